//===- Launch.h - Helpers of the CUDA kernel files --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What every kernel file's host side needs: the block size, the grid of a
// grid-stride loop, launch errors and shape strings in messages. Included by
// the .cu files only.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_LAUNCH_H
#define SHOAL_RUNTIME_CUDA_LAUNCH_H

#include "Tensor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace shoal {
namespace rt {
namespace cuda {
namespace launch {

constexpr int kThreads = 256;
/// Grid-stride loops never need more blocks than a few waves of the GPU.
constexpr int64_t kMaxBlocks = 8192;

inline std::string shapeString(const Shape &shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline int64_t product(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline void checkLaunch(const char *what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string(what) +
                ": CUDA kernel launch failed: " + cudaGetErrorString(err));
}

inline unsigned gridFor(int64_t work, int64_t perBlock = kThreads) {
  int64_t blocks = (work + perBlock - 1) / perBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

} // namespace launch
} // namespace cuda
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_LAUNCH_H
