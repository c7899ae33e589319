//===- Kernels.cu - CUDA kernels of the runtime -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every kernel walks its output with a grid-stride loop over 256-thread
// blocks. Before launching, the host side drops size-1 dimensions and merges
// neighbouring dimensions that every operand walks contiguously (as the CPU
// kernels' LoopNest does), so that a flat output index turns into operand
// offsets with as few divisions as possible; the collapsed shape and strides
// travel by value as a kernel argument. Indices are 32-bit where everything
// fits, else 64-bit. Element-wise work moves 16 bytes per access where the
// pointers allow it.
//
//===----------------------------------------------------------------------===//

#include "cuda/Kernels.h"
#include "cuda/Launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

using namespace shoal::rt;
using shoal::rt::arith::BinaryOp;
using shoal::rt::arith::ReduceOp;
using shoal::rt::arith::UnaryOp;

namespace {

//===----------------------------------------------------------------------===//
// Host-side helpers
//===----------------------------------------------------------------------===//

using namespace shoal::rt::cuda::launch;

constexpr int kWarp = 32;
/// Collapsed shapes get one extra dimension in transpose (the bytes of a wide
/// element).
constexpr int kMaxDims = shoal::rt::cuda::kMaxRank + 1;

void checkRank(const Shape &shape, const char *what) {
  if (shape.size() > static_cast<std::size_t>(shoal::rt::cuda::kMaxRank))
    throw Error(std::string(what) + ": rank " + std::to_string(shape.size()) +
                " of " + shapeString(shape) +
                " is above the CUDA kernels' limit of " +
                std::to_string(shoal::rt::cuda::kMaxRank));
}

void checkCall(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}

/// Whether 32-bit indices cover `n` elements, leaving room for the
/// grid-stride step past the end.
bool fits32(int64_t n) { return n <= INT32_MAX - kMaxBlocks * kThreads; }

bool aligned(const void *p, std::size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

/// Row-major strides of `shape` right-aligned to `rank` dimensions, 0 where
/// the dimension is broadcast (size 1 or missing).
std::vector<int64_t> broadcastStrides(const Shape &shape, std::size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t acc = 1;
  std::size_t lead = rank - shape.size();
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[lead + i] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return strides;
}

std::vector<int64_t> denseStrides(const Shape &shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= shape[i];
  }
  return strides;
}

/// Whether `from` broadcasts to `to` (numpy rules) without changing it.
[[maybe_unused]] bool broadcastsTo(const Shape &from, const Shape &to) {
  if (from.size() > to.size())
    return false;
  std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return false;
  return true;
}

/// An iteration space over a dense row-major output walked by several
/// operands: size-1 dimensions dropped, and neighbours merged where every
/// operand's strides allow. Never empty: a single element is dims [1].
struct Nest {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides; // per operand, per dim

  Nest(const Shape &shape, const std::vector<std::vector<int64_t>> &sets)
      : strides(sets.size()) {
    std::size_t ops = sets.size();
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1)
        continue;
      if (!dims.empty()) {
        bool merge = true;
        for (std::size_t o = 0; o < ops; ++o)
          if (strides[o].back() != sets[o][d] * shape[d])
            merge = false;
        if (merge) {
          dims.back() *= shape[d];
          for (std::size_t o = 0; o < ops; ++o)
            strides[o].back() = sets[o][d];
          continue;
        }
      }
      dims.push_back(shape[d]);
      for (std::size_t o = 0; o < ops; ++o)
        strides[o].push_back(sets[o][d]);
    }
    if (dims.empty()) {
      dims.push_back(1);
      for (std::size_t o = 0; o < ops; ++o)
        strides[o].push_back(0);
    }
  }

  int rank() const { return static_cast<int>(dims.size()); }
};

//===----------------------------------------------------------------------===//
// Device-side helpers
//===----------------------------------------------------------------------===//

/// A collapsed shape and the strides of K operands over it, passed by value.
template <int K> struct NestArg {
  int rank;
  int64_t dims[kMaxDims];
  int64_t strides[K][kMaxDims];
};

/// The NestArg of operands `first`..`first + K - 1` of `nest`.
template <int K> NestArg<K> nestArg(const Nest &nest, std::size_t first = 0) {
  if (nest.rank() > kMaxDims)
    throw Error("internal error: collapsed rank " +
                std::to_string(nest.rank()) + " is too large");
  NestArg<K> arg{};
  arg.rank = nest.rank();
  for (int d = 0; d < nest.rank(); ++d) {
    arg.dims[d] = nest.dims[d];
    for (int k = 0; k < K; ++k)
      arg.strides[k][d] = nest.strides[first + k][d];
  }
  return arg;
}

/// The K operand offsets of flat index `i` of `nest`'s row-major space. The
/// divisions run innermost first and stop at the outermost dimension, so a
/// rank-1 space costs none.
template <int K, typename Idx>
__device__ __forceinline__ void nestOffsets(const NestArg<K> &nest, Idx i,
                                            Idx (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 1; --d) {
    if (d < nest.rank) {
      Idx dim = static_cast<Idx>(nest.dims[d]);
      Idx q = i / dim;
      Idx c = i - q * dim;
#pragma unroll
      for (int k = 0; k < K; ++k)
        off[k] += c * static_cast<Idx>(nest.strides[k][d]);
      i = q;
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] += i * static_cast<Idx>(nest.strides[k][0]);
}

template <typename Idx>
__device__ __forceinline__ Idx nestOffset(const NestArg<1> &nest, Idx i) {
  Idx off[1];
  nestOffsets(nest, i, off);
  return off[0];
}

__device__ __forceinline__ int64_t globalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// N elements of T moved as one access of sizeof(T) * N bytes.
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

template <typename T, typename Op>
__device__ __forceinline__ T warpReduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Reduces over the whole block (blockDim.x a multiple of 32); every thread
/// gets the result. `scratch` holds 32 values.
template <typename T, typename Op>
__device__ __forceinline__ T blockReduce(T v, Op op, T identity, T *scratch) {
  v = warpReduce(v, op);
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads(); // a previous call may still be reading scratch
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  int numWarps = blockDim.x / kWarp;
  v = lane < numWarps ? scratch[lane] : identity;
  return warpReduce(v, op);
}

//===----------------------------------------------------------------------===//
// Element-wise binary
//===----------------------------------------------------------------------===//

struct AddF {
  template <typename T> __device__ T operator()(T x, T y) const {
    return T(x + y);
  }
};
struct SubF {
  template <typename T> __device__ T operator()(T x, T y) const {
    return T(x - y);
  }
};
struct MulF {
  template <typename T> __device__ T operator()(T x, T y) const {
    return T(x * y);
  }
};
struct DivF {
  __device__ float operator()(float x, float y) const { return x / y; }
};
struct PowF {
  __device__ float operator()(float x, float y) const { return powf(x, y); }
};

/// How the flat binary kernel indexes each side.
enum FlatMode {
  BothFull,  // a[i], b[i]
  ScalarA,   // a[0], b[i]
  ScalarB,   // a[i], b[0]
  TrailingA, // a[i % inner], b[i]
  TrailingB, // a[i], b[i % inner]
};

/// Element-wise on dense operands, one pack of 16 bytes per step, then the
/// tail one element at a time; `inner` (in packs, dividing n) is the size of
/// the broadcast side of the Trailing modes.
template <typename T, typename F, int Mode>
__global__ void __launch_bounds__(kThreads)
    binaryFlatKernel(const T *a, const T *b, T *out, int64_t n, int64_t inner,
                     F f) {
  constexpr int N = 16 / sizeof(T);
  int64_t numPacks = n / N;
  using P = Pack<T, N>;
  const P *pa = reinterpret_cast<const P *>(a);
  const P *pb = reinterpret_cast<const P *>(b);
  P *po = reinterpret_cast<P *>(out);
  T sa = Mode == ScalarA ? a[0] : T();
  T sb = Mode == ScalarB ? b[0] : T();
  for (int64_t p = globalThread(); p < numPacks; p += gridThreads()) {
    P x, y, r;
    if (Mode == BothFull || Mode == ScalarB || Mode == TrailingB)
      x = pa[p];
    else if (Mode == TrailingA)
      x = pa[p % inner];
    if (Mode == BothFull || Mode == ScalarA || Mode == TrailingA)
      y = pb[p];
    else if (Mode == TrailingB)
      y = pb[p % inner];
#pragma unroll
    for (int k = 0; k < N; ++k)
      r.v[k] = f(Mode == ScalarA ? sa : x.v[k], Mode == ScalarB ? sb : y.v[k]);
    po[p] = r;
  }
  if (Mode == BothFull || Mode == ScalarA || Mode == ScalarB)
    for (int64_t i = numPacks * N + globalThread(); i < n; i += gridThreads())
      out[i] = f(Mode == ScalarA ? sa : a[i], Mode == ScalarB ? sb : b[i]);
}

/// Element-wise with any broadcast: one element per step, operand offsets
/// from the collapsed nest.
template <typename T, typename F, typename Idx>
__global__ void __launch_bounds__(kThreads)
    binaryNestKernel(const T *a, const T *b, T *out, Idx n, NestArg<2> nest,
                     F f) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    Idx off[2];
    nestOffsets(nest, i, off);
    out[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename T, typename F>
void binaryTyped(F f, const T *a, const Shape &aShape, const T *b,
                 const Shape &bShape, T *out, const Shape &outShape,
                 cudaStream_t stream) {
  int64_t n = product(outShape);
  if (n == 0)
    return;
  std::size_t rank = outShape.size();
  Nest nest(outShape,
            {broadcastStrides(aShape, rank), broadcastStrides(bShape, rank)});
  constexpr int N = 16 / sizeof(T);
  const std::vector<int64_t> &sa = nest.strides[0], &sb = nest.strides[1];
  // The flat paths need the output and the sides read in packs 16-byte
  // aligned (and a trailing broadcast side of whole packs).
  bool outOk = aligned(out, 16);
  auto launchFlat = [&](auto mode, int64_t inner) {
    constexpr int M = decltype(mode)::value;
    binaryFlatKernel<T, F, M><<<gridFor(n / N + n % N), kThreads, 0, stream>>>(
        a, b, out, n, inner, f);
    checkLaunch("binary");
  };
  if (outOk && nest.rank() == 1) {
    if (sa[0] == 1 && sb[0] == 1 && aligned(a, 16) && aligned(b, 16))
      return launchFlat(std::integral_constant<int, BothFull>(), 0);
    if (sa[0] == 0 && sb[0] == 1 && aligned(b, 16))
      return launchFlat(std::integral_constant<int, ScalarA>(), 0);
    if (sa[0] == 1 && sb[0] == 0 && aligned(a, 16))
      return launchFlat(std::integral_constant<int, ScalarB>(), 0);
  }
  if (outOk && nest.rank() == 2 && nest.dims[1] % N == 0) {
    int64_t inner = nest.dims[1];
    bool aFull = sa[0] == inner && sa[1] == 1 && aligned(a, 16);
    bool bFull = sb[0] == inner && sb[1] == 1 && aligned(b, 16);
    if (sa[0] == 0 && sa[1] == 1 && bFull && aligned(a, 16))
      return launchFlat(std::integral_constant<int, TrailingA>(), inner / N);
    if (sb[0] == 0 && sb[1] == 1 && aFull && aligned(b, 16))
      return launchFlat(std::integral_constant<int, TrailingB>(), inner / N);
  }
  NestArg<2> arg = nestArg<2>(nest);
  if (fits32(n))
    binaryNestKernel<T, F, uint32_t><<<gridFor(n), kThreads, 0, stream>>>(
        a, b, out, static_cast<uint32_t>(n), arg, f);
  else
    binaryNestKernel<T, F, uint64_t><<<gridFor(n), kThreads, 0, stream>>>(
        a, b, out, static_cast<uint64_t>(n), arg, f);
  checkLaunch("binary");
}

template <typename T>
void binaryDispatch(BinaryOp op, const void *a, const Shape &aShape,
                    const void *b, const Shape &bShape, void *out,
                    const Shape &outShape, cudaStream_t stream) {
  const T *pa = static_cast<const T *>(a);
  const T *pb = static_cast<const T *>(b);
  T *po = static_cast<T *>(out);
  switch (op) {
  case BinaryOp::Add:
    return binaryTyped(AddF(), pa, aShape, pb, bShape, po, outShape, stream);
  case BinaryOp::Sub:
    return binaryTyped(SubF(), pa, aShape, pb, bShape, po, outShape, stream);
  case BinaryOp::Mul:
    return binaryTyped(MulF(), pa, aShape, pb, bShape, po, outShape, stream);
  case BinaryOp::Div:
  case BinaryOp::Pow:
    if constexpr (std::is_same_v<T, float>) {
      if (op == BinaryOp::Div)
        return binaryTyped(DivF(), pa, aShape, pb, bShape, po, outShape,
                           stream);
      return binaryTyped(PowF(), pa, aShape, pb, bShape, po, outShape, stream);
    }
    break;
  }
  throw Error("binary: internal error: unsupported op");
}

//===----------------------------------------------------------------------===//
// Element-wise unary, fill and casts
//===----------------------------------------------------------------------===//

struct ErfF {
  __device__ float operator()(float v) const { return erff(v); }
};
struct TanhF {
  __device__ float operator()(float v) const { return tanhf(v); }
};
struct ReluF {
  __device__ float operator()(float v) const { return v < 0.f ? 0.f : v; }
};
struct SqrtF {
  __device__ float operator()(float v) const { return sqrtf(v); }
};
struct ExpF {
  __device__ float operator()(float v) const { return expf(v); }
};
struct NegF {
  __device__ float operator()(float v) const { return -v; }
};
/// exp of a non-positive argument only, so neither side overflows.
struct SigmoidF {
  __device__ float operator()(float v) const {
    if (v >= 0.f)
      return 1.f / (1.f + expf(-v));
    float e = expf(v);
    return e / (1.f + e);
  }
};

/// out[i] = f(in[i]) over `n` elements, N at a time (the caller checked
/// alignment); the tail past the last whole pack one at a time.
template <typename From, typename To, int N, typename F>
__global__ void __launch_bounds__(kThreads)
    mapKernel(const From *in, To *out, int64_t n, F f) {
  using PI = Pack<From, N>;
  using PO = Pack<To, N>;
  int64_t packs = n / N;
  const PI *pi = reinterpret_cast<const PI *>(in);
  PO *po = reinterpret_cast<PO *>(out);
  for (int64_t p = globalThread(); p < packs; p += gridThreads()) {
    PI x = pi[p];
    PO y;
#pragma unroll
    for (int k = 0; k < N; ++k)
      y.v[k] = f(x.v[k]);
    po[p] = y;
  }
  for (int64_t i = packs * N + globalThread(); i < n; i += gridThreads())
    out[i] = f(in[i]);
}

/// Launches mapKernel four elements at a time where both pointers allow.
template <typename From, typename To, typename F>
void launchMap(const From *in, To *out, int64_t n, F f, cudaStream_t stream,
               const char *what) {
  if (n <= 0)
    return;
  if (aligned(in, 4 * sizeof(From)) && aligned(out, 4 * sizeof(To)))
    mapKernel<From, To, 4, F>
        <<<gridFor(n / 4 + 1), kThreads, 0, stream>>>(in, out, n, f);
  else
    mapKernel<From, To, 1, F>
        <<<gridFor(n), kThreads, 0, stream>>>(in, out, n, f);
  checkLaunch(what);
}

/// Sets out[0, n) to `value`, the first 4 * packs of them four at a time.
__global__ void __launch_bounds__(kThreads)
    fillKernel(float *out, int64_t n, int64_t packs, float value) {
  using P = Pack<float, 4>;
  P v = {{value, value, value, value}};
  for (int64_t p = globalThread(); p < packs; p += gridThreads())
    reinterpret_cast<P *>(out)[p] = v;
  for (int64_t i = packs * 4 + globalThread(); i < n; i += gridThreads())
    out[i] = value;
}

struct ToBF16 {
  __device__ __nv_bfloat16 operator()(float v) const {
    return __float2bfloat16_rn(v);
  }
};
struct ToF16 {
  __device__ __half operator()(float v) const { return __float2half_rn(v); }
};
struct FromBF16 {
  __device__ float operator()(__nv_bfloat16 v) const {
    return __bfloat162float(v);
  }
};
struct FromF16 {
  __device__ float operator()(__half v) const { return __half2float(v); }
};

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

/// Softmax of rows of at most 32 * K elements, one warp per row, the row held
/// in registers.
template <int K>
__global__ void __launch_bounds__(kThreads)
    softmaxWarpKernel(const float *in, float *out, int64_t rows, int cols) {
  int lane = threadIdx.x % kWarp;
  int64_t warps = gridThreads() / kWarp;
  for (int64_t r = globalThread() / kWarp; r < rows; r += warps) {
    const float *x = in + r * cols;
    float *y = out + r * cols;
    float v[K];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      v[k] = j < cols ? x[j] : -INFINITY;
      mx = fmaxf(mx, v[k]);
    }
    mx = warpReduce(mx, MaxOp());
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      v[k] = j < cols ? expf(v[k] - mx) : 0.f;
      sum += v[k];
    }
    sum = warpReduce(sum, SumOp());
    float inv = 1.f / sum;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      if (j < cols)
        y[j] = v[k] * inv;
    }
  }
}

/// Softmax of long rows, one block per row, three passes over the row (the
/// later ones mostly from L2).
__global__ void __launch_bounds__(kThreads)
    softmaxBlockKernel(const float *in, float *out, int64_t rows,
                       int64_t cols) {
  __shared__ float scratch[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = in + r * cols;
    float *y = out + r * cols;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      mx = fmaxf(mx, x[j]);
    mx = blockReduce(mx, MaxOp(), -INFINITY, scratch);
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += expf(x[j] - mx);
    sum = blockReduce(sum, SumOp(), 0.f, scratch);
    float inv = 1.f / sum;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      y[j] = expf(x[j] - mx) * inv;
  }
}

/// Softmax along a non-innermost axis: one thread per (outer, inner) column,
/// neighbouring threads on neighbouring elements.
__global__ void __launch_bounds__(kThreads)
    softmaxStridedKernel(const float *in, float *out, int64_t outer,
                         int64_t len, int64_t inner) {
  int64_t total = outer * inner;
  for (int64_t t = globalThread(); t < total; t += gridThreads()) {
    int64_t o = t / inner, i = t - o * inner;
    const float *x = in + o * len * inner + i;
    float *y = out + o * len * inner + i;
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j)
      mx = fmaxf(mx, x[j * inner]);
    float sum = 0.f;
    for (int64_t j = 0; j < len; ++j)
      sum += expf(x[j * inner] - mx);
    float inv = 1.f / sum;
    for (int64_t j = 0; j < len; ++j)
      y[j * inner] = expf(x[j * inner] - mx) * inv;
  }
}

/// The smallest of 1, 2, 4, 8, 16, 32 with 32 * K >= cols (cols <= 1024).
int perLane(int64_t cols) {
  int k = 1;
  while (kWarp * k < cols)
    k *= 2;
  return k;
}

//===----------------------------------------------------------------------===//
// LayerNormalization
//===----------------------------------------------------------------------===//

/// Scale and bias of a LayerNormalization, broadcast over a row of the
/// normalized shape through their nests. `simple` says that both nests have
/// rank 1, so that offsets are j times the stride (1 or 0).
struct NormParams {
  const float *scale;
  const float *bias; // may be null
  NestArg<1> scaleNest;
  NestArg<1> biasNest;
  float epsilon;
  bool simple;
  bool rms; // RMSNorm: no mean subtracted
};

template <typename Idx>
__device__ __forceinline__ float normAffine(const NormParams &p, float v,
                                            Idx j) {
  v *= p.scale[nestOffset(p.scaleNest, j)];
  if (p.bias)
    v += p.bias[nestOffset(p.biasNest, j)];
  return v;
}

/// Rows of at most 32 * K elements, one warp per row, two passes over
/// registers.
template <int K>
__global__ void __launch_bounds__(kThreads)
    layerNormWarpKernel(const float *x, float *y, int64_t rows, int cols,
                        NormParams p) {
  int lane = threadIdx.x % kWarp;
  int64_t warps = gridThreads() / kWarp;
  int64_t scaleStride = p.scaleNest.strides[0][0];
  int64_t biasStride = p.bias ? p.biasNest.strides[0][0] : 0;
  for (int64_t r = globalThread() / kWarp; r < rows; r += warps) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float v[K];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      v[k] = j < cols ? xr[j] : 0.f;
      sum += v[k];
    }
    float mean = p.rms ? 0.f : warpReduce(sum, SumOp()) / cols;
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      float d = j < cols ? v[k] - mean : 0.f;
      sq += d * d;
    }
    float var = warpReduce(sq, SumOp()) / cols;
    float inv = 1.f / sqrtf(var + p.epsilon);
    if (p.simple) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        int j = lane + kWarp * k;
        if (j < cols) {
          float out = (v[k] - mean) * inv * p.scale[j * scaleStride];
          if (p.bias)
            out += p.bias[j * biasStride];
          yr[j] = out;
        }
      }
      continue;
    }
    // General broadcasting: store the normalized row, then apply scale and
    // bias in a rolled loop (each lane rereads only what it wrote).
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int j = lane + kWarp * k;
      if (j < cols)
        yr[j] = (v[k] - mean) * inv;
    }
    for (int j = lane; j < cols; j += kWarp)
      yr[j] = normAffine(p, yr[j], static_cast<uint32_t>(j));
  }
}

/// Long rows, one block per row, three passes (the later ones mostly from
/// L2).
__global__ void __launch_bounds__(kThreads)
    layerNormBlockKernel(const float *x, float *y, int64_t rows, int64_t cols,
                         NormParams p) {
  __shared__ float scratch[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += xr[j];
    float mean = p.rms ? 0.f : blockReduce(sum, SumOp(), 0.f, scratch) / cols;
    float sq = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float d = xr[j] - mean;
      sq += d * d;
    }
    float var = blockReduce(sq, SumOp(), 0.f, scratch) / cols;
    float inv = 1.f / sqrtf(var + p.epsilon);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = normAffine(p, (xr[j] - mean) * inv, j);
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// Gather in units of U (a whole number of units per slice of the inner
/// dimensions): out[o, k, c] = data[o, indices[k], c].
template <typename U, typename IndexT, typename Idx>
__global__ void __launch_bounds__(kThreads)
    gatherKernel(const U *data, const IndexT *indices, U *out, Idx total,
                 Idx chunk, Idx numIdx, int64_t axisLen, int64_t whole,
                 int64_t offset, int *errorFlag) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += step) {
    Idx row = i / chunk;
    Idx c = i - row * chunk;
    Idx o = row / numIdx;
    Idx k = row - o * numIdx;
    // Indices count in the whole table (`whole` rows); this data holds
    // rows [offset, offset + axisLen) of it (a vocabulary-parallel block).
    int64_t v = static_cast<int64_t>(indices[k]);
    if (v < 0)
      v += whole;
    if (v < 0 || v >= whole) {
      if (errorFlag)
        *errorFlag = 1;
      out[i] = U();
      continue;
    }
    v -= offset;
    if (v < 0 || v >= axisLen) { // another rank's row
      out[i] = U();
      continue;
    }
    out[i] =
        data[(o * static_cast<Idx>(axisLen) + static_cast<Idx>(v)) * chunk + c];
  }
}

/// out[i] = in[offset of i in the collapsed permutation].
template <typename U, typename Idx>
__global__ void __launch_bounds__(kThreads)
    permuteKernel(const U *in, U *out, Idx n, NestArg<1> nest) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step)
    out[i] = in[nestOffset(nest, i)];
}

constexpr int kTile = 32;
constexpr int kTileRows = kThreads / kTile;

/// A transpose whose input-contiguous dimension P is not the output's
/// innermost dimension Q: 32x32 tiles through shared memory, read along P and
/// written along Q. The other dimensions are a batch walked by `batch` (input
/// and output strides).
struct TileArg {
  int64_t sizeP, sizeQ;
  int64_t inStrideQ, outStrideP;
  int64_t tilesP, tilesQ, numTiles;
  NestArg<2> batch;
};

template <typename U>
__global__ void __launch_bounds__(kThreads)
    transposeTiledKernel(const U *in, U *out, TileArg t) {
  __shared__ U tile[kTile][kTile + 1];
  int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (int64_t id = blockIdx.x; id < t.numTiles; id += gridDim.x) {
    int64_t tq = id % t.tilesQ;
    int64_t rest = id / t.tilesQ;
    int64_t tp = rest % t.tilesP;
    int64_t b = rest / t.tilesP;
    int64_t base[2];
    nestOffsets(t.batch, b, base);
    int64_t p0 = tp * kTile, q0 = tq * kTile;
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      int64_t p = p0 + tx, q = q0 + ty + k;
      if (p < t.sizeP && q < t.sizeQ)
        tile[ty + k][tx] = in[base[0] + q * t.inStrideQ + p];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      int64_t p = p0 + ty + k, q = q0 + tx;
      if (p < t.sizeP && q < t.sizeQ)
        out[base[1] + p * t.outStrideP + q] = tile[tx][ty + k];
    }
    __syncthreads();
  }
}

/// Copies rows of `chunk` units: output row r = (o, g) comes from
/// in[base + o * strideO + g * strideG]. Serves sliceBlock (one group) and
/// concatBlocks (one group per block).
template <typename U, typename Idx>
__global__ void __launch_bounds__(kThreads)
    blockCopyKernel(const U *in, U *out, Idx total, Idx chunk, Idx groups,
                    Idx strideO, Idx strideG, Idx base) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += step) {
    Idx row = i / chunk;
    Idx c = i - row * chunk;
    Idx o = row / groups;
    Idx g = row - o * groups;
    out[i] = in[base + o * strideO + g * strideG + c];
  }
}

/// The widest of 16, 8, 4, 2, 1 bytes that divides every size and address
/// given.
std::size_t widestUnit(std::initializer_list<uint64_t> values) {
  for (std::size_t unit = 16; unit > 1; unit /= 2) {
    bool ok = true;
    for (uint64_t v : values)
      if (v % unit != 0)
        ok = false;
    if (ok)
      return unit;
  }
  return 1;
}

uint64_t addr(const void *p) { return reinterpret_cast<uintptr_t>(p); }

/// Calls body(U{}) with U the unsigned type of `unit` bytes.
template <typename Body> void withUnit(std::size_t unit, Body body) {
  switch (unit) {
  case 1:
    return body(uint8_t());
  case 2:
    return body(uint16_t());
  case 4:
    return body(uint32_t());
  case 8:
    return body(uint2());
  case 16:
    return body(uint4());
  }
  throw Error("internal error: bad copy unit");
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// One output per warp: the sum of in[base(o) + red(r)] over r < count.
__global__ void __launch_bounds__(kThreads)
    reduceWarpKernel(const float *in, float *out, int64_t outN, int64_t count,
                     NestArg<1> kept, NestArg<1> red, bool mean) {
  int lane = threadIdx.x % kWarp;
  int64_t warps = gridThreads() / kWarp;
  for (int64_t o = globalThread() / kWarp; o < outN; o += warps) {
    int64_t base = nestOffset(kept, o);
    double acc = 0;
    for (int64_t r = lane; r < count; r += kWarp)
      acc += in[base + nestOffset(red, r)];
    acc = warpReduce(acc, SumOp());
    if (lane == 0)
      out[o] = static_cast<float>(mean ? acc / double(count) : acc);
  }
}

/// One output per block, for long reductions.
__global__ void __launch_bounds__(kThreads)
    reduceBlockKernel(const float *in, float *out, int64_t outN, int64_t count,
                      NestArg<1> kept, NestArg<1> red, bool mean) {
  __shared__ double scratch[kWarp];
  for (int64_t o = blockIdx.x; o < outN; o += gridDim.x) {
    int64_t base = nestOffset(kept, o);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < count; r += blockDim.x)
      acc += in[base + nestOffset(red, r)];
    acc = blockReduce(acc, SumOp(), 0.0, scratch);
    if (threadIdx.x == 0)
      out[o] = static_cast<float>(mean ? acc / double(count) : acc);
  }
}

/// The innermost dimension (size `inner`, stride 1) is kept: a block covers
/// TX neighbouring outputs, its kThreads / TX rows of threads splitting the
/// reduced elements, so that loads are coalesced along the kept dimension.
struct ColArg {
  int64_t inner, tiles, numTiles, count;
  NestArg<1> keptOuter;
  NestArg<1> red;
  bool mean;
};

template <int TX>
__global__ void __launch_bounds__(kThreads)
    reduceColsKernel(const float *in, float *out, ColArg a) {
  constexpr int TY = kThreads / TX;
  __shared__ double part[TY][TX + 1];
  int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  for (int64_t id = blockIdx.x; id < a.numTiles; id += gridDim.x) {
    int64_t tile = id % a.tiles, ko = id / a.tiles;
    int64_t base = nestOffset(a.keptOuter, ko);
    int64_t k = tile * TX + tx;
    double acc = 0;
    if (k < a.inner)
      for (int64_t r = ty; r < a.count; r += TY)
        acc += in[base + nestOffset(a.red, r) + k];
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && k < a.inner) {
      double s = 0;
      for (int y = 0; y < TY; ++y)
        s += part[y][tx];
      out[ko * a.inner + k] =
          static_cast<float>(a.mean ? s / double(a.count) : s);
    }
    __syncthreads();
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

namespace shoal {
namespace rt {
namespace cuda {

void binary(BinaryOp op, DType dtype, const void *a, const Shape &aShape,
            const void *b, const Shape &bShape, void *out,
            const Shape &outShape, cudaStream_t stream) {
  const char *name = arith::binaryName(op);
  checkRank(outShape, name);
  std::size_t rank = std::max(aShape.size(), bShape.size());
  bool ok = outShape.size() == rank && broadcastsTo(aShape, outShape) &&
            broadcastsTo(bShape, outShape);
  for (std::size_t d = 0; ok && d < rank; ++d) {
    // Each output dimension must come from one of the operands.
    int64_t da =
        d < rank - aShape.size() ? 1 : aShape[d - (rank - aShape.size())];
    int64_t db =
        d < rank - bShape.size() ? 1 : bShape[d - (rank - bShape.size())];
    ok = outShape[d] == (da == 1 ? db : da);
  }
  if (!ok)
    throw Error(std::string(name) + ": output " + shapeString(outShape) +
                " is not the broadcast of " + shapeString(aShape) + " and " +
                shapeString(bShape));
  bool intOk =
      op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul;
  switch (dtype) {
  case DType::F32:
    return binaryDispatch<float>(op, a, aShape, b, bShape, out, outShape,
                                 stream);
  case DType::I64:
    if (intOk)
      return binaryDispatch<int64_t>(op, a, aShape, b, bShape, out, outShape,
                                     stream);
    break;
  case DType::I32:
    if (intOk)
      return binaryDispatch<int32_t>(op, a, aShape, b, bShape, out, outShape,
                                     stream);
    break;
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
  case DType::F64:
  case DType::I8:
  case DType::U8:
    break;
  }
  throw Error(std::string(name) + " is not supported on " + dtypeName(dtype) +
              " tensors on CUDA");
}

void unary(UnaryOp op, const float *in, float *out, int64_t n,
           cudaStream_t stream) {
  switch (op) {
  case UnaryOp::Erf:
    return launchMap(in, out, n, ErfF(), stream, "Erf");
  case UnaryOp::Tanh:
    return launchMap(in, out, n, TanhF(), stream, "Tanh");
  case UnaryOp::Relu:
    return launchMap(in, out, n, ReluF(), stream, "Relu");
  case UnaryOp::Sqrt:
    return launchMap(in, out, n, SqrtF(), stream, "Sqrt");
  case UnaryOp::Exp:
    return launchMap(in, out, n, ExpF(), stream, "Exp");
  case UnaryOp::Neg:
    return launchMap(in, out, n, NegF(), stream, "Neg");
  case UnaryOp::Sigmoid:
    return launchMap(in, out, n, SigmoidF(), stream, "Sigmoid");
  }
  throw Error("unary: unknown op");
}

void softmax(const float *in, float *out, const Shape &shape, int64_t axis,
             cudaStream_t stream) {
  checkRank(shape, "Softmax");
  if (shape.empty()) // softmax of a scalar is 1
    return fill(out, 1.f, 1, stream);
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
    throw Error("Softmax: axis " + std::to_string(axis) + " out of range for " +
                shapeString(shape));
  int64_t outer = 1, inner = 1, len = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (std::size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
  if (outer == 0 || inner == 0 || len == 0)
    return;
  if (inner > 1) {
    softmaxStridedKernel<<<gridFor(outer * inner), kThreads, 0, stream>>>(
        in, out, outer, len, inner);
  } else if (len <= kWarp * 32) {
    unsigned grid = gridFor(outer, kThreads / kWarp);
    int cols = static_cast<int>(len);
    switch (perLane(len)) {
    case 1:
      softmaxWarpKernel<1><<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    case 2:
      softmaxWarpKernel<2><<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    case 4:
      softmaxWarpKernel<4><<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    case 8:
      softmaxWarpKernel<8><<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    case 16:
      softmaxWarpKernel<16>
          <<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    default:
      softmaxWarpKernel<32>
          <<<grid, kThreads, 0, stream>>>(in, out, outer, cols);
      break;
    }
  } else {
    softmaxBlockKernel<<<gridFor(outer, 1), kThreads, 0, stream>>>(in, out,
                                                                   outer, len);
  }
  checkLaunch("Softmax");
}

void layerNorm(const float *x, const float *scale, const Shape &scaleShape,
               const float *bias, const Shape &biasShape, float *y,
               const Shape &xShape, int64_t axis, float epsilon,
               cudaStream_t stream, bool rms) {
  checkRank(xShape, "LayerNormalization");
  if (axis < 0 || axis > static_cast<int64_t>(xShape.size()))
    throw Error("LayerNormalization: axis " + std::to_string(axis) +
                " out of range for " + shapeString(xShape));
  Shape normShape(xShape.begin() + axis, xShape.end());
  if (!broadcastsTo(scaleShape, normShape))
    throw Error("LayerNormalization: Scale of shape " +
                shapeString(scaleShape) +
                " does not broadcast to the normalized shape " +
                shapeString(normShape));
  if (bias && !broadcastsTo(biasShape, normShape))
    throw Error("LayerNormalization: B of shape " + shapeString(biasShape) +
                " does not broadcast to the normalized shape " +
                shapeString(normShape));
  int64_t cols = product(normShape);
  int64_t rows = product(Shape(xShape.begin(), xShape.begin() + axis));
  if (rows == 0 || cols == 0)
    return;
  std::size_t rank = normShape.size();
  NormParams p{};
  p.scale = scale;
  p.bias = bias;
  p.epsilon = epsilon;
  p.scaleNest =
      nestArg<1>(Nest(normShape, {broadcastStrides(scaleShape, rank)}));
  if (bias)
    p.biasNest =
        nestArg<1>(Nest(normShape, {broadcastStrides(biasShape, rank)}));
  p.simple = p.scaleNest.rank == 1 && (!bias || p.biasNest.rank == 1);
  p.rms = rms;
  if (cols <= kWarp * 32) {
    unsigned grid = gridFor(rows, kThreads / kWarp);
    int c = static_cast<int>(cols);
    switch (perLane(cols)) {
    case 1:
      layerNormWarpKernel<1><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    case 2:
      layerNormWarpKernel<2><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    case 4:
      layerNormWarpKernel<4><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    case 8:
      layerNormWarpKernel<8><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    case 16:
      layerNormWarpKernel<16><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    default:
      layerNormWarpKernel<32><<<grid, kThreads, 0, stream>>>(x, y, rows, c, p);
      break;
    }
  } else {
    layerNormBlockKernel<<<gridFor(rows, 1), kThreads, 0, stream>>>(x, y, rows,
                                                                    cols, p);
  }
  checkLaunch("LayerNormalization");
}

void gather(const void *data, DType dtype, const Shape &dataShape,
            const void *indices, DType indexType, const Shape &indicesShape,
            int64_t axis, void *out, int *errorFlag, cudaStream_t stream,
            int64_t whole, int64_t offset) {
  checkRank(dataShape, "Gather");
  checkRank(indicesShape, "Gather");
  if (indexType != DType::I64 && indexType != DType::I32)
    throw Error(std::string("Gather: indices must be i64 or i32, got ") +
                dtypeName(indexType));
  if (axis < 0 || axis >= static_cast<int64_t>(dataShape.size()))
    throw Error("Gather: axis " + std::to_string(axis) +
                " out of range for data " + shapeString(dataShape));
  int64_t outer = 1, axisLen = dataShape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= dataShape[d];
  for (std::size_t d = axis + 1; d < dataShape.size(); ++d)
    inner *= dataShape[d];
  int64_t numIdx = product(indicesShape);
  uint64_t chunkBytes = static_cast<uint64_t>(inner) * dtypeSize(dtype);
  if (outer == 0 || numIdx == 0 || chunkBytes == 0)
    return;
  std::size_t unit = widestUnit({chunkBytes, addr(data), addr(out)});
  int64_t chunk = static_cast<int64_t>(chunkBytes / unit);
  int64_t total = outer * numIdx * chunk;
  int64_t dataUnits = outer * axisLen * chunk;
  bool small = fits32(std::max(total, dataUnits));
  withUnit(unit, [&](auto u) {
    using U = decltype(u);
    auto run = [&](auto index, auto idx) {
      using IndexT = decltype(index);
      using Idx = decltype(idx);
      gatherKernel<U, IndexT, Idx><<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const U *>(data), static_cast<const IndexT *>(indices),
          static_cast<U *>(out), static_cast<Idx>(total),
          static_cast<Idx>(chunk), static_cast<Idx>(numIdx), axisLen,
          whole < 0 ? axisLen : whole, offset, errorFlag);
    };
    if (indexType == DType::I64)
      small ? run(int64_t(), uint32_t()) : run(int64_t(), uint64_t());
    else
      small ? run(int32_t(), uint32_t()) : run(int32_t(), uint64_t());
  });
  checkLaunch("Gather");
}

void transpose(const void *in, std::size_t elemSize, const Shape &inShape,
               const std::vector<int64_t> &perm, void *out,
               cudaStream_t stream) {
  checkRank(inShape, "Transpose");
  std::size_t rank = inShape.size();
  bool ok = perm.size() == rank && elemSize > 0;
  std::vector<bool> seen(rank, false);
  for (std::size_t d = 0; ok && d < perm.size(); ++d) {
    ok = perm[d] >= 0 && perm[d] < static_cast<int64_t>(rank) && !seen[perm[d]];
    if (ok)
      seen[perm[d]] = true;
  }
  if (!ok) {
    std::string p;
    for (int64_t v : perm)
      p += (p.empty() ? "" : ", ") + std::to_string(v);
    throw Error("Transpose: [" + p + "] is not a permutation of the " +
                std::to_string(rank) + " dimensions of " +
                shapeString(inShape) + " (element size " +
                std::to_string(elemSize) + ")");
  }
  int64_t n = product(inShape);
  if (n == 0)
    return;
  // Elements wider than the widest unit that divides them become an extra
  // innermost dimension that stays in place.
  std::size_t unit = widestUnit({elemSize, addr(in), addr(out)});
  Shape shape = inShape;
  std::vector<int64_t> order = perm;
  if (elemSize > unit) {
    shape.push_back(static_cast<int64_t>(elemSize / unit));
    order.push_back(static_cast<int64_t>(rank));
  }
  std::vector<int64_t> inStrides = denseStrides(shape);
  Shape outDims(order.size());
  std::vector<int64_t> strides(order.size());
  for (std::size_t d = 0; d < order.size(); ++d) {
    outDims[d] = shape[order[d]];
    strides[d] = inStrides[order[d]];
  }
  Nest nest(outDims, {strides});
  std::vector<int64_t> &dims = nest.dims;
  std::vector<int64_t> &in1 = nest.strides[0];
  int r = nest.rank();
  int64_t units = n * static_cast<int64_t>(elemSize / unit);
  if (r == 1 && in1[0] == 1) {
    checkCall(cudaMemcpyAsync(out, in, units * unit, cudaMemcpyDeviceToDevice,
                              stream),
              "Transpose");
    return;
  }
  // Where the innermost output dimension is also innermost in the input,
  // copy in units as wide as that contiguous run allows (the other input
  // strides are multiples of the run).
  if (in1[r - 1] == 1) {
    uint64_t runBytes = static_cast<uint64_t>(dims[r - 1]) * unit;
    std::size_t wide = widestUnit({runBytes, addr(in), addr(out)});
    if (wide > unit) {
      int64_t f = static_cast<int64_t>(wide / unit);
      dims[r - 1] /= f;
      for (int d = 0; d < r - 1; ++d)
        in1[d] /= f;
      units /= f;
      unit = wide;
    }
  }
  int p = -1;
  for (int d = 0; d < r; ++d)
    if (in1[d] == 1)
      p = d;
  bool tiled = p >= 0 && p != r - 1 && dims[p] >= 16 && dims[r - 1] >= 16;
  withUnit(unit, [&](auto u) {
    using U = decltype(u);
    const U *src = static_cast<const U *>(in);
    U *dst = static_cast<U *>(out);
    if (tiled) {
      std::vector<int64_t> outStrides = denseStrides(dims);
      Shape batchDims;
      std::vector<int64_t> batchIn, batchOut;
      for (int d = 0; d < r - 1; ++d) {
        if (d == p)
          continue;
        batchDims.push_back(dims[d]);
        batchIn.push_back(in1[d]);
        batchOut.push_back(outStrides[d]);
      }
      TileArg t{};
      t.sizeP = dims[p];
      t.sizeQ = dims[r - 1];
      t.inStrideQ = in1[r - 1];
      t.outStrideP = outStrides[p];
      t.tilesP = (t.sizeP + kTile - 1) / kTile;
      t.tilesQ = (t.sizeQ + kTile - 1) / kTile;
      t.numTiles = t.tilesP * t.tilesQ * product(batchDims);
      t.batch = nestArg<2>(Nest(batchDims, {batchIn, batchOut}));
      transposeTiledKernel<U>
          <<<gridFor(t.numTiles, 1), kThreads, 0, stream>>>(src, dst, t);
      return;
    }
    NestArg<1> arg = nestArg<1>(nest);
    if (fits32(units))
      permuteKernel<U, uint32_t><<<gridFor(units), kThreads, 0, stream>>>(
          src, dst, static_cast<uint32_t>(units), arg);
    else
      permuteKernel<U, uint64_t><<<gridFor(units), kThreads, 0, stream>>>(
          src, dst, static_cast<uint64_t>(units), arg);
  });
  checkLaunch("Transpose");
}

void expand(const void *in, std::size_t elemSize, const Shape &inShape,
            const Shape &outShape, void *out, cudaStream_t stream) {
  checkRank(outShape, "Expand");
  if (elemSize == 0 || !broadcastsTo(inShape, outShape))
    throw Error("Expand: input " + shapeString(inShape) +
                " does not broadcast to the output " + shapeString(outShape));
  // The output's dense order gathered through the input's strides (0
  // along the broadcast dimensions).
  stridedCopy(in, out, elemSize, outShape,
              broadcastStrides(inShape, outShape.size()), product(inShape),
              false, stream, "Expand");
}

namespace {
/// ONNX Cast between f32, i64, i32 and bool, as the CPU's convertElem
/// (cpu/DTypes.h): to bool is v != 0 (NaN is true); float to integer
/// truncates toward zero, NaN gives 0 and values out of range saturate;
/// integer to a narrower integer wraps; to float rounds to nearest.
template <typename T> struct IntBounds;
template <> struct IntBounds<int64_t> {
  static constexpr int64_t max = INT64_MAX, min = INT64_MIN;
};
template <> struct IntBounds<int32_t> {
  static constexpr int32_t max = INT32_MAX, min = INT32_MIN;
};

template <typename To> struct CastF {
  template <typename From> __device__ To operator()(From v) const {
    if constexpr (std::is_same<From, uint8_t>::value) // bool: any nonzero is 1
      v = v != 0;
    if constexpr (std::is_same<To, uint8_t>::value) { // bool
      return static_cast<uint8_t>(v != From(0));
    } else if constexpr (std::is_floating_point<To>::value) {
      return static_cast<To>(v);
    } else if constexpr (std::is_floating_point<From>::value) {
      // The bounds are powers of two, exact in every float type.
      const From hi = From(IntBounds<To>::max) + From(1);
      const From lo = From(IntBounds<To>::min);
      if (isnan(v))
        return 0;
      if (v >= hi)
        return IntBounds<To>::max;
      if (v < lo)
        return IntBounds<To>::min;
      return static_cast<To>(v);
    } else {
      return static_cast<To>(
          static_cast<typename std::make_unsigned<To>::type>(v));
    }
  }
};

/// An integer (or bool) to f16/bf16 as the CPU's convertElem: the integer
/// to double, then to float rounding to odd (cpu/DTypes.h roundToOddFloat),
/// then to the 16-bit type rounding to nearest even: one correct rounding.
template <typename To16> struct IntTo16F {
  template <typename From> __device__ To16 operator()(From v) const {
    double d = std::is_same<From, uint8_t>::value // bool: any nonzero is 1
                   ? (v != 0 ? 1.0 : 0.0)
                   : static_cast<double>(v);
    float f = __double2float_rz(d); // toward zero
    if (static_cast<double>(f) != d)
      f = __uint_as_float(__float_as_uint(f) | 1u);
    if constexpr (std::is_same<To16, __nv_bfloat16>::value)
      return __float2bfloat16_rn(f);
    else
      return __float2half_rn(f);
  }
};

/// Calls body(T{}) with the element type of `dtype` (f32, i64, i32, bool
/// as uint8_t); false for another dtype.
template <typename Body> bool withCastType(DType dtype, Body body) {
  switch (dtype) {
  case DType::F32:
    body(float());
    return true;
  case DType::I64:
    body(int64_t());
    return true;
  case DType::I32:
    body(int32_t());
    return true;
  case DType::Bool:
    body(uint8_t());
    return true;
  default:
    return false;
  }
}

/// out[nestOffset(i)] = in[i]: a dense input stored through the strides.
template <typename U, typename Idx>
__global__ void __launch_bounds__(kThreads)
    storeStridedKernel(const U *in, U *out, Idx n, NestArg<1> nest) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step)
    out[nestOffset(nest, i)] = in[i];
}

/// out[i] = cond[c] ? x[a] : y[b], the three offsets from one nest.
template <typename U, typename Idx>
__global__ void __launch_bounds__(kThreads)
    whereKernel(const uint8_t *cond, const U *x, const U *y, U *out, Idx n,
                NestArg<3> nest) {
  Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    Idx off[3];
    nestOffsets(nest, i, off);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}
} // namespace

void stridedCopy(const void *in, void *out, std::size_t elemSize,
                 const Shape &shape, const std::vector<int64_t> &strides,
                 int64_t span, bool store, cudaStream_t stream,
                 const char *what) {
  int64_t n = product(shape);
  if (n == 0 || elemSize == 0)
    return;
  if (strides.size() != shape.size())
    throw Error(std::string(what) + ": internal error: strides do not fit " +
                shapeString(shape));
  // Elements wider than the widest unit that divides them and both
  // addresses become an extra innermost dimension.
  std::size_t unit = widestUnit({elemSize, addr(in), addr(out)});
  Shape dims = shape;
  std::vector<int64_t> st = strides;
  int64_t k = static_cast<int64_t>(elemSize / unit);
  if (k > 1) {
    for (int64_t &v : st)
      v *= k;
    dims.push_back(k);
    st.push_back(1);
  }
  Nest nest(dims, {st});
  int64_t units = n * k;
  if (nest.rank() == 1 && nest.strides[0][0] == 1) { // dense on both sides
    checkCall(cudaMemcpyAsync(out, in, units * unit, cudaMemcpyDeviceToDevice,
                              stream),
              what);
    return;
  }
  bool small = fits32(std::max(units, span * k));
  withUnit(unit, [&](auto u) {
    using U = decltype(u);
    const U *src = static_cast<const U *>(in);
    U *dst = static_cast<U *>(out);
    NestArg<1> arg = nestArg<1>(nest);
    if (store) {
      if (small)
        storeStridedKernel<U, uint32_t>
            <<<gridFor(units), kThreads, 0, stream>>>(
                src, dst, static_cast<uint32_t>(units), arg);
      else
        storeStridedKernel<U, uint64_t>
            <<<gridFor(units), kThreads, 0, stream>>>(
                src, dst, static_cast<uint64_t>(units), arg);
    } else {
      if (small)
        permuteKernel<U, uint32_t><<<gridFor(units), kThreads, 0, stream>>>(
            src, dst, static_cast<uint32_t>(units), arg);
      else
        permuteKernel<U, uint64_t><<<gridFor(units), kThreads, 0, stream>>>(
            src, dst, static_cast<uint64_t>(units), arg);
    }
  });
  checkLaunch(what);
}

std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  return denseStrides(shape);
}

bool castSupported(DType from, DType to) {
  auto plain = [](DType t) {
    return t == DType::F32 || t == DType::I64 || t == DType::I32 ||
           t == DType::Bool;
  };
  auto half = [](DType t) { return t == DType::BF16 || t == DType::F16; };
  return (plain(from) && plain(to)) || (plain(from) && half(to)) ||
         (half(from) && to == DType::F32) || from == to;
}

void cast(const void *in, DType from, void *out, DType to, int64_t n,
          cudaStream_t stream) {
  if (!castSupported(from, to))
    throw Error(std::string("Cast: ") + dtypeName(from) + " to " +
                dtypeName(to) + " has no CUDA kernel");
  if (n <= 0)
    return;
  if (from == to) {
    checkCall(cudaMemcpyAsync(out, in, n * dtypeSize(from),
                              cudaMemcpyDeviceToDevice, stream),
              "Cast");
    return;
  }
  auto half = [](DType t) {
    return t == DType::BF16 ? DType16::BF16 : DType16::F16;
  };
  if ((to == DType::BF16 || to == DType::F16) && from == DType::F32)
    return castF32To(half(to), static_cast<const float *>(in), out, n, stream);
  if (to == DType::BF16 || to == DType::F16) { // from an integer or bool
    withCastType(from, [&](auto f) {
      using From = decltype(f);
      if (to == DType::BF16)
        launchMap(static_cast<const From *>(in),
                  static_cast<__nv_bfloat16 *>(out), n,
                  IntTo16F<__nv_bfloat16>(), stream, "Cast");
      else
        launchMap(static_cast<const From *>(in), static_cast<__half *>(out), n,
                  IntTo16F<__half>(), stream, "Cast");
    });
    return;
  }
  if (from == DType::BF16 || from == DType::F16)
    return castToF32(half(from), in, static_cast<float *>(out), n, stream);
  withCastType(from, [&](auto f) {
    using From = decltype(f);
    withCastType(to, [&](auto t) {
      using To = decltype(t);
      launchMap(static_cast<const From *>(in), static_cast<To *>(out), n,
                CastF<To>(), stream, "Cast");
    });
  });
}

void slice(const void *in, std::size_t elemSize, const Shape &inShape,
           const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, void *out, const Shape &outShape,
           cudaStream_t stream) {
  std::size_t rank = inShape.size();
  if (starts.size() != rank || steps.size() != rank || outShape.size() != rank)
    throw Error("Slice: output " + shapeString(outShape) +
                " does not fit input " + shapeString(inShape));
  std::vector<int64_t> strides = denseStrides(inShape);
  int64_t base = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    if (outShape[d] == 0)
      return;
    int64_t last = starts[d] + (outShape[d] - 1) * steps[d];
    if (steps[d] <= 0 || starts[d] < 0 || last >= inShape[d])
      throw Error("Slice: " + std::to_string(outShape[d]) + " elements from " +
                  std::to_string(starts[d]) + " by " +
                  std::to_string(steps[d]) + " do not fit dimension " +
                  std::to_string(d) + " of " + shapeString(inShape));
    base += starts[d] * strides[d];
    strides[d] *= steps[d];
  }
  stridedCopy(static_cast<const char *>(in) + base * elemSize, out, elemSize,
              outShape, strides, product(inShape) - base, false, stream,
              "Slice");
}

void concat(const std::vector<const void *> &ins,
            const std::vector<Shape> &shapes, int64_t axis,
            std::size_t elemSize, void *out, const Shape &outShape,
            cudaStream_t stream) {
  std::size_t rank = outShape.size();
  if (axis < 0 || axis >= static_cast<int64_t>(rank) ||
      ins.size() != shapes.size())
    throw Error("Concat: axis " + std::to_string(axis) + " of " +
                shapeString(outShape));
  int64_t total = 0;
  for (const Shape &sh : shapes) {
    bool fits = sh.size() == rank;
    for (std::size_t d = 0; fits && d < rank; ++d)
      fits = static_cast<int64_t>(d) == axis || sh[d] == outShape[d];
    if (!fits)
      throw Error("Concat: input " + shapeString(sh) + " does not fit " +
                  shapeString(outShape) + " along axis " +
                  std::to_string(axis));
    total += sh[axis];
  }
  if (total != outShape[axis])
    throw Error("Concat: inputs add up to " + std::to_string(total) +
                " along axis " + std::to_string(axis) + ", output " +
                shapeString(outShape));
  std::vector<int64_t> strides = denseStrides(outShape);
  int64_t offset = 0, n = product(outShape);
  for (std::size_t i = 0; i < ins.size(); ++i) {
    int64_t base = offset * strides[axis];
    offset += shapes[i][axis];
    stridedCopy(ins[i], static_cast<char *>(out) + base * elemSize, elemSize,
                shapes[i], strides, n - base, true, stream, "Concat");
  }
}

void padConstant(const void *in, const Shape &inShape, std::size_t elemSize,
                 const std::vector<int64_t> &pads, float value, void *out,
                 const Shape &outShape, cudaStream_t stream) {
  std::size_t rank = inShape.size();
  bool fits = pads.size() == 2 * rank && outShape.size() == rank;
  for (std::size_t d = 0; fits && d < rank; ++d)
    fits = pads[d] >= 0 && pads[d + rank] >= 0 &&
           outShape[d] == inShape[d] + pads[d] + pads[d + rank];
  if (!fits || (value != 0.f && elemSize != 4))
    throw Error("Pad: input " + shapeString(inShape) + " padded to " +
                shapeString(outShape) +
                " (pads >= 0, a value other than 0 only for f32)");
  int64_t n = product(outShape);
  if (n == 0)
    return;
  if (value != 0.f)
    fill(static_cast<float *>(out), value, n, stream);
  else
    checkCall(cudaMemsetAsync(out, 0, n * elemSize, stream), "Pad");
  std::vector<int64_t> strides = denseStrides(outShape);
  int64_t base = 0;
  for (std::size_t d = 0; d < rank; ++d)
    base += pads[d] * strides[d];
  stridedCopy(in, static_cast<char *>(out) + base * elemSize, elemSize, inShape,
              strides, n - base, true, stream, "Pad");
}

void where(const uint8_t *cond, const Shape &condShape, const void *x,
           const Shape &xShape, const void *y, const Shape &yShape,
           std::size_t elemSize, void *out, const Shape &outShape,
           cudaStream_t stream) {
  checkRank(outShape, "Where");
  if (!broadcastsTo(condShape, outShape) || !broadcastsTo(xShape, outShape) ||
      !broadcastsTo(yShape, outShape))
    throw Error("Where: condition " + shapeString(condShape) + ", X " +
                shapeString(xShape) + " and Y " + shapeString(yShape) +
                " do not broadcast to " + shapeString(outShape));
  int64_t n = product(outShape);
  if (n == 0)
    return;
  std::size_t r = outShape.size();
  Nest nest(outShape,
            {broadcastStrides(condShape, r), broadcastStrides(xShape, r),
             broadcastStrides(yShape, r)});
  NestArg<3> arg = nestArg<3>(nest);
  bool small = fits32(n);
  auto run = [&](auto u) {
    using U = decltype(u);
    if (small)
      whereKernel<U, uint32_t><<<gridFor(n), kThreads, 0, stream>>>(
          cond, static_cast<const U *>(x), static_cast<const U *>(y),
          static_cast<U *>(out), static_cast<uint32_t>(n), arg);
    else
      whereKernel<U, uint64_t><<<gridFor(n), kThreads, 0, stream>>>(
          cond, static_cast<const U *>(x), static_cast<const U *>(y),
          static_cast<U *>(out), static_cast<uint64_t>(n), arg);
  };
  switch (elemSize) {
  case 1:
    run(uint8_t());
    break;
  case 2:
    run(uint16_t());
    break;
  case 4:
    run(uint32_t());
    break;
  case 8:
    run(uint64_t());
    break;
  default:
    throw Error("Where: " + std::to_string(elemSize) +
                "-byte elements (1, 2, 4 or 8 expected)");
  }
  checkLaunch("Where");
}

void reduce(ReduceOp op, const float *in, const Shape &inShape,
            const std::vector<int64_t> &axes, float *out, cudaStream_t stream) {
  const char *name = op == ReduceOp::Sum ? "ReduceSum" : "ReduceMean";
  checkRank(inShape, name);
  std::size_t rank = inShape.size();
  std::vector<bool> reduced(rank, false);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(rank) ||
        (i > 0 && axes[i] <= axes[i - 1]))
      throw Error(std::string(name) +
                  ": axes must be sorted, unique and within the rank of " +
                  shapeString(inShape));
    reduced[axes[i]] = true;
  }
  int64_t n = product(inShape), outN = 1;
  for (std::size_t d = 0; d < rank; ++d)
    if (!reduced[d])
      outN *= inShape[d];
  if (outN == 0)
    return;
  bool mean = op == ReduceOp::Mean;
  if (n == 0) // an empty sum; the mean divides it by a count of 0
    return fill(out, mean ? std::numeric_limits<float>::quiet_NaN() : 0.f, outN,
                stream);
  int64_t count = n / outN;
  if (count == 1) {
    checkCall(cudaMemcpyAsync(out, in, n * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream),
              name);
    return;
  }
  // Split the input's dimensions into runs of kept and of reduced ones
  // (size-1 dimensions dropped, neighbours of one kind merged).
  std::vector<int64_t> inStrides = denseStrides(inShape);
  Shape keptDims, redDims;
  std::vector<int64_t> keptStrides, redStrides;
  int lastKind = -1; // 0 kept, 1 reduced
  for (std::size_t d = 0; d < rank; ++d) {
    if (inShape[d] == 1)
      continue;
    int kind = reduced[d] ? 1 : 0;
    Shape &dims = kind ? redDims : keptDims;
    std::vector<int64_t> &strides = kind ? redStrides : keptStrides;
    if (kind == lastKind) {
      dims.back() *= inShape[d];
      strides.back() = inStrides[d];
    } else {
      dims.push_back(inShape[d]);
      strides.push_back(inStrides[d]);
    }
    lastKind = kind;
  }
  NestArg<1> red = nestArg<1>(Nest(redDims, {redStrides}));
  if (lastKind == 0) {
    // The innermost run is kept: reduce columns.
    int64_t inner = keptDims.back();
    keptDims.pop_back();
    keptStrides.pop_back();
    ColArg a{};
    a.inner = inner;
    a.count = count;
    a.mean = mean;
    a.keptOuter = nestArg<1>(Nest(keptDims, {keptStrides}));
    a.red = red;
    int64_t outerN = product(keptDims);
    // Narrow tiles when wide ones would leave most of the GPU idle.
    bool narrow = outerN * ((inner + 31) / 32) < 256;
    a.tiles = narrow ? (inner + 7) / 8 : (inner + 31) / 32;
    a.numTiles = a.tiles * outerN;
    if (narrow)
      reduceColsKernel<8>
          <<<gridFor(a.numTiles, 1), kThreads, 0, stream>>>(in, out, a);
    else
      reduceColsKernel<32>
          <<<gridFor(a.numTiles, 1), kThreads, 0, stream>>>(in, out, a);
  } else {
    NestArg<1> kept = nestArg<1>(Nest(keptDims, {keptStrides}));
    if (count <= 1024)
      reduceWarpKernel<<<gridFor(outN, kThreads / kWarp), kThreads, 0,
                         stream>>>(in, out, outN, count, kept, red, mean);
    else
      reduceBlockKernel<<<gridFor(outN, 1), kThreads, 0, stream>>>(
          in, out, outN, count, kept, red, mean);
  }
  checkLaunch(name);
}

namespace {
/// out[i] for i < rows * groups * chunkBytes from
/// in + base + o * strideO + g * strideG (all in bytes).
void blockCopy(const void *in, void *out, int64_t rows, int64_t groups,
               uint64_t chunkBytes, uint64_t strideO, uint64_t strideG,
               uint64_t base, cudaStream_t stream, const char *what) {
  std::size_t unit =
      widestUnit({chunkBytes, strideO, strideG, base, addr(in), addr(out)});
  int64_t chunk = static_cast<int64_t>(chunkBytes / unit);
  int64_t total = rows * groups * chunk;
  if (total == 0)
    return;
  int64_t span = static_cast<int64_t>(
      (base + (rows - 1) * strideO + (groups - 1) * strideG + chunkBytes) /
      unit);
  bool small = fits32(std::max(total, span));
  withUnit(unit, [&](auto u) {
    using U = decltype(u);
    auto run = [&](auto idx) {
      using Idx = decltype(idx);
      blockCopyKernel<U, Idx><<<gridFor(total), kThreads, 0, stream>>>(
          static_cast<const U *>(in), static_cast<U *>(out),
          static_cast<Idx>(total), static_cast<Idx>(chunk),
          static_cast<Idx>(groups), static_cast<Idx>(strideO / unit),
          static_cast<Idx>(strideG / unit), static_cast<Idx>(base / unit));
    };
    small ? run(uint32_t()) : run(uint64_t());
  });
  checkLaunch(what);
}
} // namespace

void sliceBlock(const void *in, std::size_t elemSize, const Shape &inShape,
                int64_t dim, int64_t numBlocks, int64_t index, void *out,
                cudaStream_t stream) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  if (dim < 0 || dim >= rank || numBlocks <= 0 ||
      inShape[dim] % numBlocks != 0 || index < 0 || index >= numBlocks ||
      elemSize == 0)
    throw Error("LocalSlice: cannot take block " + std::to_string(index) +
                " of " + std::to_string(numBlocks) + " along dimension " +
                std::to_string(dim) + " of " + shapeString(inShape));
  int64_t outer = product(Shape(inShape.begin(), inShape.begin() + dim));
  uint64_t chunkBytes =
      static_cast<uint64_t>(inShape[dim] / numBlocks) *
      product(Shape(inShape.begin() + dim + 1, inShape.end())) * elemSize;
  if (outer == 0 || chunkBytes == 0)
    return;
  if (outer == 1) {
    checkCall(cudaMemcpyAsync(
                  out, static_cast<const uint8_t *>(in) + index * chunkBytes,
                  chunkBytes, cudaMemcpyDeviceToDevice, stream),
              "LocalSlice");
    return;
  }
  blockCopy(in, out, outer, 1, chunkBytes, numBlocks * chunkBytes, 0,
            index * chunkBytes, stream, "LocalSlice");
}

void concatBlocks(const void *blocks, std::size_t elemSize,
                  const Shape &blockShape, int64_t numBlocks, int64_t dim,
                  void *out, cudaStream_t stream) {
  int64_t rank = static_cast<int64_t>(blockShape.size());
  if (dim < 0 || dim >= rank || numBlocks <= 0 || elemSize == 0)
    throw Error("AllGather: cannot concatenate " + std::to_string(numBlocks) +
                " blocks of " + shapeString(blockShape) + " along dimension " +
                std::to_string(dim));
  int64_t outer = product(Shape(blockShape.begin(), blockShape.begin() + dim));
  uint64_t chunkBytes =
      static_cast<uint64_t>(
          product(Shape(blockShape.begin() + dim, blockShape.end()))) *
      elemSize;
  if (outer == 0 || chunkBytes == 0)
    return;
  if (outer == 1 || numBlocks == 1) {
    // The blocks already lie in the output's order.
    checkCall(cudaMemcpyAsync(out, blocks, outer * numBlocks * chunkBytes,
                              cudaMemcpyDeviceToDevice, stream),
              "AllGather");
    return;
  }
  blockCopy(blocks, out, outer, numBlocks, chunkBytes, chunkBytes,
            outer * chunkBytes, 0, stream, "AllGather");
}

void castF32To(DType16 to, const float *in, void *out, int64_t n,
               cudaStream_t stream) {
  if (to == DType16::BF16)
    return launchMap(in, static_cast<__nv_bfloat16 *>(out), n, ToBF16(), stream,
                     "Cast to bf16");
  launchMap(in, static_cast<__half *>(out), n, ToF16(), stream, "Cast to f16");
}

void castToF32(DType16 from, const void *in, float *out, int64_t n,
               cudaStream_t stream) {
  if (from == DType16::BF16)
    return launchMap(static_cast<const __nv_bfloat16 *>(in), out, n, FromBF16(),
                     stream, "Cast from bf16");
  launchMap(static_cast<const __half *>(in), out, n, FromF16(), stream,
            "Cast from f16");
}

void fill(float *out, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  int64_t packs = aligned(out, 16) ? n / 4 : 0;
  fillKernel<<<gridFor(std::max(packs, n - 4 * packs)), kThreads, 0, stream>>>(
      out, n, packs, value);
  checkLaunch("fill");
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

__global__ void __launch_bounds__(kThreads)
    adamwKernel(AdamWScalars s, float *w, const float *g, float *m, float *v,
                int64_t n) {
  // (adamwElement, UpdateMath.h: the CPU kernel's arithmetic.)
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    adamwElement(s, w[i], g[i], m[i], v[i]);
}

void adamw(const AdamWScalars &s, float *w, const float *g, float *m, float *v,
           int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return;
  adamwKernel<<<gridFor(n), kThreads, 0, stream>>>(s, w, g, m, v, n);
  checkLaunch("adamw");
}

__global__ void __launch_bounds__(kThreads)
    sgdKernel(SgdScalars s, float *w, const float *g, float *buf, int64_t n) {
  // (sgdElement, UpdateMath.h: the CPU kernel's arithmetic.)
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    sgdElement(s, w[i], g[i], buf ? buf + i : nullptr);
}

void sgd(const SgdScalars &s, float *w, const float *g, float *buf, int64_t n,
         cudaStream_t stream) {
  if (n <= 0)
    return;
  sgdKernel<<<gridFor(n), kThreads, 0, stream>>>(s, w, g, buf, n);
  checkLaunch("sgd");
}

} // namespace cuda
} // namespace rt
} // namespace shoal
