//===- TrainingKernels.cu - Loss and norm gradients on the GPU --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The softmax cross-entropy and its gradient, and the LayerNorm/RMSNorm
// input and scale gradients, on f32: one thread block per row, its sums
// and maxima through CUB's BlockReduce, each element's arithmetic through
// LossMath.h, the functions the CPU kernels call too. The scale gradient
// sums over the rows in a fixed order, in double (as the CPU kernel):
// deterministic. (A file of its own, as Reduce.cu: CUB names `::cuda`.)
//
//===----------------------------------------------------------------------===//

#include "LossMath.h"
#include "cuda/Kernels.h"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/std/functional>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

namespace shoal {
namespace rt {
namespace cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int64_t kMaxRowBlocks = 65535;

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}

void launched(const char *what) { check(cudaPeekAtLastError(), what); }

unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

using FloatReduce = cub::BlockReduce<float, kRowThreads>;
using DoubleReduce = cub::BlockReduce<double, kRowThreads>;

/// The block's sum (or max) of `v`, returned to every thread.
template <typename Op>
__device__ float blockAll(float v, Op op, FloatReduce::TempStorage &tmp,
                          float &shared) {
  float r = FloatReduce(tmp).Reduce(v, op);
  if (threadIdx.x == 0)
    shared = r;
  __syncthreads();
  r = shared;
  __syncthreads();
  return r;
}

__device__ float blockSum(float v, FloatReduce::TempStorage &tmp,
                          float &shared) {
  return blockAll(v, ::cuda::std::plus<float>(), tmp, shared);
}

/// max and sum(exp(x - max)) of row[0..v).
__device__ void rowMaxAndSum(const float *row, int64_t v,
                             FloatReduce::TempStorage &tmp, float &shared,
                             float &mx, float &sum) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += kRowThreads)
    m = fmaxf(m, row[j]);
  mx = blockAll(m, MaxOf(), tmp, shared);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < v; j += kRowThreads)
    s += expf(row[j] - mx);
  sum = blockSum(s, tmp, shared);
}

__global__ void __launch_bounds__(kRowThreads)
    crossEntropyKernel(const float *x, const int64_t *labels, int64_t rows,
                       int64_t v, int64_t ignore, float *loss, int *flag) {
  __shared__ FloatReduce::TempStorage tmp;
  __shared__ float shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * v;
    float mx, sum;
    rowMaxAndSum(row, v, tmp, shared, mx, sum);
    if (threadIdx.x == 0) {
      int64_t l = labels[r];
      bool ignored = l == ignore;
      if (!ignored && (l < 0 || l >= v)) {
        if (flag)
          *flag = 1;
        loss[r] = 0.f;
      } else {
        loss[r] =
            crossEntropyLoss(mx + logf(sum), ignored ? 0.f : row[l], ignored);
      }
    }
  }
}

__global__ void __launch_bounds__(kRowThreads)
    crossEntropyGradKernel(const float *x, const int64_t *labels,
                           const float *dloss, int64_t rows, int64_t v,
                           int64_t ignore, float *dx, int *flag) {
  __shared__ FloatReduce::TempStorage tmp;
  __shared__ float shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * v;
    float *out = dx + r * v;
    int64_t l = labels[r];
    if (l == ignore) {
      for (int64_t j = threadIdx.x; j < v; j += kRowThreads)
        out[j] = 0.f;
      continue;
    }
    if (l < 0 || l >= v) {
      if (threadIdx.x == 0 && flag)
        *flag = 1;
      for (int64_t j = threadIdx.x; j < v; j += kRowThreads)
        out[j] = 0.f;
      continue;
    }
    float mx, sum;
    rowMaxAndSum(row, v, tmp, shared, mx, sum);
    float d = dloss[r];
    float scale = d / sum;
    float p = expf(row[l] - mx) / sum;
    for (int64_t j = threadIdx.x; j < v; j += kRowThreads)
      out[j] = j == l ? crossEntropyGradAtLabel(p, d)
                      : crossEntropyGradAway(expf(row[j] - mx), scale);
  }
}

/// Softmax's gradient along rows of n: dx = y * (dy - sum(y * dy)).
__global__ void __launch_bounds__(kRowThreads)
    softmaxGradKernel(const float *y, const float *dy, float *dx, int64_t rows,
                      int64_t n) {
  __shared__ FloatReduce::TempStorage tmp;
  __shared__ float shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *yr = y + r * n, *dr = dy + r * n;
    float *out = dx + r * n;
    float part = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads)
      part += yr[j] * dr[j];
    float dot = blockSum(part, tmp, shared);
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads)
      out[j] = softmaxGradElement(yr[j], dr[j], dot);
  }
}

/// The local class of `label` in a block holding classes [offset, offset
/// + c) of `size` (-1: ignored or another rank's); an out-of-range label
/// sets the flag.
__device__ int64_t localClass(int64_t label, int64_t size, int64_t offset,
                              int64_t c, int64_t ignore, int *flag) {
  if (label == ignore)
    return -1;
  if (label < 0 || label >= size) {
    if (flag)
      *flag = 1;
    return -1;
  }
  int64_t local = label - offset;
  return local >= 0 && local < c ? local : -1;
}

__global__ void __launch_bounds__(kRowThreads)
    vocabMaxKernel(const float *x, int64_t rows, int64_t c, int64_t valid,
                   float *out) {
  __shared__ FloatReduce::TempStorage tmp;
  __shared__ float shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * c;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += kRowThreads)
      m = fmaxf(m, row[j]);
    m = blockAll(m, MaxOf(), tmp, shared);
    if (threadIdx.x == 0)
      out[r] = m;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    vocabStatsKernel(const float *x, const int64_t *labels, const float *max,
                     int64_t rows, int64_t c, int64_t valid, int64_t size,
                     int64_t offset, int64_t ignore, float *out, int *flag) {
  __shared__ DoubleReduce::TempStorage tmp;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * c;
    double s = 0;
    for (int64_t j = threadIdx.x; j < valid; j += kRowThreads)
      s += exp(double(row[j]) - double(max[r]));
    double sum = DoubleReduce(tmp).Sum(s);
    if (threadIdx.x == 0) {
      int64_t local = localClass(labels[r], size, offset, c, ignore, flag);
      out[2 * r] = static_cast<float>(sum);
      out[2 * r + 1] = local >= 0 ? row[local] : 0.f;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kRowThreads)
    vocabCrossEntropyKernel(const float *max, const float *stats,
                            const int64_t *labels, int64_t rows, int64_t ignore,
                            float *loss) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    loss[r] = labels[r] == ignore
                  ? 0.f
                  : vocabLoss(stats[2 * r], max[r], stats[2 * r + 1]);
}

__global__ void __launch_bounds__(kRowThreads)
    vocabCrossEntropyGradKernel(const float *x, const int64_t *labels,
                                const float *dloss, const float *max,
                                const float *stats, int64_t rows, int64_t c,
                                int64_t valid, int64_t size, int64_t offset,
                                int64_t ignore, float *dx, int *flag) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * c;
    float *out = dx + r * c;
    int64_t label = labels[r];
    if (label == ignore) {
      for (int64_t j = threadIdx.x; j < c; j += kRowThreads)
        out[j] = 0.f;
      continue;
    }
    int64_t local = localClass(label, size, offset, c, ignore,
                               threadIdx.x == 0 ? flag : nullptr);
    double scale = double(dloss[r]) / double(stats[2 * r]);
    for (int64_t j = threadIdx.x; j < c; j += kRowThreads) {
      float v = j < valid ? vocabGradAway(row[j], max[r], scale) : 0.f;
      out[j] = j == local ? vocabGradAtLabel(v, dloss[r]) : v;
    }
  }
}

/// Mean and 1 / sqrt(var + epsilon) of row[0..n) in float, as the CPU's
/// vector loop (meanInvStd): two passes.
__device__ void rowMeanInv(const float *row, int64_t n, float epsilon, bool rms,
                           FloatReduce::TempStorage &tmp, float &shared,
                           float &mu, float &inv) {
  mu = 0.f;
  if (!rms) {
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads)
      s += row[j];
    mu = blockSum(s, tmp, shared) / static_cast<float>(n);
  }
  float sq = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += kRowThreads) {
    float d = row[j] - mu;
    sq += d * d;
  }
  float var = blockSum(sq, tmp, shared) / static_cast<float>(n);
  inv = 1.f / sqrtf(var + epsilon);
}

__global__ void __launch_bounds__(kRowThreads)
    layerNormGradKernel(const float *x, const float *g, const float *dy,
                        int64_t rows, int64_t n, float epsilon, bool rms,
                        float *dx) {
  __shared__ FloatReduce::TempStorage tmp;
  __shared__ float shared;
  const float invN = 1.f / static_cast<float>(n);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * n, *dr = dy + r * n;
    float *out = dx + r * n;
    float mu, inv;
    rowMeanInv(xr, n, epsilon, rms, tmp, shared, mu, inv);
    float sg = 0.f, sgx = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads) {
      float gj = dr[j] * g[j];
      sg += gj;
      sgx += gj * normalized(xr[j], mu, inv);
    }
    float sumG = blockSum(sg, tmp, shared);
    float sumGX = blockSum(sgx, tmp, shared);
    float meanG = rms ? 0.f : sumG * invN, meanGX = sumGX * invN;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads)
      out[j] = layerNormGradElement(dr[j], g[j], normalized(xr[j], mu, inv),
                                    meanG, meanGX, inv);
  }
}

/// Each row's mean and 1 / sqrt(var + epsilon) in double (the CPU scale
/// gradient's rowStats): stats[2 r], stats[2 r + 1].
__global__ void __launch_bounds__(kRowThreads)
    rowStatsKernel(const float *x, int64_t rows, int64_t n, float epsilon,
                   bool rms, double *stats) {
  __shared__ DoubleReduce::TempStorage tmp;
  __shared__ double shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *row = x + r * n;
    double s = 0;
    for (int64_t j = threadIdx.x; j < n && !rms; j += kRowThreads)
      s += row[j];
    double total = DoubleReduce(tmp).Sum(s);
    if (threadIdx.x == 0)
      shared = total;
    __syncthreads();
    double mu = rms ? 0.0 : shared / static_cast<double>(n);
    __syncthreads();
    double sq = 0;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads) {
      double d = row[j] - mu;
      sq += d * d;
    }
    double var = DoubleReduce(tmp).Sum(sq);
    if (threadIdx.x == 0) {
      stats[2 * r] = mu;
      stats[2 * r + 1] =
          1.0 / sqrt(var / static_cast<double>(n) + double(epsilon));
    }
    __syncthreads();
  }
}

/// dscale[j] = sum over the rows, in order, of dy[r, j] * xhat[r, j], in
/// double: one thread per column.
__global__ void __launch_bounds__(kRowThreads)
    scaleGradKernel(const float *x, const float *dy, const double *stats,
                    int64_t rows, int64_t n, float *dscale) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < n; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += double(dy[r * n + j]) *
             ((double(x[r * n + j]) - stats[2 * r]) * stats[2 * r + 1]);
    dscale[j] = static_cast<float>(acc);
  }
}

/// GatherGrad, first pass: each index normalized (negative ones count from
/// the end) into a sort key, its position the value; one out of range sets
/// the flag and sorts last (key `rows`), where no run reads it.
template <typename IndexT>
__global__ void __launch_bounds__(kRowThreads)
    gatherGradKeysKernel(const IndexT *indices, int64_t n, int64_t rows,
                         int64_t whole, int64_t offset, int32_t *keys,
                         int32_t *positions, int *flag) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t v = static_cast<int64_t>(indices[i]);
    int64_t norm = v < 0 ? v + whole : v;
    if (norm < 0 || norm >= whole) {
      if (flag)
        *flag = 1;
      norm = rows;
    } else {
      norm -= offset; // another rank's row sorts last, unread
      if (norm < 0 || norm >= rows)
        norm = rows;
    }
    keys[i] = static_cast<int32_t>(norm);
    positions[i] = static_cast<int32_t>(i);
  }
}

/// GatherGrad, second pass: block b starts at sorted entry b; when that is
/// the first of its row's run, the block's threads sum dy over the run's
/// positions (ascending: the sort is stable), one column each, in double,
/// as the CPU kernel does, and write the row. Rows no index hits stay 0.
__global__ void __launch_bounds__(kRowThreads)
    gatherGradRowsKernel(const int32_t *keys, const int32_t *positions,
                         int64_t n, int64_t rows, const float *dy, int64_t h,
                         float *out) {
  for (int64_t b = blockIdx.x; b < n; b += gridDim.x) {
    int32_t row = keys[b];
    if (row >= rows || (b > 0 && keys[b - 1] == row))
      continue;
    for (int64_t j = threadIdx.x; j < h; j += kRowThreads) {
      double acc = 0;
      for (int64_t k = b; k < n && keys[k] == row; ++k)
        acc += dy[static_cast<int64_t>(positions[k]) * h + j];
      out[static_cast<int64_t>(row) * h + j] = static_cast<float>(acc);
    }
  }
}

/// Bits that hold every key in [0, rows].
int keyBits(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) <= rows)
    ++bits;
  return bits;
}

/// CUB's temporary bytes for sorting n pairs.
std::size_t sortBytes(int64_t n, int bits) {
  std::size_t temp = 0;
  check(cub::DeviceRadixSort::SortPairs(
            nullptr, temp, static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr),
            static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr), static_cast<int>(n), 0, bits),
        "cub::DeviceRadixSort::SortPairs (size)");
  return (temp + 255) / 256 * 256;
}

std::size_t aligned256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

} // namespace

std::size_t gatherGradWorkspace(int64_t numIndices, int64_t rows) {
  std::size_t n = static_cast<std::size_t>(std::max<int64_t>(numIndices, 1));
  return 4 * aligned256(n * sizeof(int32_t)) +
         sortBytes(std::max<int64_t>(numIndices, 1), keyBits(rows));
}

void gatherGrad(const void *indices, DType indexType, int64_t numIndices,
                const float *dy, int64_t rows, int64_t h, float *out,
                void *workspace, int *errorFlag, cudaStream_t stream,
                int64_t whole, int64_t offset) {
  if (whole < 0)
    whole = rows;
  if (rows <= 0 || h <= 0)
    return;
  check(cudaMemsetAsync(out, 0, rows * h * sizeof(float), stream),
        "GatherGrad");
  if (numIndices <= 0)
    return;
  if (numIndices > INT32_MAX || rows >= INT32_MAX ||
      (indexType != DType::I64 && indexType != DType::I32))
    throw Error("GatherGrad: " + std::to_string(numIndices) + " indices into " +
                std::to_string(rows) +
                " rows is past the kernel's 32-bit sort");
  const std::size_t slot =
      aligned256(static_cast<std::size_t>(numIndices) * sizeof(int32_t));
  char *base = static_cast<char *>(workspace);
  int32_t *keys = reinterpret_cast<int32_t *>(base);
  int32_t *positions = reinterpret_cast<int32_t *>(base + slot);
  int32_t *sortedKeys = reinterpret_cast<int32_t *>(base + 2 * slot);
  int32_t *sortedPositions = reinterpret_cast<int32_t *>(base + 3 * slot);
  void *temp = base + 4 * slot;
  const int bits = keyBits(rows);
  std::size_t tempBytes = sortBytes(numIndices, bits);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(
      (numIndices + kRowThreads - 1) / kRowThreads, kMaxRowBlocks));
  if (indexType == DType::I64)
    gatherGradKeysKernel<<<blocks, kRowThreads, 0, stream>>>(
        static_cast<const int64_t *>(indices), numIndices, rows, whole, offset,
        keys, positions, errorFlag);
  else
    gatherGradKeysKernel<<<blocks, kRowThreads, 0, stream>>>(
        static_cast<const int32_t *>(indices), numIndices, rows, whole, offset,
        keys, positions, errorFlag);
  launched("GatherGrad (keys)");
  check(cub::DeviceRadixSort::SortPairs(
            temp, tempBytes, keys, sortedKeys, positions, sortedPositions,
            static_cast<int>(numIndices), 0, bits, stream),
        "GatherGrad (cub::DeviceRadixSort::SortPairs)");
  gatherGradRowsKernel<<<rowBlocks(numIndices), kRowThreads, 0, stream>>>(
      sortedKeys, sortedPositions, numIndices, rows, dy, h, out);
  launched("GatherGrad");
}

/// The classes of the block that exist: [0, valid) of its c columns.
int64_t validClasses(int64_t size, int64_t offset, int64_t c) {
  return std::clamp<int64_t>(size - offset, 0, c);
}

void vocabMax(const float *logits, int64_t rows, int64_t c, int64_t size,
              int64_t offset, float *out, cudaStream_t stream) {
  if (rows <= 0)
    return;
  vocabMaxKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      logits, rows, c, validClasses(size, offset, c), out);
  launched("VocabMax");
}

void vocabStats(const float *logits, const int64_t *labels, const float *max,
                int64_t rows, int64_t c, int64_t size, int64_t offset,
                int64_t ignoreIndex, float *stats, int *errorFlag,
                cudaStream_t stream) {
  if (rows <= 0)
    return;
  vocabStatsKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      logits, labels, max, rows, c, validClasses(size, offset, c), size, offset,
      ignoreIndex, stats, errorFlag);
  launched("VocabStats");
}

void vocabCrossEntropy(const float *max, const float *stats,
                       const int64_t *labels, int64_t rows, int64_t ignoreIndex,
                       float *loss, cudaStream_t stream) {
  if (rows <= 0)
    return;
  unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((rows + kRowThreads - 1) / kRowThreads, kMaxRowBlocks));
  vocabCrossEntropyKernel<<<blocks, kRowThreads, 0, stream>>>(
      max, stats, labels, rows, ignoreIndex, loss);
  launched("VocabCrossEntropy");
}

void vocabCrossEntropyGrad(const float *logits, const int64_t *labels,
                           const float *dloss, const float *max,
                           const float *stats, int64_t rows, int64_t c,
                           int64_t size, int64_t offset, int64_t ignoreIndex,
                           float *dlogits, int *errorFlag,
                           cudaStream_t stream) {
  if (rows <= 0 || c <= 0)
    return;
  vocabCrossEntropyGradKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      logits, labels, dloss, max, stats, rows, c, validClasses(size, offset, c),
      size, offset, ignoreIndex, dlogits, errorFlag);
  launched("VocabCrossEntropyGrad");
}

void softmaxCrossEntropy(const float *logits, const int64_t *labels,
                         int64_t rows, int64_t v, int64_t ignoreIndex,
                         float *loss, int *errorFlag, cudaStream_t stream) {
  if (rows <= 0)
    return;
  // (With v = 0 every row's loss is 0 and a label not ignored sets the
  // flag, as the CPU kernel's check refuses it.)
  crossEntropyKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      logits, labels, rows, v, ignoreIndex, loss, errorFlag);
  launched("SoftmaxCrossEntropy");
}

void softmaxCrossEntropyGrad(const float *logits, const int64_t *labels,
                             const float *dloss, int64_t rows, int64_t v,
                             int64_t ignoreIndex, float *dlogits,
                             int *errorFlag, cudaStream_t stream) {
  if (rows <= 0)
    return;
  crossEntropyGradKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      logits, labels, dloss, rows, v, ignoreIndex, dlogits, errorFlag);
  launched("SoftmaxCrossEntropyGrad");
}

void softmaxGradRows(const float *y, const float *dy, float *dx, int64_t rows,
                     int64_t n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0)
    return;
  softmaxGradKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(y, dy, dx,
                                                                 rows, n);
  launched("SoftmaxGrad");
}

void layerNormGrad(const float *x, const float *scale, const float *dy,
                   int64_t rows, int64_t n, float epsilon, bool rms, float *dx,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0)
    return;
  layerNormGradKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      x, scale, dy, rows, n, epsilon, rms, dx);
  launched("LayerNormalizationGrad");
}

std::size_t layerNormScaleGradWorkspace(int64_t rows) {
  return static_cast<std::size_t>(std::max<int64_t>(rows, 1)) * 2 *
         sizeof(double);
}

void layerNormScaleGrad(const float *x, const float *dy, int64_t rows,
                        int64_t n, float epsilon, bool rms, float *dscale,
                        void *workspace, cudaStream_t stream) {
  if (n <= 0)
    return;
  if (rows <= 0) {
    check(cudaMemsetAsync(dscale, 0, n * sizeof(float), stream),
          "LayerNormalizationScaleGrad");
    return;
  }
  double *stats = static_cast<double *>(workspace);
  rowStatsKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      x, rows, n, epsilon, rms, stats);
  launched("LayerNormalizationScaleGrad (row statistics)");
  unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((n + kRowThreads - 1) / kRowThreads, kMaxRowBlocks));
  scaleGradKernel<<<blocks, kRowThreads, 0, stream>>>(x, dy, stats, rows, n,
                                                      dscale);
  launched("LayerNormalizationScaleGrad");
}

} // namespace cuda
} // namespace rt
} // namespace shoal
