//===- Normalization.cpp - CPU kernels: normalization -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the normalization family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp and Kernels2.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(softmaxKernel) {
  softmax(input(in, 0), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(layerNormKernel) {
  layerNorm(input(in, 0), input(in, 1), optionalInput(in, 2), op.attrs.axis,
            op.attrs.epsilon, out[0], optionalOutput(out, 1),
            optionalOutput(out, 2));
}

SHOAL_CPU_KERNEL(addLayerNormKernel) {
  addLayerNorm(input(in, 0), input(in, 1), input(in, 2), optionalInput(in, 3),
               op.attrs.axis, op.attrs.epsilon, out[0], out[1]);
}

SHOAL_CPU_KERNEL(batchNormKernel) {
  batchNorm(input(in, 0), input(in, 1), input(in, 2), input(in, 3),
            input(in, 4), op.attrs.epsilon, out[0]);
}

} // namespace

void shoal::rt::cpu::registerNormalizationKernels() {
  registerCpuKernel(OpKind::Softmax, softmaxKernel);
  registerCpuKernel(OpKind::LayerNormalization, layerNormKernel);
  registerCpuKernel(OpKind::AddLayerNorm, addLayerNormKernel);
  registerCpuKernel(OpKind::BatchNormalization, batchNormKernel);
}
