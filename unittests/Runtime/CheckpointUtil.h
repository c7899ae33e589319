//===- CheckpointUtil.h - Checkpoints for the runtime tests -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Saving global tensors as every rank of a mesh would (CheckpointTest.cpp,
// ExportTest.cpp), and checking error messages.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_UNITTESTS_RUNTIME_CHECKPOINTUTIL_H
#define SHOAL_UNITTESTS_RUNTIME_CHECKPOINTUTIL_H

#include "Checkpoint.h"
#include "ErrorOf.h"
#include "shoal/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace shoal {
namespace rt {
namespace test {

/// The block of `global` at `offsets` of shape `local`, zero past the end.
inline Tensor blockOf(const Tensor &global, const Shape &offsets,
                      const Shape &local) {
  Tensor out(TensorType{global.dtype(), local});
  Shape box(local.size());
  for (std::size_t d = 0; d < local.size(); ++d)
    box[d] = std::max<int64_t>(
        0, std::min(local[d], global.shape()[d] - offsets[d]));
  if (numElements(box) > 0)
    copyBox(global.rawData(), global.shape(), offsets, out.rawData(), local,
            Shape(local.size(), 0), box, dtypeSize(global.dtype()));
  return out;
}

inline bool sameBytes(const Tensor &a, const Tensor &b) {
  return a.type() == b.type() &&
         std::memcmp(a.rawData(), b.rawData(), a.numBytes()) == 0;
}

struct GlobalTensor {
  std::string name;
  Tensor value;
  /// Per dimension, the mesh axis names it is split over.
  std::vector<std::vector<std::string>> sharding;
};

inline ShardSpec specOf(const Mesh &mesh,
                        const std::vector<std::vector<std::string>> &dims) {
  ShardSpec spec;
  for (const auto &d : dims) {
    std::vector<int> axes;
    for (const std::string &a : d)
      axes.push_back(mesh.findAxis(a));
    spec.dims.push_back(axes);
  }
  return spec;
}

/// The blocks of `tensors` that the rank at `coords` of `mesh` holds.
inline std::vector<CheckpointTensor>
blocksOfRank(const Mesh &mesh, const std::vector<int64_t> &coords,
             const std::vector<GlobalTensor> &tensors) {
  std::vector<CheckpointTensor> mine;
  for (const GlobalTensor &g : tensors) {
    ShardSpec spec = specOf(mesh, g.sharding);
    Shape offsets = blockOffsets(g.value.shape(), spec, mesh, coords);
    Shape local = localShape(g.value.shape(), spec, mesh);
    mine.push_back(
        {g.name, g.value.type(), spec, blockOf(g.value, offsets, local)});
  }
  return mine;
}

/// Saves `tensors` as every rank of `mesh` would, in one process: each rank
/// writes its blocks into the tmp folder, then the checkpoint is committed.
inline void saveAsMesh(const std::string &dir, int64_t step, const Mesh &mesh,
                       const std::vector<GlobalTensor> &tensors) {
  std::string tmp =
      (std::filesystem::path(dir) / (".tmp-" + checkpointFolderName(step)))
          .string();
  std::filesystem::create_directories(tmp);
  CheckpointManifest manifest;
  manifest.step = step;
  manifest.worldSize = mesh.worldSize();
  manifest.optimizer = "adamw";
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    std::vector<int64_t> coords = mesh.coordsOf(r);
    std::vector<CheckpointTensor> mine = blocksOfRank(mesh, coords, tensors);
    for (auto &[name, e] : writeCheckpointShards(tmp, mesh, coords, mine)) {
      CheckpointEntry &all = manifest.tensors[name];
      all.globalType = e.globalType;
      for (const CheckpointShard &s : e.shards)
        all.shards.push_back(s);
    }
  }
  commitCheckpoint(dir, tmp, manifest);
}

#define EXPECT_HAS(text, part)                                                 \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                   \
      << "message: " << (text)

} // namespace test
} // namespace rt
} // namespace shoal

#endif // SHOAL_UNITTESTS_RUNTIME_CHECKPOINTUTIL_H
