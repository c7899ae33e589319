//===- IndexingKernels.cu - TopK, GatherElements, ScatterElements -*- C++ -*-=//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA kernels of TopK (a mixture of experts' routing) and of
// GatherElements and ScatterElements (TopK's gradient scatters into zeros).
// Their arithmetic is IndexMath.h's, which the CPU kernels call too: the
// order TopK ranks a row in and its selection, and the data offset of an
// index's position.
//
//===----------------------------------------------------------------------===//

#include "IndexMath.h"
#include "cuda/Kernels.h"
#include "cuda/Launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

using namespace shoal::rt;

namespace {

using namespace shoal::rt::cuda::launch;

__global__ void __launch_bounds__(kThreads)
    topKKernel(const float *x, int64_t rows, int64_t n, int64_t inner,
               int64_t k, bool largest, float *values, int64_t *indices) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       r < rows; r += step) {
    int64_t o = r / inner, i = r - o * inner;
    int64_t base = o * k * inner + i;
    topKRow(x + o * n * inner + i, n, inner, k, largest, values + base,
            indices ? indices + base : nullptr, inner);
  }
}

/// One element of `Bytes` bytes.
template <int Bytes> struct Unit;
template <> struct Unit<1> { using type = uint8_t; };
template <> struct Unit<2> { using type = uint16_t; };
template <> struct Unit<4> { using type = uint32_t; };
template <> struct Unit<8> { using type = uint64_t; };

template <typename U, typename IndexT>
__global__ void __launch_bounds__(kThreads)
    gatherElementsKernel(const U *data, const IndexT *indices, U *out,
                         int64_t total, ElementsGeometry g, int *errorFlag) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += step) {
    int64_t off = elementOffset(g, i, static_cast<int64_t>(indices[i]));
    if (off < 0) {
      if (errorFlag)
        *errorFlag = 1;
      out[i] = U();
      continue;
    }
    out[i] = data[off];
  }
}

template <typename U, typename IndexT, bool Add>
__global__ void __launch_bounds__(kThreads)
    scatterElementsKernel(const IndexT *indices, const U *updates, U *out,
                          int64_t total, ElementsGeometry g, int *errorFlag) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += step) {
    int64_t off = elementOffset(g, i, static_cast<int64_t>(indices[i]));
    if (off < 0) {
      if (errorFlag)
        *errorFlag = 1;
      continue;
    }
    if constexpr (Add)
      atomicAdd(out + off, updates[i]);
    else
      out[off] = updates[i];
  }
}

/// Checks GatherElements/ScatterElements operands as the CPU kernels do
/// and returns their geometry.
ElementsGeometry elementsCheck(const char *what, std::size_t elemSize,
                               const Shape &dataShape, DType indexType,
                               const Shape &indicesShape, int64_t axis) {
  if (indexType != DType::I64 && indexType != DType::I32)
    throw Error(std::string(what) + ": indices must be i64 or i32, got " +
                dtypeName(indexType));
  if (elemSize != 1 && elemSize != 2 && elemSize != 4 && elemSize != 8)
    throw Error(std::string(what) + ": elements of " +
                std::to_string(elemSize) + " bytes");
  int64_t rank = static_cast<int64_t>(dataShape.size());
  if (axis < 0 || axis >= rank || indicesShape.size() != dataShape.size() ||
      rank > kMaxIndexRank)
    throw Error(std::string(what) + ": indices " + shapeString(indicesShape) +
                " do not fit data " + shapeString(dataShape) + " along axis " +
                std::to_string(axis));
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indicesShape[d] > dataShape[d])
      throw Error(std::string(what) + ": indices " + shapeString(indicesShape) +
                  " are larger than data " + shapeString(dataShape) +
                  " along dimension " + std::to_string(d));
  return elementsGeometry(dataShape, indicesShape, axis);
}

template <typename F> void withUnit(std::size_t bytes, F f) {
  switch (bytes) {
  case 1:
    return f(Unit<1>::type());
  case 2:
    return f(Unit<2>::type());
  case 4:
    return f(Unit<4>::type());
  default:
    return f(Unit<8>::type());
  }
}

} // namespace

void shoal::rt::cuda::topK(const float *x, const Shape &shape, int64_t axis,
                           int64_t k, bool largest, float *values,
                           int64_t *indices, cudaStream_t stream) {
  int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0 || axis >= rank)
    throw Error("TopK: axis " + std::to_string(axis) + " is out of range for " +
                shapeString(shape));
  int64_t n = shape[axis];
  if (k < 0 || k > n)
    throw Error("TopK: k = " + std::to_string(k) +
                " is out of range for axis " + std::to_string(axis) +
                " of size " + std::to_string(n));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= shape[d];
  int64_t rows = outer * inner;
  if (k == 0 || rows == 0)
    return;
  topKKernel<<<gridFor(rows), kThreads, 0, stream>>>(x, rows, n, inner, k,
                                                     largest, values, indices);
  checkLaunch("TopK");
}

void shoal::rt::cuda::gatherElements(const void *data, std::size_t elemSize,
                                     const Shape &dataShape,
                                     const void *indices, DType indexType,
                                     const Shape &indicesShape, int64_t axis,
                                     void *out, int *errorFlag,
                                     cudaStream_t stream) {
  ElementsGeometry g = elementsCheck("GatherElements", elemSize, dataShape,
                                     indexType, indicesShape, axis);
  int64_t total = product(indicesShape);
  if (total == 0)
    return;
  withUnit(elemSize, [&](auto u) {
    using U = decltype(u);
    if (indexType == DType::I64)
      gatherElementsKernel<U, int64_t><<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const U *>(data), static_cast<const int64_t *>(indices),
          static_cast<U *>(out), total, g, errorFlag);
    else
      gatherElementsKernel<U, int32_t><<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const U *>(data), static_cast<const int32_t *>(indices),
          static_cast<U *>(out), total, g, errorFlag);
  });
  checkLaunch("GatherElements");
}

void shoal::rt::cuda::scatterElements(const void *data, std::size_t elemSize,
                                      const Shape &dataShape,
                                      const void *indices, DType indexType,
                                      const Shape &indicesShape,
                                      const void *updates, int64_t axis,
                                      bool add, void *out, int *errorFlag,
                                      cudaStream_t stream) {
  ElementsGeometry g = elementsCheck("ScatterElements", elemSize, dataShape,
                                     indexType, indicesShape, axis);
  if (add && elemSize != 4)
    throw Error("ScatterElements: reduction add on the device is f32 only");
  std::size_t bytes = static_cast<std::size_t>(product(dataShape)) * elemSize;
  if (out != data && bytes > 0) {
    cudaError_t err =
        cudaMemcpyAsync(out, data, bytes, cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess)
      throw Error(std::string("ScatterElements: ") + cudaGetErrorString(err));
  }
  int64_t total = product(indicesShape);
  if (total == 0)
    return;
  auto run = [&](auto u, auto index, auto addTag) {
    using U = decltype(u);
    using IndexT = decltype(index);
    scatterElementsKernel<U, IndexT, decltype(addTag)::value>
        <<<gridFor(total), kThreads, 0, stream>>>(
            static_cast<const IndexT *>(indices),
            static_cast<const U *>(updates), static_cast<U *>(out), total, g,
            errorFlag);
  };
  if (add) {
    if (indexType == DType::I64)
      run(float(), int64_t(), std::true_type());
    else
      run(float(), int32_t(), std::true_type());
  } else {
    withUnit(elemSize, [&](auto u) {
      if (indexType == DType::I64)
        run(u, int64_t(), std::false_type());
      else
        run(u, int32_t(), std::false_type());
    });
  }
  checkLaunch("ScatterElements");
}
