//===- Reduction.cpp - CPU kernels: reduction -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the reduction family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

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
