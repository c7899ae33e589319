//===- KernelRegistry.h - Kernels per (op kind, backend) --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Kernels are registered per (op kind, backend), as PyTorch's dispatcher does
// with `dispatch: CPU: ... CUDA: ...`. The scheduler looks a kernel up and
// calls it; "which ops does the CUDA backend have" is a lookup. A backend
// registers its kernels in one function of its own (cpu/Registry.h,
// cuda/Backend.h), called when its device is made or by
// registerAllBackends (BackendRegistry.h): registration in static
// initializers would be dropped by the linker from static libraries. The
// core names no backend's functions.
//
// A kernel gets its inputs (null for an absent optional operand) and its
// outputs already allocated with their declared local types on the backend's
// device, except for ops whose table entry says they alias their input
// (Reshape): those set their output themselves. Collectives and Send/Recv
// are the scheduler's, not kernels. The optimizer updates and the clipping
// norm are update kernels (UpdateKernels below), also per backend.
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
/// The backend whose kernels are the reference: an op without a kernel on
/// the device's backend runs its kernel on host copies.
constexpr BackendKind kReferenceBackend = BackendKind::CPU;

struct OptimizerParams;

/// What a kernel may need besides its operands.
struct KernelContext {
  const LoadedPlan &plan;
  /// The device the operands live on (a CUDA kernel takes its stream here).
  Device &device;
  /// This rank's index in its group over the op's mesh axes (LocalSlice,
  /// the vocabulary-parallel ops).
  int64_t groupIndex = 0;
  /// Add the result into the output, which holds a sum so far (Gemm: out
  /// += alpha A B): a weight gradient's product summing itself over
  /// micro-batches (MemoryPlan::accumulatesInto). Only Gemm kernels see it.
  bool addInto = false;
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

/// What a kernel knows of an operand before it runs: its dtype and local
/// shape; `present` false for an optional operand left out (or an output
/// not asked for).
struct OperandDesc {
  bool present = false;
  DType dtype = DType::F32;
  Shape shape;
};

/// Why a kernel would not take these operands (KernelUnsupported), or ""
/// when it would. A backend whose kernels refuse some operands registers
/// one per kernel, and the kernel calls the same check on its tensors, so
/// that what a plan audit says without a device (auditPlan, Audit.h) is
/// what the kernel does. `addInto`: KernelContext::addInto.
using KernelCheckFn = std::string (*)(const OpInfo &op,
                                      const std::vector<OperandDesc> &inputs,
                                      const std::vector<OperandDesc> &outputs,
                                      bool addInto);

/// The kernel of `kind` on `backend`, or null if it has none.
KernelFn findKernel(OpKind kind, BackendKind backend);
/// Why the kernel of `op.kind` on `backend` would not run these operands:
/// "" when it would, "no kernel" when there is none.
std::string kernelWhyNot(BackendKind backend, const OpInfo &op,
                         const std::vector<OperandDesc> &inputs,
                         const std::vector<OperandDesc> &outputs, bool addInto);
/// What a kernel runs on for these operands, when it names a library (the
/// plan audit's "device: cuBLASLt"): "" for the backend's own kernels.
using KernelLabelFn = std::string (*)(const OpInfo &op,
                                      const std::vector<OperandDesc> &inputs,
                                      const std::vector<OperandDesc> &outputs);
/// Registers the label of the kernel of `kind` on `backend`.
void registerKernelLabel(OpKind kind, BackendKind backend, KernelLabelFn fn);
/// The kernel's label for these operands ("" without one).
std::string kernelLabel(BackendKind backend, const OpInfo &op,
                        const std::vector<OperandDesc> &inputs,
                        const std::vector<OperandDesc> &outputs);
/// The descriptions of a kernel's tensors (null or undefined: absent).
std::vector<OperandDesc> describe(const std::vector<const Tensor *> &tensors);
std::vector<OperandDesc> describe(const std::vector<Tensor> &tensors);
/// Whether the kernel of `kind` on `backend` writes all of its outputs.
bool kernelWritesAll(OpKind kind, BackendKind backend);
/// Registers (or replaces) a kernel.
void registerKernel(OpKind kind, BackendKind backend, KernelFn fn,
                    KernelWrites writes = KernelWrites::Partial,
                    KernelCheckFn check = nullptr);

/// SHOAL_FILL_UNINITIALIZED=1: the scheduler fills the outputs of kernels
/// registered as writing all of them (KernelWrites::All) with NaN (all-ones
/// bytes) instead of leaving them as they are, so that a kernel that leaves
/// elements out shows in its results, as PyTorch's
/// `fill_uninitialized_memory` does for `torch.empty`. Throws Error for a
/// value other than 0 or 1.
bool fillUninitialized();

/// The scheduler's own arithmetic on a backend's tensors: the optimizer
/// updates of training plans and the clipping norm (docs/Training.md). A
/// backend registers those it has; the others run the reference backend's
/// on host copies (runUpdate... in Updates.h).
struct UpdateKernels {
  /// The sum of the squares of a f32 gradient, in double.
  double (*sumOfSquares)(Device &device, const Tensor &g) = nullptr;
  /// One AdamW step on (w, g, m, v) in place; `gradScale` multiplies the
  /// gradient (clipping, loss scaling).
  void (*adamw)(Device &device, const OptimizerParams &p, int64_t step,
                float gradScale, Tensor &w, const Tensor &g, Tensor &m,
                Tensor &v) = nullptr;
  /// One SGD step on (w, g, buf) in place; `buf` may be undefined.
  void (*sgd)(Device &device, const OptimizerParams &p, int64_t step,
              float gradScale, Tensor &w, const Tensor &g,
              Tensor &buf) = nullptr;
};

/// Registers (or replaces) `backend`'s update kernels.
void registerUpdateKernels(BackendKind backend, const UpdateKernels &kernels);
/// `backend`'s update kernels (null members where it has none).
const UpdateKernels &findUpdateKernels(BackendKind backend);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_KERNELREGISTRY_H
