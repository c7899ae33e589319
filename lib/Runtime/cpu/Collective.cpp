//===- Collective.cpp - CPU kernels: collectives ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the collectives family of Ops.def (Kernels.h):
// LocalSlice's block copy and the reordering after an all-gather (the block
// moves themselves are Sharding.h's, which Comm.cpp also uses), then their
// registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include "Sharding.h"

#include <fmt/format.h>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

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
