//===- Registry.cpp - Registering the CPU kernels ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Registry.h"

#include "cpu/Backend.h"
#include "cpu/Optimizers.h"

#include <fmt/format.h>

using namespace shoal::rt;

const Tensor &shoal::rt::cpu::input(const KernelInputs &inputs, std::size_t i) {
  if (i >= inputs.size() || !inputs[i] || !inputs[i]->defined())
    throw Error(fmt::format("input #{} has no data", i));
  return *inputs[i];
}

const Tensor *shoal::rt::cpu::optionalInput(const KernelInputs &inputs,
                                            std::size_t i) {
  if (i >= inputs.size() || !inputs[i])
    return nullptr;
  return &input(inputs, i);
}

Tensor *shoal::rt::cpu::optionalOutput(KernelOutputs &outputs, std::size_t i) {
  if (i >= outputs.size() || !outputs[i].defined())
    return nullptr;
  return &outputs[i];
}

void shoal::rt::registerCpuKernels() {
  // Function-local static: thread-safe and once.
  static const bool registered = [] {
    cpu::registerElementwiseKernels();
    cpu::registerMatrixKernels();
    cpu::registerNormalizationKernels();
    cpu::registerReductionKernels();
    cpu::registerShapeKernels();
    cpu::registerIndexingKernels();
    cpu::registerConvPoolKernels();
    cpu::registerCollectiveKernels();
    cpu::registerTrainingKernels();
    UpdateKernels updates;
    updates.sumOfSquares = [](Device &, const Tensor &g) {
      return cpu::sumOfSquares(g);
    };
    updates.adamw = [](Device &, const OptimizerParams &p, int64_t step,
                       float gradScale, Tensor &w, const Tensor &g, Tensor &m,
                       Tensor &v) {
      cpu::adamwUpdate(p, step, gradScale, w, g, m, v);
    };
    updates.sgd = [](Device &, const OptimizerParams &p, int64_t step,
                     float gradScale, Tensor &w, const Tensor &g, Tensor &buf) {
      cpu::sgdUpdate(p, step, gradScale, w, g, buf);
    };
    registerUpdateKernels(BackendKind::CPU, updates);
    return true;
  }();
  (void)registered;
}
