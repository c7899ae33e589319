//===- Checkpoint.h - Saving and resuming training runs ---------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint (docs/Training.md, "Checkpoints") is a folder of .npy files,
// one per distinct block of every weight and optimizer state, clipped to the
// global shape, and a manifest.json that says where each block lies in its
// tensor:
//
//   DIR/latest                       the name of the newest step folder
//   DIR/step-00000010/manifest.json
//   DIR/step-00000010/<tensor>.<shard>.npy
//
// Saving writes into DIR/.tmp-step-00000010; once every rank has written its
// blocks, rank 0 writes the manifest, fsyncs, renames the folder and then
// replaces `latest` by renaming a new file over it, so a crash at any point
// leaves the previous checkpoint intact and named by `latest`. Loading reads,
// for each block a rank holds under the current plan, the overlapping parts
// of whichever shard files cover it, so a checkpoint saved under one layout
// loads under any other (resharding).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CHECKPOINT_H
#define SHOAL_RUNTIME_CHECKPOINT_H

#include "Communicator.h"
#include "Sharding.h"
#include "Tensor.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// A tensor as one rank holds it: its block of the global tensor.
struct CheckpointTensor {
  std::string name;
  TensorType globalType;
  ShardSpec sharding;
  /// The rank's block (the local type; blocks of uneven shards reach past
  /// the global shape and are zero-padded there).
  Tensor block;
};

/// One shard file: a block of a tensor, clipped to the global shape.
struct CheckpointShard {
  /// File name inside the step folder.
  std::string file;
  Shape offset;
  /// The block's shape (from the file's header when loading).
  Shape shape;
  /// CRC-32 (zlib's) of the whole file; checkpoints written before
  /// checksums have none.
  bool hasCrc = false;
  uint32_t crc = 0;
};

struct CheckpointEntry {
  TensorType globalType;
  std::vector<CheckpointShard> shards;
};

/// What manifest.json says.
struct CheckpointManifest {
  /// Completed optimizer steps.
  int64_t step = 0;
  int64_t worldSize = 0;
  std::string optimizer;
  /// The run that wrote it (RunId), "" in checkpoints written before.
  std::string runId;
  /// The optimizer's settings of the run that wrote it
  /// (`lr=0.001 lr_schedule=cosine ...`, optimizerSettings); "" in
  /// checkpoints written before.
  std::string schedule;
  std::map<std::string, CheckpointEntry> tensors;
};

/// `step-00000010`.
std::string checkpointFolderName(int64_t step);

/// Writes into `folder` the blocks of `tensors` that the rank at `coords` of
/// `mesh` writes: those for which it is the replica with coordinate 0 on
/// every device axis the tensor is not split over. Each is clipped to the
/// global shape (a block wholly in the padding is skipped), written as
/// `<sanitized name>.<shard>.npy` (shard: the block's row-major index in the
/// tensor's grid of blocks) and fsynced. Returns what it wrote.
std::map<std::string, CheckpointEntry>
writeCheckpointShards(const std::string &folder, const Mesh &mesh,
                      const std::vector<int64_t> &coords,
                      const std::vector<CheckpointTensor> &tensors);

/// Finishes a checkpoint whose shards are in `tmpFolder` (inside `dir`):
/// writes its manifest, fsyncs, renames the folder to
/// `dir/step-<step>` (replacing one of that name) and atomically points
/// `dir/latest` at it. Throws Error naming the file on I/O errors.
void commitCheckpoint(const std::string &dir, const std::string &tmpFolder,
                      const CheckpointManifest &manifest);

/// The manifest as JSON text.
std::string manifestJson(const CheckpointManifest &manifest);

/// The whole save, collective over `world`: rank 0 makes
/// `dir/.tmp-step-<step>`, every rank writes its blocks, rank 0 gathers what
/// they wrote and commits. Every rank passes its own `mesh`, `coords` and
/// the tensors its program writes.
void saveCheckpoint(const std::string &dir, int64_t step,
                    const std::string &optimizer, const Mesh &mesh,
                    const std::vector<int64_t> &coords,
                    const std::vector<CheckpointTensor> &tensors,
                    Communicator &world, const std::string &runId = "",
                    const std::string &schedule = "");

/// The CRC-32 of a file's bytes (zlib's crc32), or throws Error naming it.
uint32_t fileCrc32(const std::string &path);

/// A lock on a checkpoint folder, held by the one job that saves there: an
/// exclusive flock on `DIR/.lock`, which names the job's run id, host and
/// process. A second job that asks for it is refused, naming the holder;
/// the kernel releases it when the holder exits, however it ends (a killed
/// run's folder is free again). On a file system without locks, a warning
/// says that a second job is not detected. Released when destroyed (the
/// file stays, emptied).
class CheckpointLock {
public:
  CheckpointLock() = default;
  /// Throws Error when another live job holds `dir`.
  CheckpointLock(const std::string &dir, const std::string &runId);
  CheckpointLock(CheckpointLock &&other) noexcept;
  CheckpointLock &operator=(CheckpointLock &&other) noexcept;
  ~CheckpointLock();

private:
  void release();
  /// The locked `DIR/.lock`; -1: none held.
  int fd = -1;
};

/// `dir` is a folder holding a complete checkpoint (what
/// Checkpoint::openLatest would open).
bool hasCheckpoint(const std::string &dir);

/// --keep-last: removes the complete step folders of `dir` but the `keep`
/// newest (never the one `latest` names); returns the names removed.
/// Throws Error naming a folder it cannot remove.
std::vector<std::string> pruneCheckpoints(const std::string &dir, int keep);

/// A checkpoint opened for reading.
class Checkpoint {
public:
  /// Opens the step folder `folder` (reads and checks its manifest).
  static Checkpoint open(const std::string &folder);
  /// Opens the newest complete checkpoint under `dir`: the one `latest`
  /// names or, when `latest` is missing or names no complete folder, the
  /// step folder with a manifest and the highest step (leftover .tmp-step
  /// folders and folders without a manifest are ignored); `dir` itself when
  /// it is a step folder (`--resume DIR/step-00000002`: that step). Throws
  /// Error when there is none.
  static Checkpoint openLatest(const std::string &dir);

  const std::string &folder() const { return dir; }
  const CheckpointManifest &manifest() const { return info; }
  /// The manifest's path, for messages.
  std::string manifestPath() const;

  /// The block of tensor `name` at `offsets` of shape `local` (zero past the
  /// global shape), assembled from every shard that overlaps it. Throws
  /// Error naming the checkpoint and the tensor when it is missing, its type
  /// is not `global`, a shard file is missing or corrupt, or the shards do
  /// not cover the block.
  Tensor readBlock(const std::string &name, const TensorType &global,
                   const Shape &offsets, const Shape &local) const;
  /// The whole tensor `name`, assembled from all its shards (readBlock of
  /// the block that is the whole tensor): how rank 0 gathers a weight that
  /// every rank wrote a part of.
  Tensor readTensor(const std::string &name) const;

  /// Whether reads check each shard's CRC-32 against the manifest (the
  /// default; shoal-run --no-verify turns it off).
  void setVerify(bool on) { verify = on; }

private:
  std::string dir;
  CheckpointManifest info;
  bool verify = true;
  /// Shard files whose checksum was checked already.
  mutable std::set<std::string> verified;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CHECKPOINT_H
