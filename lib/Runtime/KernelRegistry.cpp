//===- KernelRegistry.cpp - Kernels per (op kind, backend) ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "KernelRegistry.h"

using namespace shoal::rt;

namespace {

/// The kernels, indexed by [op kind][backend]; null where there is none.
KernelFn kernels[kNumOpKinds][kNumBackends] = {};
/// Whether that kernel writes every element of its outputs.
bool writesAll[kNumOpKinds][kNumBackends] = {};

} // namespace

KernelFn shoal::rt::findKernel(OpKind kind, BackendKind backend) {
  return kernels[static_cast<int>(kind)][static_cast<int>(backend)];
}

bool shoal::rt::kernelWritesAll(OpKind kind, BackendKind backend) {
  return writesAll[static_cast<int>(kind)][static_cast<int>(backend)];
}

void shoal::rt::registerKernel(OpKind kind, BackendKind backend, KernelFn fn,
                               KernelWrites writes) {
  kernels[static_cast<int>(kind)][static_cast<int>(backend)] = fn;
  writesAll[static_cast<int>(kind)][static_cast<int>(backend)] =
      writes == KernelWrites::All;
}

#ifndef SHOAL_HAVE_CUDA
void shoal::rt::registerCudaKernels() {}
#endif
