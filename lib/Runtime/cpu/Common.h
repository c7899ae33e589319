//===- Common.h - Helpers shared by the CPU kernels -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What the kernels of several op families (cpu/<Family>.cpp) share: the
// checks of outputs and operands, f32 staging of f16/bf16 operands,
// broadcast loops and dispatch from a dtype to a C++ element type. Only the
// family files include it; the kernels themselves are declared in Kernels.h.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_COMMON_H
#define SHOAL_RUNTIME_CPU_COMMON_H

#include "KernelRegistry.h"
#include "Tensor.h"
#include "cpu/DTypes.h"
#include "cpu/LoopNest.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace shoal {
namespace rt {
namespace cpu {

/// Throws Error naming `what` unless `out` is defined with `dtype` and
/// `shape` (what the inputs give).
void checkOutput(const Tensor &out, DType dtype, const Shape &shape,
                 const char *what);

/// Throws Error naming `what` and `operand` unless `t` has `dtype`.
void checkDType(const Tensor &t, DType dtype, const char *what,
                const char *operand);

/// Runs body(begin, end) over [0, n) split into contiguous ranges on the
/// kernel threads (cpuThreads()), or on the calling thread alone when the
/// work is small: `costPerItem` is a rough count of float operations per
/// item, and ranges of fewer than about 32k operations are not worth a
/// thread. An exception thrown by body reaches the caller.
void parallelFor(int64_t n, int64_t costPerItem,
                 const std::function<void(int64_t, int64_t)> &body);

/// The cores this process may run on: its affinity mask's (taskset, cgroup
/// cpusets, mpirun's binding), else the machine's; read at each call.
int usableCores();
/// The number of threads the kernels use: SHOAL_NUM_THREADS, else
/// OMP_NUM_THREADS, else setCpuThreads's, else usableCores(), at most
/// capCpuThreads's cap. Throws
/// Error when SHOAL_NUM_THREADS is not a count from 1 to 4096.
int cpuThreads();
/// SHOAL_FILL_UNINITIALIZED (KernelRegistry.h).
using rt::fillUninitialized;
/// Sets the kernel threads of this process (shoal-run gives each rank its
/// share of the node's cores); n < 1 goes back to usableCores(). The
/// environment variables above take precedence.
void setCpuThreads(int n);
/// At most n kernel threads whatever cpuThreads() would give (n < 1: no
/// cap): the cap an address-space limit sets (configureCpuProcess).
void capCpuThreads(int n);

/// Throws the Error of byNumericType for a dtype that isNumeric rejects.
[[noreturn]] void throwNotNumeric(DType dtype);

/// Tensors staged in f32 for a kernel on f16/bf16: the f32 copies of the
/// 16-bit inputs (others as they are).
inline Tensor stage(const Tensor &t) {
  return isHalfDType(t.dtype()) ? toF32(t) : t;
}

/// Stores get(i), a double, into element `begin + i` of `out` (f32, f16
/// or bf16) for i in [0, n), each rounded once: to the nearest f32, or to
/// the nearest f16/bf16 through round-to-odd (narrow), never through f32's
/// nearest first. For the kernels that sum in double.
template <typename Get>
void storeRounded(Tensor &out, int64_t begin, int64_t n, Get get) {
  switch (out.dtype()) {
  case DType::F32: {
    float *p = out.data<float>() + begin;
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<float>(get(i));
    return;
  }
  case DType::F16:
  case DType::BF16: {
    uint16_t *p = out.data<uint16_t>() + begin;
    bool f16 = out.dtype() == DType::F16;
    for (int64_t i = 0; i < n; ++i)
      p[i] = f16 ? narrow<F16Elem>(get(i)).v : narrow<BF16Elem>(get(i)).v;
    return;
  }
  default:
    throw Error(std::string("internal error: storeRounded into ") +
                dtypeName(out.dtype()));
  }
}

/// The dtypes that the numeric kernels compute with in their own type (f16
/// and bf16 are staged through f32 by the callers).
inline bool isNumeric(DType d) {
  return d == DType::F32 || d == DType::F64 || isIntegerDType(d);
}

/// Row-major element strides of `shape`.
inline std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Calls body(offA, offB, offOut, n, strideA, strideB) for every innermost
/// run of a two-input broadcast.
template <typename Body>
void forEachRun2(const Shape &aShape, const Shape &bShape,
                 const Shape &outShape, Body body) {
  std::size_t rank = outShape.size();
  if (numElements(outShape) == 0)
    return;
  std::vector<int64_t> outStrides(rank);
  int64_t acc = 1;
  for (std::size_t i = rank; i-- > 0;) {
    outStrides[i] = acc;
    acc *= outShape[i];
  }
  LoopNest nest(outShape, {broadcastStrides(aShape, rank),
                           broadcastStrides(bShape, rank), outStrides});
  std::size_t inner = nest.dims.size() - 1;
  int64_t n = nest.dims[inner];
  int64_t sa = nest.strides[0][inner], sb = nest.strides[1][inner];
  std::vector<int64_t> idx(inner, 0);
  int64_t oa = 0, ob = 0, oo = 0;
  while (true) {
    body(oa, ob, oo, n, sa, sb);
    std::size_t d = inner;
    while (d-- > 0) {
      ++idx[d];
      oa += nest.strides[0][d];
      ob += nest.strides[1][d];
      oo += nest.strides[2][d];
      if (idx[d] < nest.dims[d])
        break;
      oa -= nest.strides[0][d] * nest.dims[d];
      ob -= nest.strides[1][d] * nest.dims[d];
      oo -= nest.strides[2][d] * nest.dims[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
  }
}

/// `t` broadcast to `shape` as a dense vector.
template <typename T = float>
std::vector<T> expandTo(const Tensor &t, const Shape &shape) {
  std::vector<T> out(static_cast<std::size_t>(numElements(shape)));
  const T *src = t.data<T>();
  forEachRun2(
      t.shape(), t.shape(), shape,
      [&](int64_t oa, int64_t, int64_t oo, int64_t n, int64_t sa, int64_t) {
        for (int64_t i = 0; i < n; ++i)
          out[oo + i] = src[oa + i * sa];
      });
  return out;
}

/// Calls body(offsets, outOffset, n, strides) for every innermost run of a
/// broadcast of K inputs to the dense row-major `out` shape; adjacent
/// dimensions are merged where every input allows it.
template <std::size_t K, typename Body>
void forEachBroadcast(const std::array<const Shape *, K> &in, const Shape &out,
                      Body body) {
  if (numElements(out) == 0)
    return;
  std::size_t rank = out.size();
  std::vector<std::vector<int64_t>> full;
  for (std::size_t k = 0; k < K; ++k)
    full.push_back(broadcastStrides(*in[k], rank));
  // The output is dense, so only the inputs limit which dimensions merge.
  LoopNest nest(out, full);
  const Shape &dims = nest.dims;
  const std::vector<std::vector<int64_t>> &st = nest.strides;
  std::size_t inner = dims.size() - 1;
  int64_t n = dims[inner];
  std::array<int64_t, K> off{}, sInner{};
  for (std::size_t k = 0; k < K; ++k)
    sInner[k] = st[k][inner];
  std::vector<int64_t> idx(inner, 0);
  int64_t oo = 0;
  while (true) {
    body(off, oo, n, sInner);
    oo += n;
    std::size_t d = inner;
    while (d-- > 0) {
      ++idx[d];
      for (std::size_t k = 0; k < K; ++k)
        off[k] += st[k][d];
      if (idx[d] < dims[d])
        break;
      for (std::size_t k = 0; k < K; ++k)
        off[k] -= st[k][d] * dims[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
  }
}

/// Calls f(Tag<U>) with an unsigned type U of the dtype's element size, for
/// kernels that only move elements.
template <typename F> void byElementSize(DType dtype, F &&f) {
  switch (dtypeSize(dtype)) {
  case 1:
    f(Tag<uint8_t>{});
    return;
  case 2:
    f(Tag<uint16_t>{});
    return;
  case 4:
    f(Tag<uint32_t>{});
    return;
  default:
    f(Tag<uint64_t>{});
    return;
  }
}

/// Calls f(Tag<T>) with the C++ element type of a dtype for which
/// isNumeric holds.
template <typename F> void byNumericType(DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    f(Tag<float>{});
    return;
  case DType::F64:
    f(Tag<double>{});
    return;
  case DType::I64:
    f(Tag<int64_t>{});
    return;
  case DType::I32:
    f(Tag<int32_t>{});
    return;
  case DType::I8:
    f(Tag<int8_t>{});
    return;
  case DType::U8:
    f(Tag<uint8_t>{});
    return;
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
    break;
  }
  throwNotNumeric(dtype);
}

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_COMMON_H
