//===- Registry.h - Registering the CPU kernels -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU backend registers its kernels per op family, one function per
// family next to the family's kernels (cpu/<Family>.cpp); registerCpuKernels
// (cpu/Registry.cpp) calls them all. The helpers below read a kernel's
// operands as KernelFn hands them over.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_REGISTRY_H
#define SHOAL_RUNTIME_CPU_REGISTRY_H

#include "KernelRegistry.h"

#include <cstddef>
#include <vector>

namespace shoal {
namespace rt {
namespace cpu {

using KernelInputs = std::vector<const Tensor *>;
using KernelOutputs = std::vector<Tensor>;

/// Input `i`, which must be present and hold data.
const Tensor &input(const KernelInputs &inputs, std::size_t i);
/// Input `i`, or null if the op leaves it out; if present it must hold data.
const Tensor *optionalInput(const KernelInputs &inputs, std::size_t i);
/// Output `i`, or null if nobody reads it (not allocated).
Tensor *optionalOutput(KernelOutputs &outputs, std::size_t i);

/// Defines a CPU kernel (a KernelFn) called `Name`, with parameters `ctx`,
/// `op`, `in` (the inputs) and `out` (the outputs).
#define SHOAL_CPU_KERNEL(Name)                                                 \
  void Name([[maybe_unused]] KernelContext &ctx,                               \
            [[maybe_unused]] const OpInfo &op,                                 \
            [[maybe_unused]] const KernelInputs &in,                           \
            [[maybe_unused]] KernelOutputs &out)

/// Registers `fn` as the CPU kernel of `kind`. `KernelWrites::All` only for
/// kernels that write every element of every output (no accumulation, no
/// skipped rows): the scheduler then does not zero them first.
inline void registerCpuKernel(OpKind kind, KernelFn fn,
                              KernelWrites writes = KernelWrites::Partial) {
  registerKernel(kind, BackendKind::CPU, fn, writes);
}

// One per op family of Ops.def.
void registerElementwiseKernels();
void registerMatrixKernels();
void registerNormalizationKernels();
void registerReductionKernels();
void registerShapeKernels();
void registerIndexingKernels();
void registerConvPoolKernels();
void registerCollectiveKernels();
void registerTrainingKernels();

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_REGISTRY_H
