//===- Balance.cpp - Hardware-aware balancing of a layout -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Whale's balancing of a layout whose stage sizes and devices are fixed:
// stage boundaries by device speed (balanceBoundaries), rank orders by
// memory, batch shares by speed (shareBatch, blockShares,
// countMicroBatches) and shards by speed (shardBySpeed, shardForWholeWork);
// and the even, FLOP-balanced cut of the non-hardware-aware baseline
// (cutEvenly).
//
//===----------------------------------------------------------------------===//

#include "SearchInternal.h"
#include "shoal/Planner/Search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <queue>

using namespace shoal::planner;
using namespace shoal::planner::detail;

std::vector<int> shoal::planner::detail::cutEnds(const ModelProfile &profile) {
  std::vector<int> ends;
  for (std::size_t j = 0; j + 1 < profile.ops.size(); ++j)
    if (profile.ops[j].cutAfter)
      ends.push_back(j + 1);
  return ends;
}

namespace {

/// Prefix sums of each op's time on a stage's devices (at an even share).
std::vector<double> prefixTimes(const Layout &l, const StagePlan &s,
                                const ModelProfile &profile,
                                const Cluster &cluster, const CostModel &cost,
                                const PlanOptions &options) {
  int n = profile.ops.size();
  std::vector<int> ranks = replicaRanks(s, 0);
  // The slowest device any replica of the stage has.
  std::vector<int> all;
  for (int i = 0; i < l.dp; ++i)
    for (int r : replicaRanks(s, i))
      all.push_back(r);
  int slow = slowestRank(all, cluster, options.precision);
  std::vector<char> split(n, s.split.empty() ? 0 : s.split.front());
  double frac = profile.stepBatch() / l.dp / l.microBatches / profile.batch;
  std::vector<double> prefix(n + 1, 0);
  for (int j = 0; j < n; ++j) {
    RangeTime rt = rangeTime(profile, j, j + 1, split, 0, s.devices, frac, slow,
                             ranks, cost, options);
    prefix[j + 1] = prefix[j] + rt.compute + rt.tp;
  }
  return prefix;
}

/// Stage ends (exclusive) with every stage at most `limit` seconds, stages
/// ending only after cut points; empty if impossible.
std::vector<int> greedyEnds(const std::vector<std::vector<double>> &prefix,
                            const std::vector<int> &cutEnds, int n,
                            double limit) {
  int p = prefix.size();
  std::vector<int> ends;
  int begin = 0;
  std::size_t c = 0; // next candidate end
  for (int k = 0; k < p; ++k) {
    if (k == p - 1) {
      if (prefix[k][n] - prefix[k][begin] > limit)
        return {};
      ends.push_back(n);
      return ends;
    }
    while (c < cutEnds.size() && cutEnds[c] <= begin)
      ++c;
    int best = -1;
    // Leave at least one cut point for each later stage.
    std::size_t laterStages = p - 1 - k;
    for (std::size_t d = c; d + laterStages <= cutEnds.size(); ++d) {
      if (prefix[k][cutEnds[d]] - prefix[k][begin] > limit)
        break;
      best = cutEnds[d];
    }
    if (best < 0)
      return {};
    ends.push_back(best);
    begin = best;
  }
  return ends;
}

void setRanges(Layout &l, const std::vector<int> &ends) {
  int begin = 0;
  for (std::size_t k = 0; k < l.stages.size(); ++k) {
    StagePlan &s = l.stages[k];
    char flag = s.split.empty() ? 0 : s.split.front();
    s.begin = begin;
    s.end = ends[k];
    s.split.assign(s.end - s.begin, flag);
    begin = ends[k];
  }
}

bool balanceBoundaries(Layout &l, const ModelProfile &profile,
                       const Cluster &cluster, const CostModel &cost,
                       const PlanOptions &options) {
  int n = profile.ops.size(), p = l.pp();
  std::vector<int> ends = cutEnds(profile);
  if (p <= 1 || static_cast<int>(ends.size()) < p - 1)
    return false;
  std::vector<std::vector<double>> prefix;
  std::map<std::string, std::size_t> memo;
  std::vector<std::vector<double>> tables;
  for (const StagePlan &s : l.stages) {
    std::vector<int> all;
    for (int i = 0; i < l.dp; ++i)
      for (int r : replicaRanks(s, i))
        all.push_back(r);
    std::string key = fmt::format(
        "{}/{}/{}",
        groupId(cluster, slowestRank(all, cluster, options.precision)),
        s.devices, s.split.empty() ? 0 : int(s.split.front()));
    auto it = memo.find(key);
    if (it == memo.end()) {
      tables.push_back(prefixTimes(l, s, profile, cluster, cost, options));
      it = memo.emplace(key, tables.size() - 1).first;
    }
    prefix.push_back(tables[it->second]);
  }
  double hi = 0;
  for (auto &pr : prefix)
    hi = std::max(hi, pr[n]);
  double lo = 0;
  std::vector<int> best = greedyEnds(prefix, ends, n, hi);
  if (best.empty())
    return false;
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    double mid = 0.5 * (lo + hi);
    std::vector<int> e = greedyEnds(prefix, ends, n, mid);
    if (e.empty()) {
      lo = mid;
    } else {
      hi = mid;
      best = std::move(e);
    }
  }
  setRanges(l, best);
  return true;
}

void countMicroBatches(Layout &l, const ModelProfile &profile,
                       const Cluster &cluster, const CostModel &cost,
                       const PlanOptions &options);

/// One stage, one device per replica, one micro-batch: the samples of each
/// replica's block that minimize the slowest replica's time (each at least
/// one; the next sample goes to the replica that would finish it first,
/// timed with the cost model at its block's rows). False when they come out
/// equal.
bool blockShares(Layout &l, const ModelProfile &profile, const Cluster &cluster,
                 const CostModel &cost, const PlanOptions &options) {
  const StagePlan &s = l.stages.front();
  long batch = std::lround(profile.stepBatch());
  if (batch < l.dp)
    return false;
  std::vector<std::string> keys(l.dp);
  std::vector<int> slow(l.dp);
  std::vector<std::vector<int>> ranks(l.dp);
  for (int i = 0; i < l.dp; ++i) {
    ranks[i] = replicaRanks(s, i);
    slow[i] = slowestRank(ranks[i], cluster, options.precision);
    for (int r : ranks[i])
      keys[i] += fmt::format(",{}", groupId(cluster, r));
  }
  std::map<std::pair<std::string, long>, double> memo;
  auto timeOf = [&](int i, long samples) {
    auto [it, fresh] = memo.try_emplace({keys[i], samples}, 0.0);
    if (fresh) {
      RangeTime rt = rangeTime(profile, s.begin, s.end, s.split, s.begin,
                               s.devices, double(samples) / profile.batch,
                               slow[i], ranks[i], cost, options);
      it->second = rt.compute + rt.tp;
    }
    return it->second;
  };
  std::vector<long> n(l.dp, 1);
  using Next = std::pair<double, int>; // time with one more, replica
  std::priority_queue<Next, std::vector<Next>, std::greater<Next>> next;
  for (int i = 0; i < l.dp; ++i)
    next.push({timeOf(i, 2), i});
  for (long given = l.dp; given < batch; ++given) {
    int i = next.top().second;
    next.pop();
    ++n[i];
    next.push({timeOf(i, n[i] + 1), i});
  }
  if (std::all_of(n.begin(), n.end(), [&](long x) { return x == n.front(); }))
    return false;
  l.batchShares.assign(n.begin(), n.end());
  l.batchBlocks = true;
  return true;
}

/// Replicas' batch shares in proportion to their speed, when they differ.
void shareBatch(Layout &l, const ModelProfile &profile, const Cluster &cluster,
                const CostModel &cost, const PlanOptions &options) {
  l.batchShares.clear();
  l.uncompiledShares.clear();
  if (l.dp <= 1)
    return;
  Layout even = l;
  evaluate(even, profile, cluster, cost, options);
  // Per replica: its slowest stage per sample.
  std::vector<double> perSample(l.dp, 0);
  double batch = profile.stepBatch();
  for (int i = 0; i < l.dp; ++i) {
    for (const StagePlan &s : even.stages) {
      std::vector<int> ranks = replicaRanks(s, i);
      double frac = batch / l.dp / l.microBatches / profile.batch;
      RangeTime rt = rangeTime(
          profile, s.begin, s.end, s.split, s.begin, s.devices, frac,
          slowestRank(ranks, cluster, options.precision), ranks, cost, options);
      perSample[i] = std::max(perSample[i], rt.compute + rt.tp);
    }
  }
  double lo = *std::min_element(perSample.begin(), perSample.end());
  double hi = *std::max_element(perSample.begin(), perSample.end());
  if (lo <= 0 || hi / lo < 1.01)
    return;
  // Whole samples, in units of the micro-batch count where the batch
  // allows (each micro-batch then has whole samples), at least one unit
  // each; largest remainders get the units left.
  double inv = 0;
  for (double x : perSample)
    inv += 1 / x;
  long total = std::lround(batch);
  long unit = l.microBatches;
  if (total % unit != 0 || total / unit < l.dp)
    unit = 1;
  long units = total / unit;
  std::vector<long> whole(l.dp);
  std::vector<std::pair<double, int>> rest;
  long given = 0;
  for (int i = 0; i < l.dp; ++i) {
    double exact = units * (1 / perSample[i]) / inv;
    whole[i] = std::max(1L, static_cast<long>(exact));
    given += whole[i];
    rest.push_back({exact - whole[i], i});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](auto &a, auto &b) { return a.first > b.first; });
  for (std::size_t j = 0; given < units && j < rest.size(); ++j, ++given)
    whole[rest[j].second] += 1;
  // Rounding up to one unit each may give too many: take them back from
  // the largest shares.
  while (given > units) {
    auto it = std::max_element(whole.begin(), whole.end());
    if (*it <= 1)
      return;
    --*it;
    --given;
  }
  if (std::all_of(whole.begin(), whole.end(),
                  [&](long w) { return w == whole.front(); }))
    return;
  for (long w : whole)
    l.batchShares.push_back(double(w * unit));
  if (l.pp() == 1 && l.stages.front().devices == 1 && options.zeroStage == 0) {
    // Two ways to compile them: each replica one block of its share
    // (batch blocks), or micro-batches of one size dealt out by speed;
    // the faster, blocks when within 0.5% (one pass over each weight).
    Layout blocks = l;
    countMicroBatches(l, profile, cluster, cost, options);
    if (!options.batchBlocks || blocks.microBatches != 1 ||
        profile.batchScale != 1)
      return;
    if (l.replicaMicroBatches.empty())
      l.batchShares.clear();
    if (!blockShares(blocks, profile, cluster, cost, options))
      return;
    evaluate(blocks, profile, cluster, cost, options);
    Layout dealt = l;
    evaluate(dealt, profile, cluster, cost, options);
    if (blocks.fits &&
        (!dealt.fits || blocks.stepSeconds <= dealt.stepSeconds * 1.005))
      l = std::move(blocks);
    return;
  }
  // Not compiled: the layout keeps equal shares (what the plan will run);
  // what the shares would give is only said (--explain, a warning).
  Layout shared = l;
  evaluate(shared, profile, cluster, cost, options);
  l.uncompiledShares = std::move(l.batchShares);
  l.uncompiledStepSeconds = shared.stepSeconds;
  l.batchShares.clear();
}

/// One stage: the shares as the compiler builds them, every replica running
/// micro-batches of one size b (a divisor of the batch, at most the
/// annotation's micro-batch), replica i `counts[i]` of them (the compiled
/// program is one replica's with sum(counts) micro-batches, dealt out to
/// the replicas). Tries every such b, each with counts in proportion to the
/// replicas' speed at that size, and keeps the fastest (the largest b among
/// those within 0.5%: fewer, larger products).
void countMicroBatches(Layout &l, const ModelProfile &profile,
                       const Cluster &cluster, const CostModel &cost,
                       const PlanOptions &options) {
  const StagePlan &s = l.stages.front();
  long batch = std::lround(profile.stepBatch());
  std::vector<std::vector<int>> ranks(l.dp);
  std::vector<int> slow(l.dp);
  for (int i = 0; i < l.dp; ++i) {
    ranks[i] = replicaRanks(s, i);
    slow[i] = slowestRank(ranks[i], cluster, options.precision);
  }
  double bestTime = 0;
  std::vector<int> best;
  for (long b = batch / (long(l.dp) * l.microBatches); b >= 1; --b) {
    if (batch % b != 0)
      continue;
    long total = batch / b;
    if (total < l.dp || total > 1024 * long(l.dp)) // kMaxMicroBatches each
      continue;
    std::vector<double> perMicro(l.dp);
    std::map<std::string, double> memo; // as evaluate() keys replicas
    for (int i = 0; i < l.dp; ++i) {
      std::string key;
      for (int r : ranks[i])
        key += fmt::format(",{}", groupId(cluster, r));
      key += cluster.nodeOf(ranks[i].front()) == cluster.nodeOf(ranks[i].back())
                 ? "|node"
                 : "|span";
      auto it = memo.find(key);
      if (it == memo.end()) {
        RangeTime rt = rangeTime(profile, s.begin, s.end, s.split, s.begin,
                                 s.devices, double(b) / profile.batch, slow[i],
                                 ranks[i], cost, options);
        it = memo.emplace(key, rt.compute + rt.tp).first;
      }
      perMicro[i] = it->second;
    }
    // The counts that minimize the slowest replica's time, at least one
    // each: give the next micro-batch to the replica that would finish it
    // first (water filling; exact for this min-max).
    std::vector<int> c(l.dp, 1);
    using Next = std::pair<double, int>; // time with one more, replica
    std::priority_queue<Next, std::vector<Next>, std::greater<Next>> next;
    for (int i = 0; i < l.dp; ++i)
      next.push({2 * perMicro[i], i});
    for (long given = l.dp; given < total; ++given) {
      int i = next.top().second;
      next.pop();
      ++c[i];
      next.push({(c[i] + 1) * perMicro[i], i});
    }
    if (*std::max_element(c.begin(), c.end()) > 1024)
      continue;
    double time = 0;
    for (int i = 0; i < l.dp; ++i)
      time = std::max(time, c[i] * perMicro[i]);
    if (best.empty() || time < bestTime * 0.995) {
      bestTime = time;
      best = c;
    }
  }
  if (best.empty() || std::all_of(best.begin(), best.end(),
                                  [&](int x) { return x == best.front(); }))
    return;
  long total = 0;
  for (int x : best)
    total += x;
  l.replicaMicroBatches = best;
  l.microBatches = static_cast<int>(total);
  // One stage: each micro-batch's backward right after its forward (1F1B
  // of one stage), so a replica holds one micro-batch's activations.
  l.schedule = "1f1b";
  l.batchShares.clear();
  for (int x : best)
    l.batchShares.push_back(double(x) * double(batch / total));
}

} // namespace

bool shoal::planner::cutEvenly(Layout &l, const ModelProfile &profile) {
  int n = profile.ops.size(), p = l.pp();
  std::vector<int> ends = cutEnds(profile);
  if (p <= 1) {
    if (p == 1)
      setRanges(l, {n});
    return p == 1;
  }
  if (static_cast<int>(ends.size()) < p - 1)
    return false;
  std::vector<double> prefix(n + 1, 0);
  for (int j = 0; j < n; ++j)
    prefix[j + 1] = prefix[j] + profile.ops[j].flops;
  std::vector<int> chosen;
  std::size_t c = 0;
  for (int k = 1; k < p; ++k) {
    double target = prefix[n] * k / p;
    // The cut nearest to the target that leaves room for the rest.
    std::size_t best = c;
    for (std::size_t d = c; d + (p - 1 - k) < ends.size(); ++d)
      if (std::abs(prefix[ends[d]] - target) <
          std::abs(prefix[ends[best]] - target))
        best = d;
    chosen.push_back(ends[best]);
    c = best + 1;
  }
  chosen.push_back(n);
  setRanges(l, chosen);
  return true;
}

bool shoal::planner::shardBySpeed(Layout &l, const Cluster &cluster,
                                  const PlanOptions &options) {
  // What the compiler builds: one stage, one replica, no batch shares.
  if (l.pp() != 1 || l.dp != 1 || !l.replicaMicroBatches.empty())
    return false;
  StagePlan &s = l.stages.front();
  s.shardWeights.clear();
  if (s.devices <= 1 ||
      std::find(s.split.begin(), s.split.end(), 1) == s.split.end())
    return false;
  std::vector<int> ranks = replicaRanks(s, 0);
  std::vector<double> speed;
  double total = 0;
  for (int r : ranks) {
    speed.push_back(cluster.groupOf(r).device.peakFlops(options.precision));
    total += speed.back();
  }
  if (std::all_of(speed.begin(), speed.end(),
                  [&](double x) { return x == speed.front(); }))
    return false;
  for (double x : speed)
    s.shardWeights.push_back(
        std::max<int64_t>(1, std::llround(1000 * x / total)));
  return true;
}

void shoal::planner::shardForWholeWork(Layout &l, const ModelProfile &profile,
                                       const Cluster &cluster,
                                       const CostModel &cost,
                                       const PlanOptions &options) {
  if (l.stages.size() != 1 || l.stages.front().shardWeights.empty())
    return;
  // Every device of the split scope also does its whole ops (the ones not
  // split: a GELU after a row-parallel product and its all-reduce), at its
  // own speed. With whole work W and split work S (on a device of speed
  // 1), device i of speed v_i ends with the others when its share is
  // x_i = v_i (1 + n r) / sum(v) - r, r = W / S: the fast devices take
  // more than their speed's share. r is searched (the cost model times
  // each candidate), from 0 (shares by speed) up.
  std::vector<int> ranks = replicaRanks(l.stages.front(), 0);
  std::vector<double> speed;
  double sum = 0;
  for (int r : ranks) {
    speed.push_back(cluster.groupOf(r).device.peakFlops(options.precision));
    sum += speed.back();
  }
  double n = static_cast<double>(speed.size());
  Layout best = l;
  for (int k = 1; k <= 40; ++k) {
    double r = 0.025 * k;
    Layout c = l;
    c.stages.front().shardsBeyondSpeed = true;
    std::vector<int64_t> &w = c.stages.front().shardWeights;
    w.clear();
    for (double v : speed)
      w.push_back(std::max<int64_t>(
          1, std::llround(1000 * (v * (1 + n * r) / sum - r))));
    evaluate(c, profile, cluster, cost, options);
    if ((c.fits && !best.fits) ||
        (c.fits == best.fits && c.stepSeconds < best.stepSeconds * (1 - 1e-9)))
      best = std::move(c);
  }
  l = std::move(best);
}

void shoal::planner::balance(Layout &l, const ModelProfile &profile,
                             const Cluster &cluster, const CostModel &cost,
                             const PlanOptions &options, bool moveBoundaries) {
  // Rank orders to try: pipeline-major, and stage-major with the stages
  // that keep the most micro-batches in flight on the blocks of ranks with
  // the most memory (when the stages have the same size, so that blocks can
  // be swapped).
  std::vector<std::pair<bool, std::vector<int>>> orders = {{false, {}}};
  int p = l.pp();
  bool sameSize =
      std::all_of(l.stages.begin(), l.stages.end(), [&](const StagePlan &s) {
        return s.devices == l.stages[0].devices;
      });
  if (p > 1) {
    std::vector<int> order(p);
    std::iota(order.begin(), order.end(), 0);
    if (sameSize) {
      int block = l.dp * l.stages[0].devices;
      std::vector<std::pair<double, int>> blocks;
      for (int b = 0; b < p; ++b) {
        std::vector<int> ranks(block);
        std::iota(ranks.begin(), ranks.end(), b * block);
        blocks.push_back({capacityOf(ranks, cluster), b});
      }
      std::stable_sort(blocks.begin(), blocks.end(),
                       [](auto &a, auto &b) { return a.first > b.first; });
      std::vector<std::pair<int, int>> stages; // (in flight, stage)
      for (int k = 0; k < p; ++k)
        stages.push_back({inFlightOf(l, k), k});
      std::stable_sort(stages.begin(), stages.end(),
                       [](auto &a, auto &b) { return a.first > b.first; });
      // Block b (in rank order) holds stage order[b].
      for (int i = 0; i < p; ++i)
        order[blocks[i].second] = stages[i].second;
    }
    orders.push_back({true, order});
  }
  Layout best;
  bool have = false;
  for (auto &[stageMajor, order] : orders) {
    Layout c = l;
    c.stageMajor = stageMajor;
    placeRanks(c, order);
    if (moveBoundaries)
      balanceBoundaries(c, profile, cluster, cost, options);
    shareBatch(c, profile, cluster, cost, options);
    shardBySpeed(c, cluster, options);
    evaluate(c, profile, cluster, cost, options);
    shardForWholeWork(c, profile, cluster, cost, options);
    bool better =
        !have || (c.fits && !best.fits) ||
        (c.fits == best.fits && c.stepSeconds < best.stepSeconds * (1 - 1e-9));
    if (better) {
      best = std::move(c);
      have = true;
    }
  }
  l = std::move(best);
}
