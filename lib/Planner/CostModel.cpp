//===- CostModel.cpp - Time and memory of ops and collectives ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/CostModel.h"

#include <algorithm>
#include <map>

using namespace shoal::planner;

double CostModel::opSeconds(int rank, double flops, double bytes, OpClass cls,
                            double rows) const {
  const DeviceType &d = cluster.groupOf(rank).device;
  double compute = 0;
  if (flops > 0) {
    double rate =
        d.peakFlops(cls == OpClass::MatMul ? precision : Precision::FP32);
    double e = cls == OpClass::MatMul ? eff.matmul : 1.0;
    if (cls == OpClass::MatMul && rows > 0 && d.matmulHalfRows > 0)
      e *= rows / (rows + d.matmulHalfRows);
    compute = flops / (rate * e);
  }
  // A matrix product on a device with a size curve: the curve already
  // holds what small (memory-bound) products lose.
  if (cls == OpClass::MatMul && rows > 0 && d.matmulHalfRows > 0)
    return compute;
  double memory = 0;
  double rate =
      cls == OpClass::Copy && d.copyGBps > 0 ? d.copyGBps : d.bandwidthGBps;
  if (bytes > 0 && rate > 0)
    memory = bytes / (rate * 1e9 * eff.memory);
  return std::max(compute, memory);
}

double CostModel::ring(const std::vector<int> &ranks, double bytes,
                       double rounds) const {
  double n = static_cast<double>(ranks.size());
  if (n <= 1 || bytes <= 0)
    return 0;
  Link l = cluster.slowestLink(ranks);
  return rounds * ((n - 1) / n * bytes / (l.bandwidthGBps * 1e9 * eff.link) +
                   (n - 1) * l.latencyUs * 1e-6);
}

double CostModel::allReduceSeconds(const std::vector<int> &ranks,
                                   double bytes) const {
  // Ranks per node; hierarchical when every node has the same k > 1.
  std::map<int, std::vector<int>> byNode;
  for (int r : ranks)
    byNode[cluster.nodeOf(r)].push_back(r);
  std::size_t k = byNode.begin()->second.size();
  bool uniform = std::all_of(byNode.begin(), byNode.end(),
                             [&](auto &e) { return e.second.size() == k; });
  if (byNode.size() <= 1 || k <= 1 || !uniform)
    return ring(ranks, bytes, 2);
  std::vector<int> leaders;
  for (auto &e : byNode)
    leaders.push_back(e.second.front());
  const std::vector<int> &local = byNode.begin()->second;
  // Reduce-scatter in the node, all-reduce of 1/k across nodes, all-gather.
  return ring(local, bytes, 1) + ring(leaders, bytes / k, 2) +
         ring(local, bytes, 1);
}

double CostModel::allGatherSeconds(const std::vector<int> &ranks,
                                   double bytes) const {
  return ring(ranks, bytes, 1);
}

double CostModel::sendRecvSeconds(int src, int dst, double bytes) const {
  if (src == dst)
    return 0;
  Link l = cluster.slowestLink({src, dst});
  return l.latencyUs * 1e-6 + bytes / (l.bandwidthGBps * 1e9 * eff.link);
}

MemoryEstimate shoal::planner::estimateMemory(const MemoryInputs &in) {
  MemoryEstimate m;
  m.weights = in.parameters * in.bytesPerParam;
  if (in.training) {
    m.gradients = in.parameters * in.bytesPerParam;
    switch (in.optimizer) {
    case MemoryInputs::Optimizer::Adam:
      m.optimizer = in.parameters * 8;
      break;
    case MemoryInputs::Optimizer::Momentum:
      m.optimizer = in.parameters * 4;
      break;
    case MemoryInputs::Optimizer::SGD:
    case MemoryInputs::Optimizer::None:
      break;
    }
    // Weights kept below fp32 get an fp32 master copy for the update.
    if (in.optimizer != MemoryInputs::Optimizer::None && in.bytesPerParam < 4)
      m.optimizer += in.parameters * 4;
  }
  // (ZeRO-3 divides the weights, not these copies: it has none.)
  double copies = in.parameters * in.weightCopyBytesPerParam;
  if (in.training && in.zeroRanks > 1) {
    double n = in.zeroRanks;
    // shoal's ZeRO-1 and 2 (one plan) reduce-scatter the gradients
    // (docs/Training.md "ZeRO"): each rank keeps the block it updates, and
    // with several micro-batches also the whole gradient summed over them
    // first, scattered once per step; stage 3 scatters every
    // micro-batch's, keeping only the block.
    if (in.zeroStage >= 1) {
      m.optimizer /= n;
      m.gradients = in.zeroStage <= 2 && in.microBatches > 1
                        ? m.gradients + m.gradients / n
                        : m.gradients / n;
    }
    if (in.zeroStage >= 3)
      m.weights /= n;
  }
  m.weights += copies;
  m.activations = in.activationBytes * std::max(1, in.inFlight) +
                  in.transientBytes + in.persistentBytes;
  m.workspace = in.workspaceBytes;
  return m;
}
