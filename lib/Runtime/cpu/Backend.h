//===- Backend.h - The CPU backend's registration ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What the CPU backend offers the backend registry (BackendRegistry.h). Only
// backends/Init.cpp and the runtime's own tests call these.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_BACKEND_H
#define SHOAL_RUNTIME_CPU_BACKEND_H

#include <memory>

namespace shoal {
namespace rt {

class Device;

/// Registers the CPU backend (BackendInfo) and its kernels. Idempotent.
void registerCpuBackend();
/// Registers the CPU kernels and update kernels (cpu/Registry.cpp).
/// Idempotent.
void registerCpuKernels();
/// The CPU device: host memory, kernels run synchronously.
std::unique_ptr<Device> makeCpuDevice();
/// Gives this rank its share of the node's cores for BLAS and the CPU
/// kernels' threads (cpu::setCpuThreads) unless the user chose
/// (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, SHOAL_NUM_THREADS). A bad
/// SHOAL_NUM_THREADS, SHOAL_CPU_ISA or SHOAL_FILL_UNINITIALIZED is an error
/// here, before any op runs.
void configureCpuProcess(int ranksOnNode);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_BACKEND_H
