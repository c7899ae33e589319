//===- Backend.h - The CUDA backend's registration --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What the CUDA backend offers the backend registry (BackendRegistry.h):
// its device, its kernels and the NCCL world. Only backends/Init.cpp (in a
// build with CUDA) and the CUDA backend's own tests call these.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_BACKEND_H
#define SHOAL_RUNTIME_CUDA_BACKEND_H

#include "shoal/Schema/DeviceCatalog.h"

#include <memory>

namespace shoal {
namespace rt {

class Communicator;
class Device;

/// Registers the CUDA backend (BackendInfo). Idempotent.
void registerCudaBackend();
/// Registers the CUDA kernels (cuda/Registry.cpp). Idempotent.
void registerCudaKernels();
/// The GPU `localRank % device count`; throws Error ("no CUDA device ...")
/// when there is none.
std::unique_ptr<Device> makeCudaDevice(int localRank, Precision matmul);
/// The NCCL world of the ranks of `bootstrap` (a host communicator that
/// carries NCCL's unique id), on `device`'s GPU (a CUDA device). Collective
/// over `bootstrap`.
std::unique_ptr<Communicator> makeNcclWorld(Communicator &bootstrap,
                                            Device &device);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_BACKEND_H
