//===- BackendRegistry.h - Backends that register themselves ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// As IREE's HAL driver registry (hal/drivers/init.c, driver_registry.h):
// each backend (cpu/, cuda/) registers what it provides, a device factory,
// its kernel registration and, optionally, a
// collective world on its devices (NCCL) and a per-process set-up (the CPU's
// thread share). The engine and the tooling ask the registry by
// BackendKind; they name no backend, and the core builds and links without
// any of them. registerAllBackends (backends/Init.cpp, the
// ShoalRuntimeBackends library) registers every backend this build has.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_BACKENDREGISTRY_H
#define SHOAL_RUNTIME_BACKENDREGISTRY_H

#include "KernelRegistry.h"
#include "shoal/Schema/DeviceCatalog.h"

#include <memory>
#include <string>

namespace shoal {
namespace rt {

class Communicator;
class Device;

/// What a backend registers.
struct BackendInfo {
  BackendKind kind = BackendKind::CPU;
  /// "cpu", "cuda": as --backend names it.
  const char *name = "";
  /// The device of the rank that is `localRank` on its node (a GPU backend
  /// takes device `localRank % count`); `matmul` is the precision of matrix
  /// products. Throws Error when no device is usable.
  std::unique_ptr<Device> (*makeDevice)(int localRank,
                                        Precision matmul) = nullptr;
  /// The collective world of the ranks of `bootstrap` (a host communicator
  /// that carries the set-up, e.g. NCCL's unique id) on `device`, one of
  /// this backend's devices; collective over `bootstrap`. Null if the
  /// backend has none.
  std::unique_ptr<Communicator> (*makeDeviceWorld)(Communicator &bootstrap,
                                                   Device &device) = nullptr;
  /// Registers the backend's kernels (KernelRegistry.h); idempotent. The
  /// engine calls it where it looks kernels up (registerBackendKernels).
  void (*registerKernels)() = nullptr;
  /// The name --comm gives that world ("nccl"); null without one.
  const char *deviceWorldName = nullptr;
  /// Checks the process's settings of the backend and shares the node's
  /// resources among its `ranksOnNode` ranks, once, before any op runs (the
  /// CPU kernels' threads). Null if the backend needs none.
  void (*configureProcess)(int ranksOnNode) = nullptr;
};

/// Registers (or replaces) a backend.
void registerBackend(const BackendInfo &info);
/// Says how to load backend `kind` (whose collective world, if any, is
/// `deviceWorldName`) when it is first asked for: `load` registers it (a
/// module the tool dlopens: the CUDA backend) or throws Error saying why
/// it cannot. Asked for once; its error is the answer from then on.
void registerBackendLoader(BackendKind kind, const char *deviceWorldName,
                           void (*load)());
/// The backend of `kind`, or null when this build (or process) has not
/// registered it (a backend with a loader is loaded first; an Error when
/// it cannot be).
const BackendInfo *findBackend(BackendKind kind);
/// The backend whose `deviceWorldName` is `name`, or null.
const BackendInfo *findBackendWithWorld(const std::string &name);

/// A device of backend `kind`; throws Error when the backend is not in
/// this build ("no CUDA device: this build of shoal has no CUDA backend").
std::unique_ptr<Device> makeDevice(BackendKind kind, int localRank,
                                   Precision matmul);
/// The world named `name` (--comm, e.g. "nccl") on `device`; throws Error
/// when no registered backend has it.
std::unique_ptr<Communicator> makeDeviceWorld(const std::string &name,
                                              Communicator &bootstrap,
                                              Device &device);
/// Registers the kernels of backend `kind` if it is registered (so that
/// "which ops does it have" is a lookup before any of its devices exists).
void registerBackendKernels(BackendKind kind);
/// Calls every registered backend's configureProcess.
void configureBackends(int ranksOnNode);

/// Registers every backend of this build (backends/Init.cpp, the
/// ShoalRuntimeBackends library). Idempotent. Also declared for the tools
/// in shoal/Runtime/Runtime.h.
void registerAllBackends();

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_BACKENDREGISTRY_H
