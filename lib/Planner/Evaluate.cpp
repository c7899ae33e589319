//===- Evaluate.cpp - The planner's model of a layout -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// evaluate(): a layout's predicted step time (per stage and replica, op by
// op with the cost model; the pipeline's fill, drain and transfers; the
// gradient all-reduces and the optimizer) and each stage's memory.
//
//===----------------------------------------------------------------------===//

#include "SearchInternal.h"
#include "shoal/Planner/Search.h"
#include "shoal/Schedule/Schedule.h"
#include "shoal/Schema/UnevenBlocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

using namespace shoal::planner;
using namespace shoal::planner::detail;

namespace {

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
    return 3; // the attention cores again: a few percent (rangeTime)
  }
  return 1;
}

/// Tensor-parallel all-reduces per forward one, for profiles without a
/// backward (ModelProfile::hasBackward false): the backward has about one
/// for each (the input gradient of a column-parallel product);
/// recomputation redoes the forward ones. With a backward, rangeTime
/// counts the backward's own (OpCost::tpBackwardAllReduceBytes, the loss's
/// tpLossAllReduceBytes).
double tpCommFactor(StepKind k) {
  return k == StepKind::Forward                                  ? 1
         : k == StepKind::Train || k == StepKind::TrainSelective ? 2
                                                                 : 3;
}

bool training(StepKind k) { return k != StepKind::Forward; }

double bytesPerParam(Precision p) {
  return p == Precision::BF16 || p == Precision::FP16 ? 2 : 4;
}

int rankOf(const StagePlan &s, int replica, int t) {
  return s.offset + replica * s.stride + t;
}

} // namespace

namespace shoal::planner::detail {

long groupId(const Cluster &cluster, int rank) {
  return &cluster.groupOf(rank) - cluster.groups.data();
}

std::vector<int> replicaRanks(const StagePlan &s, int replica) {
  std::vector<int> r(s.devices);
  for (int t = 0; t < s.devices; ++t)
    r[t] = rankOf(s, replica, t);
  return r;
}

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

/// Mixed-precision training: float32 weights, products in a 16-bit type.
bool mixedPrecision(const PlanOptions &options) {
  return options.fp32Weights && (options.precision == Precision::BF16 ||
                                 options.precision == Precision::FP16);
}

/// The whole model in that 16-bit type (shoal-mixed-precision's default):
/// 16-bit activations, transfers and tensor-parallel all-reduces.
bool wholeModelLow(const PlanOptions &options) {
  return mixedPrecision(options) && options.lowActivations;
}

RangeTime rangeTime(const ModelProfile &profile, int begin, int end,
                    const std::vector<char> &split, int splitBase, int devices,
                    double frac, int rank, const std::vector<int> &group,
                    const CostModel &cost, const PlanOptions &options,
                    const std::vector<std::pair<int, int64_t>> &shards) {
  const StepKind step = options.step;
  // Mixed precision (float32 weights, products in a 16-bit type): every
  // product reads its operands through casts and casts its result back
  // (4 + 2 bytes per element each), and moves 16-bit values itself.
  // bf16-autocast: products cast around; the default: the whole model low.
  const bool lowModel = wholeModelLow(options);
  const bool mixed = mixedPrecision(options) && !lowModel;
  RangeTime t;
  double forward = 0, backward = 0, gathers = 0;
  double forwardTp = 0, backwardTp = 0, lossTp = 0;
  // The op's part of the profile's work: `f` of what divides over the
  // group, `fw` of what stays whole on each of its ranks (the two differ
  // under tensor parallelism), `wf` of its weights (a sharded weight's
  // part; the batch does not divide them).
  struct Parts {
    double f, fw, wf, rowsF;
  };
  // The whole model low: a product reads each weight through a cast
  // (float32 in, 16-bit out), made once per step and shared by every
  // micro-batch's forward and backward (rt::weightCopies): RangeTime::casts.
  auto weightCastOn = [&](int r, const OpPiece &p, const Parts &x) {
    if (!lowModel || p.castWeightElements <= 0)
      return 0.0;
    double elements = p.castWeightElements * x.wf;
    return cost.opSeconds(r, elements, elements * 6, OpClass::Elementwise);
  };
  auto secondsOn = [&](int r, const OpPiece &p, const Parts &x) {
    double divided = p.bytes - p.weightBytes - p.wholeBytes;
    double moved = divided * x.f + p.wholeBytes * x.fw + p.weightBytes * x.wf;
    double s = cost.opSeconds(
        r, p.flops * (p.hasSplit ? x.f : x.fw),
        (mixed && p.rows > 0) || lowModel ? moved / 2 : moved,
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
    double casts = 0;
    for (const auto &[r, x] : parts) {
      double a = secondsOn(r, op, x), b = 0;
      casts = std::max(casts, weightCastOn(r, op, x));
      // The backward as shoal-autodiff builds it (the ops of the gradient
      // rule), with the forward op's share of the work.
      if (training(step) && profile.hasBackward) {
        for (const OpPiece &p : op.backward)
          b += secondsOn(r, p, x);
        // Selective recomputation runs the attention cores' ops again
        // before their backward (shoal-recompute).
        if (step == StepKind::TrainSelective && op.selectiveRecompute)
          b += a;
      }
      since[r].first += a;
      since[r].second += b;
    }
    t.casts += casts;
    if (isSplit && devices > 1 && op.tpAllReduceBytes > 0) {
      flush();
      // The runtime reduces the product's result where it lies
      // (rt::allReducesInPlace). (16-bit activations when the whole model
      // is low.)
      double bytes = op.tpAllReduceBytes * frac * (lowModel ? 0.5 : 1.0);
      forwardTp += cost.allReduceSeconds(group, bytes);
    }
    // The backward's own: a column-parallel product's input gradient, and
    // a vocabulary-parallel loss's statistics (forward and backward).
    if (isSplit && devices > 1 && training(step) && profile.hasBackward) {
      if (op.tpBackwardAllReduceBytes > 0)
        backwardTp += cost.allReduceSeconds(
            group, op.tpBackwardAllReduceBytes * frac * (lowModel ? 0.5 : 1.0));
      for (double b : op.tpLossAllReduceBytes)
        lossTp += cost.allReduceSeconds(group, b * frac);
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
  if (!training(step) || !profile.hasBackward) {
    t.tp = forwardTp * tpCommFactor(step) + gathers;
    t.tpBackward = t.tp - forwardTp - gathers;
  } else {
    // The forward's all-reduces, the backward's own, and under full
    // recomputation the forward's again in the backward.
    t.tpBackward = backwardTp + lossTp +
                   (step == StepKind::TrainRecompute ? forwardTp : 0);
    t.tp = forwardTp + lossTp + t.tpBackward + gathers;
  }
  return t;
}

int inFlightOf(const Layout &l, int k) {
  int p = l.pp(), m = l.microBatches;
  if (l.schedule == "gpipe")
    return m;
  if (p <= 1)
    return 1;
  if (l.schedule == "interleaved" && l.virtualStages > 1) {
    // Megatron's interleaved 1F1B: stage k runs 2 (p - k - 1) + (v - 1) p
    // chunk passes forward before its first backward, so that many plus
    // one hold their inputs at once (p (1 + (p - 1) / (p v)) micro-batches
    // on stage 0, (v - 1) p / v + 1 / v on the last); counted here in whole
    // micro-batches of the stage's v chunks, rounded up.
    const int v = l.virtualStages;
    int passes = std::min(m * v, 2 * (p - k - 1) + (v - 1) * p + 1);
    return std::min(m, (passes + v - 1) / v);
  }
  return std::min(m, p - k);
}

} // namespace shoal::planner::detail

namespace {

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
/// Which weight gradients are temporaries before their sum: none (an
/// all-reduce over the replicas sums in place), those that are not matrix
/// products (over micro-batches a product sums itself into the step's
/// sum), or all (ZeRO's reduce-scatter reads a temporary).
enum class GradTemporaries { None, NotProducts, All };

struct StageActivations {
  double keptPerMicroBatch = 0;
  /// The same per model chunk of the stage (interleaved: its v chunks,
  /// in model order; one otherwise).
  std::vector<double> keptPerChunk;
  double arena = 0;
};

/// Chunk c of `chunks` for each op of [begin, end): the stage's layers (the
/// profile's, from node names) in `chunks` runs of consecutive layers, as
/// Megatron-LM cuts a stage into model chunks; ops outside the layers join
/// the chunk before them (the first chunk at the start). All 0 when there
/// is one chunk or no layers.
std::vector<int> chunkOfOps(const ModelProfile &profile, int begin, int end,
                            int chunks) {
  std::vector<int> chunk(end - begin, 0);
  int first = -1, last = -1;
  for (int j = begin; j < end; ++j)
    if (int l = profile.ops[j].layer; l >= 0) {
      first = first < 0 ? l : std::min(first, l);
      last = std::max(last, l);
    }
  if (chunks <= 1 || first < 0)
    return chunk;
  const int layers = last - first + 1;
  for (int j = begin, c = 0; j < end; ++j) {
    if (int l = profile.ops[j].layer; l >= 0)
      c = std::min(chunks - 1, (l - first) * chunks / layers);
    chunk[j - begin] = c;
  }
  return chunk;
}

StageActivations trainingActivations(const ModelProfile &profile,
                                     const StagePlan &s, int k, int p,
                                     StepKind step, bool tasks,
                                     GradTemporaries weightGradTemporary,
                                     double bytesPerParam, double frac,
                                     int chunks = 1) {
  const int begin = s.begin, end = s.end;
  // Interleaved: each chunk receives its input from another stage and
  // keeps it, and sends its result on; what a chunk keeps is counted per
  // chunk (the schedule holds different numbers of each).
  const std::vector<int> chunk = chunkOfOps(profile, begin, end, chunks);
  auto chunkOf = [&](int j) { return chunk[j - begin]; };
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
  a.keptPerChunk.assign(std::max(1, chunks), 0.0);
  double keptBefore = 0, recomputed = 0, peak = 0, forward = 0;
  // What the segment's recomputed results hold at the backward of each op
  // j: a result of op i < j is held until the backward of its last
  // gradient reader r (OpCost::savedUntil) has run; the backward runs last
  // to first, so it is held at j when r <= j. `joins[t - begin]`: the bytes
  // held from op t on (t = max(r, i + 1)); `touched`: the slots written in
  // the current segment, cleared when the next begins.
  std::vector<double> joins(end - begin + 1, 0.0);
  std::vector<int> touched;
  std::vector<char> redone(end - begin, 0); // op j's results recomputed
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
    if (j > begin && segmentOf(j) != segmentOf(j - 1)) {
      recomputed = 0;
      for (int t : touched)
        joins[t] = 0;
      touched.clear();
    }
    recomputed += joins[j - begin];
    // The gradients alive at op j's backward: the mirror of the values
    // that have one alive on either side of j in the forward.
    double before = j > begin ? profile.ops[j - 1].liveBytes
                              : (begin > 0 ? profile.ops[begin - 1].liveBytes
                                           : op.liveBytes);
    double gradients = (before + op.outBytes) / devices * frac;
    if (weightGradTemporary == GradTemporaries::All ||
        (weightGradTemporary == GradTemporaries::NotProducts && op.rows <= 0))
      gradients += op.params / shard(j) * bytesPerParam;
    // A recomputed operand that dies inside op j's backward leaves its
    // place to its gradient (OpCost::reusedBytes).
    if (step == StepKind::TrainRecompute && op.reusedFrom >= begin &&
        op.reusedFrom < j && redone[op.reusedFrom - begin] &&
        segmentOf(op.reusedFrom) == segmentOf(j))
      gradients -= op.reusedBytes / spread(op.reusedFrom) * frac;
    double held = recomputed + gradients + (tasks ? 0 : keptBefore);
    peak = std::max(peak, held);
    forward = std::max(forward, op.liveBytes / devices * frac);
    keptBefore += keep;
    // The last op of a chunk: its result is the next chunk's input, which
    // that chunk keeps.
    bool chunkEnd = j + 1 < end && chunkOf(j + 1) != chunkOf(j);
    a.keptPerChunk[chunkEnd ? chunkOf(j + 1) : chunkOf(j)] += keep;
    if (step != StepKind::Train && redo > 0) {
      redone[j - begin] = 1;
      // The result by result split of `redo` (in proportion to `saved`).
      double scale = redo / std::max(saved, 1e-30);
      for (auto [until, bytes] : op.savedUntil) {
        int at = std::max(until, j + 1);
        if (at >= end)
          continue;
        joins[at - begin] += bytes / spread(j) * frac * scale;
        touched.push_back(at - begin);
      }
      if (op.savedUntil.empty())
        recomputed += redo;
    }
  }
  a.keptPerMicroBatch = keptBefore;
  // The value a later stage receives is kept until its backward.
  if (begin > 0) {
    const OpCost &in = profile.ops[begin - 1];
    a.keptPerMicroBatch += in.cutBytes / spread(begin) * frac;
    a.keptPerChunk[0] += in.cutBytes / spread(begin) * frac;
  }
  a.arena = std::max(peak, forward);
  return a;
}

/// The most bytes a stage running `order` keeps at once: each chunk pass
/// whose forward has run and whose backward has not holds its chunk's
/// `keptPerChunk`.
double keptAtPeak(const std::vector<shoal::sched::Step> &order,
                  const std::vector<double> &keptPerChunk) {
  double held = 0, peak = 0;
  for (const shoal::sched::Step &st : order) {
    if (st.chunk < 0 || st.chunk >= static_cast<int>(keptPerChunk.size()))
      continue;
    held += st.backward ? -keptPerChunk[st.chunk] : keptPerChunk[st.chunk];
    peak = std::max(peak, held);
  }
  return peak;
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

namespace {
/// Per stage of `l` (placed): whether the activations it receives go as
/// Megatron's scatter/gather (Layout::scatterGather). `bytesInto(k)`: the
/// bytes of one micro-batch's transfer into stage k from stage k - 1, as
/// evaluate() prices them.
std::vector<char>
decideScatterGather(const Layout &l, const CostModel &cost,
                    const std::function<double(int)> &bytesInto) {
  const int p = l.pp();
  std::vector<char> out(p, 0);
  for (int k = 0; k < p; ++k) {
    int n = k > 0 ? k - 1 : k + 1; // the neighbour it receives from
    if (n >= p)
      continue;
    const StagePlan &b = l.stages[k], &a = l.stages[n];
    const int t = b.devices;
    if (t <= 1 || a.devices != t || a.split.empty() || b.split.empty() ||
        a.sequenceParallel || b.sequenceParallel)
      continue;
    // The boundary between the two, and the transfer across it.
    int boundary = std::max(k, n);
    bool splitAtBoundary = k > n ? a.split.back() && b.split.front()
                                 : b.split.back() && a.split.front();
    double bytes = bytesInto(boundary);
    if (!splitAtBoundary || bytes <= 0)
      continue;
    int src = rankOf(a, 0, 0), dst = rankOf(b, 0, 0);
    std::vector<int> group = replicaRanks(b, 0);
    // Each transfer gets shorter by what the link no longer carries, and
    // the receivers all-gather at every micro-batch. Under 1F1B (and
    // interleaved) each stage's next step waits for its neighbour's
    // transfer, so every transfer is on the way: it pays when the shorter
    // transfer and the all-gather take less than the whole transfer. GPipe
    // runs each phase's micro-batches back to back, so the transfers hide
    // behind them but for the (p - 1) hops of the fill and the drain,
    // while the all-gather adds to every micro-batch.
    double gather = cost.allGatherSeconds(group, bytes);
    double saved = cost.sendRecvSeconds(src, dst, bytes) -
                   cost.sendRecvSeconds(src, dst, bytes / t) - gather;
    out[k] = l.schedule == "gpipe"
                 ? (p - 1) * saved > std::max(1, l.microBatches) * gather
                 : saved > 0;
  }
  return out;
}
} // namespace

void shoal::planner::evaluate(Layout &l, const ModelProfile &profile,
                              const Cluster &cluster, const CostModel &cost,
                              const PlanOptions &options) {
  const bool lowModel = wholeModelLow(options);
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
  // The interleaved schedule the compiler builds (its stages' orders), for
  // the chunk passes each stage holds at once.
  shoal::sched::Schedule schedule;
  const bool interleaved =
      l.schedule == "interleaved" && l.virtualStages > 1 && p > 1 &&
      shoal::sched::build(shoal::sched::Kind::Interleaved, p, l.microBatches,
                          l.virtualStages, /*forwardOnly=*/false, schedule)
          .empty();

  // Per stage and replica: one micro-batch's time. Replicas on the same kind
  // of devices with the same share are computed once.
  std::vector<std::vector<RangeTime>> t(p, std::vector<RangeTime>(dp));
  l.tpSeconds = 0;
  // Per stage: the parameters each of its ranks holds (tp-sharded weights
  // divided), and every rank of its replicas.
  const double bpp = options.fp32Weights ? 4 : bytesPerParam(options.precision);
  std::vector<double> stageParams(p, 0);
  // Of them, those of weights that no matrix product reads (norms, biases,
  // embeddings): their gradients are not products, which sum themselves
  // over micro-batches (rt::productsAccumulatingInPlace).
  std::vector<double> stageOtherParams(p, 0);
  // Of them, those every device of the stage holds whole (a replicate
  // stage's, a split stage's norms and row-parallel biases).
  std::vector<double> stageWholeParams(p, 0);
  // ZeRO's collectives, one per weight (a gradient's reduce-scatter) or
  // per read of a weight (ZeRO-3's gathers in the forward and the
  // backward): how many, and their parameters (per rank before a gather),
  // of the tp-sharded weights [0] and of those held whole [1].
  struct Collectives {
    double count[2] = {0, 0}, params[2] = {0, 0};
    void add(bool whole, int n, double elements) {
      count[whole] += n;
      params[whole] += elements;
    }
  };
  std::vector<Collectives> stageScatters(p), stageGathersF(p), stageGathersB(p);
  std::vector<std::vector<int>> stageRanks(p);
  for (int k = 0; k < p; ++k) {
    const StagePlan &s = l.stages[k];
    for (int j = s.begin; j < s.end; ++j) {
      const OpCost &op = profile.ops[j];
      bool sharded = s.split[j - s.begin] && op.tpSharded;
      double div = sharded ? s.devices : 1;
      double mine = op.params / div;
      stageParams[k] += mine;
      if (!sharded)
        stageWholeParams[k] += mine;
      if (op.rows <= 0)
        stageOtherParams[k] += mine;
      stageScatters[k].add(!sharded, op.weights, mine);
      stageGathersF[k].add(!sharded, op.weightReads, op.weightReadParams / div);
      stageGathersB[k].add(!sharded, op.backwardWeightReads,
                           op.backwardWeightReadParams / div);
    }
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
      // reduce-scattered (ZeRO-1/2: the whole gradient, scattered once per
      // step); per micro-batch, on average. One micro-batch's all-reduce
      // over the replicas sums in place, and over micro-batches a product
      // sums itself into the step's sum. ZeRO-3 scatters every
      // micro-batch's gradient and sums the blocks.
      int width = s.split.front() ? 1 : s.devices;
      int mi = microBatchesOf(i);
      bool zero = options.zeroStage >= 1 && dp * width > 1;
      bool blocks = zero && options.zeroStage >= 3;
      if (training(step) && profile.hasBackward &&
          (mi > 1 || (zero && !blocks))) {
        int slowest = slowestRank(ranks, cluster, options.precision);
        double bytes = (blocks ? (stageParams[k] - stageWholeParams[k]) / dp +
                                     stageWholeParams[k] / (dp * s.devices)
                        : zero ? stageParams[k]
                               : stageOtherParams[k]) *
                       bpp;
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
  // The transfer into stage k from stage k - 1: one micro-batch of the
  // activation that crosses (16-bit when the whole model is).
  auto bytesInto = [&](int k, int replica) {
    if (k <= 0 || k >= p)
      return 0.0;
    return profile.ops[l.stages[k].begin - 1].cutBytes * microFrac(replica) *
           (lowModel ? 0.5 : 1.0);
  };
  // (Not a column-split product's result: that crosses split already.)
  l.scatterGather = decideScatterGather(l, cost, [&](int k) {
    return profile.ops[l.stages[k].begin - 1].outSplit ? 0.0 : bytesInto(k, 0);
  });
  // The all-gather over stage k's tp group of `bytes` (replica i).
  auto gatherOn = [&](int k, int i, double bytes) {
    return cost.allGatherSeconds(replicaRanks(l.stages[k], i), bytes);
  };
  // ZeRO's collectives `c` of stage k, one weight each, at `b` bytes per
  // parameter: a weight's ZeRO group is what it is replicated over
  // (shoal-zero): the replicas for a tp-sharded weight, the replicas and
  // the stage's devices for one every device holds whole. Gathers run over
  // the group; a gradient's reduce-scatter over the ranks it is summed
  // over, and a split stage's devices (without sequence parallelism) each
  // compute a whole weight's gradient whole: it is scattered over the
  // replicas and sliced. (A ring's time is linear in its bytes: n of them
  // of B bytes in all take n times one of B / n.)
  enum class Zero { Gather, Scatter };
  auto zeroCollectives = [&](int k, const Collectives &c, double b, Zero kind) {
    const StagePlan &s = l.stages[k];
    const bool sliced =
        kind == Zero::Scatter && s.split.front() && !s.sequenceParallel;
    std::vector<int> replicas, all;
    for (int r = 0; r < dp; ++r)
      for (int w = 0; w < s.devices; ++w) {
        all.push_back(rankOf(s, r, w));
        if (w == 0)
          replicas.push_back(rankOf(s, r, w));
      }
    double seconds = 0;
    for (int whole = 0; whole < 2; ++whole)
      if (c.count[whole] > 0)
        seconds += c.count[whole] *
                   cost.allGatherSeconds(whole && !sliced ? all : replicas,
                                         c.params[whole] * b / c.count[whole]);
    return seconds;
  };
  // ZeRO-3: every micro-batch gathers the stage's weights over its ZeRO
  // group before each reader, in the forward, the backward and a full
  // recomputation's forward again (shoal-zero; synchronous, on the compute
  // stream), one gather per read as the runtime makes them.
  auto zeroGathers = [&](int k) -> std::pair<double, double> {
    if (!training(step) || options.zeroStage < 3)
      return {0.0, 0.0};
    // (The stored weights: float32 masters when the whole model is low,
    // cast after the gather.)
    const double forward =
        zeroCollectives(k, stageGathersF[k], lowModel ? 4 : bpp, Zero::Gather);
    const double backward =
        zeroCollectives(k, stageGathersB[k], lowModel ? 4 : bpp, Zero::Gather);
    const double again = step == StepKind::TrainRecompute ? forward : 0;
    // Stage 3 also reduce-scatters each weight's gradient at every
    // micro-batch (docs/Training.md "ZeRO"), synchronously: the step's
    // gradient reduction.
    const double scatter =
        zeroCollectives(k, stageScatters[k], bpp, Zero::Scatter);
    return {forward + again + backward + scatter, again + backward + scatter};
  };
  int worst = 0; // the replica whose step is the longest
  for (int i = 0; i < dp; ++i) {
    // The slowest stage's steady step and the tensor-parallel all-reduces
    // in it (the breakdown's share of that step).
    double slowest = 0, slowestTp = 0, sum = 0, p2p = 0;
    // GPipe runs every forward, then every backward: each phase is bound by
    // its own slowest stage (which need not be the same stage).
    double slowestF = 0, slowestB = 0;
    for (int k = 0; k < p; ++k) {
      // A value whole on every tp rank of both stages goes as Megatron's
      // scatter/gather (shoal-pipeline, Layout::scatterGather): each tp
      // rank sends 1/t of it and the receivers all-gather it over tp, on
      // their compute stream, at every micro-batch: stage k the
      // activations from k - 1 (forward) and the gradients from k + 1
      // (backward).
      const bool sg = l.scatterGather[k];
      const int tpHere = l.stages[k].devices;
      double gatherF = sg && k > 0 ? gatherOn(k, i, bytesInto(k, i)) : 0;
      double gatherB = sg && training(step) && k + 1 < p
                           ? gatherOn(k, i, bytesInto(k + 1, i))
                           : 0;
      auto [zero, zeroB] = zeroGathers(k);
      double tk = t[k][i].compute + t[k][i].tp + v * (gatherF + gatherB) + zero;
      double tb = training(step) ? t[k][i].backward + t[k][i].tpBackward +
                                       v * gatherB + zeroB
                                 : 0;
      slowestF = std::max(slowestF, tk - tb);
      slowestB = std::max(slowestB, tb);
      double in = 0, busy = 0;
      if (k > 0) {
        int src = rankOf(l.stages[k - 1], i, 0),
            dst = rankOf(l.stages[k], i, 0);
        double bytes = bytesInto(k, i);
        // Forward into k (cut by k's decision), backward into k - 1 (cut
        // by k - 1's).
        double fwd =
            cost.sendRecvSeconds(src, dst, sg ? bytes / tpHere : bytes);
        double bwd =
            training(step)
                ? cost.sendRecvSeconds(dst, src,
                                       l.scatterGather[k - 1]
                                           ? bytes / l.stages[k - 1].devices
                                           : bytes)
                : 0;
        in = v * (fwd + bwd);
        // Sends are asynchronous: the link's latency overlaps the next
        // micro-batch, its bandwidth does not.
        busy = in - v * passes * cost.sendRecvSeconds(src, dst, 0);
      }
      p2p += in;
      if (std::max(tk, busy) > slowest) {
        slowest = std::max(tk, busy);
        slowestTp = tk >= busy ? t[k][i].tp : 0;
      }
      // (A stage's weight casts: once, at its first forward.)
      sum += tk + t[k][i].casts;
    }
    double total;
    int mi = microBatchesOf(i);
    if (v > 1)
      total = (mi + double(p - 1) / v) * slowest + p2p;
    else if (l.schedule == "gpipe" && training(step) && p > 1)
      total = (mi - 1) * (slowestF + slowestB) + sum + p2p;
    else
      total = (mi - 1) * slowest + sum + p2p;
    if (total > l.stepSeconds) {
      worst = i;
      l.stepSeconds = total;
      l.computeSeconds = mi * slowest;
      l.p2pSeconds = p2p;
      l.bubbleSeconds = std::max(0.0, total - l.computeSeconds - p2p);
      l.tpSeconds = slowestTp * mi;
    }
  }

  // Gradients of replicated weights: one all-reduce per stage, in buckets
  // started during the stage's last backward (overlapped with it and with
  // the drain of the stages ahead), then the optimizer's update.
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
    double reduce = 0, update = 0, exposed = 0;
    if (training(step) && profile.hasBackward && options.zeroStage >= 1) {
      // ZeRO: each weight's gradient reduce-scattered over its ZeRO group,
      // synchronously: stage 3 at every micro-batch (zeroGathers), 1 and
      // 2 once per step, at the last micro-batch, after the local sum;
      // after its update of its block, each weight gathered again
      // (stages 1 and 2; the runtime's gatherZeroWeight).
      if (options.zeroStage < 3)
        reduce = exposed =
            zeroCollectives(k, stageScatters[k], bpp, Zero::Scatter) +
            zeroCollectives(k, stageScatters[k], lowModel ? 4 : bpp,
                            Zero::Gather);
    } else if (training(step) && dp * (s.split.front() ? 1 : s.devices) > 1) {
      std::vector<int> group;
      int width = s.split.front() ? 1 : s.devices;
      for (int i = 0; i < dp; ++i)
        for (int w = 0; w < width; ++w)
          group.push_back(rankOf(s, i, w));
      // In buckets of kGradBucketBytes, as the executor packs them.
      double bytes = params * bpp;
      double buckets = std::max(1.0, std::ceil(bytes / kGradBucketBytes));
      reduce = buckets * cost.allReduceSeconds(group, bytes / buckets);
      // The executor starts each bucket when it fills, beside the backward
      // of the chunk's last micro-batch (shoal-sim's communication
      // channel), one bucket after another. Each of the stage's v chunks
      // (alike: 1/v of the gradients and of the backward each) has its
      // last backward c * p chunk passes before the stage's end under the
      // interleaved schedule (the last p passes are chunk 0's, the p
      // before chunk 1's, ...), so the later chunks' reductions hide behind
      // the earlier chunks' backwards. With one chunk: all but the last
      // bucket hide behind the last micro-batch's backward.
      const int chunks = static_cast<int>(v);
      const double pass = t[k][worst].backward / chunks;
      const double perBucket = reduce / buckets;
      const int bucketsPerChunk =
          static_cast<int>(std::max(1.0, std::ceil(buckets / chunks)));
      // Time relative to the end of the stage's last backward.
      double channel = -std::numeric_limits<double>::infinity();
      for (int c = chunks - 1; c >= 0; --c) {
        double passStart = -double(c) * p * pass - pass;
        for (int b = 1; b <= bucketsPerChunk; ++b)
          channel = std::max(channel, passStart + pass * b / bucketsPerChunk) +
                    perBucket * buckets / (bucketsPerChunk * chunks);
      }
      exposed = std::max(perBucket, channel);
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
        // Its backward and the tensor-parallel all-reduces in it.
        drain += t[j][worst].backward + t[j][worst].tpBackward;
        const OpCost &edge = profile.ops[l.stages[j + 1].begin - 1];
        drain += v * cost.sendRecvSeconds(rankOf(l.stages[j + 1], worst, 0),
                                          rankOf(l.stages[j], worst, 0),
                                          edge.cutBytes * microFrac(worst));
      }
    tail = std::max(tail, exposed + update - drain);
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
    // (Interleaved: activationBytes is the peak over the schedule itself.)
    bool perChunk = false;
    // Training: the step walked op by op (trainingActivations); one
    // program holds everything in its arena.
    if (step == StepKind::Forward) {
      in.activationBytes = live * frac;
    } else {
      // Micro-batches (or stages) make the forward and the backward tasks
      // of their own.
      bool tasks = p > 1 || mostMicroBatches > 1;
      // A weight gradient is a temporary when it is summed over
      // micro-batches or reduce-scattered (ZeRO); an all-reduce over the
      // replicas sums it in place, in the gradient buffer
      // (rt::allReducesInPlace).
      // (Over micro-batches a product's weight gradient sums itself into
      // the step's sum, rt::productsAccumulatingInPlace: only the other
      // weights' gradients are temporaries.)
      GradTemporaries summed =
          options.zeroStage >= 1 && in.zeroRanks > 1 ? GradTemporaries::All
          : mostMicroBatches > 1 ? GradTemporaries::NotProducts
                                 : GradTemporaries::None;
      // The whole model in bf16/fp16: 16-bit activations (the weight
      // gradients stay float32, bpp).
      StageActivations a = trainingActivations(
          profile, s, k, p, step, tasks, summed, bpp,
          lowModel ? frac / 2 : frac, interleaved ? l.virtualStages : 1);
      in.activationBytes = tasks ? a.keptPerMicroBatch : 0;
      in.transientBytes = a.arena;
      // Interleaved: the chunk passes the schedule holds at once, each
      // with what its chunk keeps (the last stage's last chunk, with the
      // head and the loss, runs its backward right after its forward).
      if (tasks && interleaved) {
        in.activationBytes = keptAtPeak(schedule.order[k], a.keptPerChunk);
        perChunk = true;
      }
    }
    in.inFlight = perChunk ? 1 : s.inFlight;
    in.workspaceBytes = work * frac;
    // The stage's constants, once each (16-bit floats when the whole
    // model is).
    {
      std::set<int> constants;
      for (int j = s.begin; j < s.end; ++j)
        constants.insert(profile.ops[j].constants.begin(),
                         profile.ops[j].constants.end());
      for (int c : constants)
        in.persistentBytes +=
            profile.constantBytes[c] *
            (lowModel && profile.constantIsFloat[c] ? 0.5 : 1);
    }
    // The whole model in 16 bits keeps a 16-bit copy of each weight it
    // reads whole, made once per step (rt::weightCopies); ZeRO-3 casts the
    // gathered weights in the arena instead.
    in.weightCopyBytesPerParam =
        lowModel && training(step) && options.zeroStage < 3 ? 2 : 0;

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
