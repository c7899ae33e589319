//===- Search.cpp - Balancing and strategy search ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Search.h"
#include "shoal/Schema/UnevenBlocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <queue>
#include <set>

using namespace shoal::planner;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// The runtime's gradient buckets (grad_bucket_mb's default, 25 MiB).
constexpr double kGradBucketBytes = 25.0 * 1024 * 1024;

double stepFactor(StepKind k) {
  switch (k) {
  case StepKind::Forward:
    return 1; // forward
  case StepKind::Train:
    return 3; // forward + backward (two products per forward one)
  case StepKind::TrainRecompute:
    return 4; // and the forward again before backward
  case StepKind::TrainSelective:
    return 3; // the attention cores again: a few percent, not modeled
  }
  return 1;
}

/// Tensor-parallel all-reduces per forward one: backward has one for each
/// (the input gradient of a column-parallel product); recomputation redoes
/// the forward ones.
double tpCommFactor(StepKind k) {
  return k == StepKind::Forward                                  ? 1
         : k == StepKind::Train || k == StepKind::TrainSelective ? 2
                                                                 : 3;
}

bool training(StepKind k) { return k != StepKind::Forward; }

double bytesPerParam(Precision p) {
  return p == Precision::BF16 || p == Precision::FP16 ? 2 : 4;
}

/// Which node group a rank is in (groups may share a device name but
/// differ in their figures).
long groupId(const Cluster &cluster, int rank) {
  return &cluster.groupOf(rank) - cluster.groups.data();
}

int rankOf(const StagePlan &s, int replica, int t) {
  return s.offset + replica * s.stride + t;
}

std::vector<int> replicaRanks(const StagePlan &s, int replica) {
  std::vector<int> r(s.devices);
  for (int t = 0; t < s.devices; ++t)
    r[t] = rankOf(s, replica, t);
  return r;
}

/// The rank with the lowest matrix-product rate among `ranks` (the one a
/// lock-step group waits for).
int slowestRank(const std::vector<int> &ranks, const Cluster &cluster,
                Precision p) {
  int best = ranks.front();
  double rate = cluster.groupOf(best).device.peakFlops(p);
  for (int r : ranks) {
    double x = cluster.groupOf(r).device.peakFlops(p);
    if (x < rate) {
      rate = x;
      best = r;
    }
  }
  return best;
}

double capacityOf(const std::vector<int> &ranks, const Cluster &cluster) {
  double c = 1e300;
  for (int r : ranks)
    c = std::min(c, cluster.groupOf(r).device.memoryGiB * kGiB);
  return c;
}

/// Seconds of ops [begin, end) for `frac` of the profile's batch on a
/// replica of `devices` devices (`rank` its slowest), and of its
/// tensor-parallel all-reduces over `group`.
struct RangeTime {
  double compute = 0, tp = 0;
  /// Of `compute`, the backward pass (with its recomputed forward).
  double backward = 0;
};

/// `shards`: with shards by speed, each device's rank and weight (per
/// mille) of the split ops' work, cut as the compiler cuts each op's split
/// dimension (unevenBlockSizes, in whole options.shardMultiple); they take
/// as long as the slowest part. Empty: equal parts on `rank`.
RangeTime rangeTime(const ModelProfile &profile, int begin, int end,
                    const std::vector<char> &split, int splitBase, int devices,
                    double frac, int rank, const std::vector<int> &group,
                    const CostModel &cost, const PlanOptions &options,
                    const std::vector<std::pair<int, int64_t>> &shards = {}) {
  const StepKind step = options.step;
  // Mixed precision (float32 weights, products in a 16-bit type): every
  // product reads its operands through casts and casts its result back
  // (4 + 2 bytes per element each), and moves 16-bit values itself.
  const bool mixed =
      options.fp32Weights && (options.precision == Precision::BF16 ||
                              options.precision == Precision::FP16);
  RangeTime t;
  double forward = 0, backward = 0, gathers = 0;
  // The op's part of the profile's work: `f` of what divides over the
  // group, `fw` of what stays whole on each of its ranks (the two differ
  // under tensor parallelism), `wf` of its weights (a sharded weight's
  // part; the batch does not divide them).
  struct Parts {
    double f, fw, wf, rowsF;
  };
  auto secondsOn = [&](int r, const OpPiece &p, const Parts &x) {
    double divided = p.bytes - p.weightBytes - p.wholeBytes;
    double moved = divided * x.f + p.wholeBytes * x.fw + p.weightBytes * x.wf;
    double s = cost.opSeconds(
        r, p.flops * (p.hasSplit ? x.f : x.fw),
        mixed && p.rows > 0 ? moved / 2 : moved,
        p.rows > 0 ? OpClass::MatMul : OpClass::Elementwise, p.rows * x.rowsF);
    if (mixed && p.castElements > 0) {
      double elements =
          (p.castElements - p.castWeightElements - p.castWholeElements) * x.f +
          p.castWholeElements * x.fw + p.castWeightElements * x.wf;
      s += cost.opSeconds(r, elements, elements * 6, OpClass::Elementwise);
    }
    return s;
  };
  std::vector<int64_t> weights;
  double total = 0;
  for (auto [r, w] : shards) {
    weights.push_back(w);
    total += static_cast<double>(w);
  }
  // Each device's time (forward, backward) since the last all-reduce: the
  // devices of a split scope wait for each other only there, so with
  // shards by speed the fast device's larger shard and the slow ones'
  // whole ops (done by every device) add up before they meet.
  std::map<int, std::pair<double, double>> since;
  auto flush = [&] {
    double fwd = 0, bwd = 0;
    for (const auto &[r, fb] : since)
      if (fb.first + fb.second > fwd + bwd) {
        fwd = fb.first;
        bwd = fb.second;
      }
    forward += fwd;
    backward += bwd;
    since.clear();
  };
  for (int j = begin; j < end; ++j) {
    const OpCost &op = profile.ops[j];
    bool isSplit = split[j - splitBase];
    // Each device's part: by its shard with shards by speed, else an equal
    // one on `rank`.
    std::vector<std::pair<int, Parts>> parts;
    if (isSplit && op.tpSharded && !shards.empty()) {
      // Each device's block of the op's split dimension.
      std::vector<int64_t> blocks;
      auto size = static_cast<int64_t>(op.splitSize);
      if (size >= static_cast<int64_t>(shards.size()))
        blocks =
            shoal::rt::unevenBlockSizes(size, weights, options.shardMultiple);
      for (std::size_t q = 0; q < shards.size(); ++q) {
        double part = blocks.empty() ? static_cast<double>(weights[q]) / total
                                     : static_cast<double>(blocks[q]) /
                                           static_cast<double>(size);
        parts.push_back({shards[q].first, {frac * part, frac, part, frac}});
      }
    } else if (!isSplit) {
      // Each device takes a part of the micro-batch.
      double f = frac / devices;
      parts.push_back({rank, {f, f, 1, f}});
    } else if (op.tpSharded) {
      // The product's columns (or heads) are divided.
      parts.push_back({rank, {frac / devices, frac, 1.0 / devices, frac}});
    } else {
      parts.push_back({rank, {frac, frac, 1, frac}});
    }
    if (!shards.empty() && !(isSplit && op.tpSharded)) {
      // With shards by speed every device does it, each at its own speed.
      Parts x = parts.front().second;
      parts.clear();
      for (auto [r, w] : shards)
        parts.push_back({r, x});
    }
    for (const auto &[r, x] : parts) {
      double a = secondsOn(r, op, x), b = 0;
      // The backward as shoal-autodiff builds it (the ops of the gradient
      // rule), with the forward op's share of the work.
      if (training(step) && profile.hasBackward)
        for (const OpPiece &p : op.backward)
          b += secondsOn(r, p, x);
      since[r].first += a;
      since[r].second += b;
    }
    if (isSplit && devices > 1 && op.tpAllReduceBytes > 0) {
      flush();
      // The runtime copies its input into the result, then exchanges it.
      double bytes = op.tpAllReduceBytes * frac;
      t.tp += cost.allReduceSeconds(group, bytes) +
              cost.opSeconds(rank, 0, 2 * bytes, OpClass::Copy);
    }
    if (isSplit && devices > 1 && op.tpGatherBytes > 0 && !training(step))
      gathers += cost.allGatherSeconds(group, op.tpGatherBytes * frac);
  }
  flush();
  if (!training(step))
    t.compute = forward;
  else if (!profile.hasBackward)
    t.compute = forward * stepFactor(step);
  else
    t.compute = forward * (step == StepKind::TrainRecompute ? 2 : 1) + backward;
  t.backward = t.compute - forward;
  t.tp = t.tp * tpCommFactor(step) + gathers;
  return t;
}

/// A training stage's activations, per device at a micro-batch of `frac` of
/// the profile's batch: what it keeps per micro-batch in flight, and the
/// largest set of temporaries alive at once. The step is walked op by op:
/// at the backward of op j the stage holds what the ops before j keep for
/// the backward, the values of j's recomputed segment that come before it,
/// and the gradients around j (the mirror of the values alive on either
/// side of j in the forward, as reverse mode frees each gradient once its
/// producer's backward has read it) plus j's weight gradient while it is
/// a temporary (summed over micro-batches or data-parallel replicas
/// afterwards; otherwise it is the gradient buffer itself). A program of
/// one task holds it all in one arena; with `tasks` (a pipeline stage, or
/// micro-batches) the forward and the backward are tasks of their own, so
/// what it keeps crosses them per micro-batch and the rest is the arena.
struct StageActivations {
  double keptPerMicroBatch = 0;
  double arena = 0;
};

StageActivations trainingActivations(const ModelProfile &profile,
                                     const StagePlan &s, int k, int p,
                                     StepKind step, bool tasks,
                                     bool weightGradTemporary,
                                     double bytesPerParam, double frac) {
  const int begin = s.begin, end = s.end;
  const double devices = s.devices;
  // Devices a value of op j is divided over: a replicated op splits the
  // batch; a split op its result when that is split (or along the sequence
  // with sequence parallelism), else every device holds it whole.
  auto spread = [&](int j) {
    const OpCost &op = profile.ops[j];
    bool sp = s.split[j - begin];
    return !sp || op.outSplit || s.sequenceParallel ? devices : 1.0;
  };
  auto shard = [&](int j) {
    return s.split[j - begin] && profile.ops[j].tpSharded ? devices : 1.0;
  };
  // Full recomputation's segments: the layers found in the node names
  // (ops outside them are not recomputed), else the stretches between cut
  // points.
  std::vector<int> segment(end - begin, -1);
  for (int j = begin, cuts = 0; j < end; ++j) {
    segment[j - begin] = profile.layers > 0 ? profile.ops[j].layer : cuts;
    if (profile.ops[j].cutAfter)
      ++cuts;
  }
  auto segmentOf = [&](int j) {
    return j >= begin && j < end ? segment[j - begin] : -2;
  };
  const bool lastStage = k == p - 1;
  StageActivations a;
  double keptBefore = 0, recomputed = 0, peak = 0, forward = 0;
  for (int j = begin; j < end; ++j) {
    const OpCost &op = profile.ops[j];
    double saved = op.savedBytes / spread(j) * frac;
    double core = op.coreBytes / spread(j) * frac;
    // What op j's result keeps for the backward and what the backward
    // recomputes of it.
    double keep = saved, redo = 0;
    if (step == StepKind::TrainSelective) {
      keep = saved - core;
      redo = core;
    } else if (step == StepKind::TrainRecompute && segmentOf(j) >= 0) {
      // A segment keeps only its result, the next one's input.
      bool boundary = op.cutAfter && segmentOf(j + 1) != segmentOf(j) &&
                      (j + 1 < end || lastStage);
      keep = boundary ? op.cutBytes / spread(j) * frac : 0;
      redo = saved - keep;
    }
    // A stage's result goes to the next stage, which keeps it.
    if (j + 1 == end && !lastStage)
      keep = 0;
    if (j > begin && segmentOf(j) != segmentOf(j - 1))
      recomputed = 0;
    double before = j > begin ? profile.ops[j - 1].liveBytes
                              : (begin > 0 ? profile.ops[begin - 1].liveBytes
                                           : op.liveBytes);
    double gradients = (before + op.outBytes) / devices * frac;
    if (weightGradTemporary)
      gradients += op.params / shard(j) * bytesPerParam;
    double held = recomputed + gradients + (tasks ? 0 : keptBefore);
    peak = std::max(peak, held);
    forward = std::max(forward, op.liveBytes / devices * frac);
    keptBefore += keep;
    if (step != StepKind::Train)
      recomputed += redo;
  }
  a.keptPerMicroBatch = keptBefore;
  // The value a later stage receives is kept until its backward.
  if (begin > 0) {
    const OpCost &in = profile.ops[begin - 1];
    a.keptPerMicroBatch += in.cutBytes / spread(begin) * frac;
  }
  a.arena = std::max(peak, forward);
  return a;
}

int inFlightOf(const Layout &l, int k) {
  int p = l.pp(), m = l.microBatches;
  if (l.schedule == "gpipe")
    return m;
  if (p <= 1)
    return 1;
  int f = std::min(m, p - k);
  if (l.schedule == "interleaved" && l.virtualStages > 1)
    f = static_cast<int>(
        std::ceil(f * (1.0 + double(p - 1) / (double(p) * l.virtualStages))));
  return std::min(m, f);
}

} // namespace

int Layout::tp() const {
  int t = 1;
  for (const StagePlan &s : stages)
    if (std::any_of(s.split.begin(), s.split.end(), [](char c) { return c; }))
      t = std::max(t, s.devices);
  return t;
}

int Layout::worldSize() const {
  int s = 0;
  for (const StagePlan &st : stages)
    s += st.devices;
  return s * dp;
}

namespace {

/// `3/1/1/1`; with more than 8 values, runs of equal ones: `3 (x8)/1 (x8)`.
template <typename T> std::string formatRuns(const std::vector<T> &values) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j < values.size() && values[j] == values[i])
      ++j;
    if (values.size() <= 8)
      for (std::size_t k = i; k < j; ++k)
        parts.push_back(fmt::format("{:g}", double(values[k])));
    else
      parts.push_back(j - i > 1
                          ? fmt::format("{:g} (x{})", double(values[i]), j - i)
                          : fmt::format("{:g}", double(values[i])));
    i = j;
  }
  return fmt::format("{}", fmt::join(parts, "/"));
}

} // namespace

std::string Layout::describe() const {
  std::string s =
      fmt::format("dp={} tp={} pp={} m={}", dp, tp(), pp(), microBatches);
  if (!replicaMicroBatches.empty())
    s += fmt::format(" (per replica {})", formatRuns(replicaMicroBatches));
  if (batchBlocks)
    s += fmt::format(" (batch blocks {})", formatRuns(batchShares));
  if (pp() > 1) {
    s += " " + schedule;
    if (virtualStages > 1)
      s += fmt::format(" v={}", virtualStages);
    s += stageMajor ? " stage-major" : " pipeline-major";
  }
  return s;
}

std::string shoal::planner::formatShares(const std::vector<double> &shares) {
  return formatRuns(shares);
}

std::string shoal::planner::sharesNotCompiled(const Layout &l) {
  if (l.pp() > 1)
    return "uneven batch shares are compiled for one stage, not for "
           "pipelines; every replica gets an equal part";
  if (!l.stages.empty() && l.stages.front().devices > 1)
    return "uneven batch shares are compiled for replicas of one device, not "
           "with tensor parallelism; every replica gets an equal part";
  return "uneven batch shares are not compiled with ZeRO (their program is "
         "one replica's); every replica gets an equal part";
}

std::string shoal::planner::formatBytes(double bytes) {
  if (bytes >= kGiB)
    return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (bytes >= 1024.0 * 1024.0)
    return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

void shoal::planner::placeRanks(Layout &l, const std::vector<int> &order) {
  if (!l.stageMajor || l.stages.size() <= 1) {
    int total = 0;
    for (const StagePlan &s : l.stages)
      total += s.devices;
    int off = 0;
    for (StagePlan &s : l.stages) {
      s.offset = off;
      s.stride = total;
      off += s.devices;
    }
    return;
  }
  std::vector<int> o = order;
  if (o.empty()) {
    o.resize(l.stages.size());
    std::iota(o.begin(), o.end(), 0);
  }
  int start = 0;
  for (int k : o) {
    l.stages[k].offset = start;
    l.stages[k].stride = l.stages[k].devices;
    start += l.dp * l.stages[k].devices;
  }
}

void shoal::planner::evaluate(Layout &l, const ModelProfile &profile,
                              const Cluster &cluster, const CostModel &cost,
                              const PlanOptions &options) {
  const int p = l.pp(), m = l.microBatches, dp = l.dp;
  const double batch = profile.stepBatch();
  std::vector<double> shares = l.batchShares;
  if (shares.size() != static_cast<std::size_t>(dp))
    shares.assign(dp, batch / dp);
  // Compiled uneven shares: replica i runs counts[i] micro-batches of
  // microSamples samples each.
  const bool counts = p == 1 && l.replicaMicroBatches.size() == std::size_t(dp);
  double microSamples = batch / m / dp;
  int mostMicroBatches = m;
  if (counts) {
    int total = 0;
    mostMicroBatches = 0;
    for (int c : l.replicaMicroBatches) {
      total += c;
      mostMicroBatches = std::max(mostMicroBatches, c);
    }
    microSamples = batch / total;
  }
  auto microBatchesOf = [&](int i) {
    return counts ? l.replicaMicroBatches[i] : m;
  };
  auto microFrac = [&](int i) {
    return (counts ? microSamples : shares[i] / m) / profile.batch;
  };
  const StepKind step = options.step;
  const double v = l.schedule == "interleaved" ? l.virtualStages : 1;

  // Per stage and replica: one micro-batch's time. Replicas on the same kind
  // of devices with the same share are computed once.
  std::vector<std::vector<RangeTime>> t(p, std::vector<RangeTime>(dp));
  l.tpSeconds = 0;
  // Per stage: the parameters each of its ranks holds (tp-sharded weights
  // divided), and every rank of its replicas.
  const double bpp = options.fp32Weights ? 4 : bytesPerParam(options.precision);
  std::vector<double> stageParams(p, 0);
  std::vector<std::vector<int>> stageRanks(p);
  for (int k = 0; k < p; ++k) {
    const StagePlan &s = l.stages[k];
    for (int j = s.begin; j < s.end; ++j)
      stageParams[k] +=
          profile.ops[j].params /
          (s.split[j - s.begin] && profile.ops[j].tpSharded ? s.devices : 1);
    for (int i = 0; i < dp; ++i)
      for (int r : replicaRanks(s, i))
        stageRanks[k].push_back(r);
  }
  for (int k = 0; k < p; ++k) {
    StagePlan &s = l.stages[k];
    std::map<std::string, RangeTime> memo;
    s.seconds = s.tpSeconds = 0;
    for (int i = 0; i < dp; ++i) {
      std::vector<int> ranks = replicaRanks(s, i);
      std::string key = fmt::format("{}", microFrac(i));
      for (int r : ranks)
        key += fmt::format(",{}", groupId(cluster, r));
      key += cluster.nodeOf(ranks.front()) == cluster.nodeOf(ranks.back())
                 ? "|node"
                 : "|span";
      auto it = memo.find(key);
      if (it == memo.end()) {
        double frac = microFrac(i);
        std::vector<std::pair<int, int64_t>> shards;
        for (std::size_t t = 0; t < s.shardWeights.size(); ++t)
          shards.push_back({ranks[t], s.shardWeights[t]});
        RangeTime rt =
            rangeTime(profile, s.begin, s.end, s.split, s.begin, s.devices,
                      frac, slowestRank(ranks, cluster, options.precision),
                      ranks, cost, options, shards);
        it = memo.emplace(key, rt).first;
      }
      t[k][i] = it->second;
      // Training: each micro-batch's weight gradients go into the step's
      // sum (the executor copies the first and adds the others, at 2 and
      // 3 times their bytes) when they are summed over micro-batches or
      // all-reduced over replicas; per micro-batch, on average.
      int width = s.split.front() ? 1 : s.devices;
      int mi = microBatchesOf(i);
      if (training(step) && profile.hasBackward && (mi > 1 || dp * width > 1)) {
        int slowest = slowestRank(ranks, cluster, options.precision);
        double bytes = stageParams[k] * bpp;
        t[k][i].compute +=
            cost.opSeconds(slowest, 0, 2.0 / mi * bytes, OpClass::Copy) +
            cost.opSeconds(slowest, 0, 3.0 * (mi - 1) / mi * bytes,
                           OpClass::Elementwise);
      }
      double total = t[k][i].compute + t[k][i].tp;
      if (total > s.seconds) {
        s.seconds = total;
        s.tpSeconds = it->second.tp;
      }
    }
  }

  // Pipelines: fill and drain plus m - 1 steady steps of the slowest stage
  // (the steady step of a stage is at least its incoming transfer).
  l.stepSeconds = l.computeSeconds = l.bubbleSeconds = l.p2pSeconds = 0;
  double passes = training(step) ? 2 : 1; // activations, then gradients
  int worst = 0; // the replica whose step is the longest
  for (int i = 0; i < dp; ++i) {
    double slowest = 0, sum = 0, p2p = 0, tpc = 0;
    for (int k = 0; k < p; ++k) {
      double tk = t[k][i].compute + t[k][i].tp;
      double in = 0, busy = 0;
      if (k > 0) {
        const OpCost &edge = profile.ops[l.stages[k].begin - 1];
        double frac = microFrac(i);
        int src = rankOf(l.stages[k - 1], i, 0),
            dst = rankOf(l.stages[k], i, 0);
        double once = cost.sendRecvSeconds(src, dst, edge.cutBytes * frac);
        in = passes * v * once;
        // Sends are asynchronous: the link's latency overlaps the next
        // micro-batch, its bandwidth does not.
        busy = passes * v * (once - cost.sendRecvSeconds(src, dst, 0));
      }
      p2p += in;
      slowest = std::max(slowest, std::max(tk, busy));
      sum += tk;
      tpc += t[k][i].tp;
    }
    double total;
    int mi = microBatchesOf(i);
    if (v > 1)
      total = (mi + double(p - 1) / v) * slowest + p2p;
    else
      total = (mi - 1) * slowest + sum + p2p;
    if (total > l.stepSeconds) {
      worst = i;
      l.stepSeconds = total;
      l.computeSeconds = mi * slowest;
      l.p2pSeconds = p2p;
      l.bubbleSeconds = std::max(0.0, total - l.computeSeconds - p2p);
      l.tpSeconds = tpc * mi;
    }
  }

  // Gradients of replicated weights: one all-reduce per stage after the
  // pipeline drains (not overlapped), then the optimizer's update.
  l.dpSeconds = l.optimizerSeconds = 0;
  double tail = 0;
  l.fits = true;
  for (int k = 0; k < p; ++k) {
    StagePlan &s = l.stages[k];
    const double params = stageParams[k];
    const std::vector<int> &all = stageRanks[k];
    double live = 0, work = 0;
    for (int j = s.begin; j < s.end; ++j) {
      const OpCost &op = profile.ops[j];
      live = std::max(live, op.liveBytes / s.devices);
      work = std::max(work, op.bytes / s.devices);
    }
    double reduce = 0, update = 0;
    if (training(step) && dp * (s.split.front() ? 1 : s.devices) > 1) {
      std::vector<int> group;
      int width = s.split.front() ? 1 : s.devices;
      for (int i = 0; i < dp; ++i)
        for (int w = 0; w < width; ++w)
          group.push_back(rankOf(s, i, w));
      // In buckets of kGradBucketBytes, as the executor packs them.
      double bytes = params * bpp;
      double buckets = std::max(1.0, std::ceil(bytes / kGradBucketBytes));
      reduce = buckets * cost.allReduceSeconds(group, bytes / buckets);
    }
    if (training(step) && profile.hasBackward) {
      // AdamW over this rank's parameters (its ZeRO block).
      int zeroRanks = dp * (s.split.front() ? 1 : s.devices);
      double mine = options.zeroStage >= 1 ? params / zeroRanks : params;
      update = cost.opSeconds(slowestRank(all, cluster, options.precision), 0,
                              mine * ModelProfile::optimizerBytesPerParam,
                              OpClass::Elementwise);
    }
    l.dpSeconds = std::max(l.dpSeconds, reduce);
    l.optimizerSeconds = std::max(l.optimizerSeconds, update);
    // A stage's all-reduce and update start when its own last backward
    // ends: before the pipeline drains through the stages ahead of it.
    double drain = 0;
    if (training(step))
      for (int j = 0; j < k; ++j) {
        // Its backward and the tensor-parallel all-reduces in it (all but
        // the forward's one per op).
        drain += t[j][worst].backward +
                 t[j][worst].tp * (1 - 1 / tpCommFactor(step));
        const OpCost &edge = profile.ops[l.stages[j + 1].begin - 1];
        drain += v * cost.sendRecvSeconds(rankOf(l.stages[j + 1], worst, 0),
                                          rankOf(l.stages[j], worst, 0),
                                          edge.cutBytes * microFrac(worst));
      }
    tail = std::max(tail, reduce + update - drain);
    // Memory on the replica with the largest share.
    double frac = counts ? microSamples / profile.batch
                         : *std::max_element(shares.begin(), shares.end()) / m /
                               profile.batch;
    MemoryInputs in;
    in.parameters = params;
    in.bytesPerParam = bpp;
    in.training = training(step);
    in.optimizer = in.training ? MemoryInputs::Optimizer::Adam
                               : MemoryInputs::Optimizer::None;
    in.zeroStage = options.zeroStage;
    // ZeRO shards over the data-parallel group: the replicas and, in a
    // replicate stage, its own devices.
    in.zeroRanks = dp * (s.split.front() ? 1 : s.devices);
    in.microBatches = mostMicroBatches;
    s.inFlight = training(step) ? inFlightOf(l, k) : 1;
    // Training: the step walked op by op (trainingActivations); one
    // program holds everything in its arena.
    if (step == StepKind::Forward) {
      in.activationBytes = live * frac;
    } else {
      // Micro-batches (or stages) make the forward and the backward tasks
      // of their own.
      bool tasks = p > 1 || mostMicroBatches > 1;
      bool summed = mostMicroBatches > 1 || in.zeroRanks > 1;
      StageActivations a =
          trainingActivations(profile, s, k, p, step, tasks, summed, bpp, frac);
      in.activationBytes = tasks ? a.keptPerMicroBatch : 0;
      in.transientBytes = a.arena;
    }
    in.inFlight = s.inFlight;
    in.workspaceBytes = work * frac;

    s.memory = estimateMemory(in);
    s.memoryBytes = s.memory.total();
    s.capacityBytes = capacityOf(all, cluster);
    s.device = cluster.groupOf(slowestRank(all, cluster, options.precision))
                   .device.name;
    if (s.memoryBytes > s.capacityBytes)
      l.fits = false;
  }
  l.stepSeconds += tail;

  double flops = 0;
  for (const OpCost &op : profile.ops)
    flops += op.flops;
  l.flopsPerStep = flops * profile.batchScale * stepFactor(step);
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

std::vector<int> cutEnds(const ModelProfile &profile) {
  std::vector<int> ends;
  for (std::size_t j = 0; j + 1 < profile.ops.size(); ++j)
    if (profile.ops[j].cutAfter)
      ends.push_back(j + 1);
  return ends;
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

namespace {

double peakMemory(const Layout &l, double *capacity = nullptr) {
  double worst = -1, mem = 0;
  for (const StagePlan &s : l.stages) {
    double f = s.memoryBytes / s.capacityBytes;
    if (f > worst) {
      worst = f;
      mem = s.memoryBytes;
      if (capacity)
        *capacity = s.capacityBytes;
    }
  }
  return mem;
}

std::string reasons(const Layout &a, const Layout &b) {
  struct Part {
    const char *name;
    double a, b;
  };
  Part parts[] = {{"compute", a.computeSeconds - a.tpSeconds,
                   b.computeSeconds - b.tpSeconds},
                  {"pipeline bubble", a.bubbleSeconds, b.bubbleSeconds},
                  {"tensor-parallel all-reduces", a.tpSeconds, b.tpSeconds},
                  {"stage-to-stage transfers", a.p2pSeconds, b.p2pSeconds},
                  {"gradient all-reduce", a.dpSeconds, b.dpSeconds}};
  std::sort(std::begin(parts), std::end(parts),
            [](auto &x, auto &y) { return (x.b - x.a) > (y.b - y.a); });
  std::string s;
  for (const Part &p : parts) {
    double d = p.b - p.a;
    if (d <= 1e-3 * b.stepSeconds)
      continue;
    if (!s.empty())
      s += ", ";
    s += fmt::format("{} {:.3g} ms less", p.name, d * 1e3);
  }
  std::string worse;
  for (const Part &p : parts) {
    double d = p.a - p.b;
    if (d <= 1e-3 * b.stepSeconds)
      continue;
    if (!worse.empty())
      worse += ", ";
    worse += fmt::format("{} {:.3g} ms more", p.name, d * 1e3);
  }
  if (s.empty())
    s = "the same time";
  if (!worse.empty())
    s += "; it pays " + worse;
  return s;
}

} // namespace

std::vector<std::string>
shoal::planner::explainChanges(const Layout &asIs, const Layout &chosen,
                               const Cluster &cluster,
                               const std::vector<std::string> &names) {
  std::vector<std::string> out;
  if (asIs.pp() != chosen.pp())
    return out;
  auto name = [&](int k) {
    return k < static_cast<int>(names.size())
               ? fmt::format("stage {} '{}'", k, names[k])
               : fmt::format("stage {}", k);
  };
  // A stage's ranks (every replica's) and their device kinds.
  auto ranksOf = [&](const Layout &l, const StagePlan &s) {
    std::vector<int> r;
    for (int i = 0; i < l.dp; ++i)
      for (int x : replicaRanks(s, i))
        r.push_back(x);
    std::sort(r.begin(), r.end());
    return r;
  };
  auto kindsOf = [&](const std::vector<int> &ranks) {
    std::vector<std::string> kinds;
    for (int r : ranks) {
      const std::string &k = cluster.groupOf(r).device.name;
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end())
        kinds.push_back(k);
    }
    return kinds;
  };
  auto where = [&](const std::vector<int> &ranks) {
    bool contiguous =
        ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    std::string r;
    if (ranks.size() == 1)
      r = fmt::format("rank {}", ranks.front());
    else if (contiguous)
      r = fmt::format("ranks {}-{}", ranks.front(), ranks.back());
    else
      for (std::size_t i = 0; i < ranks.size(); ++i)
        r += i == 0 ? fmt::format("ranks {}", ranks[i])
                    : fmt::format(",{}", ranks[i]);
    std::string kinds;
    for (const std::string &k : kindsOf(ranks))
      kinds += (kinds.empty() ? "" : " + ") + k;
    double least = capacityOf(ranks, cluster), most = least;
    for (int x : ranks)
      most = std::max(most, capacityOf({x}, cluster));
    return fmt::format("{} ({}, {}{})", r, kinds, formatBytes(least),
                       ranks.size() == 1 ? ""
                       : most > least    ? " the smallest"
                                         : " each");
  };
  for (int k = 0; k < chosen.pp(); ++k) {
    const StagePlan &a = asIs.stages[k], &c = chosen.stages[k];
    if (a.begin != c.begin || a.end != c.end)
      out.push_back(fmt::format(
          "{}: ops {}-{} (annotated {}-{}), so that every stage takes the "
          "same time on its own devices: {:.4g} ms per micro-batch (was "
          "{:.4g})",
          name(k), c.begin, c.end - 1, a.begin, a.end - 1, c.seconds * 1e3,
          a.seconds * 1e3));
    std::vector<int> was = ranksOf(asIs, a), now = ranksOf(chosen, c);
    if (was == now)
      continue;
    bool fitted = a.memoryBytes <= a.capacityBytes,
         fits = c.memoryBytes <= c.capacityBytes;
    std::string why;
    if (!fitted && fits)
      why =
          fmt::format("it needs {}, more than the {} it had",
                      formatBytes(c.memoryBytes), formatBytes(a.capacityBytes));
    else if (kindsOf(was).size() > 1 && kindsOf(now).size() == 1)
      why = "its replicas run on one kind of device, as fast as each other";
    else
      why = fmt::format("it needs {} with {} micro-batch(es) in flight; the "
                        "stages that keep the most sit on the devices with "
                        "the most memory",
                        formatBytes(c.memoryBytes), c.inFlight);
    out.push_back(fmt::format("{}: on {} in place of {}: {}", name(k),
                              where(now), where(was), why));
  }
  if (chosen.batchShares != asIs.batchShares && !chosen.batchShares.empty()) {
    std::string shares = formatRuns(chosen.batchShares);
    if (chosen.batchBlocks)
      out.push_back(fmt::format(
          "batch shares per replica {} in proportion to speed: each replica "
          "runs its share as one block of the batch",
          shares));
    if (!chosen.replicaMicroBatches.empty()) {
      int total = 0;
      for (int c : chosen.replicaMicroBatches)
        total += c;
      out.push_back(fmt::format(
          "batch shares per replica {} in proportion to speed: the step's {} "
          "micro-batches of {:g} samples dealt out as {}",
          shares, total,
          chosen.batchShares.front() / chosen.replicaMicroBatches.front(),
          formatRuns(chosen.replicaMicroBatches)));
    }
  }
  for (std::size_t k = 0; k < chosen.stages.size(); ++k) {
    const StagePlan &s = chosen.stages[k];
    if (s.shardWeights.empty() ||
        (k < asIs.stages.size() &&
         asIs.stages[k].shardWeights == s.shardWeights))
      continue;
    std::vector<double> w(s.shardWeights.begin(), s.shardWeights.end());
    out.push_back(fmt::format(
        "{}: shards by speed per device {} (per mille of each split "
        "dimension, rounded to its multiple): each device's part of the split "
        "ops {}",
        name(static_cast<int>(k)), formatRuns(w),
        s.shardsBeyondSpeed
            ? "by its speed, the faster ones taking more than their speed's "
              "share so that the ops every device does whole (not split) end "
              "at the same time too"
            : "in proportion to its speed"));
  }
  if (!chosen.uncompiledShares.empty())
    out.push_back(fmt::format(
        "not compiled: batch shares per replica {} in proportion to speed "
        "would take {:.4f} ms per step; {}",
        formatRuns(chosen.uncompiledShares), chosen.uncompiledStepSeconds * 1e3,
        sharesNotCompiled(chosen)));
  return out;
}

std::string shoal::planner::explain(const std::vector<Layout> &ranked,
                                    const Cluster &cluster, int top) {
  std::string out;
  std::map<std::string, int> types;
  for (int r = 0; r < cluster.numDevices(); ++r)
    types[cluster.groupOf(r).device.name]++;
  std::string devs;
  for (auto &[name, n] : types)
    devs += fmt::format("{}{} x {}", devs.empty() ? "" : " + ", n, name);
  int fitting = std::count_if(ranked.begin(), ranked.end(),
                              [](const Layout &l) { return l.fits; });
  out += fmt::format("planner: {} ({} devices); {} layouts, {} fit in memory\n",
                     devs, cluster.numDevices(), ranked.size(), fitting);
  out +=
      fmt::format("{:>3}  {:<52} {:>10} {:>12} {:>7} {:>22}\n", "#", "layout",
                  "step (ms)", "TFLOP/s/dev", "bubble", "memory / capacity");
  int shown = 0;
  for (const Layout &l : ranked) {
    if (shown >= top)
      break;
    double cap = 0, mem = peakMemory(l, &cap);
    double tflops = l.flopsPerStep / l.stepSeconds / l.worldSize() / 1e12;
    out += fmt::format("{:>3}  {:<52} {:>10.4g} {:>12.3g} {:>6.1f}% {:>22}{}\n",
                       shown + 1, l.describe(), l.stepSeconds * 1e3, tflops,
                       100 * l.bubbleSeconds / l.stepSeconds,
                       formatBytes(mem) + " / " + formatBytes(cap),
                       l.fits ? "" : "  does not fit");
    ++shown;
  }
  if (ranked.empty() || !ranked.front().fits) {
    out += "no layout fits in memory\n";
    return out;
  }
  const Layout &w = ranked.front();
  out += fmt::format("chosen: {}, {:.4g} ms per step\n", w.describe(),
                     w.stepSeconds * 1e3);
  if (ranked.size() > 1 && ranked[1].fits)
    out += fmt::format("  against #2 ({}): {}\n", ranked[1].describe(),
                       reasons(w, ranked[1]));
  // The best layout of each other family (another pp or tp).
  std::map<std::pair<int, int>, const Layout *> family;
  for (const Layout &l : ranked)
    if (l.fits && !family.count({l.tp(), l.pp()}))
      family[{l.tp(), l.pp()}] = &l;
  int lines = 0;
  for (auto &[key, l] : family) {
    if (l == &w || (ranked.size() > 1 && l == &ranked[1]) || lines >= 3)
      continue;
    out += fmt::format("  against the best with tp={} pp={} ({}, {:.4g} ms): "
                       "{}\n",
                       key.first, key.second, l->describe(),
                       l->stepSeconds * 1e3, reasons(w, *l));
    ++lines;
  }
  int refused = ranked.size() - fitting;
  if (refused > 0) {
    const Layout *fast = nullptr;
    for (const Layout &l : ranked)
      if (!l.fits && (!fast || l.stepSeconds < fast->stepSeconds))
        fast = &l;
    double cap = 0, mem = peakMemory(*fast, &cap);
    out += fmt::format("  {} layouts do not fit; the fastest of them ({}, "
                       "{:.4g} ms) needs {} on a device with {}\n",
                       refused, fast->describe(), fast->stepSeconds * 1e3,
                       formatBytes(mem), formatBytes(cap));
  }
  return out;
}
