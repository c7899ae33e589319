//===- Indexing.cpp - CPU kernels: indexing ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the indexing family of Ops.def (Kernels.h): Gather,
// GatherElements, ScatterElements, ScatterND, OneHot and TopK, then their
// registration per op.
//
//===----------------------------------------------------------------------===//

#include "IndexMath.h"
#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

void shoal::rt::cpu::gather(const Tensor &data, const Tensor &indices,
                            int64_t axis, Tensor &out,
                            const VocabBlock *block) {
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("Gather: indices must be i64 or i32, got {}",
                            indices.type().str()));
  if (axis < 0 || axis >= data.rank())
    throw Error(fmt::format("Gather: axis {} out of range for data {}", axis,
                            data.type().str()));
  checkOutput(out, data.dtype(),
              gatherShape(data.shape(), indices.shape(), axis), "Gather");
  const Shape &s = data.shape();
  int64_t outer = 1, axisLen = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::size_t chunk = static_cast<std::size_t>(inner) * dtypeSize(data.dtype());
  int64_t numIdx = indices.numElements();
  if (block && axis != 0)
    throw Error(fmt::format("Gather: a vocabulary-parallel lookup must be "
                            "along axis 0, not {}",
                            axis));
  // Indices count in the whole table; a block holds rows [offset, ...).
  int64_t whole = block ? block->size : axisLen;
  int64_t offset = block ? block->offset : 0;
  // Normalize and check every index before writing anything (-1: a row
  // held by another rank).
  std::vector<int64_t> idx(static_cast<std::size_t>(numIdx));
  for (int64_t i = 0; i < numIdx; ++i) {
    int64_t v = indices.dtype() == DType::I64 ? indices.data<int64_t>()[i]
                                              : indices.data<int32_t>()[i];
    int64_t norm = v < 0 ? v + whole : v;
    if (norm < 0 || norm >= whole)
      throw Error(fmt::format("Gather: index {} (at position {} of the "
                              "indices) is out of range for axis {} of size {}",
                              v, i, axis, whole));
    norm -= offset;
    idx[i] = norm >= 0 && norm < axisLen ? norm : -1;
  }
  const uint8_t *src = data.bytes();
  uint8_t *dst = out.bytes();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < numIdx; ++i) {
      if (idx[i] < 0)
        std::memset(dst, 0, chunk);
      else
        std::memcpy(dst, src + (o * axisLen + idx[i]) * chunk, chunk);
      dst += chunk;
    }
}

namespace {
/// Reads index `i` of an i64 or i32 tensor.
int64_t indexAt(const Tensor &t, int64_t i) {
  return t.dtype() == DType::I64 ? t.data<int64_t>()[i]
                                 : int64_t(t.data<int32_t>()[i]);
}

/// Checks GatherElements/ScatterElements operands: indices of data's rank,
/// no larger than data outside `axis`.
void checkElementsIndices(const Tensor &data, const Tensor &indices,
                          int64_t axis, const char *what) {
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("{}: indices must be i64 or i32, got {}", what,
                            indices.type().str()));
  if (axis < 0 || axis >= data.rank() || indices.rank() != data.rank())
    throw Error(fmt::format("{}: indices {} do not fit data {} along axis {}",
                            what, indices.type().str(), data.type().str(),
                            axis));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape()[d] > data.shape()[d])
      throw Error(fmt::format("{}: indices {} are larger than data {} along "
                              "dimension {}",
                              what, indices.type().str(), data.type().str(),
                              d));
}

/// ScatterElements and ScatterND: writes or combines one update `u` into
/// the element `d` (ONNX's reduction attribute).
template <typename T>
void combineScatter(T &d, T u, ScatterReduction reduction) {
  switch (reduction) {
  case ScatterReduction::None:
    d = u;
    break;
  case ScatterReduction::Add:
    d = T(d + u);
    break;
  case ScatterReduction::Mul:
    d = T(d * u);
    break;
  case ScatterReduction::Max:
    d = d < u ? u : d;
    break;
  case ScatterReduction::Min:
    d = u < d ? u : d;
    break;
  }
}

/// Calls f(i, dataOffset) for every position i of `indices` (row-major),
/// dataOffset being the flat offset in data of that position with the
/// coordinate along `axis` replaced by the (checked, wrapped) index: the
/// offset the CUDA kernels compute (elementOffset).
template <typename F>
void forEachElementIndex(const Tensor &data, const Tensor &indices,
                         int64_t axis, const char *what, F f) {
  int64_t total = indices.numElements();
  if (total == 0)
    return;
  std::vector<int64_t> strides = rowMajorStrides(data.shape());
  int64_t axisLen = data.shape()[axis];
  for (int64_t i = 0; i < total; ++i) {
    int64_t v = indexAt(indices, i);
    int64_t off = elementOffset(indices.rank(), indices.shape().data(),
                                strides.data(), axis, axisLen, i, v);
    if (off < 0)
      throw Error(fmt::format("{}: index {} (at position {} of the indices) "
                              "is out of range for axis {} of size {}",
                              what, v, i, axis, axisLen));
    f(i, off);
  }
}
} // namespace

void shoal::rt::cpu::gatherElements(const Tensor &data, const Tensor &indices,
                                    int64_t axis, Tensor &out) {
  checkElementsIndices(data, indices, axis, "GatherElements");
  checkOutput(out, data.dtype(), indices.shape(), "GatherElements");
  byElementSize(data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(data.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachElementIndex(data, indices, axis, "GatherElements",
                        [&](int64_t i, int64_t off) { dst[i] = src[off]; });
  });
}

void shoal::rt::cpu::scatterElements(const Tensor &data, const Tensor &indices,
                                     const Tensor &updates, int64_t axis,
                                     ScatterReduction reduction, Tensor &out) {
  const char *what = "ScatterElements";
  checkElementsIndices(data, indices, axis, what);
  if (updates.dtype() != data.dtype() || updates.shape() != indices.shape())
    throw Error(fmt::format("{}: updates {} must have data's dtype ({}) and "
                            "the indices' shape {}",
                            what, updates.type().str(), dtypeName(data.dtype()),
                            formatShape(indices.shape())));
  checkOutput(out, data.dtype(), data.shape(), what);
  std::memcpy(out.rawData(), data.rawData(), data.numBytes());
  if (reduction == ScatterReduction::None) {
    byElementSize(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *up = static_cast<const T *>(updates.rawData());
      T *dst = static_cast<T *>(out.rawData());
      forEachElementIndex(data, indices, axis, what,
                          [&](int64_t i, int64_t off) { dst[off] = up[i]; });
    });
    return;
  }
  if (!isNumeric(data.dtype()))
    throw Error(fmt::format("{}: reductions are not supported on {} tensors",
                            what, dtypeName(data.dtype())));
  byNumericType(data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *up = static_cast<const T *>(updates.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachElementIndex(data, indices, axis, what, [&](int64_t i, int64_t off) {
      combineScatter(dst[off], up[i], reduction);
    });
  });
}

void shoal::rt::cpu::scatterND(const Tensor &data, const Tensor &indices,
                               const Tensor &updates,
                               ScatterReduction reduction, Tensor &out) {
  const Shape &ds = data.shape(), &is = indices.shape();
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("ScatterND: indices must be i64 or i32, got {}",
                            indices.type().str()));
  int64_t k = is.empty() ? -1 : is.back();
  if (k < 0 || k > data.rank())
    throw Error(fmt::format("ScatterND: indices {} do not index data {}",
                            indices.type().str(), data.type().str()));
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + k, ds.end());
  int64_t count = 1, slice = 1;
  for (std::size_t d = 0; d + 1 < is.size(); ++d)
    count *= is[d];
  for (std::size_t d = k; d < ds.size(); ++d)
    slice *= ds[d];
  // No index at all writes nothing, whatever the updates' shape (as the
  // type rule allows).
  if (updates.dtype() != data.dtype() ||
      (updates.shape() != want && count != 0))
    throw Error(fmt::format("ScatterND: updates {} must be {}",
                            updates.type().str(),
                            TensorType{data.dtype(), want}.str()));
  checkOutput(out, data.dtype(), ds, "ScatterND");
  std::memcpy(out.rawData(), data.rawData(), data.numBytes());
  if (reduction != ScatterReduction::None && !isNumeric(data.dtype()))
    throw Error(fmt::format("ScatterND: reductions are not supported on {} "
                            "tensors",
                            dtypeName(data.dtype())));
  std::vector<int64_t> strides = rowMajorStrides(ds);
  // The flat offset in data of every update slice, checked first.
  std::vector<int64_t> offsets(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t v = indexAt(indices, i * k + j);
      int64_t w = v < 0 ? v + ds[j] : v;
      if (w < 0 || w >= ds[j])
        throw Error(fmt::format("ScatterND: index {} (entry {} of index {}) "
                                "is out of range for dimension {} of size {}",
                                v, j, i, j, ds[j]));
      off += w * strides[j];
    }
    offsets[i] = off;
  }
  auto apply = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *up = static_cast<const T *>(updates.rawData());
    T *dst = static_cast<T *>(out.rawData());
    for (int64_t i = 0; i < count; ++i)
      for (int64_t e = 0; e < slice; ++e)
        combineScatter(dst[offsets[i] + e], up[i * slice + e], reduction);
  };
  if (reduction == ScatterReduction::None)
    byElementSize(data.dtype(), apply);
  else
    byNumericType(data.dtype(), apply);
}

void shoal::rt::cpu::oneHot(const Tensor &indices, const Tensor &values,
                            int64_t depth, int64_t axis, Tensor &out) {
  const Shape &is = indices.shape();
  if (axis < 0 || axis > indices.rank())
    throw Error(fmt::format("OneHot: axis {} is out of range for {}", axis,
                            indices.type().str()));
  if (values.numElements() != 2)
    throw Error(fmt::format("OneHot: values must have two elements, got {}",
                            values.type().str()));
  Shape shape = is;
  shape.insert(shape.begin() + axis, depth);
  checkOutput(out, values.dtype(), shape, "OneHot");
  Tensor idx = stage(indices);
  if (!isNumeric(idx.dtype()))
    throwNotNumeric(idx.dtype());
  // Positions of the output are [outer, depth, inner].
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= is[d];
  for (std::size_t d = axis; d < is.size(); ++d)
    inner *= is[d];
  std::vector<int64_t> hot(outer * inner);
  byNumericType(idx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *p = idx.data<T>();
    for (int64_t i = 0; i < outer * inner; ++i) {
      int64_t v = static_cast<int64_t>(p[i]);
      hot[i] = v < 0 ? v + depth : v;
    }
  });
  byElementSize(values.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *v = static_cast<const T *>(values.rawData());
    T *dst = static_cast<T *>(out.rawData());
    std::fill(dst, dst + out.numElements(), v[0]);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < inner; ++r) {
        int64_t h = hot[o * inner + r];
        if (h >= 0 && h < depth)
          dst[(o * depth + h) * inner + r] = v[1];
      }
  });
}

void shoal::rt::cpu::topK(const Tensor &x, int64_t k, int64_t axis,
                          bool largest, Tensor &values, Tensor *indices) {
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("TopK: axis {} is out of range for {}", axis,
                            x.type().str()));
  const Shape &s = x.shape();
  if (k < 0 || k > s[axis])
    throw Error(fmt::format("TopK: k = {} is out of range for axis {} of size "
                            "{}",
                            k, axis, s[axis]));
  if (isHalfDType(x.dtype())) { // exact in f32
    Shape os = s;
    os[axis] = k;
    checkOutput(values, x.dtype(), os, "TopK");
    Tensor v(DType::F32, os);
    topK(toF32(x), k, axis, largest, v, indices);
    return fromF32(v, values);
  }
  if (!isNumeric(x.dtype()))
    throw Error(fmt::format("TopK is not supported on {} tensors",
                            dtypeName(x.dtype())));
  Shape os = s;
  os[axis] = k;
  checkOutput(values, x.dtype(), os, "TopK");
  if (indices)
    checkOutput(*indices, DType::I64, os, "TopK indices");
  int64_t outer = 1, n = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  if (k == 0 || outer * inner == 0)
    return;
  byNumericType(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.data<T>();
    T *pv = values.data<T>();
    int64_t *pi = indices ? indices->data<int64_t>() : nullptr;
    // A few of each row (a router's top experts): k passes over the row,
    // as the CUDA kernel selects them (topKRow).
    if (k <= kTopKRowSelect) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t base = o * k * inner + i;
          topKRow(px + o * n * inner + i, n, inner, k, largest, pv + base,
                  pi ? pi + base : nullptr, inner);
        }
      return;
    }
    // TopK's order (NaN above every number, ties to the lower index).
    using Entry = std::pair<T, int64_t>;
    auto before = [&](const Entry &p, const Entry &q) {
      return topKBefore(p.first, p.second, q.first, q.second, largest);
    };
    std::vector<Entry> row(static_cast<std::size_t>(n));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T *src = px + o * n * inner + i;
        for (int64_t j = 0; j < n; ++j)
          row[j] = {src[j * inner], j};
        std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
        int64_t base = o * k * inner + i;
        for (int64_t j = 0; j < k; ++j) {
          pv[base + j * inner] = row[j].first;
          if (pi)
            pi[base + j * inner] = row[j].second;
        }
      }
  });
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(gatherKernel) {
  if (op.attrs.shardSize > 0) {
    VocabBlock block{op.attrs.shardSize,
                     ctx.groupIndex * input(in, 0).shape()[0]};
    gather(input(in, 0), input(in, 1), op.attrs.axis, out[0], &block);
    return;
  }
  gather(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(gatherElementsKernel) {
  gatherElements(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(scatterElementsKernel) {
  scatterElements(input(in, 0), input(in, 1), input(in, 2), op.attrs.axis,
                  op.attrs.reduction, out[0]);
}

SHOAL_CPU_KERNEL(scatterNDKernel) {
  scatterND(input(in, 0), input(in, 1), input(in, 2), op.attrs.reduction,
            out[0]);
}

SHOAL_CPU_KERNEL(oneHotKernel) {
  oneHot(input(in, 0), input(in, 1), op.attrs.depth, op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(topKKernel) {
  const OpAttrs &a = op.attrs;
  topK(input(in, 0), a.k, a.axis, a.largest, out[0], optionalOutput(out, 1));
}

} // namespace

void shoal::rt::cpu::registerIndexingKernels() {
  registerCpuKernel(OpKind::Gather, gatherKernel, KernelWrites::All);
  registerCpuKernel(OpKind::GatherElements, gatherElementsKernel);
  registerCpuKernel(OpKind::ScatterElements, scatterElementsKernel);
  registerCpuKernel(OpKind::ScatterND, scatterNDKernel);
  registerCpuKernel(OpKind::OneHot, oneHotKernel);
  registerCpuKernel(OpKind::TopK, topKKernel);
}
