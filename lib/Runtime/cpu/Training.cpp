//===- Training.cpp - CPU kernels: training ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the training family of Ops.def, registered per op.
// Their bodies are still in TrainKernels.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(crossEntropyKernel) {
  softmaxCrossEntropy(input(in, 0), input(in, 1), op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(crossEntropyGradKernel) {
  softmaxCrossEntropyGrad(input(in, 0), input(in, 1), input(in, 2),
                          op.attrs.ignoreIndex, out[0]);
}

SHOAL_CPU_KERNEL(softmaxGradKernel) {
  softmaxGrad(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(layerNormGradKernel) {
  layerNormGrad(input(in, 0), input(in, 1), input(in, 2), op.attrs.axis,
                op.attrs.epsilon, out[0]);
}

SHOAL_CPU_KERNEL(layerNormScaleGradKernel) {
  layerNormScaleGrad(input(in, 0), input(in, 1), op.attrs.axis,
                     op.attrs.epsilon, out[0]);
}

SHOAL_CPU_KERNEL(gatherGradKernel) {
  gatherGrad(input(in, 0), input(in, 1), out[0]);
}

} // namespace

void shoal::rt::cpu::registerTrainingKernels() {
  registerCpuKernel(OpKind::SoftmaxCrossEntropy, crossEntropyKernel);
  registerCpuKernel(OpKind::SoftmaxCrossEntropyGrad, crossEntropyGradKernel);
  registerCpuKernel(OpKind::SoftmaxGrad, softmaxGradKernel);
  registerCpuKernel(OpKind::LayerNormalizationGrad, layerNormGradKernel);
  registerCpuKernel(OpKind::LayerNormalizationScaleGrad,
                    layerNormScaleGradKernel);
  registerCpuKernel(OpKind::GatherGrad, gatherGradKernel);
  // AdamW and SGD are the scheduler's (kSchedulerOps): they run once per
  // step, after the gradient all-reduces (cpu/Optimizers.h).
}
