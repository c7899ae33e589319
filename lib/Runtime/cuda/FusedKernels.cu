//===- FusedKernels.cu - CUDA kernels of the fused ops ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cuda/FusedKernels.h"

#include <fmt/format.h>

using namespace shoal::rt;

namespace {

void checkLaunch(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw Error(
        fmt::format("CUDA: launching {}: {}", what, cudaGetErrorString(e)));
}

int blocksFor(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

constexpr float kTanhScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kTanhCube = 0.044715f;

__global__ void geluKernel(const float *__restrict__ x,
                           const float *__restrict__ bias, int64_t biasSize,
                           float *__restrict__ out, int64_t n, bool tanhForm) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float z = x[i];
    if (bias)
      z += bias[i % biasSize];
    out[i] =
        tanhForm
            ? 0.5f * z * (1.f + tanhf(kTanhScale * (z + kTanhCube * z * z * z)))
            : 0.5f * z * (1.f + erff(z * 0.70710678118654752f));
  }
}

/// dz = dy * gelu'(x + bias), as cpu/VectorImpl.cpp's geluGrad.
__global__ void geluGradKernel(const float *__restrict__ dy,
                               const float *__restrict__ x,
                               const float *__restrict__ bias, int64_t biasSize,
                               float *__restrict__ dz, int64_t n,
                               bool tanhForm) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float z = x[i];
    if (bias)
      z += bias[i % biasSize];
    float d;
    if (tanhForm) {
      float z2 = z * z;
      float t = tanhf(kTanhScale * (z + kTanhCube * z2 * z));
      d = 0.5f * (1.f + t) +
          0.5f * z * (1.f - t * t) * kTanhScale * (1.f + 3.f * kTanhCube * z2);
    } else {
      d = 0.5f * (1.f + erff(z * 0.70710678118654752f)) +
          z * 0.3989422804014327f * expf(-0.5f * z * z);
    }
    dz[i] = dy[i] * d;
  }
}

/// Block-wide sum of one float per thread (blockDim.x a multiple of 32, at
/// most 1024); every thread gets the total.
__device__ float blockSum(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  int warps = blockDim.x / 32;
  v = lane < warps ? shared[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

/// One block per row: writes the sum, then normalizes it (two passes over
/// the row for a stable variance).
__global__ void
addLayerNormKernel(const float *__restrict__ a, const float *__restrict__ b,
                   const float *__restrict__ scale,
                   const float *__restrict__ bias, float *__restrict__ sum,
                   float *__restrict__ y, int64_t cols, float epsilon) {
  __shared__ float shared[32];
  int64_t row = blockIdx.x;
  const float *ar = a + row * cols, *br = b + row * cols;
  float *sr = sum + row * cols, *yr = y + row * cols;
  float local = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float s = ar[j] + br[j];
    sr[j] = s;
    local += s;
  }
  float mean = blockSum(local, shared) / cols;
  local = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = sr[j] - mean;
    local += d * d;
  }
  float inv = rsqrtf(blockSum(local, shared) / cols + epsilon);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = (sr[j] - mean) * inv * scale[j];
    yr[j] = bias ? v + bias[j] : v;
  }
}

} // namespace

void shoal::rt::cuda::gelu(const float *x, const float *bias, int64_t biasSize,
                           float *out, int64_t n, bool tanhForm,
                           cudaStream_t stream) {
  if (n == 0)
    return;
  if (bias && biasSize <= 0)
    throw Error("gelu: bias of size 0");
  geluKernel<<<blocksFor(n, 256), 256, 0, stream>>>(x, bias, biasSize, out, n,
                                                    tanhForm);
  checkLaunch("gelu");
}

void shoal::rt::cuda::geluGrad(const float *dy, const float *x,
                               const float *bias, int64_t biasSize, float *dz,
                               int64_t n, bool tanhForm, cudaStream_t stream) {
  if (n == 0)
    return;
  if (bias && biasSize <= 0)
    throw Error("geluGrad: bias of size 0");
  geluGradKernel<<<blocksFor(n, 256), 256, 0, stream>>>(dy, x, bias, biasSize,
                                                        dz, n, tanhForm);
  checkLaunch("geluGrad");
}

void shoal::rt::cuda::addLayerNorm(const float *a, const float *b,
                                   const float *scale, const float *bias,
                                   float *sum, float *y, int64_t rows,
                                   int64_t cols, float epsilon,
                                   cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  if (rows > 2147483647)
    throw Error("add_layer_norm: too many rows for one launch");
  int threads = cols >= 1024 ? 1024 : (cols >= 256 ? 256 : 128);
  addLayerNormKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      a, b, scale, bias, sum, y, cols, epsilon);
  checkLaunch("add_layer_norm");
}
