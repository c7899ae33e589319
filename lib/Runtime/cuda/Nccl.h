//===- Nccl.h - The NCCL communicator ---------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_NCCL_H
#define SHOAL_RUNTIME_CUDA_NCCL_H

#include "Communicator.h"
#include "Device.h"

#include <memory>

namespace shoal {
namespace rt {

/// The NCCL world of the ranks of `bootstrap` (a host communicator that
/// carries NCCL's unique id), on `device`'s GPU (a CUDA device). Collective
/// over `bootstrap`.
std::unique_ptr<Communicator> makeNcclWorld(Communicator &bootstrap,
                                            Device &device);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_NCCL_H
