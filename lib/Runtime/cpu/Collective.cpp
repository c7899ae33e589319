//===- Collective.cpp - CPU kernels: collectives ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the collectives family of Ops.def (Kernels.h):
// LocalSlice's block copy and the reordering after an all-gather
// (concatBlocks, which Comm.cpp calls), then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include "Sharding.h"

#include <fmt/format.h>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

void shoal::rt::cpu::sliceBlock(const Tensor &x, int64_t dim, int64_t numBlocks,
                                int64_t index, Tensor &out) {
  if (dim < 0 || dim >= x.rank() || numBlocks <= 0 || index < 0 ||
      index >= numBlocks)
    throw Error(fmt::format("LocalSlice: cannot take block {} of {} along "
                            "dimension {} of {}",
                            index, numBlocks, dim, x.type().str()));
  // Uneven: ceil-sized blocks, the last ones zero-padded.
  Shape shape = x.shape();
  shape[dim] = (shape[dim] + numBlocks - 1) / numBlocks;
  checkOutput(out, x.dtype(), shape, "LocalSlice");
  Shape offsets(shape.size(), 0);
  offsets[dim] = index * shape[dim];
  extractBlock(x.rawData(), x.shape(), dtypeSize(x.dtype()), offsets, shape,
               out.rawData());
}

void shoal::rt::cpu::concatBlocks(const uint8_t *blocks, int64_t numBlocks,
                                  int64_t dim, Tensor &out) {
  if (dim < 0 || dim >= out.rank() || numBlocks <= 0 ||
      out.shape()[dim] % numBlocks != 0)
    throw Error(fmt::format("AllGather: cannot split {} into {} blocks along "
                            "dimension {}",
                            out.type().str(), numBlocks, dim));
  concatBlocks(blocks,
               std::vector<int64_t>(numBlocks, out.shape()[dim] / numBlocks),
               dim, out);
}

void shoal::rt::cpu::concatBlocks(const uint8_t *blocks,
                                  const std::vector<int64_t> &sizes,
                                  int64_t dim, Tensor &out) {
  std::size_t elem = dtypeSize(out.dtype());
  Shape block = out.shape(), offsets(block.size(), 0);
  for (int64_t size : sizes) {
    block[dim] = size;
    insertBlock(blocks, block, elem, offsets, out.rawData(), out.shape());
    blocks += static_cast<std::size_t>(numElements(block)) * elem;
    offsets[dim] += size;
  }
}

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
