//===- Module.cpp - The CUDA backend as a loadable module -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The entry point of libshoal_cuda_backend.so: the tools dlopen the module
// when a run asks for a CUDA device or NCCL (backends/Init.cpp) and call
// this, which registers the backend in the tool's registry (the module
// resolves the core's symbols against the tool).
//
//===----------------------------------------------------------------------===//

#include "cuda/Backend.h"

extern "C" __attribute__((visibility("default"))) void
shoalRegisterCudaBackend() {
  shoal::rt::registerCudaBackend();
}
