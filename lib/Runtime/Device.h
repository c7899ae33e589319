//===- Device.h - Where a rank's tensors live and its kernels run -*- C++ -*-//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The scheduler (Executor) talks to a device through this interface only, as
// IREE's HAL separates its scheduler from drivers: memory (buffers of their
// own, and one arena planned ahead of time for op results), copies between
// host and device, completion, and the little arithmetic the scheduler does
// itself (gradient accumulation).
// Kernels of plan ops are looked up in the KernelRegistry by the device's
// backend kind. The CPU device (cpu/CpuDevice.cpp) is the reference; the
// CUDA device (cuda/CudaDevice.cpp) keeps every tensor in GPU memory and
// orders its work on one compute stream.
//
// Operations on device tensors are enqueued in order; copies to the host
// and synchronize() wait for what came before them.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_DEVICE_H
#define SHOAL_RUNTIME_DEVICE_H

#include "KernelRegistry.h"
#include "Tensor.h"
#include "shoal/Schema/DeviceCatalog.h"

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

namespace shoal {
namespace rt {

class Device {
public:
  virtual ~Device() = default;

  virtual BackendKind kind() const = 0;
  /// Where this device's tensors are.
  virtual MemoryKind memory() const = 0;
  /// A name for reports ("cpu", "cuda:0 NVIDIA H100 80GB HBM3").
  virtual std::string name() const = 0;
  /// The catalog entry of the device, or null when unknown (CPUs).
  virtual const DeviceSpec *spec() const { return nullptr; }

  // Memory.
  /// A zero-filled buffer of its own (weights, inputs, optimizer state, and
  /// values kept across tasks: allocated once, before or in the first step).
  virtual Tensor allocate(const TensorType &type) = 0;
  /// Reserves the arena of op results once; later calls with no more bytes
  /// keep it.
  virtual void reserveArena(std::size_t bytes) = 0;
  /// A tensor at `offset` in the arena (not initialized).
  virtual Tensor arenaView(const TensorType &type, std::size_t offset) = 0;
  /// Bytes held by allocate() and the arena so far.
  virtual std::size_t bytesAllocated() const = 0;
  /// The most bytes the device has held at once (the allocator's peak; for
  /// the CPU, the process's peak resident set).
  virtual std::size_t peakBytes() const = 0;

  // Copies; the tensors' types must agree.
  virtual void copyFromHost(const Tensor &host, Tensor &dst) = 0;
  virtual void copyToHost(const Tensor &src, Tensor &host) = 0;
  virtual void copy(const Tensor &src, Tensor &dst) = 0;
  virtual void zero(Tensor &t) = 0;
  /// Sets every byte of `t` to `byte` (SHOAL_FILL_UNINITIALIZED's NaN
  /// fill). The default writes host memory and leaves device memory alone.
  virtual void fillBytes(Tensor &t, unsigned char byte);

  /// A host copy of `t` (the same tensor on the CPU).
  Tensor toHost(const Tensor &t);
  /// A device copy of host tensor `host` in a buffer of its own (the same
  /// tensor on the CPU).
  Tensor fromHost(const Tensor &host);

  /// Waits for all enqueued work; throws the errors kernels flagged (an
  /// index out of range).
  virtual void synchronize() = 0;

  // The scheduler's own arithmetic; the optimizer updates and the clipping
  // norm are update kernels (KernelRegistry.h, Updates.h). The default
  // stages device tensors through the host.
  /// acc += x (same type).
  virtual void addInto(Tensor &acc, const Tensor &x);

  // Data movement around the collectives that take device buffers (NCCL):
  // the defaults stage through the host.
  /// A tensor for one operation's temporaries, released with its last
  /// handle (the default: allocate).
  virtual Tensor temporary(const TensorType &type) { return allocate(type); }
  /// out = the n dense blocks stored one after the other in `blocks` (each
  /// of out's shape with dimension `dim` divided by n) side by side along
  /// `dim`: the reordering after an all-gather.
  virtual void concatBlocks(const Tensor &blocks, int64_t n, int64_t dim,
                            Tensor &out);
  /// packed = `in` cut along `dim` into n blocks of ceil(size / n) entries
  /// (the last ones zero-padded), each dense, one after the other: a
  /// reduce-scatter's operand.
  virtual void packBlocks(const Tensor &in, int64_t n, int64_t dim,
                          Tensor &packed);
};

/// Runs `f` on host copies of `device`'s tensors `written` and `read`
/// (the tensors themselves on a host device) and copies the `written` ones
/// back: for arithmetic a backend has no kernel for.
void runOnHostCopies(Device &device, std::initializer_list<Tensor *> written,
                     std::initializer_list<const Tensor *> read,
                     const std::function<void()> &f);

// Devices are made through the backend registry (BackendRegistry.h).

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_DEVICE_H
