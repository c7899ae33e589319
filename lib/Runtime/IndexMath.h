//===- IndexMath.h - TopK order and element offsets, CPU and GPU -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The arithmetic of TopK (the order it ranks a row in, and the selection of
// a row's first k) and of GatherElements/ScatterElements (the data offset of
// an index's position), as functions that the CPU kernels (cpu/Indexing.cpp)
// and the CUDA kernels (cuda/IndexingKernels.cu) both call, so that the CPU
// tests check the GPU's arithmetic. Light: no CUDA header.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_INDEXMATH_H
#define SHOAL_RUNTIME_INDEXMATH_H

#include "HostDevice.h"

#include <cstdint>

namespace shoal {
namespace rt {

/// TopK's order of values: `a` above `b`, NaN above every number (as
/// PyTorch's topk ranks NaN largest). (`x != x` is NaN's test, false for
/// integers.)
template <typename T> SHOAL_HOST_DEVICE inline bool topKGreater(T a, T b) {
  if (a != a)
    return !(b != b);
  if (b != b)
    return false;
  return a > b;
}

/// Whether element (a, index ia) of a row comes before (b, ib) in TopK's
/// output: the larger first (`largest`) or the smaller first, ties to the
/// lower index. A strict total order on a row's elements.
template <typename T>
SHOAL_HOST_DEVICE inline bool topKBefore(T a, int64_t ia, T b, int64_t ib,
                                         bool largest) {
  if (largest ? topKGreater(a, b) : topKGreater(b, a))
    return true;
  if (largest ? topKGreater(b, a) : topKGreater(a, b))
    return false;
  return ia < ib;
}

/// The first k of a row of n elements (element j at src[j * stride]) in
/// topKBefore's order, into values[j * outStride] and, if not null,
/// indices[j * outStride]: each is the first of the elements after the one
/// before it (k passes over the row, no workspace; TopK's k is small where
/// it routes tokens to experts).
template <typename T>
SHOAL_HOST_DEVICE inline void topKRow(const T *src, int64_t n, int64_t stride,
                                      int64_t k, bool largest, T *values,
                                      int64_t *indices, int64_t outStride) {
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      T v = src[e * stride];
      if (prev >= 0 && !topKBefore(src[prev * stride], prev, v, e, largest))
        continue;
      if (best < 0 || topKBefore(v, e, src[best * stride], best, largest))
        best = e;
    }
    if (best < 0)
      return;
    values[j * outStride] = src[best * stride];
    if (indices)
      indices[j * outStride] = best;
    prev = best;
  }
}

/// The largest k the CPU kernel selects by topKRow's passes (the CUDA
/// kernel always does); above it, a partial sort in topKBefore's order.
constexpr int64_t kTopKRowSelect = 16;

/// The most dimensions elementOffset handles.
constexpr int kMaxIndexRank = 8;

/// GatherElements/ScatterElements: the shape of the indices and the
/// row-major strides of the data (same rank), the axis and its length.
struct ElementsGeometry {
  int rank = 0;
  int64_t indexShape[kMaxIndexRank] = {};
  int64_t dataStrides[kMaxIndexRank] = {};
  int axis = 0;
  int64_t axisLen = 0;
};

/// The geometry of indices of shape `indexShape` into data of shape
/// `dataShape` along `axis` (ranks equal, at most kMaxIndexRank: the
/// caller checks). Host only.
template <typename ShapeT>
inline ElementsGeometry elementsGeometry(const ShapeT &dataShape,
                                         const ShapeT &indexShape,
                                         int64_t axis) {
  ElementsGeometry g;
  g.rank = static_cast<int>(indexShape.size());
  g.axis = static_cast<int>(axis);
  g.axisLen = dataShape[axis];
  int64_t stride = 1;
  for (int d = g.rank - 1; d >= 0; --d) {
    g.indexShape[d] = indexShape[d];
    g.dataStrides[d] = stride;
    stride *= dataShape[d];
  }
  return g;
}

/// The flat data offset that position `i` (row-major) of indices of shape
/// indexShape[0, rank) addresses in data of row-major strides
/// dataStrides[0, rank), its coordinate along `axis` (of length axisLen)
/// replaced by `index` (negative counts from the end), or -1 when the
/// index is out of range.
SHOAL_HOST_DEVICE inline int64_t elementOffset(int64_t rank,
                                               const int64_t *indexShape,
                                               const int64_t *dataStrides,
                                               int64_t axis, int64_t axisLen,
                                               int64_t i, int64_t index) {
  int64_t w = index < 0 ? index + axisLen : index;
  if (w < 0 || w >= axisLen)
    return -1;
  int64_t off = 0;
  for (int64_t d = rank - 1; d >= 0; --d) {
    int64_t n = indexShape[d];
    int64_t c = n ? i % n : 0;
    i = n ? i / n : 0;
    off += (d == axis ? w : c) * dataStrides[d];
  }
  return off;
}

/// The same with a kernel argument's geometry.
SHOAL_HOST_DEVICE inline int64_t elementOffset(const ElementsGeometry &g,
                                               int64_t i, int64_t index) {
  return elementOffset(g.rank, g.indexShape, g.dataStrides, g.axis, g.axisLen,
                       i, index);
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_INDEXMATH_H
