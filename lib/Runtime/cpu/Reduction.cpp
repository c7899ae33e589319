//===- Reduction.cpp - CPU kernels: reduction -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the reduction family of Ops.def (Kernels.h):
// ReduceSum and ReduceMean, then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include <algorithm>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

void shoal::rt::cpu::reduce(ReduceOp op, const Tensor &x,
                            const std::vector<int64_t> &axes, Tensor &out) {
  const char *name = op == ReduceOp::Sum ? "ReduceSum" : "ReduceMean";
  if (isHalfDType(x.dtype())) { // sums in double, rounded once
    if (!out.defined() || out.dtype() != x.dtype())
      checkOutput(out, x.dtype(), reduceShape(x.shape(), axes, true), name);
    Tensor r(DType::F32, out.shape());
    reduce(op, toF32(x), axes, r);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, name, "input");
  const Shape &s = x.shape();
  Shape kept = reduceShape(s, axes, true);
  Shape dropped = reduceShape(s, axes, false);
  if (out.dtype() != DType::F32 ||
      (out.shape() != kept && out.shape() != dropped))
    checkOutput(out, DType::F32, kept, name);
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
  const float *px = x.data<float>();
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
  float *po = out.data<float>();
  for (int64_t i = 0; i < outN; ++i)
    po[i] = static_cast<float>(op == ReduceOp::Mean ? sums[i] / double(count)
                                                    : sums[i]);
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

} // namespace

void shoal::rt::cpu::registerReductionKernels() {
  registerCpuKernel(OpKind::ReduceMean, reduceKernel<ReduceOp::Mean>);
  registerCpuKernel(OpKind::ReduceSum, reduceKernel<ReduceOp::Sum>);
}
