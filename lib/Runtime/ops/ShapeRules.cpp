//===- ShapeRules.cpp - Result shapes of ops -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/ShapeRules.h"

#include <fmt/format.h>

#include <algorithm>

using namespace shoal::rt;

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace

Shape shoal::rt::broadcastShape(const Shape &a, const Shape &b) {
  std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(fmt::format("shapes {} and {} do not broadcast",
                              formatShape(a), formatShape(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool shoal::rt::broadcastsTo(const Shape &from, const Shape &to) {
  if (from.size() > to.size())
    return false;
  std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return false;
  return true;
}

Shape shoal::rt::matmulShape(const Shape &a, const Shape &b) {
  if (a.empty() || b.empty())
    throw Error("MatMul operands must have rank >= 1");
  Shape as = a, bs = b;
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back();
  int64_t k2 = bs[bs.size() - 2], n = bs.back();
  if (k != k2)
    throw Error(fmt::format("MatMul operands {} and {} have different "
                            "contraction sizes ({} and {})",
                            formatShape(a), formatShape(b), k, k2));
  Shape batch = broadcastShape(Shape(as.begin(), as.end() - 2),
                               Shape(bs.begin(), bs.end() - 2));
  if (a.size() != 1)
    batch.push_back(m);
  if (b.size() != 1)
    batch.push_back(n);
  return batch;
}

Shape shoal::rt::gemmShape(const Shape &a, const Shape &b, bool transA,
                           bool transB) {
  if (a.size() != 2 || b.size() != 2)
    throw Error(fmt::format("Gemm operands must be 2-D, got {} and {}",
                            formatShape(a), formatShape(b)));
  int64_t m = transA ? a[1] : a[0], k = transA ? a[0] : a[1];
  int64_t k2 = transB ? b[1] : b[0], n = transB ? b[0] : b[1];
  if (k != k2)
    throw Error(fmt::format("Gemm operands {} and {} (transA={}, transB={}) "
                            "have different contraction sizes ({} and {})",
                            formatShape(a), formatShape(b), int(transA),
                            int(transB), k, k2));
  return {m, n};
}

Shape shoal::rt::gatherShape(const Shape &data, const Shape &indices,
                             int64_t axis) {
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return out;
}

Shape shoal::rt::transposeShape(const Shape &x,
                                const std::vector<int64_t> &perm) {
  Shape out(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    out[i] = x[perm[i]];
  return out;
}

Shape shoal::rt::reduceShape(const Shape &x, const std::vector<int64_t> &axes,
                             bool keepdims) {
  Shape out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    bool reduced =
        std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!reduced)
      out.push_back(x[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

Shape shoal::rt::concatShape(const std::vector<Shape> &inputs, int64_t axis) {
  if (inputs.empty())
    throw Error("Concat needs at least one input");
  const Shape &first = inputs[0];
  if (axis < 0 || axis >= static_cast<int64_t>(first.size()))
    throw Error(fmt::format("Concat axis {} is out of range for rank {}", axis,
                            first.size()));
  Shape out = first;
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    const Shape &s = inputs[i];
    bool ok = s.size() == first.size();
    for (std::size_t d = 0; ok && d < s.size(); ++d)
      if (int64_t(d) != axis && s[d] != first[d])
        ok = false;
    if (!ok)
      throw Error(fmt::format("Concat input #{} of shape {} does not match "
                              "input #0 of shape {} outside axis {}",
                              i, formatShape(s), formatShape(first), axis));
    out[axis] += s[axis];
  }
  return out;
}

Shape shoal::rt::sliceShape(const Shape &x, const std::vector<int64_t> &starts,
                            const std::vector<int64_t> &ends,
                            const std::vector<int64_t> &axes,
                            const std::vector<int64_t> &steps,
                            std::vector<int64_t> &first,
                            std::vector<int64_t> &step) {
  int64_t rank = static_cast<int64_t>(x.size());
  std::size_t n = starts.size();
  if (ends.size() != n)
    throw Error(fmt::format("'starts' has {} entries but 'ends' has {}", n,
                            ends.size()));
  if (!axes.empty() && axes.size() != n)
    throw Error(fmt::format("'starts' has {} entries but 'axes' has {}", n,
                            axes.size()));
  if (!steps.empty() && steps.size() != n)
    throw Error(fmt::format("'starts' has {} entries but 'steps' has "
                            "{}",
                            n, steps.size()));
  if (axes.empty() && static_cast<int64_t>(n) > rank)
    throw Error(fmt::format("'starts' has {} entries for a rank-{} "
                            "input",
                            n, rank));
  first.assign(x.size(), 0);
  step.assign(x.size(), 1);
  Shape out = x;
  std::vector<bool> seen(x.size(), false);
  for (std::size_t i = 0; i < n; ++i) {
    int64_t ax = axes.empty() ? int64_t(i) : axes[i];
    if (ax < -rank || ax >= rank)
      throw Error(
          fmt::format("slice axis {} is out of range for rank {}", ax, rank));
    if (ax < 0)
      ax += rank;
    if (seen[ax])
      throw Error(fmt::format("slice axis {} is listed twice", ax));
    seen[ax] = true;
    int64_t st = steps.empty() ? 1 : steps[i];
    if (st == 0)
      throw Error(fmt::format("the step along axis {} is 0", ax));
    int64_t dim = x[ax];
    // A step longer than the dimension takes one element at most; clamping
    // it keeps the arithmetic below in range.
    st = std::max(-(dim + 1), std::min(dim + 1, st));
    int64_t s = starts[i], e = ends[i];
    if (s < 0)
      s += dim;
    if (e < 0)
      e += dim;
    int64_t len;
    if (st > 0) {
      s = std::max<int64_t>(0, std::min(dim, s));
      e = std::max<int64_t>(0, std::min(dim, e));
      len = e > s ? ceilDiv(e - s, st) : 0;
    } else if (dim == 0) {
      s = 0;
      len = 0;
    } else {
      s = std::max<int64_t>(0, std::min(dim - 1, s));
      e = std::max<int64_t>(-1, std::min(dim - 1, e));
      len = s > e ? ceilDiv(s - e, -st) : 0;
    }
    first[ax] = s;
    step[ax] = st;
    out[ax] = len;
  }
  return out;
}

int64_t shoal::rt::windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                    int64_t padBegin, int64_t padEnd,
                                    int64_t dilation, bool ceilMode) {
  int64_t dk = (kernel - 1) * dilation + 1;
  int64_t padded = in + padBegin + padEnd;
  if (dk > padded)
    throw Error(fmt::format("a window of {} (kernel {}, dilation {}) does not "
                            "fit in a padded input of {} ({} + pads {} and {})",
                            dk, kernel, dilation, padded, in, padBegin,
                            padEnd));
  int64_t span = padded - dk;
  int64_t out = ceilMode ? ceilDiv(span, stride) + 1 : span / stride + 1;
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

Shape shoal::rt::windowOutputShape(const Shape &x, int64_t channels,
                                   const WindowParams &w) {
  std::size_t s = w.kernel.size();
  if (s == 0 || x.size() != s + 2 || w.strides.size() != s ||
      w.dilations.size() != s || w.pads.size() != 2 * s)
    throw Error(fmt::format("a window with {} kernel, {} strides, {} "
                            "dilations and {} pads does not fit an input of "
                            "shape {} (expected [N, C] + {} spatial "
                            "dimensions)",
                            w.kernel.size(), w.strides.size(),
                            w.dilations.size(), w.pads.size(), formatShape(x),
                            s));
  for (std::size_t d = 0; d < s; ++d)
    if (w.kernel[d] < 1 || w.strides[d] < 1 || w.dilations[d] < 1 ||
        w.pads[d] < 0 || w.pads[d + s] < 0)
      throw Error(fmt::format("bad window along spatial dimension {}: kernel "
                              "{}, stride {}, dilation {}, pads {} and {}",
                              d, w.kernel[d], w.strides[d], w.dilations[d],
                              w.pads[d], w.pads[d + s]));
  Shape out = {x[0], channels};
  for (std::size_t d = 0; d < s; ++d)
    out.push_back(windowOutputSize(x[d + 2], w.kernel[d], w.strides[d],
                                   w.pads[d], w.pads[d + s], w.dilations[d],
                                   w.ceilMode));
  return out;
}
