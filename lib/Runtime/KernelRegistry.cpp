//===- KernelRegistry.cpp - Kernels per (op kind, backend) ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "KernelRegistry.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

using namespace shoal::rt;

namespace {

/// The kernels, indexed by [op kind][backend]; null where there is none.
KernelFn kernels[kNumOpKinds][kNumBackends] = {};
/// Whether that kernel writes every element of its outputs.
bool writesAll[kNumOpKinds][kNumBackends] = {};
/// The operands it refuses (null: none).
KernelCheckFn checks[kNumOpKinds][kNumBackends] = {};
KernelLabelFn labels[kNumOpKinds][kNumBackends] = {};
/// The update kernels of each backend.
UpdateKernels updates[kNumBackends];

} // namespace

KernelFn shoal::rt::findKernel(OpKind kind, BackendKind backend) {
  return kernels[static_cast<int>(kind)][static_cast<int>(backend)];
}

bool shoal::rt::kernelWritesAll(OpKind kind, BackendKind backend) {
  return writesAll[static_cast<int>(kind)][static_cast<int>(backend)];
}

void shoal::rt::registerKernel(OpKind kind, BackendKind backend, KernelFn fn,
                               KernelWrites writes, KernelCheckFn check) {
  kernels[static_cast<int>(kind)][static_cast<int>(backend)] = fn;
  writesAll[static_cast<int>(kind)][static_cast<int>(backend)] =
      writes == KernelWrites::All;
  checks[static_cast<int>(kind)][static_cast<int>(backend)] = check;
}

std::string shoal::rt::kernelWhyNot(BackendKind backend, const OpInfo &op,
                                    const std::vector<OperandDesc> &inputs,
                                    const std::vector<OperandDesc> &outputs,
                                    bool addInto) {
  if (!findKernel(op.kind, backend))
    return "no kernel";
  KernelCheckFn check =
      checks[static_cast<int>(op.kind)][static_cast<int>(backend)];
  return check ? check(op, inputs, outputs, addInto) : "";
}

void shoal::rt::registerKernelLabel(OpKind kind, BackendKind backend,
                                    KernelLabelFn fn) {
  labels[static_cast<int>(kind)][static_cast<int>(backend)] = fn;
}

std::string shoal::rt::kernelLabel(BackendKind backend, const OpInfo &op,
                                   const std::vector<OperandDesc> &inputs,
                                   const std::vector<OperandDesc> &outputs) {
  KernelLabelFn fn =
      labels[static_cast<int>(op.kind)][static_cast<int>(backend)];
  return fn ? fn(op, inputs, outputs) : std::string();
}

std::vector<OperandDesc>
shoal::rt::describe(const std::vector<const Tensor *> &tensors) {
  std::vector<OperandDesc> out;
  for (const Tensor *t : tensors)
    out.push_back(t && t->defined() ? OperandDesc{true, t->dtype(), t->shape()}
                                    : OperandDesc{});
  return out;
}

std::vector<OperandDesc>
shoal::rt::describe(const std::vector<Tensor> &tensors) {
  std::vector<OperandDesc> out;
  for (const Tensor &t : tensors)
    out.push_back(t.defined() ? OperandDesc{true, t.dtype(), t.shape()}
                              : OperandDesc{});
  return out;
}

bool shoal::rt::fillUninitialized() {
  static const bool on = [] {
    const char *v = std::getenv("SHOAL_FILL_UNINITIALIZED");
    if (!v || !*v || std::string(v) == "0")
      return false;
    if (std::string(v) == "1")
      return true;
    throw Error(fmt::format("SHOAL_FILL_UNINITIALIZED={}: expected 0 or 1", v));
  }();
  return on;
}

void shoal::rt::registerUpdateKernels(BackendKind backend,
                                      const UpdateKernels &kernels) {
  updates[static_cast<int>(backend)] = kernels;
}

const UpdateKernels &shoal::rt::findUpdateKernels(BackendKind backend) {
  return updates[static_cast<int>(backend)];
}
