//===- Explain.cpp - What the planner says about layouts --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Layouts in words: describe(), the --explain table (explain) and what
// balancing changed and why (explainChanges), with their formatting.
//
//===----------------------------------------------------------------------===//

#include "SearchInternal.h"
#include "shoal/Planner/Search.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

using namespace shoal::planner;
using namespace shoal::planner::detail;

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
