//===- Comm.h - Communication over mesh axes --------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A collective over mesh axes A runs among the ranks whose coordinates agree
// on every axis not in A, ordered row-major over A (proto/plan.proto). Each
// such group is a Communicator made with split (color: the row-major index
// of the other coordinates; key: the row-major index over A), created once
// per list of axes. Comm knows tensors and meshes; the Communicator below it
// (MPI, Gloo, NCCL) knows bytes and ranks.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_COMM_H
#define SHOAL_RUNTIME_COMM_H

#include "Communicator.h"
#include "Sharding.h"
#include "Tensor.h"

#include <map>
#include <memory>
#include <vector>

namespace shoal {
namespace rt {

/// This rank's place in the mesh and its communicators.
class Comm {
public:
  /// `world` must have mesh.worldSize() ranks, ordered as the mesh (in
  /// format version 2, the communicator of one program), and outlive this.
  Comm(Communicator &world, const Mesh &mesh);
  ~Comm();
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;

  int rank() const { return worldRank; }
  int size() const { return worldSize; }
  /// The communicator of all the mesh's ranks.
  Communicator &communicator() const { return worldComm; }
  const Mesh &mesh() const { return meshInfo; }
  const std::vector<int64_t> &coords() const { return myCoords; }
  /// Sets this rank's coordinate on the micro-batch axis (if the mesh has
  /// one) to the micro-batch about to run: LocalSlice over "mb" keeps it.
  void setMicroBatch(int microBatch);

  /// Creates the communicators for each list of axes, in order. Collective
  /// over the world: every rank must pass the same lists.
  void createGroups(const std::vector<std::vector<int>> &axesLists);
  /// The communicator of this rank's group over `axes`; created on first
  /// use (collectively) if createGroups did not make it.
  Communicator &group(const std::vector<int> &axes);
  /// This rank's index in its group over `axes`.
  int64_t groupIndex(const std::vector<int> &axes) const {
    return meshInfo.blockIndex(axes, myCoords);
  }

  /// Sums `in` over the group of `axes` into `out` (same type; may alias).
  void allReduce(const Tensor &in, Tensor &out, const std::vector<int> &axes);
  /// Gathers every group member's `in` and concatenates them along `dim` in
  /// group order into `out`.
  /// `blocks`: each member's block along `dim` when they differ (uneven
  /// blocks); empty: all the size of `in`'s.
  void allGather(const Tensor &in, Tensor &out, int64_t dim,
                 const std::vector<int> &axes,
                 const std::vector<int64_t> &blocks = {});
  /// Sums `in` over the group of `axes` and leaves this rank's block of
  /// dimension `dim` in `out`: ceil(d / n) entries, zero-padded past the end
  /// of `in` (the blocks of LocalSlice).
  void reduceScatter(const Tensor &in, Tensor &out, int64_t dim,
                     const std::vector<int> &axes);
  /// Cuts dimension `splitDim` of `in` into one block per group member,
  /// sends block j to member j, and concatenates the received blocks along
  /// `concatDim` in group order into `out`.
  void allToAll(const Tensor &in, Tensor &out, int64_t splitDim,
                int64_t concatDim, const std::vector<int> &axes);

  /// Asynchronous forms of the above: they start the collective and return
  /// its Work; `out` (`inout`) holds the result once the Work has completed
  /// (test() true or wait() returned). The tensors' buffers are kept alive
  /// by the Work. Collectives of one group complete in the order started.
  std::unique_ptr<Work> allReduceAsync(Tensor &inout,
                                       const std::vector<int> &axes,
                                       ReduceOp op = ReduceOp::Sum);
  std::unique_ptr<Work> allGatherAsync(const Tensor &in, Tensor &out,
                                       int64_t dim,
                                       const std::vector<int> &axes,
                                       const std::vector<int64_t> &blocks = {});
  std::unique_ptr<Work> allToAllAsync(const Tensor &in, Tensor &out,
                                      int64_t splitDim, int64_t concatDim,
                                      const std::vector<int> &axes);

  /// Gathers the same-sized `in` of every rank into `recv` (rank-major) on
  /// rank 0 of the world. `recv` may be null on other ranks.
  void gatherToRoot(const Tensor &in, uint8_t *recv);
  /// Gathers `bytes` bytes of every rank into `recv` (rank-major) on rank 0
  /// of the world. `recv` may be null on other ranks.
  void gatherBytesToRoot(const void *in, std::size_t bytes, uint8_t *recv);

private:
  Communicator &worldComm;
  int worldRank = 0, worldSize = 1;
  Mesh meshInfo;
  std::vector<int64_t> myCoords;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_COMM_H
