//===- Registry.cpp - Registering the CPU kernels ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Registry.h"

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
    return true;
  }();
  (void)registered;
}
