//===- Transfer.h - Placements and the messages of a transfer ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A value that crosses from one program (or TaskGraph) to another is a
// Transfer (proto/plan.proto): one micro-batch's global tensor, laid out on
// a set of source ranks and wanted on a set of destination ranks, each side
// with its own mesh, sharding and placement in the world. planTransfer turns
// that into point-to-point messages. It is pure arithmetic, so that the
// sending and the receiving ranks, which both compute it, agree on every
// message without talking.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_TRANSFER_H
#define SHOAL_RUNTIME_TRANSFER_H

#include "Sharding.h"
#include "Tensor.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

/// Which world ranks a mesh occupies: the rank at device coordinates c is
/// offset + c[0] * stride + row-major index of c[1:]. A stride of 0 means
/// packed (the product of the sizes of the device axes after the first).
struct Placement {
  int64_t offset = 0;
  int64_t stride = 0;
};

/// The world rank of every rank of `mesh` (in mesh rank order) placed by
/// `placement`. The result may be out of range or repeat ranks; callers
/// validate it.
std::vector<int64_t> placeRanks(const Mesh &mesh, const Placement &placement);

/// How one side of a transfer holds the value.
struct Layout {
  Mesh mesh;
  /// Never names the micro-batch axis.
  ShardSpec sharding;
  Placement placement;
};

/// One point-to-point message of a transfer: the box of the global tensor
/// at `offsets` with `shape` goes from world rank `src` to world rank `dst`.
struct TransferMessage {
  int64_t src = 0, dst = 0;
  Shape offsets, shape;

  int64_t numElements() const { return rt::numElements(shape); }
};

/// The messages that move a tensor of shape `global` from layout `src` to
/// layout `dst`. For each destination rank (in mesh order) and each distinct
/// source block (source ranks with equal blocks are replicas) that overlaps
/// its block: the replica that is the destination rank itself if there is
/// one, else the replica at index (the destination's index among the
/// destination ranks) % (number of replicas), so that replicas share the
/// sending. Empty overlaps send nothing. Messages are ordered by destination
/// index, then by first source rank of the block. Layouts must be valid
/// (shardings divide `global` evenly, ranks distinct).
std::vector<TransferMessage> planTransfer(const Shape &global,
                                          const Layout &src, const Layout &dst);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_TRANSFER_H
