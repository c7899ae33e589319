//===- PlanChecker.h - Converting and checking a plan -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The one pass over a plan that loadPlan and checkPlan make (PlanLoader.h):
// the conversion of the protobuf into a LoadedPlan (PlanLoader.cpp) and the
// checks of its programs, tasks, schedules and training parts
// (PlanCheck.cpp). Private to those two files.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_PLANCHECKER_H
#define SHOAL_RUNTIME_PLANCHECKER_H

#include "PlanLoader.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

class PlanChecker {
public:
  PlanChecker(const plan::Plan &plan, const std::string &path,
              int64_t worldSize, int64_t worldRank, bool predictOnly)
      : plan(plan), path(path), worldSize(worldSize), worldRank(worldRank),
        predictOnly(predictOnly) {}

  LoadedPlan run();

private:
  [[noreturn]] void fail(const std::string &msg) const {
    throw Error(fmt::format("plan {}: {}", path, msg));
  }

  /// `prefix` starts messages about a program's mesh ("" for the plan's);
  /// with `v2`, an axis "mb" is the micro-batch axis.
  Mesh convertMesh(const plan::Mesh &m, const std::string &prefix, bool v2);
  void checkSources();
  TensorType convertType(const plan::TensorType &t, const std::string &what);
  /// `allowUneven`: a dimension may split into ceil-sized blocks, the last
  /// ones zero-padded (weights of an uneven split).
  ShardSpec convertSharding(const plan::Sharding &s, const Shape &global,
                            const Mesh &mesh, const std::string &what,
                            bool allowUneven = false);
  /// Validated world ranks of `mesh` placed by `p`.
  std::vector<int64_t> convertPlacement(const plan::Placement &p,
                                        const Mesh &mesh,
                                        const std::string &what);
  TransferInfo convertTransfer(const plan::Transfer &t,
                               const std::string &what);
  std::string programName(int index) const;
  /// Version 2: checks that the programs' placements tile the world and
  /// that every Send has its Recv; returns this rank's program.
  int checkPrograms();
  void checkProgram(const plan::Program &p, int index);
  void checkTasks(const plan::Program &p, const std::string &where);
  void checkSchedule(const plan::Program &p, const std::string &where);
  void checkShares(const plan::Program &p, const std::string &where);
  /// Program.uneven_axes (into out.mesh).
  void checkUneven(const plan::Program &p, const std::string &where);
  /// Program.value_layouts: this rank's local types in out.values.
  void applyValueLayouts(const plan::Program &p, const std::string &where);
  void checkSharedCollectives(const std::string &where);
  /// Plan.training: the loss and labels ports, the other inputs, clipping
  /// and which program owns each initializer.
  void checkTraining();

  const plan::Plan &plan;
  std::string path;
  int64_t worldSize, worldRank;
  /// shoal-sim: shapes-only weight sources are fine.
  bool predictOnly;
  Mesh worldMesh;
  /// Version 2: each program's mesh and world ranks.
  std::vector<Mesh> meshes;
  /// The program's num_micro_batches when micro_batch_shares give this
  /// rank fewer (out.numMicroBatches); 0 without shares.
  int programMicroBatches = 0;
  std::vector<std::vector<int64_t>> ranks;
  /// The values whose types value_layouts set for this rank, with their
  /// global types and shardings.
  std::map<int, std::pair<TensorType, ShardSpec>> unevenLayouts;
  LoadedPlan out;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_PLANCHECKER_H
