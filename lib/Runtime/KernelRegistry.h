//===- KernelRegistry.h - Kernels per (op kind, backend) --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Kernels are registered per (op kind, backend), as PyTorch's dispatcher does
// with `dispatch: CPU: ... CUDA: ...`. The scheduler looks a kernel up and
// calls it; "which ops does the CUDA backend have" is a lookup. A backend
// registers its kernels in one function (registerCpuKernels,
// registerCudaKernels) that the engine calls once: registration in static
// initializers would be dropped by the linker from static libraries.
//
// A kernel gets its inputs (null for an absent optional operand) and its
// outputs already allocated with their declared local types on the backend's
// device, except for ops whose table entry says they alias their input
// (Reshape): those set their output themselves. Collectives, Send/Recv and
// optimizer ops are the scheduler's, not kernels.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_KERNELREGISTRY_H
#define SHOAL_RUNTIME_KERNELREGISTRY_H

#include "Ops.h"
#include "Tensor.h"

#include <vector>

namespace shoal {
namespace rt {

class Device;
struct LoadedPlan;

enum class BackendKind { CPU, CUDA };
constexpr int kNumBackends = 2;

/// What a kernel may need besides its operands.
struct KernelContext {
  const LoadedPlan &plan;
  /// The device the operands live on (a CUDA kernel takes its stream here).
  Device &device;
  /// This rank's index in its group over the op's mesh axes (LocalSlice,
  /// the vocabulary-parallel ops).
  int64_t groupIndex = 0;
};

using KernelFn = void (*)(KernelContext &ctx, const OpInfo &op,
                          const std::vector<const Tensor *> &inputs,
                          std::vector<Tensor> &outputs);

/// Thrown by a kernel, before it starts any work, for operands it does not
/// handle (a dtype, a broadcast): the scheduler then runs the CPU kernel on
/// host copies, as for an op without a kernel on the backend.
class KernelUnsupported : public Error {
public:
  using Error::Error;
};

/// What a kernel does with its outputs' memory.
enum class KernelWrites {
  /// It may accumulate into its outputs or leave elements out (a scatter, a
  /// gradient by indices): the scheduler zeroes them first.
  Partial,
  /// It writes every element of every output it is given: no zeroing.
  All,
};

/// The kernel of `kind` on `backend`, or null if it has none.
KernelFn findKernel(OpKind kind, BackendKind backend);
/// Whether the kernel of `kind` on `backend` writes all of its outputs.
bool kernelWritesAll(OpKind kind, BackendKind backend);
/// Registers (or replaces) a kernel.
void registerKernel(OpKind kind, BackendKind backend, KernelFn fn,
                    KernelWrites writes = KernelWrites::Partial);

/// Registers the CPU backend's kernels (cpu/Registry.cpp). Idempotent.
void registerCpuKernels();
/// Registers the CUDA backend's kernels (cuda/Registry.cpp); a no-op in a
/// build without CUDA. Idempotent.
void registerCudaKernels();

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_KERNELREGISTRY_H
