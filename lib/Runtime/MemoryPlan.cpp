//===- MemoryPlan.cpp - Ahead-of-time buffer placement ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "MemoryPlan.h"

#include "PlanLoader.h"
#include "shoal/Runtime/MemoryReport.h"
#include "shoal/Schema/InPlace.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>

using namespace shoal::rt;

namespace {
std::size_t alignUp(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}
} // namespace

bool shoal::rt::aliasesInput(const OpInfo &op) {
  return op.kind == OpKind::Reshape ||
         ((op.kind == OpKind::ReduceMean || op.kind == OpKind::ReduceSum) &&
          op.attrs.reduceIsIdentity);
}

bool shoal::rt::accumulatesOverMicroBatches(const LoadedPlan &plan,
                                            const OpInfo &op) {
  int mb = plan.mesh.microBatchAxis();
  return op.kind == OpKind::AllReduce && mb >= 0 &&
         std::find(op.attrs.meshAxes.begin(), op.attrs.meshAxes.end(), mb) !=
             op.attrs.meshAxes.end();
}

namespace {
std::vector<InPlaceOp> inPlaceOps(const LoadedPlan &plan) {
  std::vector<InPlaceOp> ops(plan.ops.size());
  for (const OpInfo &op : plan.ops) {
    InPlaceOp &info = ops[op.index];
    info.kind = op.kind;
    info.inputs = &op.inputs;
    info.outputs = &op.outputs;
    info.task = op.task;
    info.aliases = aliasesInput(op);
    info.overMicroBatches = accumulatesOverMicroBatches(plan, op);
  }
  return ops;
}

std::vector<bool> programOutputs(const LoadedPlan &plan) {
  std::vector<bool> programOutput(plan.values.size(), false);
  for (std::size_t v = 0; v < plan.values.size(); ++v)
    programOutput[v] = plan.lastUse[v] == LoadedPlan::kKeepAlive;
  for (const PortInfo &port : plan.outputs)
    if (port.value >= 0)
      programOutput[port.value] = true;
  return programOutput;
}

/// The buffer-sharing rules of shoal/Schema/InPlace.h (shared with
/// shoal-sim), per op.
struct Sharing {
  std::vector<int> weightCopyOf, accumulatesInto;
  std::vector<bool> inPlace;
};
Sharing sharing(const LoadedPlan &plan) {
  std::vector<InPlaceOp> ops = inPlaceOps(plan);
  std::vector<bool> outputs = programOutputs(plan);
  // Per value, the weight buffer it is loaded into (weightBufferKey: one
  // per weight and layout, whichever tasks read it).
  std::vector<int> weight(plan.values.size(), -1);
  std::map<std::string, int> buffers;
  for (const WeightInfo &w : plan.weights)
    if (!w.zeroInit)
      weight[w.value] = buffers
                            .emplace(weightBufferKey(w, plan.mesh),
                                     static_cast<int>(buffers.size()))
                            .first->second;
  std::vector<int> dtype(plan.values.size());
  for (std::size_t v = 0; v < plan.values.size(); ++v)
    dtype[v] = static_cast<int>(plan.values[v].dtype);
  Sharing s;
  s.weightCopyOf = weightCopies(ops, weight, dtype, outputs);
  s.inPlace = allReducesInPlace(ops, outputs, s.weightCopyOf);
  s.accumulatesInto = productsAccumulatingInPlace(ops, outputs);
  return s;
}
} // namespace

std::vector<bool> shoal::rt::inputCopies(const LoadedPlan &plan) {
  std::vector<bool> given(plan.values.size(), false);
  for (const PortInfo &port : plan.inputs)
    if (port.value >= 0)
      given[port.value] = true;
  for (const ConstantInfo &c : plan.constants)
    if (c.value >= 0)
      given[c.value] = true;
  std::vector<bool> out(plan.values.size(), false);
  for (const OpInfo &op : plan.ops)
    if (op.kind == OpKind::Cast && op.inputs.size() == 1 && op.inputs[0] >= 0 &&
        given[op.inputs[0]] && op.outputs.size() == 1 && op.outputs[0] >= 0)
      out[op.outputs[0]] = true;
  return out;
}

std::vector<bool> shoal::rt::gradientTransients(const LoadedPlan &plan) {
  std::vector<bool> out(plan.values.size(), false);
  for (const OpInfo &op : plan.ops)
    if ((op.kind == OpKind::AdamW || op.kind == OpKind::SGD) &&
        op.inputs.size() > 1 && op.inputs[1] >= 0)
      out[op.inputs[1]] = true;
  // A step's sum over micro-batches that a pipeline stage sends (a tied or
  // shared weight's gradient, to the stage that sums its uses): only
  // gradients are summed over micro-batches.
  std::vector<int> producer(plan.values.size(), -1);
  for (const OpInfo &op : plan.ops)
    for (int v : op.outputs)
      if (v >= 0)
        producer[v] = op.index;
  for (const OpInfo &op : plan.ops)
    if (op.kind == OpKind::Send && !op.inputs.empty() && op.inputs[0] >= 0 &&
        producer[op.inputs[0]] >= 0 &&
        accumulatesOverMicroBatches(plan, plan.ops[producer[op.inputs[0]]]))
      out[op.inputs[0]] = true;
  // Readers of each value.
  std::vector<std::vector<int>> readers(plan.values.size());
  for (const OpInfo &op : plan.ops)
    for (int v : op.inputs)
      if (v >= 0 && (readers[v].empty() || readers[v].back() != op.index))
        readers[v].push_back(op.index);
  auto carries = [](OpKind k) {
    switch (k) {
    case OpKind::Add:
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::Reshape:
    case OpKind::Cast:
    case OpKind::Transpose:
    case OpKind::Concat:
    case OpKind::Slice:
    case OpKind::LocalSlice:
      return true;
    default:
      return false;
    }
  };
  // Last op first: a value whose readers all carry it into gradients.
  for (auto it = plan.ops.rbegin(); it != plan.ops.rend(); ++it)
    for (int v : it->outputs) {
      if (v < 0 || out[v] || readers[v].empty())
        continue;
      out[v] = std::all_of(readers[v].begin(), readers[v].end(), [&](int r) {
        const OpInfo &reader = plan.ops[r];
        return carries(reader.kind) && !reader.outputs.empty() &&
               std::all_of(reader.outputs.begin(), reader.outputs.end(),
                           [&](int o) { return o >= 0 && out[o]; });
      });
    }
  return out;
}

MemoryPlan shoal::rt::planMemory(const LoadedPlan &plan,
                                 std::size_t alignment) {
  std::size_t numValues = plan.values.size();
  int numOps = static_cast<int>(plan.ops.size());
  MemoryPlan mp;
  mp.residence.assign(numValues, Residence::Persistent);
  mp.offset.assign(numValues, -1);
  mp.aliasOf.assign(numValues, -1);
  mp.firstUse.assign(numValues, -1);
  mp.lastUse.assign(numValues, -1);
  auto bytesOf = [&](int v) {
    return alignUp(std::max<std::size_t>(plan.values[v].numBytes(), 1),
                   alignment);
  };

  std::vector<bool> produced(numValues, false), kept(numValues, false);
  std::vector<int> producer(numValues, -1);
  for (const OpInfo &op : plan.ops)
    for (int v : op.outputs)
      if (v >= 0) {
        produced[v] = true;
        producer[v] = op.index;
      }
  for (std::size_t v = 0; v < numValues; ++v)
    if (!produced[v])
      mp.persistentBytes += bytesOf(static_cast<int>(v));

  // What must outlive its task's run.
  for (const OpInfo &op : plan.ops) {
    bool optimizer = op.kind == OpKind::AdamW || op.kind == OpKind::SGD ||
                     op.kind == OpKind::Assign;
    for (int v : op.inputs)
      if (v >= 0 && produced[v] &&
          (optimizer || plan.definingTask[v] != op.task))
        kept[v] = true;
    if (accumulatesOverMicroBatches(plan, op))
      kept[op.outputs[0]] = true;
  }
  for (const TaskInfo &task : plan.tasks)
    for (int v : task.exports)
      kept[v] = true;
  for (std::size_t v = 0; v < numValues; ++v)
    if (produced[v] && plan.lastUse[v] == LoadedPlan::kKeepAlive)
      kept[v] = true;

  // Aliases share their root's buffer, so a kept alias keeps its root and
  // the whole chain.
  auto root = [&](int v) {
    while (mp.aliasOf[v] >= 0)
      v = mp.aliasOf[v];
    return v;
  };
  // A view of a weight, an input or a constant needs no buffer at all.
  mp.viewOfOutside.assign(numValues, false);
  for (const OpInfo &op : plan.ops)
    if (aliasesInput(op) && op.outputs[0] >= 0) {
      if (produced[op.inputs[0]])
        mp.aliasOf[op.outputs[0]] = op.inputs[0];
      else
        mp.viewOfOutside[op.outputs[0]] = true;
    }
  // An AllReduce that reduces in its operand's buffer (allReducesInPlace).
  Sharing shared = sharing(plan);
  for (const OpInfo &op : plan.ops)
    if (shared.inPlace[op.index])
      mp.aliasOf[op.outputs[0]] = op.inputs[0];
  // A product that sums itself into an accumulating AllReduce's step sum
  // (productsAccumulatingInPlace) writes that buffer: its result views the
  // sum.
  mp.accumulatesInto = std::move(shared.accumulatesInto);
  mp.accumulatedFrom.assign(plan.ops.size(), -1);
  for (const OpInfo &op : plan.ops)
    if (int a = mp.accumulatesInto[op.index]; a >= 0) {
      mp.aliasOf[op.outputs[0]] = plan.ops[a].outputs[0];
      mp.accumulatedFrom[a] = op.index;
    }
  for (std::size_t v = 0; v < numValues; ++v)
    if (kept[v])
      kept[root(static_cast<int>(v))] = true;
  // The step's copies of weights in another type (weightCopies): the
  // first cast's result holds it, the others view it.
  mp.weightCopyOf = std::move(shared.weightCopyOf);
  std::vector<bool> isCopy(numValues, false);
  for (const OpInfo &op : plan.ops)
    if (int first = mp.weightCopyOf[op.index]; first >= 0) {
      int holder = plan.ops[first].outputs[0];
      isCopy[holder] = true;
      if (first != op.index)
        mp.aliasOf[op.outputs[0]] = holder;
    }
  for (std::size_t v = 0; v < numValues; ++v)
    if (produced[v]) {
      int r = root(static_cast<int>(v));
      if (isCopy[r]) {
        mp.residence[v] = Residence::WeightCopy;
        if (r == static_cast<int>(v))
          mp.weightCopyBytes += bytesOf(r);
        continue;
      }
      bool k = kept[r];
      mp.residence[v] = k ? Residence::Kept : Residence::Arena;
      if (k && mp.aliasOf[v] < 0 && !mp.viewOfOutside[v])
        mp.keptBytes += bytesOf(static_cast<int>(v));
    }

  // Lifetimes of arena values: from the producing op to the last reader,
  // stretched over the readers of their aliases.
  for (std::size_t v = 0; v < numValues; ++v) {
    if (mp.residence[v] != Residence::Arena)
      continue;
    int r = root(static_cast<int>(v));
    int last = plan.lastUse[v];
    if (last == LoadedPlan::kKeepAlive)
      last = numOps;
    if (mp.firstUse[r] < 0)
      mp.firstUse[r] = producer[r];
    mp.lastUse[r] = std::max({mp.lastUse[r], last, producer[v]});
  }

  std::vector<int> order;
  for (std::size_t v = 0; v < numValues; ++v)
    if (mp.residence[v] == Residence::Arena && mp.aliasOf[v] < 0 &&
        !mp.viewOfOutside[v]) {
      order.push_back(static_cast<int>(v));
      mp.unsharedBytes += bytesOf(static_cast<int>(v));
    }
  // First fit in two orders, the smaller arena kept: by decreasing size,
  // and by decreasing lifetime (long-lived buffers at the bottom leave the
  // short-lived ones above them room to share; on a training step's saved
  // activations it comes closer to the bytes alive at the peak).
  auto place = [&](const std::vector<int> &sequence,
                   std::vector<int64_t> &offset) {
    std::size_t arena = 0;
    std::vector<int> placed;
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (int v : sequence) {
      std::size_t size = bytesOf(v);
      // Intervals of buffers alive at the same time, by offset.
      busy.clear();
      for (int p : placed)
        if (mp.firstUse[p] <= mp.lastUse[v] && mp.firstUse[v] <= mp.lastUse[p])
          busy.emplace_back(offset[p], offset[p] + bytesOf(p));
      std::sort(busy.begin(), busy.end());
      std::size_t at = 0;
      for (auto [begin, end] : busy) {
        if (at + size <= begin)
          break;
        at = std::max(at, end);
      }
      offset[v] = static_cast<int64_t>(at);
      arena = std::max(arena, at + size);
      placed.push_back(v);
    }
    return arena;
  };
  auto life = [&](int v) { return mp.lastUse[v] - mp.firstUse[v]; };
  // Places `values` both ways into `offset`; returns the smaller arena.
  auto placeBest = [&](const std::vector<int> &values,
                       std::vector<int64_t> &offset) {
    std::vector<int> bySize = values, byLife = values;
    std::stable_sort(bySize.begin(), bySize.end(), [&](int a, int b) {
      return plan.values[a].numBytes() > plan.values[b].numBytes();
    });
    std::stable_sort(byLife.begin(), byLife.end(), [&](int a, int b) {
      return life(a) != life(b) ? life(a) > life(b) : bytesOf(a) > bytesOf(b);
    });
    std::vector<int64_t> lifeOffset = offset;
    std::size_t bytes = place(bySize, offset);
    if (std::size_t other = place(byLife, lifeOffset); other < bytes) {
      bytes = other;
      offset = std::move(lifeOffset);
    }
    return bytes;
  };
  mp.arenaBytes = placeBest(order, mp.offset);
  // The bytes an arena of `values` placed in `bytes` needs beyond what it
  // would without those `drop` marks; `values` keeps the others.
  auto bytesFor = [&](std::vector<int> &values, std::size_t bytes,
                      const std::vector<bool> &drop) -> std::size_t {
    std::size_t before = values.size();
    values.erase(std::remove_if(values.begin(), values.end(),
                                [&](int v) { return drop[v]; }),
                 values.end());
    if (values.size() == before)
      return 0;
    std::vector<int64_t> scratch(numValues, -1);
    return bytes - std::min(bytes, placeBest(values, scratch));
  };
  // Weight gradients on their way to the optimizer (a product's partial
  // sums before their all_reduce, the sum of a shared weight's uses, a
  // gradient before its cast) are gradient memory, as Megatron-LM's
  // main_grad is, not activations. They share the arena; the report counts
  // as theirs the bytes it needs beyond what its activations alone need.
  std::vector<int> values = order;
  mp.gradientArenaBytes =
      bytesFor(values, mp.arenaBytes, gradientTransients(plan));
  // Copies of the inputs in the type the ops read them in are the step's
  // data (MemoryReport::inputs): theirs are the bytes the activations need
  // beyond what they would without them.
  mp.inputArenaBytes = bytesFor(values, mp.arenaBytes - mp.gradientArenaBytes,
                                inputCopies(plan));
  return mp;
}

std::vector<KeptLife> shoal::rt::keptLives(const LoadedPlan &plan,
                                           const MemoryPlan &memory) {
  std::vector<KeptLife> life(plan.values.size(), KeptLife::PerMicroBatch);
  for (const OpInfo &op : plan.ops) {
    bool once = accumulatesOverMicroBatches(plan, op) ||
                op.kind == OpKind::ReduceScatter;
    for (int v : op.outputs) {
      if (v < 0 || memory.residence[v] != Residence::Kept)
        continue;
      if (once)
        life[v] = KeptLife::OncePerStep;
      else if (plan.lastUse[v] != LoadedPlan::kKeepAlive)
        life[v] = aliasesInput(op) || memory.aliasOf[v] >= 0 ? KeptLife::View
                                                             : KeptLife::Pooled;
    }
  }
  for (const PortInfo &port : plan.outputs)
    if (port.value >= 0 && life[port.value] != KeptLife::OncePerStep)
      life[port.value] = KeptLife::PerMicroBatch;
  return life;
}

namespace {
/// When each micro-batch holds each kept buffer, from the schedule: a
/// buffer group (a root value and the values aliasing it) is held by
/// micro-batch j from the entry of j defining the root to the last entry
/// of j running a task that defines or reads a value of the group.
struct KeptSpans {
  int m = 1;
  /// (task * m + micro-batch) -> its first and last schedule entry, or -1.
  std::vector<int> firstEntry, lastEntry;
  /// Per value: the root of its buffer group.
  std::vector<int> rootOf;
  /// Per root: the tasks that define or read a value of its group, sorted.
  std::vector<std::vector<int>> groupTasks;
  /// Per root: its buffers are held for good, never released: an
  /// optimizer update reads a value of its group (updates run at the end of
  /// the step, Executor::defer), or a value of the group is itself kept per
  /// micro-batch or per step (a program output viewing it).
  std::vector<char> held;

  /// The entry after which micro-batch j hands back group `root`'s buffer;
  /// -1 if j holds none.
  int release(int root, int j) const {
    int last = -1;
    for (int t : groupTasks[root])
      last = std::max(last, lastEntry[static_cast<std::size_t>(t) * m + j]);
    return last;
  }
  /// The entry at which micro-batch j takes a buffer for `v`; -1 if none.
  int take(const LoadedPlan &plan, int v, int j) const {
    int t = plan.definingTask[v];
    return t < 0 ? -1 : firstEntry[static_cast<std::size_t>(t) * m + j];
  }
};

KeptSpans keptSpans(const LoadedPlan &plan, const MemoryPlan &memory,
                    const std::vector<KeptLife> &life) {
  KeptSpans s;
  s.m = std::max(1, plan.numMicroBatches);
  std::size_t numTasks = plan.tasks.size();
  s.firstEntry.assign(numTasks * s.m, -1);
  s.lastEntry.assign(numTasks * s.m, -1);
  for (std::size_t i = 0; i < plan.schedule.size(); ++i) {
    const ScheduleEntry &e = plan.schedule[i];
    if (e.task < 0 || static_cast<std::size_t>(e.task) >= numTasks ||
        e.microBatch < 0 || e.microBatch >= s.m)
      continue;
    std::size_t k = static_cast<std::size_t>(e.task) * s.m + e.microBatch;
    if (s.firstEntry[k] < 0)
      s.firstEntry[k] = static_cast<int>(i);
    s.lastEntry[k] = static_cast<int>(i);
  }
  std::size_t numValues = plan.values.size();
  s.rootOf.resize(numValues);
  for (std::size_t v = 0; v < numValues; ++v) {
    int r = static_cast<int>(v);
    while (memory.aliasOf[r] >= 0)
      r = memory.aliasOf[r];
    s.rootOf[v] = r;
  }
  s.groupTasks.resize(numValues);
  auto add = [&](int v, int task) {
    if (v >= 0 && task >= 0 && memory.residence[v] == Residence::Kept)
      s.groupTasks[s.rootOf[v]].push_back(task);
  };
  s.held.assign(numValues, 0);
  for (std::size_t v = 0; v < numValues; ++v)
    if (memory.residence[v] == Residence::Kept && life[v] != KeptLife::Pooled &&
        life[v] != KeptLife::View)
      s.held[s.rootOf[v]] = 1;
  for (const OpInfo &op : plan.ops) {
    bool update = op.kind == OpKind::AdamW || op.kind == OpKind::SGD ||
                  op.kind == OpKind::Assign;
    for (int v : op.inputs) {
      add(v, op.task);
      if (update && v >= 0)
        s.held[s.rootOf[v]] = 1;
    }
    for (int v : op.outputs)
      add(v, op.task);
  }
  for (std::vector<int> &tasks : s.groupTasks) {
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  }
  return s;
}
} // namespace

std::vector<std::vector<int>>
shoal::rt::keptReleases(const LoadedPlan &plan, const MemoryPlan &memory,
                        const std::vector<KeptLife> &life) {
  std::vector<std::vector<int>> out(plan.schedule.size());
  KeptSpans spans = keptSpans(plan, memory, life);
  for (std::size_t v = 0; v < plan.values.size(); ++v) {
    if (memory.residence[v] != Residence::Kept ||
        (life[v] != KeptLife::Pooled && life[v] != KeptLife::View) ||
        spans.held[spans.rootOf[v]])
      continue;
    for (int j = 0; j < spans.m; ++j)
      if (int i = spans.release(spans.rootOf[v], j); i >= 0)
        out[i].push_back(static_cast<int>(v));
  }
  return out;
}

std::vector<bool> shoal::rt::keptHeld(const LoadedPlan &plan,
                                      const MemoryPlan &memory,
                                      const std::vector<KeptLife> &life) {
  KeptSpans spans = keptSpans(plan, memory, life);
  std::vector<bool> out(plan.values.size(), false);
  for (std::size_t v = 0; v < plan.values.size(); ++v)
    out[v] = spans.held[spans.rootOf[v]] != 0;
  return out;
}

std::vector<bool> shoal::rt::optimizerGradients(const LoadedPlan &plan,
                                                const MemoryPlan &memory) {
  std::vector<bool> isGrad(plan.values.size(), false);
  for (const OpInfo &op : plan.ops)
    if ((op.kind == OpKind::AdamW || op.kind == OpKind::SGD) &&
        op.inputs.size() > 1 && op.inputs[1] >= 0)
      isGrad[op.inputs[1]] = true;
  // Views, last first, so that a chain of them reaches its root.
  for (auto it = plan.ops.rbegin(); it != plan.ops.rend(); ++it)
    if (!it->outputs.empty() && it->outputs[0] >= 0 && !it->inputs.empty() &&
        it->inputs[0] >= 0 &&
        (aliasesInput(*it) ||
         memory.aliasOf[it->outputs[0]] == it->inputs[0]) &&
        isGrad[it->outputs[0]])
      isGrad[it->inputs[0]] = true;
  return isGrad;
}

std::vector<KeptKind> shoal::rt::keptKinds(const LoadedPlan &plan,
                                           const MemoryPlan &memory) {
  std::vector<bool> grad = optimizerGradients(plan, memory);
  std::vector<bool> transient = gradientTransients(plan);
  std::vector<bool> copy = inputCopies(plan);
  std::vector<KeptKind> out(plan.values.size(), KeptKind::Activation);
  for (std::size_t v = 0; v < out.size(); ++v)
    out[v] = grad[v]        ? KeptKind::Gradient
             : transient[v] ? KeptKind::GradientTemporary
             : copy[v]      ? KeptKind::InputCopy
                            : KeptKind::Activation;
  return out;
}

void shoal::rt::countKept(MemoryReport &r, KeptKind kind, std::size_t bytes) {
  if (kind == KeptKind::Gradient)
    r.grads += bytes;
  else
    r.activations += bytes;
  if (kind == KeptKind::GradientTemporary)
    r.gradientTemporaries += bytes;
  if (kind == KeptKind::InputCopy)
    r.inputs += bytes;
}

MemoryReport shoal::rt::predictMemory(const LoadedPlan &plan,
                                      const MemoryPlan &memory) {
  MemoryReport r;
  std::size_t numValues = plan.values.size();
  int m = std::max(1, plan.numMicroBatches);
  auto bytes = [&](int v) { return plan.values[v].numBytes(); };

  // Values set from outside the ops: weights (one buffer per initializer
  // slice, as loadWeights shares them), constants and inputs.
  std::vector<bool> outside(numValues, false);
  std::set<std::string> loaded;
  for (const WeightInfo &w : plan.weights) {
    outside[w.value] = true;
    if (loaded.insert(weightBufferKey(w, plan.mesh)).second)
      (w.zeroInit ? r.optimizer : r.weights) += bytes(w.value);
  }
  for (const ConstantInfo &c : plan.constants)
    if (!outside[c.value]) {
      r.activations += bytes(c.value);
      r.inputs += bytes(c.value);
      outside[c.value] = true;
    }
  int mbAxis = plan.mesh.microBatchAxis();
  for (const PortInfo &port : plan.inputs)
    if (port.value >= 0 && !outside[port.value]) {
      bool perMicroBatch = mbAxis >= 0 && port.sharding.uses(mbAxis);
      r.activations += bytes(port.value) * (perMicroBatch ? m : 1);
      r.inputs += bytes(port.value) * (perMicroBatch ? m : 1);
      outside[port.value] = true;
    }

  // The step's 16-bit (or other) copies of weights, one buffer each.
  for (std::size_t v = 0; v < numValues; ++v)
    if (memory.residence[v] == Residence::WeightCopy && memory.aliasOf[v] < 0)
      r.weights += bytes(static_cast<int>(v));
  std::vector<KeptKind> kind = keptKinds(plan, memory);
  auto count = [&](KeptKind k, std::size_t b) { countKept(r, k, b); };
  for (const OpInfo &op : plan.ops) {
    // ZeRO's reduce-scatter over micro-batches sums its whole input over
    // the step first (Executor::reduceScatter).
    if (op.kind == OpKind::ReduceScatter && mbAxis >= 0 &&
        std::find(op.attrs.meshAxes.begin(), op.attrs.meshAxes.end(), mbAxis) !=
            op.attrs.meshAxes.end() &&
        !op.inputs.empty() && op.inputs[0] >= 0)
      r.grads += bytes(op.inputs[0]);
  }

  // Pooled buffers go back to a pool per size (and kind: gradient or
  // not) when keptReleases says, and any value of that size takes one from
  // there (Executor::resultBuffer). Micro-batch j holds a buffer for value
  // v from the entry defining v to the one after which it is released, so
  // a pool holds as many buffers as its values hold at once, at most: a
  // 1F1B stage's forward activations one per micro-batch in flight, an
  // interleaved stage's one per chunk pass in flight.
  std::vector<KeptLife> life = keptLives(plan, memory);
  KeptSpans spans = keptSpans(plan, memory, life);
  std::map<std::pair<KeptKind, std::size_t>, std::vector<std::pair<int, int>>>
      poolEvents;
  for (std::size_t v = 0; v < numValues; ++v) {
    if (memory.residence[v] != Residence::Kept || memory.aliasOf[v] >= 0 ||
        memory.viewOfOutside[v])
      continue;
    std::size_t b = bytes(static_cast<int>(v));
    if (life[v] != KeptLife::Pooled) {
      std::size_t copies = life[v] == KeptLife::OncePerStep ? 1 : m;
      count(kind[v], b * copies);
      continue;
    }
    if (spans.held[v]) {
      // Its own buffer per micro-batch that makes it, kept across steps
      // (it neither goes back to a pool nor takes from one).
      for (int j = 0; j < m; ++j)
        if (spans.take(plan, static_cast<int>(v), j) >= 0)
          count(kind[v], b);
      continue;
    }
    // +1 at the entry taking a buffer, -1 after the one releasing it.
    std::vector<std::pair<int, int>> &events = poolEvents[{kind[v], b}];
    for (int j = 0; j < m; ++j) {
      int from = spans.take(plan, static_cast<int>(v), j);
      if (from < 0)
        continue;
      int to = spans.release(static_cast<int>(v), j);
      events.push_back({from, 1});
      events.push_back({std::max(from, to) + 1, -1});
    }
  }
  for (auto &[key, events] : poolEvents) {
    // At one entry, buffers released before it are taken again first.
    std::sort(events.begin(), events.end());
    int held = 0, most = 0;
    for (auto [at, delta] : events) {
      held += delta;
      most = std::max(most, held);
    }
    count(key.first, key.second * static_cast<std::size_t>(most));
  }
  r.activations += memory.arenaBytes;
  r.gradientTemporaries += memory.gradientArenaBytes;
  r.inputs += memory.inputArenaBytes;
  return r;
}

std::vector<ProgramMemory>
shoal::rt::checkAndPredictMemory(const plan::Plan &plan,
                                 const std::string &path, int64_t worldSize) {
  // One rank of each program: check the plan as that rank would, then
  // take the first rank no checked program holds.
  std::vector<ProgramMemory> out;
  std::vector<bool> covered(static_cast<std::size_t>(worldSize), false);
  for (int64_t rank = 0; rank < worldSize; ++rank) {
    if (covered[rank])
      continue;
    LoadedPlan loaded =
        checkPlan(plan, path, worldSize, rank, /*predictOnly=*/true);
    for (int64_t r : loaded.programRanks)
      if (r >= 0 && r < worldSize)
        covered[r] = true;
    covered[rank] = true;
    out.push_back({loaded.program, loaded.programRanks,
                   predictMemory(loaded, planMemory(loaded))});
  }
  std::sort(out.begin(), out.end(),
            [](const ProgramMemory &a, const ProgramMemory &b) {
              return a.program < b.program;
            });
  return out;
}
