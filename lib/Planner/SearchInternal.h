//===- SearchInternal.h - The planner's shared helpers ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What the planner's files (Evaluate.cpp, Balance.cpp, Search.cpp,
// Explain.cpp) share and no one else uses: ranks of a layout's replicas,
// the devices' speed and memory, and the time of a range of ops.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_PLANNER_SEARCHINTERNAL_H
#define SHOAL_LIB_PLANNER_SEARCHINTERNAL_H

#include "shoal/Planner/Search.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace shoal::planner::detail {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// Which node group a rank is in (groups may share a device name but
/// differ in their figures).
long groupId(const Cluster &cluster, int rank);

/// The ranks of replica `replica` of stage `s`.
std::vector<int> replicaRanks(const StagePlan &s, int replica);

/// The rank with the lowest matrix-product rate among `ranks` (the one a
/// lock-step group waits for).
int slowestRank(const std::vector<int> &ranks, const Cluster &cluster,
                Precision p);

/// The smallest memory among `ranks`' devices, in bytes.
double capacityOf(const std::vector<int> &ranks, const Cluster &cluster);

/// Seconds of ops [begin, end) for `frac` of the profile's batch on a
/// replica of `devices` devices (`rank` its slowest), and of its
/// tensor-parallel all-reduces over `group`.
struct RangeTime {
  /// `tp`: the tensor-parallel all-reduces (and a forward step's gathers),
  /// outside `compute`; `tpBackward`: those of them in the backward pass.
  double compute = 0, tp = 0, tpBackward = 0;
  /// Of `compute`, the backward pass (with its recomputed forward).
  double backward = 0;
  /// Once per step, not per micro-batch: the casts of the weights to their
  /// 16-bit copies (the whole model low).
  double casts = 0;
};

/// `shards`: with shards by speed, each device's rank and weight (per
/// mille) of the split ops' work, cut as the compiler cuts each op's split
/// dimension (unevenBlockSizes, in whole options.shardMultiple); they take
/// as long as the slowest part. Empty: equal parts on `rank`.
RangeTime rangeTime(const ModelProfile &profile, int begin, int end,
                    const std::vector<char> &split, int splitBase, int devices,
                    double frac, int rank, const std::vector<int> &group,
                    const CostModel &cost, const PlanOptions &options,
                    const std::vector<std::pair<int, int64_t>> &shards = {});

/// Micro-batches stage `k` of `l` keeps in flight under its schedule.
int inFlightOf(const Layout &l, int k);

/// The ends (exclusive) of the stages a cut after each op with `cutAfter`
/// would make.
std::vector<int> cutEnds(const ModelProfile &profile);

} // namespace shoal::planner::detail

#endif // SHOAL_LIB_PLANNER_SEARCHINTERNAL_H
