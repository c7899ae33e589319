//===- ConvPool.cpp - CPU kernels: convolution and pooling ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the convolution and pooling family of Ops.def, registered
// per op. Their bodies are still in Kernels2.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(convKernel) {
  conv(input(in, 0), input(in, 1), optionalInput(in, 2), op.attrs.window,
       op.attrs.group, out[0]);
}

SHOAL_CPU_KERNEL(maxPoolKernel) {
  pool(PoolOp::Max, input(in, 0), op.attrs.window, false, out[0]);
}

SHOAL_CPU_KERNEL(averagePoolKernel) {
  pool(PoolOp::Average, input(in, 0), op.attrs.window, op.attrs.countIncludePad,
       out[0]);
}

template <PoolOp Op> SHOAL_CPU_KERNEL(globalPoolKernel) {
  globalPool(Op, input(in, 0), out[0]);
}

} // namespace

void shoal::rt::cpu::registerConvPoolKernels() {
  registerCpuKernel(OpKind::Conv, convKernel);
  registerCpuKernel(OpKind::MaxPool, maxPoolKernel);
  registerCpuKernel(OpKind::AveragePool, averagePoolKernel);
  registerCpuKernel(OpKind::GlobalAveragePool,
                    globalPoolKernel<PoolOp::Average>);
  registerCpuKernel(OpKind::GlobalMaxPool, globalPoolKernel<PoolOp::Max>);
}
