//===- Training.cpp - CPU kernels: training ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the training family of Ops.def (Kernels.h): the
// loss and gradient ops shoal-autodiff emits (docs/Training.md):
// SoftmaxCrossEntropy and its gradient, SoftmaxGrad, the
// LayerNormalization gradients, GatherGrad and the vocabulary-parallel
// cross-entropy (Vocab*), on f32, then their registration per op.
// SoftmaxGrad along the last axis and LayerNorm's input gradient run
// Vector.h's float loops (as PyTorch's CPU kernels compute in float); the
// other sums that many terms feed are kept in double. f16/bf16 operands
// (mixed-precision training) are read exactly as f32 and computed as for
// f32: a 16-bit result is the f32 one rounded once, and the sums kept in
// double (the scale gradient, GatherGrad) round once from double to
// whichever result type. The Vocab* kernels widen 16-bit logits one row at
// a time (max, stats and the loss stay f32).
//
//===----------------------------------------------------------------------===//

#include "LossMath.h"
#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"
#include "cpu/Vector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

/// Checks f32, f16 or bf16 logits [..., V] and i64 labels [...] (every
/// label in [0, V) or `ignoreIndex`); returns V.
int64_t checkLogitsAndLabels(const Tensor &logits, const Tensor &labels,
                             int64_t ignoreIndex, const char *what) {
  DType t = logits.dtype();
  if (t != DType::F32 && !isHalfDType(t))
    throw Error(fmt::format("{}: logits must be f32, f16 or bf16, got {}", what,
                            logits.type().str()));
  checkDType(labels, DType::I64, what, "labels");
  const Shape &s = logits.shape();
  if (s.empty())
    throw Error(fmt::format("{}: logits must be [..., V] with rank >= 1, got "
                            "{}",
                            what, logits.type().str()));
  Shape rows(s.begin(), s.end() - 1);
  if (labels.shape() != rows)
    throw Error(fmt::format("{}: labels {} do not fit logits {}", what,
                            labels.type().str(), logits.type().str()));
  int64_t v = s.back();
  const int64_t *pl = labels.data<int64_t>();
  for (int64_t i = 0, n = labels.numElements(); i < n; ++i)
    if (pl[i] != ignoreIndex && (pl[i] < 0 || pl[i] >= v))
      throw Error(fmt::format("{}: label {} (at position {} of the labels) "
                              "is out of range [0, {}) and not the "
                              "ignore_index {}",
                              what, pl[i], i, v, ignoreIndex));
  return v;
}

/// Splits `shape` around `axis`: the product of the dimensions before it,
/// its size and the product of the dimensions after it.
void splitAt(const Shape &shape, int64_t axis, int64_t &outer, int64_t &n,
             int64_t &inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  n = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
}

/// The checks both LayerNormalization gradients share: f32, f16 or bf16 x,
/// dy of x's type, axis in range.
void checkLayerNorm(const Tensor &x, const Tensor &dy, int64_t axis,
                    const char *what) {
  if (x.dtype() != DType::F32 && !isHalfDType(x.dtype()))
    throw Error(fmt::format("{}: x must be f32, f16 or bf16, got {}", what,
                            x.type().str()));
  if (dy.type() != x.type())
    throw Error(fmt::format("{}: dy {} must have the type of x {}", what,
                            dy.type().str(), x.type().str()));
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("{}: axis {} is out of range for x {}", what, axis,
                            x.type().str()));
}

/// Mean and 1 / sqrt(var + epsilon) of row[0..n) (biased variance), in
/// double (the forward kernel's, in float, agree to float precision).
void rowStats(const float *row, int64_t n, float epsilon, bool rms, double &mu,
              double &inv) {
  double sum = 0;
  for (int64_t j = 0; j < n && !rms; ++j)
    sum += row[j];
  mu = n ? sum / double(n) : 0.0;
  double sq = 0;
  for (int64_t j = 0; j < n; ++j) {
    double d = row[j] - mu;
    sq += d * d;
  }
  double var = n ? sq / double(n) : 0.0;
  inv = 1.0 / std::sqrt(var + double(epsilon));
}

} // namespace

//===----------------------------------------------------------------------===//
// Softmax cross-entropy
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::softmaxCrossEntropy(const Tensor &logits,
                                         const Tensor &labels,
                                         int64_t ignoreIndex, Tensor &loss) {
  const char *what = "SoftmaxCrossEntropy";
  int64_t v = checkLogitsAndLabels(logits, labels, ignoreIndex, what);
  checkOutput(loss, DType::F32, labels.shape(), what);
  Tensor staged = toF32(logits); // the loss stays f32
  const float *px = staged.data<float>();
  const int64_t *pl = labels.data<int64_t>();
  float *po = loss.data<float>();
  int64_t rows = labels.numElements();
  if (v == 0) { // checkLogitsAndLabels let only ignored rows through
    std::fill(po, po + rows, 0.f);
    return;
  }
  // log-sum-exp of each row with the vectorized loop, then lse - x[label].
  const VectorKernels &vk = vectorKernels();
  parallelFor(rows, 20 * v, [&](int64_t r0, int64_t r1) {
    vk.logSumExp(px, po, v, r0, r1);
    for (int64_t r = r0; r < r1; ++r)
      po[r] = crossEntropyLoss(po[r],
                               pl[r] == ignoreIndex ? 0.f : px[r * v + pl[r]],
                               pl[r] == ignoreIndex);
  });
}

void shoal::rt::cpu::softmaxCrossEntropyGrad(const Tensor &logits,
                                             const Tensor &labels,
                                             const Tensor &dloss,
                                             int64_t ignoreIndex,
                                             Tensor &dlogits) {
  const char *what = "SoftmaxCrossEntropyGrad";
  int64_t v = checkLogitsAndLabels(logits, labels, ignoreIndex, what);
  checkDType(dloss, DType::F32, what, "dloss");
  if (dloss.shape() != labels.shape())
    throw Error(fmt::format("{}: dloss {} must have the labels' shape {}", what,
                            dloss.type().str(), formatShape(labels.shape())));
  checkOutput(dlogits, logits.dtype(), logits.shape(), what);
  if (isHalfDType(logits.dtype())) { // in f32, rounded once
    Tensor r(DType::F32, logits.shape());
    softmaxCrossEntropyGrad(toF32(logits), labels, dloss, ignoreIndex, r);
    return fromF32(r, dlogits);
  }
  const float *px = logits.data<float>();
  const int64_t *pl = labels.data<int64_t>();
  const float *pd = dloss.data<float>();
  float *po = dlogits.data<float>();
  if (v == 0)
    return;
  const VectorKernels &vk = vectorKernels();
  parallelFor(labels.numElements(), 25 * v, [&](int64_t r0, int64_t r1) {
    vk.crossEntropyGrad(px, pl, pd, po, v, ignoreIndex, r0, r1);
  });
}

//===----------------------------------------------------------------------===//
// Softmax and LayerNormalization gradients
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::softmaxGrad(const Tensor &y, const Tensor &dy,
                                 int64_t axis, Tensor &dx) {
  const char *what = "SoftmaxGrad";
  if (y.dtype() != DType::F32 && !isHalfDType(y.dtype()))
    throw Error(fmt::format("{}: y must be f32, f16 or bf16, got {}", what,
                            y.type().str()));
  if (dy.type() != y.type())
    throw Error(fmt::format("{}: dy {} must have the type of y {}", what,
                            dy.type().str(), y.type().str()));
  checkOutput(dx, y.dtype(), y.shape(), what);
  if (isHalfDType(y.dtype())) { // in f32, rounded once
    Tensor r(DType::F32, y.shape());
    softmaxGrad(toF32(y), toF32(dy), axis, r);
    return fromF32(r, dx);
  }
  float *po = dx.data<float>();
  if (y.rank() == 0) { // softmax of a scalar is the constant 1
    po[0] = 0.f;
    return;
  }
  if (axis < 0 || axis >= y.rank())
    throw Error(fmt::format("{}: axis {} is out of range for y {}", what, axis,
                            y.type().str()));
  int64_t outer, n, inner;
  splitAt(y.shape(), axis, outer, n, inner);
  const float *py = y.data<float>();
  const float *pdy = dy.data<float>();
  if (inner == 1) { // rows along the last axis, split over the threads
    const VectorKernels &vk = vectorKernels();
    parallelFor(outer, 4 * n, [&](int64_t r0, int64_t r1) {
      vk.softmaxGrad(py, pdy, po, n, r0, r1);
    });
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * n * inner + i;
      double dot = 0;
      for (int64_t j = 0; j < n; ++j)
        dot += double(py[base + j * inner]) * pdy[base + j * inner];
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = base + j * inner;
        po[k] = static_cast<float>(py[k] * (pdy[k] - dot));
      }
    }
}

void shoal::rt::cpu::layerNormGrad(const Tensor &x, const Tensor &scale,
                                   const Tensor &dy, int64_t axis,
                                   float epsilon, Tensor &dx, bool rms) {
  const char *what = "LayerNormalizationGrad";
  checkLayerNorm(x, dy, axis, what);
  if (scale.dtype() != DType::F32 && scale.dtype() != x.dtype())
    throw Error(
        fmt::format("{}: scale must be f32{}, got {}", what,
                    x.dtype() == DType::F32
                        ? std::string()
                        : fmt::format(" or {} like x", dtypeName(x.dtype())),
                    scale.type().str()));
  checkOutput(dx, x.dtype(), x.shape(), what);
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    Tensor r(DType::F32, x.shape());
    layerNormGrad(toF32(x), stage(scale), toF32(dy), axis, epsilon, r, rms);
    return fromF32(r, dx);
  }
  const Shape &s = x.shape();
  Shape normShape(s.begin() + axis, s.end());
  if (!broadcastsTo(scale.shape(), normShape))
    throw Error(fmt::format("{}: scale of shape {} does not broadcast to the "
                            "normalized shape {}",
                            what, formatShape(scale.shape()),
                            formatShape(normShape)));
  Tensor fullScale(DType::F32, normShape);
  expand(scale, fullScale);
  const float *pg = fullScale.data<float>();
  int64_t n = numElements(normShape);
  int64_t outer = n ? x.numElements() / n : 0;
  const float *px = x.data<float>();
  const float *pdy = dy.data<float>();
  float *po = dx.data<float>();
  const VectorKernels &vk = vectorKernels();
  parallelFor(outer, 12 * n, [&](int64_t r0, int64_t r1) {
    vk.layerNormGrad(px, pg, pdy, po, n, epsilon, rms, r0, r1);
  });
}

void shoal::rt::cpu::layerNormScaleGrad(const Tensor &x, const Tensor &dy,
                                        int64_t axis, float epsilon,
                                        Tensor &dscale, bool rms) {
  const char *what = "LayerNormalizationScaleGrad";
  checkLayerNorm(x, dy, axis, what);
  const Shape &s = x.shape();
  Shape normShape(s.begin() + axis, s.end());
  // A weight gradient: f32, or rounded once to x's 16-bit type.
  checkOutput(dscale,
              dscale.defined() && dscale.dtype() == DType::F32 ? DType::F32
                                                               : x.dtype(),
              normShape, what);
  int64_t n = numElements(normShape);
  int64_t outer = n ? x.numElements() / n : 0;
  Tensor x32 = toF32(x), dy32 = toF32(dy);
  const float *px = x32.data<float>();
  const float *pdy = dy32.data<float>();
  // Partial sums over fixed blocks of rows, added in block order: the same
  // result on any number of threads.
  const int64_t block = std::max<int64_t>(64, (outer + 255) / 256);
  const int64_t blocks = (outer + block - 1) / block;
  std::vector<double> partial(static_cast<std::size_t>(blocks * n), 0.0);
  parallelFor(blocks, 6 * block * n, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double *acc = partial.data() + b * n;
      for (int64_t o = b * block, e = std::min(outer, o + block); o < e; ++o) {
        const float *row = px + o * n;
        const float *drow = pdy + o * n;
        double mu, inv;
        rowStats(row, n, epsilon, rms, mu, inv);
        for (int64_t j = 0; j < n; ++j)
          acc[j] += double(drow[j]) * ((row[j] - mu) * inv);
      }
    }
  });
  for (int64_t b = 1; b < blocks; ++b)
    for (int64_t j = 0; j < n; ++j)
      partial[j] += partial[b * n + j];
  storeRounded(dscale, 0, n,
               [&](int64_t j) { return blocks ? partial[j] : 0.0; });
}

//===----------------------------------------------------------------------===//
// GatherGrad
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::gatherGrad(const Tensor &indices, const Tensor &dy,
                                Tensor &out, const VocabBlock *block) {
  const char *what = "GatherGrad";
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("{}: indices must be i64 or i32, got {}", what,
                            indices.type().str()));
  if (dy.dtype() != DType::F32 && !isHalfDType(dy.dtype()))
    throw Error(fmt::format("{}: dy must be f32, f16 or bf16, got {}", what,
                            dy.type().str()));
  if (!out.defined() ||
      (out.dtype() != DType::F32 && out.dtype() != dy.dtype()) ||
      out.rank() == 0)
    throw Error(fmt::format(
        "{}: output must be {} [rows, ...], got {}", what,
        dy.dtype() == DType::F32
            ? std::string("f32")
            : fmt::format("f32 or {} (dy's)", dtypeName(dy.dtype())),
        out.defined() ? out.type().str() : "undefined"));
  const Shape &os = out.shape();
  Shape rowShape(os.begin() + 1, os.end());
  Shape want = indices.shape();
  want.insert(want.end(), rowShape.begin(), rowShape.end());
  if (dy.shape() != want)
    throw Error(fmt::format("{}: dy {} must be {} (the indices' shape, then "
                            "the output's row shape)",
                            what, dy.type().str(), formatShape(want)));
  int64_t rows = os[0], h = numElements(rowShape);
  int64_t numIdx = indices.numElements();
  // Indices count in the whole table; a block holds rows [offset, ...).
  int64_t whole = block ? block->size : rows;
  int64_t offset = block ? block->offset : 0;
  // Normalize and check every index, and count the positions of each row
  // of the block (-1: a row held by another rank).
  std::vector<int64_t> idx(static_cast<std::size_t>(numIdx));
  std::vector<int64_t> start(static_cast<std::size_t>(rows) + 1, 0);
  for (int64_t i = 0; i < numIdx; ++i) {
    int64_t v = indices.dtype() == DType::I64 ? indices.data<int64_t>()[i]
                                              : indices.data<int32_t>()[i];
    int64_t norm = v < 0 ? v + whole : v;
    if (norm < 0 || norm >= whole)
      throw Error(fmt::format("{}: index {} (at position {} of the indices) "
                              "is out of range for {} rows",
                              what, v, i, whole));
    norm -= offset;
    idx[i] = norm >= 0 && norm < rows ? norm : -1;
    if (idx[i] >= 0)
      ++start[idx[i] + 1];
  }
  for (int64_t r = 0; r < rows; ++r)
    start[r + 1] += start[r];
  // The positions grouped by row, in index order within a row.
  std::vector<int64_t> order(static_cast<std::size_t>(numIdx));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < numIdx; ++i)
      if (idx[i] >= 0)
        order[next[idx[i]]++] = i;
  }
  // 16-bit dy is read exactly as f32; each row's sums round once into
  // the output's dtype.
  Tensor dy32 = toF32(dy);
  const float *pdy = dy32.data<float>();
  std::vector<double> acc(static_cast<std::size_t>(h));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0); // a row no index hits stays 0
    for (int64_t k = start[r]; k < start[r + 1]; ++k) {
      const float *src = pdy + order[k] * h;
      for (int64_t j = 0; j < h; ++j)
        acc[j] += src[j];
    }
    storeRounded(out, r * h, h, [&](int64_t j) { return acc[j]; });
  }
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

namespace {

/// The classes of the block that exist: [0, valid) of its `c` columns.
int64_t validClasses(const VocabBlock &block, int64_t c) {
  return std::clamp<int64_t>(block.size - block.offset, 0, c);
}

/// Checks the labels against the whole vocabulary; returns the local class
/// of each (-1: ignored, or held by another rank).
std::vector<int64_t> localLabels(const Tensor &labels, int64_t size,
                                 int64_t offset, int64_t c, int64_t ignoreIndex,
                                 const char *what) {
  checkDType(labels, DType::I64, what, "labels");
  const int64_t *pl = labels.data<int64_t>();
  std::vector<int64_t> out(static_cast<std::size_t>(labels.numElements()));
  for (int64_t i = 0, n = labels.numElements(); i < n; ++i) {
    if (pl[i] == ignoreIndex) {
      out[i] = -1;
      continue;
    }
    if (pl[i] < 0 || pl[i] >= size)
      throw Error(fmt::format("{}: label {} (at position {} of the labels) "
                              "is out of range [0, {}) and not the "
                              "ignore_index {}",
                              what, pl[i], i, size, ignoreIndex));
    int64_t local = pl[i] - offset;
    out[i] = local >= 0 && local < c ? local : -1;
  }
  return out;
}

/// Checks logits [P..., C] and an f32 tensor `t` of shape P (+ `extra`).
void checkPositions(const Tensor &logits, const Tensor &t, int64_t extra,
                    const char *what, const char *name) {
  checkDType(t, DType::F32, what, name);
  Shape want(logits.shape().begin(), logits.shape().end() - 1);
  if (extra)
    want.push_back(extra);
  if (t.shape() != want)
    throw Error(fmt::format("{}: {} {} must be {}", what, name, t.type().str(),
                            formatShape(want)));
}

/// Checks f32, f16 or bf16 logits [..., C].
void checkLogits(const Tensor &logits, const char *what) {
  DType t = logits.dtype();
  if (t != DType::F32 && !isHalfDType(t))
    throw Error(fmt::format("{}: logits must be f32, f16 or bf16, got {}", what,
                            logits.type().str()));
  if (logits.rank() == 0)
    throw Error(fmt::format("{}: logits must be [..., C], got {}", what,
                            logits.type().str()));
}

/// Columns [0, n) of row `r` of logits [rows, c] as f32: the data itself
/// for f32, else that part of the row widened (exactly) into `buf`, so a
/// kernel on 16-bit logits holds one f32 row, never an f32 copy of all.
const float *logitsRow(const Tensor &logits, int64_t r, int64_t c, int64_t n,
                       std::vector<float> &buf) {
  switch (logits.dtype()) {
  case DType::F32:
    return logits.data<float>() + r * c;
  case DType::BF16: {
    const uint16_t *p = logits.data<uint16_t>() + r * c;
    for (int64_t j = 0; j < n; ++j)
      buf[j] = bf16ToFloat(p[j]);
    return buf.data();
  }
  default: {
    const uint16_t *p = logits.data<uint16_t>() + r * c;
    for (int64_t j = 0; j < n; ++j)
      buf[j] = halfToFloat(p[j]);
    return buf.data();
  }
  }
}

} // namespace

void shoal::rt::cpu::vocabMax(const Tensor &logits, const VocabBlock &block,
                              Tensor &out) {
  const char *what = "VocabMax";
  checkLogits(logits, what);
  Shape pos(logits.shape().begin(), logits.shape().end() - 1);
  checkOutput(out, DType::F32, pos, what);
  int64_t c = logits.shape().back(), valid = validClasses(block, c);
  std::vector<float> buf(isHalfDType(logits.dtype()) ? valid : 0);
  float *po = out.data<float>();
  for (int64_t r = 0, rows = numElements(pos); r < rows; ++r) {
    const float *row = logitsRow(logits, r, c, valid, buf);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j)
      mx = std::max(mx, row[j]);
    po[r] = mx;
  }
}

void shoal::rt::cpu::vocabStats(const Tensor &logits, const Tensor &labels,
                                const Tensor &max, const VocabBlock &block,
                                int64_t ignoreIndex, Tensor &out) {
  const char *what = "VocabStats";
  checkLogits(logits, what);
  checkPositions(logits, max, 0, what, "max");
  int64_t c = logits.shape().back(), valid = validClasses(block, c);
  std::vector<int64_t> local =
      localLabels(labels, block.size, block.offset, c, ignoreIndex, what);
  Shape statsShape(logits.shape().begin(), logits.shape().end() - 1);
  statsShape.push_back(2);
  checkOutput(out, DType::F32, statsShape, what);
  // The label's local class, when held, is below `valid`.
  std::vector<float> buf(isHalfDType(logits.dtype()) ? valid : 0);
  const float *pm = max.data<float>();
  float *po = out.data<float>();
  for (int64_t r = 0, rows = max.numElements(); r < rows; ++r) {
    const float *row = logitsRow(logits, r, c, valid, buf);
    double sum = 0;
    for (int64_t j = 0; j < valid; ++j)
      sum += std::exp(double(row[j]) - double(pm[r]));
    po[2 * r] = static_cast<float>(sum);
    po[2 * r + 1] = local[r] >= 0 ? row[local[r]] : 0.f;
  }
}

void shoal::rt::cpu::vocabCrossEntropy(const Tensor &max, const Tensor &stats,
                                       const Tensor &labels,
                                       int64_t ignoreIndex, Tensor &loss) {
  const char *what = "VocabCrossEntropy";
  checkDType(max, DType::F32, what, "max");
  checkDType(stats, DType::F32, what, "stats");
  checkDType(labels, DType::I64, what, "labels");
  Shape statsShape = max.shape();
  statsShape.push_back(2);
  if (stats.shape() != statsShape || labels.shape() != max.shape())
    throw Error(fmt::format("{}: max {}, stats {} and labels {} do not fit",
                            what, max.type().str(), stats.type().str(),
                            labels.type().str()));
  checkOutput(loss, DType::F32, max.shape(), what);
  const float *pm = max.data<float>(), *ps = stats.data<float>();
  const int64_t *pl = labels.data<int64_t>();
  float *po = loss.data<float>();
  for (int64_t r = 0, rows = max.numElements(); r < rows; ++r)
    po[r] =
        pl[r] == ignoreIndex ? 0.f : vocabLoss(ps[2 * r], pm[r], ps[2 * r + 1]);
}

void shoal::rt::cpu::vocabCrossEntropyGrad(
    const Tensor &logits, const Tensor &labels, const Tensor &dloss,
    const Tensor &max, const Tensor &stats, const VocabBlock &block,
    int64_t ignoreIndex, Tensor &dlogits) {
  const char *what = "VocabCrossEntropyGrad";
  checkLogits(logits, what);
  checkPositions(logits, dloss, 0, what, "dloss");
  checkPositions(logits, max, 0, what, "max");
  checkPositions(logits, stats, 2, what, "stats");
  checkOutput(dlogits, logits.dtype(), logits.shape(), what);
  int64_t c = logits.shape().back(), valid = validClasses(block, c);
  std::vector<int64_t> local =
      localLabels(labels, block.size, block.offset, c, ignoreIndex, what);
  const int64_t *pl = labels.data<int64_t>();
  const float *pd = dloss.data<float>(), *pm = max.data<float>(),
              *ps = stats.data<float>();
  // 16-bit logits: each row is read into `buf` and computed into `rowOut`
  // in f32 as for f32 logits, then rounded once into dlogits.
  DType dtype = logits.dtype();
  bool half = isHalfDType(dtype);
  std::vector<float> buf(half ? valid : 0), rowOut(half ? c : 0);
  for (int64_t r = 0, rows = max.numElements(); r < rows; ++r) {
    float *orow = half ? rowOut.data() : dlogits.data<float>() + r * c;
    std::fill(orow, orow + c, 0.f);
    if (pl[r] != ignoreIndex) {
      const float *row = logitsRow(logits, r, c, valid, buf);
      double scale = double(pd[r]) / double(ps[2 * r]);
      for (int64_t j = 0; j < valid; ++j)
        orow[j] = vocabGradAway(row[j], pm[r], scale);
      if (local[r] >= 0)
        orow[local[r]] = vocabGradAtLabel(orow[local[r]], pd[r]);
    }
    if (!half)
      continue;
    uint16_t *o16 = dlogits.data<uint16_t>() + r * c;
    for (int64_t j = 0; j < c; ++j)
      o16[j] =
          dtype == DType::F16 ? floatToHalf(orow[j]) : floatToBF16(orow[j]);
  }
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(crossEntropyKernel) {
  softmaxCrossEntropy(input(in, 0), input(in, 1), op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(crossEntropyGradKernel) {
  softmaxCrossEntropyGrad(input(in, 0), input(in, 1), input(in, 2),
                          op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(softmaxGradKernel) {
  softmaxGrad(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(layerNormGradKernel) {
  layerNormGrad(input(in, 0), input(in, 1), input(in, 2), op.attrs.axis,
                op.attrs.epsilon, out[0], op.attrs.rms);
}

SHOAL_CPU_KERNEL(layerNormScaleGradKernel) {
  layerNormScaleGrad(input(in, 0), input(in, 1), op.attrs.axis,
                     op.attrs.epsilon, out[0], op.attrs.rms);
}

/// This rank's block of a vocabulary-parallel op whose block has `local`
/// rows or classes.
VocabBlock blockOf(const KernelContext &ctx, const OpInfo &op, int64_t local) {
  return VocabBlock{op.attrs.shardSize, ctx.groupIndex * local};
}

SHOAL_CPU_KERNEL(gatherGradKernel) {
  if (op.attrs.shardSize > 0) {
    VocabBlock block = blockOf(ctx, op, out[0].shape()[0]);
    gatherGrad(input(in, 0), input(in, 1), out[0], &block);
    return;
  }
  gatherGrad(input(in, 0), input(in, 1), out[0]);
}

SHOAL_CPU_KERNEL(vocabMaxKernel) {
  vocabMax(input(in, 0), blockOf(ctx, op, input(in, 0).shape().back()), out[0]);
}

SHOAL_CPU_KERNEL(vocabStatsKernel) {
  vocabStats(input(in, 0), input(in, 1), input(in, 2),
             blockOf(ctx, op, input(in, 0).shape().back()),
             op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(vocabCrossEntropyKernel) {
  vocabCrossEntropy(input(in, 0), input(in, 1), input(in, 2),
                    op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(vocabCrossEntropyGradKernel) {
  vocabCrossEntropyGrad(input(in, 0), input(in, 1), input(in, 2), input(in, 3),
                        input(in, 4),
                        blockOf(ctx, op, input(in, 0).shape().back()),
                        op.attrs.ignoreIndex, out[0]);
}

} // namespace

void shoal::rt::cpu::registerTrainingKernels() {
  registerCpuKernel(OpKind::SoftmaxCrossEntropy, crossEntropyKernel,
                    KernelWrites::All);
  registerCpuKernel(OpKind::SoftmaxCrossEntropyGrad, crossEntropyGradKernel,
                    KernelWrites::All);
  registerCpuKernel(OpKind::SoftmaxGrad, softmaxGradKernel, KernelWrites::All);
  registerCpuKernel(OpKind::LayerNormalizationGrad, layerNormGradKernel,
                    KernelWrites::All);
  registerCpuKernel(OpKind::LayerNormalizationScaleGrad,
                    layerNormScaleGradKernel, KernelWrites::All);
  registerCpuKernel(OpKind::GatherGrad, gatherGradKernel);
  registerCpuKernel(OpKind::VocabMax, vocabMaxKernel);
  registerCpuKernel(OpKind::VocabStats, vocabStatsKernel);
  registerCpuKernel(OpKind::VocabCrossEntropy, vocabCrossEntropyKernel);
  registerCpuKernel(OpKind::VocabCrossEntropyGrad, vocabCrossEntropyGradKernel);
  // AdamW and SGD are the scheduler's (kSchedulerOps): they run once per
  // step, after the gradient all-reduces (cpu/Optimizers.h).
}
