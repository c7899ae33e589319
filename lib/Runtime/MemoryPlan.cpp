//===- MemoryPlan.cpp - Ahead-of-time buffer placement ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "MemoryPlan.h"

#include "PlanLoader.h"

#include <algorithm>
#include <numeric>

using namespace shoal::rt;

namespace {
std::size_t alignUp(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}
} // namespace

MemoryPlan shoal::rt::planMemory(const LoadedPlan &plan,
                                 std::size_t alignment) {
  std::size_t numValues = plan.values.size();
  int numOps = static_cast<int>(plan.ops.size());
  MemoryPlan mp;
  mp.offset.assign(numValues, -1);
  mp.aliasOf.assign(numValues, -1);
  mp.firstUse.assign(numValues, -1);
  mp.lastUse.assign(numValues, -1);

  std::vector<bool> produced(numValues, false);
  for (const OpInfo &op : plan.ops)
    for (int v : op.outputs)
      if (v >= 0)
        produced[v] = true;
  for (std::size_t v = 0; v < numValues; ++v)
    if (!produced[v])
      mp.persistentBytes += alignUp(plan.values[v].numBytes(), alignment);

  // Lifetimes: from the producing op to the last reader; outputs of the
  // program stay to the end. A Reshape's result shares its input's buffer,
  // which must then live as long as either of them.
  auto root = [&](int v) {
    while (mp.aliasOf[v] >= 0)
      v = mp.aliasOf[v];
    return v;
  };
  for (const OpInfo &op : plan.ops) {
    for (int v : op.outputs) {
      if (v < 0)
        continue;
      int last = plan.lastUse[v];
      if (last == LoadedPlan::kKeepAlive)
        last = numOps;
      if (op.kind == OpKind::Reshape && produced[op.inputs[0]]) {
        mp.aliasOf[v] = op.inputs[0];
        int r = root(v);
        mp.lastUse[r] = std::max({mp.lastUse[r], last, op.index});
        continue;
      }
      mp.firstUse[v] = op.index;
      mp.lastUse[v] = std::max(last, op.index);
    }
  }

  std::vector<int> order;
  for (std::size_t v = 0; v < numValues; ++v)
    if (produced[v] && mp.aliasOf[v] < 0) {
      order.push_back(static_cast<int>(v));
      mp.unsharedBytes += alignUp(plan.values[v].numBytes(), alignment);
    }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.values[a].numBytes() > plan.values[b].numBytes();
  });

  std::vector<int> placed;
  for (int v : order) {
    std::size_t size =
        alignUp(std::max<std::size_t>(plan.values[v].numBytes(), 1), alignment);
    // Intervals of buffers alive at the same time, by offset.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (int p : placed)
      if (mp.firstUse[p] <= mp.lastUse[v] && mp.firstUse[v] <= mp.lastUse[p])
        busy.emplace_back(
            mp.offset[p],
            mp.offset[p] +
                alignUp(std::max<std::size_t>(plan.values[p].numBytes(), 1),
                        alignment));
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (auto [begin, end] : busy) {
      if (at + size <= begin)
        break;
      at = std::max(at, end);
    }
    mp.offset[v] = static_cast<int64_t>(at);
    mp.arenaBytes = std::max(mp.arenaBytes, at + size);
    placed.push_back(v);
  }
  return mp;
}
