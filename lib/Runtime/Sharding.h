//===- Sharding.h - Mesh coordinates and block arithmetic -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The conventions of proto/plan.proto: ranks are numbered row-major over the
// mesh axes; a dimension sharded over axes (major first) is cut into
// prod(sizes) blocks of ceil(d / n) elements (the last ones zero-padded when
// n does not divide d) and a rank holds the block whose index is the
// row-major index of its coordinates on those axes.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_SHARDING_H
#define SHOAL_RUNTIME_SHARDING_H

#include "Tensor.h"
#include "shoal/Schema/UnevenBlocks.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// The name of the micro-batch axis of format-version-2 program meshes.
inline constexpr const char kMicroBatchAxis[] = "mb";

/// The device mesh: named axes with sizes. An empty mesh is a world of one.
///
/// A mesh may have a micro-batch axis (format version 2, axis "mb"): a time
/// axis, not devices. Ranks are numbered over the other (device) axes only;
/// coordinates still have one entry per axis, the micro-batch entry being the
/// micro-batch that runs (0 from coordsOf, see withMicroBatch).
class Mesh {
public:
  Mesh() = default;
  /// With `hasMicroBatchAxis`, an axis named "mb" is the micro-batch axis.
  Mesh(std::vector<std::string> names, std::vector<int64_t> sizes,
       bool hasMicroBatchAxis = false);

  std::size_t numAxes() const { return sizes.size(); }
  const std::string &axisName(std::size_t i) const { return names[i]; }
  int64_t axisSize(std::size_t i) const { return sizes[i]; }
  /// The product of the device axis sizes (all but the micro-batch axis).
  int64_t worldSize() const;
  /// Index of the axis called `name`, or -1.
  int findAxis(const std::string &name) const;
  /// Index of the micro-batch axis, or -1.
  int microBatchAxis() const { return mbAxis; }
  /// The size of the micro-batch axis; 1 without one.
  int64_t numMicroBatches() const;

  /// Uneven data parallelism (Program.micro_batch_shares): device rank q
  /// runs `perRank[q]` micro-batches of the same shape. A dimension sharded
  /// over the micro-batch axis is then cut into S = sum(perRank) blocks, and
  /// rank q's micro-batch j holds block sum(perRank[0..q)) + j; such a
  /// dimension must be sharded over every device axis of size > 1 too
  /// (`coversShares`). `perRank` has worldSize() entries, each in [1, the
  /// micro-batch axis size].
  void setMicroBatchShares(std::vector<int64_t> perRank);
  bool hasMicroBatchShares() const { return !shareOffset.empty(); }
  /// Micro-batches device rank `rank` runs (the axis size without shares).
  int64_t microBatchesOf(int64_t rank) const;
  /// True if a dimension sharded over `axes` may hold micro-batch blocks
  /// under shares: no micro-batch axis in it, or every device axis of size
  /// > 1 with it.
  bool coversShares(const std::vector<int> &axes) const;

  /// Coordinates of `rank` (row-major over the device axes, first axis
  /// major); the micro-batch entry is 0.
  std::vector<int64_t> coordsOf(int64_t rank) const;
  /// Inverse of coordsOf (the micro-batch entry is ignored).
  int64_t rankOf(const std::vector<int64_t> &coords) const;
  /// `coords` with the micro-batch entry set to `microBatch` (unchanged
  /// without a micro-batch axis).
  std::vector<int64_t> withMicroBatch(std::vector<int64_t> coords,
                                      int64_t microBatch) const;

  /// Number of blocks a dimension sharded over `axes` is cut into.
  int64_t numBlocks(const std::vector<int> &axes) const;
  /// Row-major index of `coords` restricted to `axes` (in that order).
  int64_t blockIndex(const std::vector<int> &axes,
                     const std::vector<int64_t> &coords) const;
  /// Row-major index of `coords` restricted to the device axes not in `axes`
  /// (in mesh order): ranks with equal values form one collective group.
  int64_t groupColor(const std::vector<int> &axes,
                     const std::vector<int64_t> &coords) const;
  /// Uneven tensor parallelism (Program.uneven_axes): a dimension sharded
  /// over device axis `axis` is cut into blocks whose sizes follow
  /// `weights` (one per coordinate, > 0), in multiples of `multiple` where
  /// it divides the dimension (unevenBlockSizes). Such a dimension is
  /// sharded over no other axis of size > 1.
  void setUneven(int axis, std::vector<int64_t> weights, int64_t multiple);
  bool isUneven(int axis) const {
    return axis >= 0 && axis < static_cast<int>(unevenWeights.size()) &&
           !unevenWeights[axis].empty();
  }
  bool hasUnevenAxes() const;
  /// The uneven axis among `axes`, or -1.
  int unevenAxisIn(const std::vector<int> &axes) const;
  /// The blocks of a dimension of `size` sharded over uneven axis `axis`.
  std::vector<int64_t> unevenBlocks(int axis, int64_t size) const;

  /// `x=2, y=4`, for messages.
  std::string str() const;

private:
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int mbAxis = -1;
  /// With micro-batch shares: each device rank's first block and, last, the
  /// total S (worldSize() + 1 entries); empty without.
  std::vector<int64_t> shareOffset;
  /// Per axis: the weights of its uneven blocks (empty: even) and their
  /// multiple.
  std::vector<std::vector<int64_t>> unevenWeights;
  std::vector<int64_t> unevenMultiple;
};

/// How a tensor is spread over the mesh: for each dimension the mesh axes it
/// is sharded over, major first. No dimensions at all means replicated.
struct ShardSpec {
  std::vector<std::vector<int>> dims;
  /// Its blocks over the mesh's uneven axes follow their weights (a value
  /// of Program.value_layouts); otherwise every block is even.
  bool uneven = false;

  bool isReplicated() const;
  /// True if some dimension is sharded over mesh axis `axis`.
  bool uses(int axis) const;
  /// `[{x}, {}]` style text with axis names, for messages.
  std::string str(const Mesh &mesh) const;
};

/// The shape of one rank's block of a `global` tensor. Assumes a validated
/// spec (dimensions divide evenly). On a mesh with uneven axes, the shape of
/// an even split (use the overload with coordinates).
Shape localShape(const Shape &global, const ShardSpec &spec, const Mesh &mesh);
/// The shape of the block held by the rank at `coords` (uneven blocks when
/// `spec.uneven`).
Shape localShape(const Shape &global, const ShardSpec &spec, const Mesh &mesh,
                 const std::vector<int64_t> &coords);
/// Offsets (per dimension) of the block held by the rank at `coords`.
Shape blockOffsets(const Shape &global, const ShardSpec &spec, const Mesh &mesh,
                   const std::vector<int64_t> &coords);

/// Copies the box `boxShape` at `srcOffsets` of a row-major `srcShape` array
/// to `dstOffsets` of a row-major `dstShape` array. Elements are `elemSize`
/// bytes; runs that are contiguous in both arrays are copied with memcpy.
void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffsets,
             void *dst, const Shape &dstShape, const Shape &dstOffsets,
             const Shape &boxShape, std::size_t elemSize);

/// Copies block `blockShape` at `offsets` of `src` (shape `srcShape`) into
/// the dense array `dst`.
void extractBlock(const void *src, const Shape &srcShape, std::size_t elemSize,
                  const Shape &offsets, const Shape &blockShape, void *dst);
/// Copies the dense array `src` (shape `blockShape`) into `dst` (shape
/// `dstShape`) at `offsets`.
void insertBlock(const void *src, const Shape &blockShape, std::size_t elemSize,
                 const Shape &offsets, void *dst, const Shape &dstShape);

/// Copies block `index` of `numBlocks` blocks of `x` along `dim` (ceil-sized,
/// the last ones zero-padded) into `out` (LocalSlice, an all-to-all's
/// pieces).
void sliceBlock(const Tensor &x, int64_t dim, int64_t numBlocks, int64_t index,
                Tensor &out);

/// Places `numBlocks` dense blocks of shape `out` with dimension `dim`
/// divided by numBlocks, stored one after the other in `blocks`, side by side
/// along `dim` of `out` (the reordering after an all-gather).
void concatBlocks(const uint8_t *blocks, int64_t numBlocks, int64_t dim,
                  Tensor &out);
/// The same for blocks of different sizes: block g holds sizes[g] entries of
/// dimension `dim` (an all-gather of uneven blocks).
void concatBlocks(const uint8_t *blocks, const std::vector<int64_t> &sizes,
                  int64_t dim, Tensor &out);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_SHARDING_H
