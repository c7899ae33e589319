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

} // namespace

KernelFn shoal::rt::findKernel(OpKind kind, BackendKind backend) {
  return kernels[static_cast<int>(kind)][static_cast<int>(backend)];
}

void shoal::rt::registerKernel(OpKind kind, BackendKind backend, KernelFn fn) {
  kernels[static_cast<int>(kind)][static_cast<int>(backend)] = fn;
}

#ifndef SHOAL_HAVE_CUDA
void shoal::rt::registerCudaKernels() {}
#endif
