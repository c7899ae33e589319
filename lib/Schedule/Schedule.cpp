//===- Schedule.cpp - Pipeline schedules ------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Schedule/Schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

using namespace shoal::sched;

bool shoal::sched::parseKind(const std::string &text, Kind &out) {
  if (text == "gpipe")
    out = Kind::GPipe;
  else if (text == "1f1b")
    out = Kind::OneFOneB;
  else if (text == "interleaved")
    out = Kind::Interleaved;
  else
    return false;
  return true;
}

const char *shoal::sched::kindName(Kind kind) {
  switch (kind) {
  case Kind::GPipe:
    return "gpipe";
  case Kind::OneFOneB:
    return "1f1b";
  case Kind::Interleaved:
    return "interleaved";
  }
  return "?";
}

std::string shoal::sched::str(const Step &step, bool withChunk) {
  std::string s = (step.backward ? "B" : "F") + std::to_string(step.microBatch);
  if (withChunk)
    s += "." + std::to_string(step.chunk);
  return s;
}

int Schedule::peakInFlight(int stage) const {
  int live = 0, peak = 0;
  for (const Step &st : order.at(stage)) {
    live += st.backward ? -1 : 1;
    peak = std::max(peak, live);
  }
  return peak;
}

double Schedule::bubbleFraction() const {
  return static_cast<double>(stages - 1) / (chunks * microBatches);
}

namespace {
Step fwd(int mb, int chunk = 0) { return {false, mb, chunk}; }
Step bwd(int mb, int chunk = 0) { return {true, mb, chunk}; }

/// Megatron-LM's interleaved 1F1B for one stage: micro-batches go through
/// the chunks in groups of `p`; forward k runs chunk (k / p) % v of
/// micro-batch (k / (p v)) p + k % p, backward k the chunks in reverse.
std::vector<Step> interleavedStage(int p, int m, int v, int s) {
  int total = m * v;
  int warmup = std::min(total, (p - s - 1) * 2 + (v - 1) * p);
  auto fStep = [&](int k) {
    return fwd((k / (p * v)) * p + k % p, (k / p) % v);
  };
  auto bStep = [&](int k) {
    return bwd((k / (p * v)) * p + k % p, v - 1 - (k / p) % v);
  };
  std::vector<Step> out;
  int f = 0, b = 0;
  for (; f < warmup; ++f)
    out.push_back(fStep(f));
  while (f < total) {
    out.push_back(fStep(f++));
    out.push_back(bStep(b++));
  }
  while (b < total)
    out.push_back(bStep(b++));
  return out;
}
} // namespace

std::string shoal::sched::build(Kind kind, int stages, int microBatches,
                                int chunks, bool forwardOnly, Schedule &out) {
  if (stages < 1 || microBatches < 1 || chunks < 1)
    return "stages, micro-batches and chunks must be at least 1";
  if (kind != Kind::Interleaved && chunks != 1)
    return std::string("the ") + kindName(kind) +
           " schedule has one chunk per stage";
  if (kind == Kind::Interleaved && chunks < 2)
    return "interleaved 1F1B needs at least 2 chunks per stage (with one, "
           "use 1f1b)";
  if (kind == Kind::Interleaved && microBatches % stages != 0)
    return "interleaved 1F1B needs the micro-batches (" +
           std::to_string(microBatches) + ") to be a multiple of the stages (" +
           std::to_string(stages) + ")";
  out = Schedule{kind, stages, microBatches, chunks, forwardOnly, {}};
  int p = stages, m = microBatches;
  for (int s = 0; s < p; ++s) {
    std::vector<Step> order;
    switch (kind) {
    case Kind::GPipe:
      for (int i = 0; i < m; ++i)
        order.push_back(fwd(i));
      for (int i = 0; i < m; ++i)
        order.push_back(bwd(i));
      break;
    case Kind::OneFOneB: {
      int warmup = std::min(p - s - 1, m);
      for (int i = 0; i < warmup; ++i)
        order.push_back(fwd(i));
      for (int i = 0; i < m - warmup; ++i) {
        order.push_back(fwd(warmup + i));
        order.push_back(bwd(i));
      }
      for (int i = m - warmup; i < m; ++i)
        order.push_back(bwd(i));
      break;
    }
    case Kind::Interleaved:
      order = interleavedStage(p, m, chunks, s);
      break;
    }
    if (forwardOnly)
      order.erase(std::remove_if(order.begin(), order.end(),
                                 [](const Step &st) { return st.backward; }),
                  order.end());
    out.order.push_back(std::move(order));
  }
  return "";
}

std::string shoal::sched::replay(const Schedule &s, int *makespan) {
  int p = s.stages, v = s.chunks, m = s.microBatches;
  int virtualStages = p * v;
  // Completion time of (backward, micro-batch, virtual stage).
  std::map<std::tuple<bool, int, int>, int> done;
  std::vector<size_t> next(p, 0);
  std::vector<int> clock(p, 0);
  auto virtualOf = [&](int stage, const Step &st) {
    return st.chunk * p + stage;
  };
  size_t total = 0;
  for (const auto &o : s.order)
    total += o.size();
  size_t finished = 0;
  while (finished < total) {
    bool progress = false;
    for (int stage = 0; stage < p; ++stage) {
      if (next[stage] >= s.order[stage].size())
        continue;
      const Step &st = s.order[stage][next[stage]];
      int vs = virtualOf(stage, st);
      int ready = clock[stage];
      auto need = [&](bool backward, int mb, int stageIndex) {
        auto it = done.find({backward, mb, stageIndex});
        if (it == done.end())
          return false;
        ready = std::max(ready, it->second);
        return true;
      };
      bool ok = true;
      if (!st.backward) {
        if (vs > 0)
          ok = need(false, st.microBatch, vs - 1);
      } else {
        ok = need(false, st.microBatch, vs);
        if (ok && vs + 1 < virtualStages)
          ok = need(true, st.microBatch, vs + 1);
      }
      if (!ok)
        continue;
      clock[stage] = ready + 1;
      if (!done.emplace(std::make_tuple(st.backward, st.microBatch, vs),
                        clock[stage])
               .second)
        return "stage " + std::to_string(stage) + " runs " + str(st, v > 1) +
               " twice";
      ++next[stage];
      ++finished;
      progress = true;
    }
    if (!progress) {
      std::string msg = "deadlock: stages wait on";
      for (int stage = 0; stage < p; ++stage)
        if (next[stage] < s.order[stage].size())
          msg += " " + std::to_string(stage) + ":" +
                 str(s.order[stage][next[stage]], v > 1);
      return msg;
    }
  }
  // Every step of every virtual stage must have run exactly once.
  for (int vs = 0; vs < virtualStages; ++vs)
    for (int mb = 0; mb < m; ++mb) {
      if (!done.count({false, mb, vs}))
        return "forward of micro-batch " + std::to_string(mb) +
               " on virtual stage " + std::to_string(vs) + " never runs";
      if (!s.forwardOnly && !done.count({true, mb, vs}))
        return "backward of micro-batch " + std::to_string(mb) +
               " on virtual stage " + std::to_string(vs) + " never runs";
    }
  if (makespan)
    *makespan = *std::max_element(clock.begin(), clock.end());
  return "";
}
