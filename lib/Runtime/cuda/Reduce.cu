//===- Reduce.cu - Reductions through CUB -----------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Device-wide reductions with CUB (CCCL), not hand-written: the clipping
// norm's sum of squares. (A file of its own: CUB's kernel stubs name
// `::cuda::std`, which a `using namespace shoal::rt` would make ambiguous
// with shoal::rt::cuda.)
//
//===----------------------------------------------------------------------===//

#include "cuda/Kernels.h"

#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>
#include <cuda_runtime.h>

#include <string>

namespace shoal {
namespace rt {
namespace cuda {
namespace {

/// x^2 in double (the CPU sums float squares in double too).
struct SquareInDouble {
  __device__ double operator()(float x) const {
    return static_cast<double>(x) * static_cast<double>(x);
  }
};

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}

/// CUB's temporary storage for n elements.
std::size_t cubBytes(int64_t n) {
  std::size_t temp = 0;
  check(cub::DeviceReduce::TransformReduce(
            nullptr, temp, static_cast<const float *>(nullptr),
            static_cast<double *>(nullptr), n, ::cuda::std::plus<double>(),
            SquareInDouble(), 0.0),
        "cub::DeviceReduce::TransformReduce (size)");
  return (temp + 255) / 256 * 256;
}

} // namespace

std::size_t sumOfSquaresWorkspace(int64_t n) { return cubBytes(n) + 256; }

double sumOfSquares(const float *g, int64_t n, void *workspace,
                    cudaStream_t stream) {
  if (n <= 0)
    return 0;
  std::size_t temp = cubBytes(n);
  double *result =
      reinterpret_cast<double *>(static_cast<char *>(workspace) + temp);
  check(cub::DeviceReduce::TransformReduce(workspace, temp, g, result, n,
                                           ::cuda::std::plus<double>(),
                                           SquareInDouble(), 0.0, stream),
        "cub::DeviceReduce::TransformReduce");
  double host = 0;
  check(cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost,
                        stream),
        "cudaMemcpyAsync (sum of squares)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

} // namespace cuda
} // namespace rt
} // namespace shoal
