//===- Search.cpp - The strategy search -------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// search(): every (dp, tp, pp, micro-batches, schedule) the cluster and the
// options allow, each cut (cutEvenly), balanced (Balance.cpp) and evaluated
// (Evaluate.cpp), ranked best first.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Search.h"
#include "SearchInternal.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace shoal::planner;
using namespace shoal::planner::detail;

std::vector<Layout> shoal::planner::search(const ModelProfile &profile,
                                           const Cluster &cluster,
                                           const CostModel &cost,
                                           const PlanOptions &options) {
  const int world = cluster.numDevices();
  int perNode = world;
  for (const NodeGroup &g : cluster.groups)
    perNode = std::min(perNode, g.devicesPerNode);
  const double batch = profile.stepBatch();
  const int maxStages = static_cast<int>(cutEnds(profile).size()) + 1;
  auto divisors = [](int n) {
    std::vector<int> d;
    for (int i = 1; i <= n; ++i)
      if (n % i == 0)
        d.push_back(i);
    return d;
  };
  std::vector<Layout> out;
  for (int tp : divisors(perNode)) {
    // Every device is used: dp * tp * pp is the world (the compiler lays
    // the stages over all of it).
    if ((options.tp && tp != options.tp) || world % tp != 0)
      continue;
    for (int pp : divisors(world / tp)) {
      if ((options.pp && pp != options.pp) || pp > maxStages)
        continue;
      int dp = world / (tp * pp);
      if (options.dp && dp != options.dp)
        continue;
      double perReplica = batch / dp;
      if (perReplica < 1 || perReplica != std::floor(perReplica))
        continue;
      for (int mbs : divisors(static_cast<int>(perReplica))) {
        int m = static_cast<int>(perReplica) / mbs;
        if ((options.microBatches && m != options.microBatches) ||
            (options.microBatchSize && mbs != options.microBatchSize))
          continue;
        std::vector<std::pair<std::string, int>> schedules;
        if (pp == 1)
          schedules = {{"1f1b", 1}};
        else {
          schedules = {{"gpipe", 1}, {"1f1b", 1}};
          std::vector<int> chunks = {2, 4};
          if (options.virtualStages > 1)
            chunks = {options.virtualStages};
          for (int v : chunks)
            if (m % pp == 0 && pp * v <= maxStages)
              schedules.push_back({"interleaved", v});
        }
        for (auto &[sched, v] : schedules) {
          if (!options.schedule.empty() && sched != options.schedule)
            continue;
          Layout l;
          l.dp = dp;
          l.microBatches = m;
          l.schedule = sched;
          l.virtualStages = v;
          l.stages.resize(pp);
          for (StagePlan &s : l.stages) {
            s.devices = tp;
            s.split.assign(1, tp > 1);
          }
          if (!cutEvenly(l, profile))
            continue;
          if (options.balance) {
            balance(l, profile, cluster, cost, options);
          } else {
            placeRanks(l);
            evaluate(l, profile, cluster, cost, options);
          }
          out.push_back(std::move(l));
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Layout &a, const Layout &b) {
                     if (a.fits != b.fits)
                       return a.fits;
                     if (a.stepSeconds != b.stepSeconds)
                       return a.stepSeconds < b.stepSeconds;
                     if (a.microBatches != b.microBatches)
                       return a.microBatches < b.microBatches; // simpler
                     double ma = 0, mb = 0;
                     for (auto &s : a.stages)
                       ma = std::max(ma, s.memoryBytes);
                     for (auto &s : b.stages)
                       mb = std::max(mb, s.memoryBytes);
                     return ma < mb;
                   });
  // Batch shares compile every annotated micro-batch count of one stage to
  // the same micro-batches: keep one of each.
  std::set<std::string> seen;
  out.erase(std::remove_if(out.begin(), out.end(),
                           [&](const Layout &l) {
                             return !l.replicaMicroBatches.empty() &&
                                    !seen.insert(l.describe()).second;
                           }),
            out.end());
  return out;
}
