//===- Reduction.cpp - CPU kernels: reduction -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the reduction family of Ops.def (Kernels.h):
// ReduceSum, ReduceMean, ArgMax, ArgMin and CumSum, then their registration per
// op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

void shoal::rt::cpu::reduce(ReduceOp op, const Tensor &x,
                            const std::vector<int64_t> &axes, Tensor &out) {
  const char *name = op == ReduceOp::Sum ? "ReduceSum" : "ReduceMean";
  // f16/bf16 are read exactly as f32 and summed in double like it; each
  // result is rounded once, to f32 or straight to the 16-bit type.
  DType outType = DType::F32;
  if (isHalfDType(x.dtype())) {
    if (!out.defined() || out.dtype() != DType::F32)
      outType = x.dtype();
  } else if (x.dtype() != DType::F32) {
    throw Error(fmt::format("{}: input must be f32, f16 or bf16, got {}", name,
                            x.type().str()));
  }
  const Shape &s = x.shape();
  Shape kept = reduceShape(s, axes, true);
  Shape dropped = reduceShape(s, axes, false);
  if (!out.defined() || out.dtype() != outType ||
      (out.shape() != kept && out.shape() != dropped))
    checkOutput(out, outType, kept, name);
  Tensor staged = toF32(x);
  std::size_t rank = s.size();
  // Output strides over the input's dimensions (0 on reduced ones).
  std::vector<int64_t> outStrides(rank, 0);
  int64_t acc = 1;
  for (std::size_t d = rank; d-- > 0;) {
    bool reduced =
        std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    outStrides[d] = reduced ? 0 : acc;
    acc *= kept[d];
  }
  int64_t outN = numElements(kept);
  int64_t count = outN ? x.numElements() / std::max<int64_t>(outN, 1) : 0;
  std::vector<double> sums(static_cast<std::size_t>(outN), 0.0);
  const float *px = staged.data<float>();
  if (x.numElements() > 0) {
    // Merge dimensions, then walk the input once.
    std::vector<int64_t> inStrides(rank);
    int64_t a = 1;
    for (std::size_t d = rank; d-- > 0;) {
      inStrides[d] = a;
      a *= s[d];
    }
    LoopNest nest(s, {inStrides, outStrides});
    std::size_t inner = nest.dims.size() - 1;
    int64_t n = nest.dims[inner];
    int64_t sIn = nest.strides[0][inner], sOut = nest.strides[1][inner];
    std::vector<int64_t> idx(inner, 0);
    int64_t oi = 0, oo = 0;
    while (true) {
      if (sOut == 0) {
        double t = 0;
        for (int64_t i = 0; i < n; ++i)
          t += px[oi + i * sIn];
        sums[oo] += t;
      } else {
        for (int64_t i = 0; i < n; ++i)
          sums[oo + i * sOut] += px[oi + i * sIn];
      }
      std::size_t d = inner;
      while (d-- > 0) {
        ++idx[d];
        oi += nest.strides[0][d];
        oo += nest.strides[1][d];
        if (idx[d] < nest.dims[d])
          break;
        oi -= nest.strides[0][d] * nest.dims[d];
        oo -= nest.strides[1][d] * nest.dims[d];
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  }
  storeRounded(out, 0, outN, [&](int64_t i) {
    return op == ReduceOp::Mean ? sums[i] / double(count) : sums[i];
  });
}

void shoal::rt::cpu::argReduce(bool max, const Tensor &x, int64_t axis,
                               bool selectLast, Tensor &out) {
  const char *name = max ? "ArgMax" : "ArgMin";
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("{}: axis {} is out of range for {}", name, axis,
                            x.type().str()));
  const Shape &s = x.shape();
  Shape kept = reduceShape(s, {axis}, true);
  if (out.dtype() != DType::I64 ||
      (out.shape() != kept && out.shape() != reduceShape(s, {axis}, false)))
    checkOutput(out, DType::I64, kept, name);
  if (isHalfDType(x.dtype())) // exact in f32
    return argReduce(max, toF32(x), axis, selectLast, out);
  int64_t outer = 1, n = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  if (n == 0 && outer * inner > 0)
    throw Error(
        fmt::format("{}: axis {} of {} is empty", name, axis, x.type().str()));
  int64_t *po = out.data<int64_t>();
  byNumericType(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Whether v beats the best so far (ties go to the later index with
    // selectLast); NaN beats every number.
    auto beats = [&](T v, T best) {
      if constexpr (std::is_floating_point<T>::value) {
        if (std::isnan(best))
          return selectLast && std::isnan(v);
        if (std::isnan(v))
          return true;
      }
      if (v == best)
        return selectLast;
      return max ? v > best : v < best;
    };
    const T *px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T *src = px + o * n * inner + i;
        int64_t arg = 0;
        for (int64_t j = 1; j < n; ++j)
          if (beats(src[j * inner], src[arg * inner]))
            arg = j;
        po[o * inner + i] = arg;
      }
  });
}

void shoal::rt::cpu::cumSum(const Tensor &x, int64_t axis, bool exclusive,
                            bool reverse, Tensor &out) {
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("CumSum: axis {} is out of range for {}", axis,
                            x.type().str()));
  checkOutput(out, x.dtype(), x.shape(), "CumSum");
  const Shape &s = x.shape();
  int64_t outer = 1, n = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  // Visits the n elements of one line in summation order: (position of the
  // element, position of the sum it ends).
  auto line = [&](auto &&visit) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t base = o * n * inner + i;
        visit(base, [&](int64_t j) {
          return base + (reverse ? n - 1 - j : j) * inner;
        });
      }
  };
  if (isHalfDType(x.dtype()) || x.dtype() == DType::F32 ||
      x.dtype() == DType::F64) {
    Tensor xs = stage(x);
    std::vector<double> sums(x.numElements());
    auto read = [&](int64_t k) {
      return xs.dtype() == DType::F64 ? xs.data<double>()[k]
                                      : double(xs.data<float>()[k]);
    };
    line([&](int64_t, auto at) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = at(j);
        double v = read(k);
        if (!exclusive)
          acc += v;
        sums[k] = acc;
        if (exclusive)
          acc += v;
      }
    });
    if (x.dtype() == DType::F64)
      std::copy(sums.begin(), sums.end(), out.data<double>());
    else
      storeRounded(out, 0, x.numElements(), [&](int64_t k) { return sums[k]; });
    return;
  }
  byNumericType(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral<T>::value) {
      using U = std::make_unsigned_t<T>; // wraps rather than overflows
      const T *px = x.data<T>();
      T *po = out.data<T>();
      line([&](int64_t, auto at) {
        U acc = 0;
        for (int64_t j = 0; j < n; ++j) {
          int64_t k = at(j);
          U v = static_cast<U>(px[k]);
          if (!exclusive)
            acc += v;
          po[k] = static_cast<T>(acc);
          if (exclusive)
            acc += v;
        }
      });
    }
  });
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

template <ReduceOp Op> SHOAL_CPU_KERNEL(reduceKernel) {
  if (op.aliasesInput) {
    // noop_with_empty_axes without axes: the identity.
    out[0] = Tensor::alias(input(in, 0), input(in, 0).shape());
    return;
  }
  reduce(Op, input(in, 0), op.attrs.axes, out[0]);
}

template <bool Max> SHOAL_CPU_KERNEL(argReduceKernel) {
  argReduce(Max, input(in, 0), op.attrs.axis, op.attrs.selectLastIndex, out[0]);
}

SHOAL_CPU_KERNEL(cumSumKernel) {
  cumSum(input(in, 0), op.attrs.axis, op.attrs.exclusive, op.attrs.reverse,
         out[0]);
}

} // namespace

void shoal::rt::cpu::registerReductionKernels() {
  registerCpuKernel(OpKind::ReduceMean, reduceKernel<ReduceOp::Mean>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::ReduceSum, reduceKernel<ReduceOp::Sum>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::ArgMax, argReduceKernel<true>);
  registerCpuKernel(OpKind::ArgMin, argReduceKernel<false>);
  registerCpuKernel(OpKind::CumSum, cumSumKernel, KernelWrites::All);
}
