//===- Transfer.cpp - Placements and the messages of a transfer -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Transfer.h"

#include <algorithm>
#include <map>

using namespace shoal::rt;

std::vector<int64_t> shoal::rt::placeRanks(const Mesh &mesh,
                                           const Placement &placement) {
  // The device axes, in order.
  std::vector<int64_t> sizes;
  for (std::size_t i = 0; i < mesh.numAxes(); ++i)
    if (static_cast<int>(i) != mesh.microBatchAxis())
      sizes.push_back(mesh.axisSize(i));
  int64_t inner = 1;
  for (std::size_t i = 1; i < sizes.size(); ++i)
    inner *= sizes[i];
  int64_t stride = placement.stride == 0 ? inner : placement.stride;
  int64_t n = mesh.worldSize();
  std::vector<int64_t> ranks(n);
  for (int64_t r = 0; r < n; ++r)
    ranks[r] = placement.offset + (r / inner) * stride + r % inner;
  return ranks;
}

std::vector<TransferMessage> shoal::rt::planTransfer(const Shape &global,
                                                     const Layout &src,
                                                     const Layout &dst) {
  Shape srcBlock = localShape(global, src.sharding, src.mesh);
  Shape dstBlock = localShape(global, dst.sharding, dst.mesh);
  std::vector<int64_t> srcRanks = placeRanks(src.mesh, src.placement);
  std::vector<int64_t> dstRanks = placeRanks(dst.mesh, dst.placement);

  // Distinct source blocks, in order of their first rank, with their
  // replicas in mesh order.
  struct Block {
    Shape offsets;
    std::vector<int64_t> replicas;
  };
  std::vector<Block> blocks;
  std::map<Shape, std::size_t> blockOf;
  for (std::size_t r = 0; r < srcRanks.size(); ++r) {
    Shape off = blockOffsets(global, src.sharding, src.mesh,
                             src.mesh.coordsOf(static_cast<int64_t>(r)));
    auto [it, inserted] = blockOf.emplace(off, blocks.size());
    if (inserted)
      blocks.push_back({off, {}});
    blocks[it->second].replicas.push_back(srcRanks[r]);
  }

  std::vector<TransferMessage> messages;
  for (std::size_t i = 0; i < dstRanks.size(); ++i) {
    int64_t me = dstRanks[i];
    Shape dstOff = blockOffsets(global, dst.sharding, dst.mesh,
                                dst.mesh.coordsOf(static_cast<int64_t>(i)));
    for (const Block &block : blocks) {
      TransferMessage msg;
      bool empty = false;
      for (std::size_t d = 0; d < global.size(); ++d) {
        int64_t lo = std::max(block.offsets[d], dstOff[d]);
        int64_t hi =
            std::min(block.offsets[d] + srcBlock[d], dstOff[d] + dstBlock[d]);
        if (hi <= lo)
          empty = true;
        msg.offsets.push_back(lo);
        msg.shape.push_back(std::max<int64_t>(hi - lo, 0));
      }
      if (empty)
        continue;
      const std::vector<int64_t> &reps = block.replicas;
      msg.src = std::find(reps.begin(), reps.end(), me) != reps.end()
                    ? me
                    : reps[i % reps.size()];
      msg.dst = me;
      messages.push_back(std::move(msg));
    }
  }
  return messages;
}
