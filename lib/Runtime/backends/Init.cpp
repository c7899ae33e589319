//===- Init.cpp - Registering the backends of this build --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The one place that knows which backends a build has (as IREE's
// hal/drivers/init.c): the ShoalRuntimeBackends library, compiled with
// SHOAL_HAVE_CUDA when the CUDA backend (ShoalRuntimeCUDA) is built. The
// tools call registerAllBackends once at start-up.
//
//===----------------------------------------------------------------------===//

#include "BackendRegistry.h"
#include "shoal/Runtime/Runtime.h"

namespace shoal {
namespace rt {
// Each backend's registration (cpu/Backend.h, cuda/Backend.h), declared
// here so that no file outside a backend's folder includes its headers.
void registerCpuBackend();
#ifdef SHOAL_HAVE_CUDA
void registerCudaBackend();
#endif
} // namespace rt
} // namespace shoal

void shoal::rt::registerAllBackends() {
  static const bool registered = [] {
    registerCpuBackend();
#ifdef SHOAL_HAVE_CUDA
    registerCudaBackend();
#endif
    return true;
  }();
  (void)registered;
}
