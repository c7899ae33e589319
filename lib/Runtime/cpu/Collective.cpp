//===- Collective.cpp - CPU kernels: collectives ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the collectives family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

/// Keeps this rank's block of its group (ctx.groupIndex): no communication.
SHOAL_CPU_KERNEL(localSliceKernel) {
  sliceBlock(input(in, 0), op.attrs.dim, op.attrs.groupSize, ctx.groupIndex,
             out[0]);
}

} // namespace

void shoal::rt::cpu::registerCollectiveKernels() {
  // AllReduce, AllGather, AllToAll, Send and Recv are the scheduler's
  // (kSchedulerOps): they go through the communicator.
  registerCpuKernel(OpKind::LocalSlice, localSliceKernel);
}
