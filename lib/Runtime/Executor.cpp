//===- Executor.cpp - The scheduler of every plan on every device -*- C++ -*-//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "BackendRegistry.h"
#include "Comm.h"
#include "Updates.h"
#include "Watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace shoal::rt;

/// A collective in flight: its Work, the value it writes and, when the
/// device's tensors are staged through the host for a host communicator,
/// the host buffer to copy back.
struct Executor::Pending {
  std::unique_ptr<Work> work;
  std::string name;
  Clock::time_point start;
  std::size_t bytes = 0;
  /// (value, device tensor, host staging buffer or undefined).
  struct Part {
    int value = -1;
    Tensor target;
    Tensor host;
    /// Offset of the part in a bucket's flat buffer (bytes).
    std::size_t offset = 0;
  };
  std::vector<Part> parts;
  /// A bucket's flat buffer (on the host when staged, else on the device).
  Tensor flat;
  bool packed = false;
  bool done = false;
};

/// Gradient all-reduces waiting to be packed into one.
struct Executor::Bucket {
  std::vector<int> axes;
  DType dtype = DType::F32;
  std::size_t bytes = 0;
  std::vector<std::pair<int, Tensor>> parts;
};

const OpInfo *shoal::rt::firstOpWithoutKernel(const LoadedPlan &plan,
                                              BackendKind backend) {
  registerBackendKernels(backend);
  for (const OpInfo &op : plan.ops)
    if (!opKindHas(op.kind, kSchedulerOps) && !findKernel(op.kind, backend))
      return &op;
  return nullptr;
}

Executor::Executor(const LoadedPlan &plan, ExecutorOptions options)
    : Executor(plan,
               *makeDevice(kReferenceBackend, 0, Precision::FP32).release(),
               options) {
  ownDevice.reset(&device);
}

Executor::Executor(const LoadedPlan &plan, Device &device,
                   ExecutorOptions options)
    : plan(plan), device(device), options(options), values(plan.values.size()),
      persistent(plan.values.size(), false) {
  registerBackendKernels(kReferenceBackend);
  registerBackendKernels(device.kind());
  for (const WeightInfo &w : plan.weights)
    weightOfValue[w.value] = &w;
  // Values only optimizer ops read: gradients, whose reductions may join a
  // bucket.
  gradientOnly.assign(plan.values.size(), false);
  std::vector<bool> otherReader(plan.values.size(), false);
  for (const OpInfo &o : plan.ops)
    for (int v : o.inputs)
      if (v >= 0)
        (o.kind == OpKind::AdamW || o.kind == OpKind::SGD ? gradientOnly
                                                          : otherReader)[v] =
            true;
  for (std::size_t v = 0; v < otherReader.size(); ++v)
    if (otherReader[v])
      gradientOnly[v] = false;
  memory = planMemory(plan);
  device.reserveArena(memory.arenaBytes);
  made.assign(plan.values.size() * plan.numMicroBatches, 0);
  if (plan.training.lossScale.present) {
    scaler.active = true;
    scaler.scale = plan.training.lossScale.initial;
  }
  for (const ConstantInfo &c : plan.constants)
    if (c.lossScale)
      lossScaleSeeds.push_back(c.value);
}

void Executor::setLossScaler(double scale, int64_t cleanSteps,
                             int64_t skippedSteps) {
  if (!scaler.active)
    return;
  scaler.scale = scale;
  scaler.cleanSteps = cleanSteps;
  scaler.skippedSteps = skippedSteps;
}

Executor::~Executor() {
  // Outstanding work must finish before its buffers go.
  try {
    progress(true);
    progressSends(true);
  } catch (...) {
  }
}

void Executor::setValue(int id, Tensor tensor) {
  if (id < 0 || id >= static_cast<int>(values.size()))
    throw Error(fmt::format("value id {} out of range", id));
  if (tensor.type() != plan.values[id])
    throw Error(fmt::format("value {} is {} but was given a {} tensor", id,
                            plan.values[id].str(), tensor.type().str()));
  values[id] = device.fromHost(tensor);
  persistent[id] = true;
}

const Tensor &Executor::input(const OpInfo &op, std::size_t i) {
  int v = op.inputs[i];
  waitFor(v);
  const Tensor &t = values[v];
  if (!t.defined())
    throw Error(fmt::format("input #{} (value {}) has no data", i, v));
  return t;
}

void Executor::setMicroBatchValue(int id, int microBatch, Tensor tensor) {
  if (microBatch < 0 || microBatch >= plan.numMicroBatches)
    throw Error(fmt::format("micro-batch {} out of range (the program has {})",
                            microBatch, plan.numMicroBatches));
  setValue(id, tensor);
  std::vector<Tensor> &blocks = microBatchInputs[id];
  blocks.resize(plan.numMicroBatches);
  blocks[microBatch] = values[id];
}

Tensor Executor::fetch(int id) {
  waitFor(id);
  device.synchronize();
  return device.toHost(values.at(id));
}

Tensor Executor::fetchOutput(int id, int microBatch) {
  device.synchronize();
  auto k = kept.find({id, microBatch});
  if (k != kept.end())
    return device.toHost(k->second);
  auto in = microBatchInputs.find(id);
  if (in != microBatchInputs.end())
    return device.toHost(in->second.at(microBatch));
  return device.toHost(values.at(id));
}

double Executor::usSinceStart(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - stepStart).count();
}

namespace {

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

void Executor::commEvent(const std::string &name, Clock::time_point start,
                         Clock::time_point end, const std::string &args) {
  stepProfile.events.push_back({name, 1, usSinceStart(start),
                                usSinceStart(end) - usSinceStart(start), args});
}

void Executor::run(Comm &comm, bool verbose) {
  runSchedule(comm, verbose, /*forwardOnly=*/false);
}

void Executor::evaluate(Comm &comm) {
  prepareEvaluation();
  runSchedule(comm, /*verbose=*/false, /*forwardOnly=*/true);
}

void Executor::prepareEvaluation() {
  if (!plan.training.present)
    throw Error("internal error: evaluate() runs the forward of a training "
                "plan");
  planForward();
}

void Executor::planForward() {
  if (!forwardEntries.empty())
    return;
  forwardOps.assign(plan.ops.size(), 0);
  forwardEntries.assign(plan.schedule.size(), 0);
  auto isUpdate = [&](const TaskInfo &t) {
    return t.name.size() > 4 &&
           t.name.compare(t.name.size() - 4, 4, ".opt") == 0;
  };
  bool scheduled =
      std::any_of(plan.schedule.begin(), plan.schedule.end(),
                  [](const ScheduleEntry &e) { return e.backward; });
  if (scheduled) {
    // A pipeline's schedule: its forward tasks (TaskGraphs of the forward
    // phase) hold the forward, their Sends and Recvs included; backward
    // and optimizer TaskGraphs are skipped.
    for (std::size_t i = 0; i < plan.schedule.size(); ++i) {
      const ScheduleEntry &e = plan.schedule[i];
      const TaskInfo &task = plan.tasks[e.task];
      if (e.backward || isUpdate(task))
        continue;
      forwardEntries[i] = 1;
      for (int k = task.begin; k < task.end; ++k)
        forwardOps[k] = 1;
    }
    return;
  }
  // One task of forward, backward and update: the ops the outputs depend
  // on. Every rank of the program has the same ops, so its collectives
  // among them match; a transfer would need its peer program's ops too.
  std::vector<int> producer(plan.values.size(), -1);
  for (const OpInfo &op : plan.ops) {
    if (op.kind == OpKind::Send || op.kind == OpKind::Recv)
      throw Error(fmt::format("evaluation runs the forward of a training "
                              "plan; {} has transfers ({}) but no pipeline "
                              "schedule to tell its forward from its "
                              "backward",
                              plan.path, op.describe()));
    for (int v : op.outputs)
      if (v >= 0)
        producer[v] = op.index;
  }
  std::vector<int> work;
  for (const PortInfo &port : plan.outputs)
    if (producer[port.value] >= 0)
      work.push_back(producer[port.value]);
  while (!work.empty()) {
    int i = work.back();
    work.pop_back();
    if (forwardOps[i])
      continue;
    forwardOps[i] = 1;
    for (int v : plan.ops[i].inputs)
      if (v >= 0 && producer[v] >= 0 && !forwardOps[producer[v]])
        work.push_back(producer[v]);
  }
  // Tasks with none of those ops are skipped (they may import values that
  // only skipped ops make).
  for (std::size_t i = 0; i < plan.schedule.size(); ++i) {
    const TaskInfo &task = plan.tasks[plan.schedule[i].task];
    forwardEntries[i] =
        std::any_of(forwardOps.begin() + task.begin,
                    forwardOps.begin() + task.end, [](char c) { return c; });
  }
}

void Executor::runSchedule(Comm &comm, bool verbose, bool forwardOnly) {
  // Transfers name world ranks; comm is the program's.
  worldRank = global ? global->rank() : comm.rank();
  bool print = verbose && worldRank == 0;
  // Values of the last step are dead; persistent ones stay.
  for (std::size_t v = 0; v < values.size(); ++v)
    if (!persistent[v])
      values[v] = Tensor();
  std::fill(made.begin(), made.end(), 0);
  ++runs; // (weight copies of earlier runs are stale)
  stepStart = Clock::now();
  recvWaitSeconds = 0;
  stepProfile = StepProfile();
  double taskSeconds = 0;
  deferred.clear();
  accumulators.clear();
  // The backward of a loss-scaled plan starts from the current scale.
  if (!forwardOnly && scaler.active && seededScale != scaler.scale) {
    Tensor host(TensorType{DType::F32, {}});
    host.data<float>()[0] = static_cast<float>(scaler.scale);
    for (int v : lossScaleSeeds) {
      if (!values[v].defined())
        throw Error(
            fmt::format("the loss-scale seed (value {}) is not set", v));
      device.copyFromHost(host, values[v]);
    }
    seededScale = scaler.scale;
  }
  if (keptLife.empty()) {
    keptLife = keptLives(plan, memory);
    releases = keptReleases(plan, memory, keptLife);
    keptIsHeld = keptHeld(plan, memory, keptLife);
    keptKind = keptKinds(plan, memory);
  }
  for (std::size_t i = 0; i < plan.schedule.size(); ++i) {
    const ScheduleEntry &e = plan.schedule[i];
    if (forwardOnly && !forwardEntries[i]) {
      // What the skipped (backward) entry would have freed goes back to the
      // pools here too: no later entry of its micro-batch reads it, and a
      // pipeline's forward would otherwise hold every micro-batch's saved
      // activations at once, and keep them for the training steps after.
      for (int v : releases[i])
        releaseKept(v, e.microBatch);
      continue;
    }
    auto start = Clock::now();
    const TaskInfo &task = plan.tasks[e.task];
    std::string name =
        task.name.empty() ? fmt::format("task{}", e.task) : task.name;
    runTask(e.task, e.microBatch, comm, print,
            forwardOnly ? &forwardOps : nullptr);
    auto end = Clock::now();
    taskSeconds += secondsBetween(start, end);
    stepProfile.events.push_back(
        {fmt::format("{}{} {}", e.backward ? 'B' : 'F', e.microBatch, name), 0,
         usSinceStart(start), usSinceStart(end) - usSinceStart(start),
         fmt::format("{{\"task\": {}, \"task_name\": {}, \"micro_batch\": "
                     "{}, \"backward\": {}}}",
                     e.task, jsonString(name), e.microBatch,
                     e.backward ? "true" : "false")});
    progressSends(false);
    // Buffers no later task of this micro-batch reads go back to their
    // pools, for later values of their size (of this micro-batch or
    // later ones).
    for (int v : releases[i])
      releaseKept(v, e.microBatch);
  }
  flushBucket(comm);
  progress(true);
  progressSends(true);
  selfMessages.clear();
  accumulators.clear();
  if (plan.training.present && !forwardOnly) {
    auto start = Clock::now();
    applyOptimizers(comm);
    taskSeconds += secondsBetween(start, Clock::now());
    ++completedSteps;
  }
  device.synchronize();
  stepProfile.busySeconds = std::max(0.0, taskSeconds - recvWaitSeconds);
}

Tensor Executor::resultBuffer(int v) {
  switch (memory.residence[v]) {
  case Residence::Arena:
    return device.arenaView(plan.values[v],
                            static_cast<std::size_t>(memory.offset[v]));
  case Residence::Kept: {
    auto key = std::make_pair(v, currentMicroBatch);
    auto it = kept.find(key);
    if (it == kept.end()) {
      // A pooled value takes a released buffer of its kind and size that
      // nothing else holds (a pending send or all-reduce keeps its own
      // reference), viewed as v; values kept for the step or held for good
      // (keptHeld) have their own.
      Tensor buffer;
      auto pool = keptLife[v] == KeptLife::Pooled && !keptIsHeld[v]
                      ? keptPool.find(poolKey(v))
                      : keptPool.end();
      if (pool != keptPool.end())
        for (auto b = pool->second.begin(); b != pool->second.end(); ++b)
          if (b->storageHandle().use_count() == 1) {
            buffer =
                Tensor::view(plan.values[v], b->storageHandle(), b->memory());
            pool->second.erase(b);
            break;
          }
      if (!buffer.defined())
        buffer = device.allocate(plan.values[v]);
      it = kept.emplace(key, std::move(buffer)).first;
    }
    return it->second;
  }
  case Residence::WeightCopy: {
    int holder = v;
    while (memory.aliasOf[holder] >= 0)
      holder = memory.aliasOf[holder];
    auto it = weightCopies.find(holder);
    if (it == weightCopies.end())
      it = weightCopies.emplace(holder, device.allocate(plan.values[holder]))
               .first;
    return it->second;
  }
  case Residence::Persistent:
    break;
  }
  throw Error(fmt::format("internal error: value {} is set from outside the "
                          "ops but an op defines it",
                          v));
}

std::pair<KeptKind, std::size_t> Executor::poolKey(int v) const {
  return {keptKind[v], plan.values[v].numBytes()};
}

void Executor::releaseKept(int v, int microBatch) {
  auto it = kept.find({v, microBatch});
  if (it == kept.end())
    return;
  if (values[v].defined() &&
      values[v].storageHandle() == it->second.storageHandle())
    values[v] = Tensor();
  if (keptLife[v] == KeptLife::Pooled)
    keptPool[poolKey(v)].push_back(std::move(it->second));
  kept.erase(it);
}

void Executor::runTask(int taskIndex, int microBatch, Comm &comm, bool print,
                       const std::vector<char> *only) {
  const TaskInfo &task = plan.tasks[taskIndex];
  currentMicroBatch = microBatch;
  comm.setMicroBatch(microBatch);
  for (auto &entry : microBatchInputs)
    values[entry.first] = entry.second[microBatch];
  std::size_t m = static_cast<std::size_t>(plan.numMicroBatches);
  for (int v : task.imports) {
    auto it = kept.find({v, microBatch});
    if (it == kept.end() || !made[v * m + microBatch])
      throw Error(fmt::format("task '{}' of micro-batch {} reads value {}, "
                              "which the task defining it has not made",
                              task.name, microBatch, v));
    values[v] = it->second;
  }
  for (int i = task.begin; i < task.end; ++i) {
    if (only && !(*only)[i])
      continue;
    const OpInfo &op = plan.ops[i];
    auto start = Clock::now();
    noteOp(op);
    reusedWeightCopy = false;
    try {
      runOp(op, comm);
      if (print || profiling)
        device.synchronize();
    } catch (const Error &e) {
      // Kernel messages start with the op kind, which describe() has too.
      std::string msg = e.what();
      std::string kind = op.kindName + ": ";
      if (msg.compare(0, kind.size(), kind) == 0)
        msg = msg.substr(kind.size());
      throw Error(fmt::format("{}: {}", op.describe(), msg));
    }
    auto end = Clock::now();
    for (int v : op.outputs)
      if (v >= 0)
        made[v * m + microBatch] = 1;
    // (A weight's copy made earlier in the step did no work: calibration
    // would take it for a fast op.)
    if (profiling && !reusedWeightCopy)
      stepProfile.ops.push_back(
          {op.index, microBatch, secondsBetween(start, end)});
    if (options.traceOps && !op.isCollective() && op.kind != OpKind::Send &&
        op.kind != OpKind::Recv)
      stepProfile.events.push_back(
          {op.name.empty() ? op.kindName : op.name, 0, usSinceStart(start),
           usSinceStart(end) - usSinceStart(start),
           fmt::format("{{\"op\": {}, \"kind\": {}, \"micro_batch\": {}}}",
                       op.index, jsonString(op.kindName), microBatch)});
    // Let collectives in flight progress between ops.
    if (!pending.empty())
      progress(false);
    if (print) {
      double ms =
          std::chrono::duration<double, std::milli>(end - start).count();
      std::string what = op.describe();
      if (plan.numMicroBatches > 1)
        what += fmt::format(" mb {}", microBatch);
      std::fprintf(stderr, "shoal-run: %-60s %10.3f ms\n", what.c_str(), ms);
    }
  }
}

void Executor::runOp(const OpInfo &op, Comm &comm) {
  switch (op.kind) {
  case OpKind::Send:
    send(op, comm);
    return;
  case OpKind::Recv:
    recv(op, comm);
    return;
  case OpKind::AdamW:
  case OpKind::SGD:
  case OpKind::Assign:
    defer(op);
    return;
  case OpKind::ReduceScatter:
    reduceScatter(op, comm);
    return;
  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::AllToAll:
    if (accumulatesOverMicroBatches(plan, op))
      accumulate(op, comm);
    else
      collective(op, comm);
    return;
  default:
    runKernel(op, comm);
  }
}

void Executor::runKernel(const OpInfo &op, Comm &comm) {
  // A cast of a weight whose copy this step already made (weightCopyOf):
  // the copy is the result.
  int copyHolder = -1;
  if (int first = memory.weightCopyOf[op.index]; first >= 0) {
    copyHolder = plan.ops[first].outputs[0];
    auto it = weightCopyRun.find(copyHolder);
    if (it != weightCopyRun.end() && it->second == runs) {
      values[op.outputs[0]] = resultBuffer(op.outputs[0]);
      reusedWeightCopy = true;
      return;
    }
  }
  std::vector<const Tensor *> inputs;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    inputs.push_back(op.inputs[i] < 0 ? nullptr : &input(op, i));
  bool aliases = aliasesInput(op);
  std::vector<Tensor> outs;
  outs.reserve(op.outputs.size());
  // A product that sums itself into an accumulating AllReduce's step sum
  // (accumulatesInto): micro-batch 0 writes the sum, later ones add.
  bool addInto = false;
  if (int a = memory.accumulatesInto[op.index]; a >= 0) {
    Accumulator &acc = accumulators[a];
    if (currentMicroBatch == 0 || !acc.sum.defined()) {
      // The step's sum lives in micro-batch 0's buffer of the output.
      int saved = currentMicroBatch;
      currentMicroBatch = 0;
      acc.sum = resultBuffer(plan.ops[a].outputs[0]);
      currentMicroBatch = saved;
    } else {
      addInto = true;
    }
    outs.push_back(acc.sum);
  } else {
    for (int v : op.outputs)
      outs.push_back(v >= 0 && !aliases ? resultBuffer(v) : Tensor());
  }
  KernelFn fn = findKernel(op.kind, device.kind());
  // Kernels may accumulate into their outputs or skip elements, as when
  // they owned freshly zeroed buffers, unless they say they write them all.
  if (addInto) {
    // (The output holds the sum so far.)
  } else if (!fn || !kernelWritesAll(op.kind, device.kind())) {
    for (Tensor &t : outs)
      if (t.defined())
        device.zero(t);
  } else if (fillUninitialized()) {
    for (Tensor &t : outs)
      if (t.defined())
        device.fillBytes(t, 0xFF);
  }
  KernelContext ctx{plan, device, 0};
  ctx.addInto = addInto;
  // LocalSlice and the vocabulary-parallel ops take this rank's block.
  if (!op.attrs.meshAxes.empty())
    ctx.groupIndex = comm.groupIndex(op.attrs.meshAxes);
  bool ran = false;
  if (fn) {
    try {
      fn(ctx, op, inputs, outs);
      ran = true;
    } catch (const KernelUnsupported &) {
      if (device.kind() == kReferenceBackend)
        throw;
    }
  }
  if (!ran) {
    // No kernel on this device: run the reference kernel on host copies.
    KernelFn referenceFn = findKernel(op.kind, kReferenceBackend);
    if (!referenceFn)
      throw Error(fmt::format("no kernel for {} on any backend", op.kindName));
    if (options.strict)
      throw Error(fmt::format("--strict: the {} backend has no kernel for "
                              "these operands of {}",
                              backendName(device.kind()), op.kindName));
    if (warnedFallback.insert(op.kind).second && worldRank == 0)
      std::fprintf(stderr,
                   "shoal-run: warning: the %s backend has no kernel for %s; "
                   "it runs on the CPU\n",
                   backendName(device.kind()), op.kindName.c_str());
    std::vector<Tensor> hostIn;
    hostIn.reserve(inputs.size());
    std::vector<const Tensor *> hostInputs;
    for (const Tensor *t : inputs) {
      if (!t) {
        hostInputs.push_back(nullptr);
        continue;
      }
      hostIn.push_back(device.toHost(*t));
      hostInputs.push_back(&hostIn.back());
    }
    std::vector<Tensor> hostOuts;
    for (const Tensor &t : outs)
      hostOuts.push_back(!t.defined() ? Tensor()
                         : addInto    ? device.toHost(t)
                                      : Tensor(t.type()));
    KernelContext hostCtx = ctx;
    referenceFn(hostCtx, op, hostInputs, hostOuts);
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (op.outputs[i] < 0)
        continue;
      if (outs[i].defined())
        device.copyFromHost(hostOuts[i], outs[i]);
      else
        outs[i] = device.fromHost(hostOuts[i]);
    }
  }
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    int v = op.outputs[i];
    if (v < 0)
      continue;
    // A kept alias (a view of its kept root) is read by later tasks too.
    if (aliases && memory.residence[v] == Residence::Kept)
      kept[{v, currentMicroBatch}] = outs[i];
    values[v] = std::move(outs[i]);
  }
  if (copyHolder >= 0)
    weightCopyRun[copyHolder] = runs;
}

MemoryReport Executor::memoryReport() const {
  MemoryReport r;
  std::set<const void *> seen;
  std::vector<bool> isWeight(values.size(), false),
      isState(values.size(), false);
  for (const WeightInfo &w : plan.weights)
    (w.zeroInit ? isState : isWeight)[w.value] = true;
  for (std::size_t v = 0; v < values.size(); ++v) {
    if (!persistent[v] || !values[v].defined() ||
        !seen.insert(values[v].rawData()).second)
      continue;
    std::size_t bytes = values[v].numBytes();
    if (isWeight[v])
      r.weights += bytes;
    else if (isState[v])
      r.optimizer += bytes;
    else {
      r.activations += bytes;
      r.inputs += bytes; // inputs and constants
    }
  }
  for (const auto &[v, t] : weightCopies)
    if (t.defined() && seen.insert(t.rawData()).second)
      r.weights += t.numBytes();
  for (const auto &[v, blocks] : microBatchInputs)
    for (const Tensor &t : blocks)
      if (t.defined() && seen.insert(t.rawData()).second) {
        r.activations += t.numBytes();
        r.inputs += t.numBytes();
      }
  std::vector<KeptKind> kind = keptKinds(plan, memory);
  auto count = [&](KeptKind k, std::size_t b) { countKept(r, k, b); };
  for (const auto &[key, t] : kept) {
    if (!seen.insert(t.rawData()).second)
      continue;
    count(kind[key.first], t.numBytes());
  }
  for (const auto &[key, buffers] : keptPool)
    for (const Tensor &t : buffers)
      if (t.defined() && seen.insert(t.rawData()).second)
        count(key.first, t.numBytes());
  // ZeRO-1 sums whole gradients over the micro-batches before scattering.
  r.grads += scatterAccumPeak;
  r.activations += memory.arenaBytes;
  r.gradientTemporaries += memory.gradientArenaBytes;
  r.inputs += memory.inputArenaBytes;
  r.peak = device.peakBytes();
  return r;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// The readers of value `v` after op `after`: true if the next op reads it
/// (then an asynchronous start gains nothing).
bool readNext(const LoadedPlan &plan, int v, int after) {
  int next = after + 1;
  if (next >= static_cast<int>(plan.ops.size()))
    return false;
  for (int in : plan.ops[next].inputs)
    if (in == v)
      return true;
  return false;
}

std::string axesName(const Mesh &mesh, const std::vector<int> &axes) {
  std::vector<std::string> names;
  for (int a : axes)
    names.push_back(mesh.axisName(a));
  return fmt::format("{}", fmt::join(names, ","));
}

} // namespace

void Executor::collective(const OpInfo &op, Comm &comm) {
  const OpAttrs &a = op.attrs;
  if (op.kind == OpKind::AllReduce) {
    int v = op.outputs[0];
    Tensor out;
    if (memory.aliasOf[v] == op.inputs[0]) {
      // Reduces in its operand's buffer (rt::allReducesInPlace): nothing else
      // reads the operand.
      out = input(op, 0);
      if (memory.residence[v] == Residence::Kept)
        kept[{v, currentMicroBatch}] = out;
    } else {
      out = resultBuffer(v);
      device.copy(input(op, 0), out);
    }
    values[v] = out;
    bool async = plan.lastUse[op.outputs[0]] >= 0 &&
                 !readNext(plan, op.outputs[0], op.index);
    bool bucketable = async && options.gradBucketBytes > 0 &&
                      plan.training.present && gradientOnly[op.outputs[0]] &&
                      !a.reduceMax;
    if (async) {
      startAllReduce(op, out, a.meshAxes, comm, bucketable);
      return;
    }
    startAllReduce(op, out, a.meshAxes, comm, false);
    waitFor(op.outputs[0]);
    return;
  }
  // AllGather and AllToAll run synchronously. Over a communicator of
  // device buffers (NCCL), an AllGather of even blocks and an AllToAll
  // exchange device tensors and their blocks are packed and reordered on
  // the device; the others stage through host tensors.
  auto start = Clock::now();
  Tensor out = resultBuffer(op.outputs[0]);
  bool onDevice = device.memory() != MemoryKind::Host &&
                  comm.group(a.meshAxes).deviceMemory() &&
                  (op.kind == OpKind::AllToAll || a.gatherBlocks.empty());
  if (onDevice) {
    Tensor in = input(op, 0);
    Communicator &group = comm.group(a.meshAxes);
    int64_t n = comm.mesh().numBlocks(a.meshAxes);
    if (op.kind == OpKind::AllGather) {
      // Blocks arrive one after the other in group order: already out's
      // layout when every dimension before `dim` has size 1.
      bool direct = true;
      for (int64_t d = 0; d < a.dim; ++d)
        direct &= out.shape()[d] == 1;
      device.synchronize(); // the input is written on the compute stream
      if (direct) {
        group.allGather(in.rawData(), out.rawData(), in.numBytes())->wait();
      } else {
        Tensor blocks = device.temporary({in.dtype(), {n * in.numElements()}});
        group.allGather(in.rawData(), blocks.rawData(), in.numBytes())->wait();
        device.concatBlocks(blocks, n, a.dim, out);
      }
    } else {
      // Block j of the split dimension packed densely for member j, the
      // received blocks placed side by side along the concatenated one.
      if (a.dim < 0 || a.dim >= in.rank() || in.shape()[a.dim] % n != 0)
        throw Error(fmt::format("AllToAll: cannot split dimension {} of {} "
                                "into {} blocks",
                                a.dim, in.type().str(), n));
      Tensor send = device.temporary({in.dtype(), {in.numElements()}});
      Tensor recv = device.temporary({in.dtype(), {in.numElements()}});
      device.packBlocks(in, n, a.dim, send);
      device.synchronize();
      group.allToAll(send.rawData(), recv.rawData(), in.numBytes() / n)->wait();
      device.concatBlocks(recv, n, a.concatDim, out);
    }
  } else {
    Tensor in = device.toHost(input(op, 0));
    Tensor hostOut = device.memory() == MemoryKind::Host
                         ? out
                         : Tensor::uninitialized(out.type());
    if (op.kind == OpKind::AllGather)
      comm.allGather(in, hostOut, a.dim, a.meshAxes, a.gatherBlocks);
    else
      comm.allToAll(in, hostOut, a.dim, a.concatDim, a.meshAxes);
    if (device.memory() != MemoryKind::Host)
      device.copyFromHost(hostOut, out);
  }
  values[op.outputs[0]] = out;
  commEvent(
      fmt::format("{} over {}", op.kindName, axesName(plan.mesh, a.meshAxes)),
      start, Clock::now(),
      fmt::format("{{\"op\": {}, \"bytes\": {}}}", op.index, out.numBytes()));
}

void Executor::startAllReduce(const OpInfo &op, Tensor t,
                              const std::vector<int> &axes, Comm &comm,
                              bool bucketable) {
  int v = op.outputs[0];
  if (bucketable) {
    if (bucket && (bucket->axes != axes || bucket->dtype != t.dtype()))
      flushBucket(comm);
    if (!bucket) {
      bucket = std::make_unique<Bucket>();
      bucket->axes = axes;
      bucket->dtype = t.dtype();
    }
    bucket->parts.emplace_back(v, t);
    bucket->bytes += t.numBytes();
    pendingOf[v] = nullptr; // In the open bucket.
    if (bucket->bytes >= options.gradBucketBytes)
      flushBucket(comm);
    return;
  }
  auto p = std::make_unique<Pending>();
  p->name = fmt::format("AllReduce over {}", axesName(plan.mesh, axes));
  p->start = Clock::now();
  p->bytes = t.numBytes();
  Pending::Part part;
  part.value = v;
  part.target = t;
  Communicator &group = comm.group(axes);
  bool staged = device.memory() != MemoryKind::Host && !group.deviceMemory();
  if (staged)
    part.host = device.toHost(t);
  Tensor &buf = staged ? part.host : part.target;
  p->work = group.allReduce(buf.rawData(), buf.numElements(), buf.dtype(),
                            op.attrs.reduceMax ? ReduceOp::Max : ReduceOp::Sum);
  p->parts.push_back(std::move(part));
  pendingOf[v] = p.get();
  pending.push_back(std::move(p));
}

void Executor::flushBucket(Comm &comm) {
  if (!bucket)
    return;
  std::unique_ptr<Bucket> b = std::move(bucket);
  auto p = std::make_unique<Pending>();
  p->name = fmt::format("AllReduce over {} (bucket of {})",
                        axesName(plan.mesh, b->axes), b->parts.size());
  p->start = Clock::now();
  p->bytes = b->bytes;
  p->packed = true;
  Communicator &group = comm.group(b->axes);
  bool host = device.memory() == MemoryKind::Host || !group.deviceMemory();
  int64_t elems = static_cast<int64_t>(b->bytes / dtypeSize(b->dtype));
  TensorType flatType{b->dtype, {elems}};
  p->flat = host ? Tensor::uninitialized(flatType) : device.allocate(flatType);
  std::size_t offset = 0;
  for (auto &[v, t] : b->parts) {
    Pending::Part part;
    part.value = v;
    part.target = t;
    part.offset = offset;
    Tensor slot =
        Tensor::view(t.type(),
                     std::shared_ptr<uint8_t>(p->flat.storageHandle(),
                                              p->flat.bytes() + offset),
                     p->flat.memory());
    if (host)
      device.copyToHost(t, slot);
    else
      device.copy(t, slot);
    offset += t.numBytes();
    pendingOf[v] = p.get();
    p->parts.push_back(std::move(part));
  }
  if (!host)
    device.synchronize();
  p->work = group.allReduce(p->flat.rawData(), elems, b->dtype);
  pending.push_back(std::move(p));
}

void Executor::finishPending(Pending &p) {
  if (p.done)
    return;
  p.work->wait();
  auto end = Clock::now();
  for (Pending::Part &part : p.parts) {
    if (p.packed) {
      Tensor slot =
          Tensor::view(part.target.type(),
                       std::shared_ptr<uint8_t>(p.flat.storageHandle(),
                                                p.flat.bytes() + part.offset),
                       p.flat.memory());
      if (slot.onHost() && device.memory() != MemoryKind::Host)
        device.copyFromHost(slot, part.target);
      else
        device.copy(slot, part.target);
    } else if (part.host.defined()) {
      device.copyFromHost(part.host, part.target);
    }
    pendingOf.erase(part.value);
  }
  p.done = true;
  commEvent(p.name, p.start, end,
            fmt::format("{{\"bytes\": {}, \"values\": {}}}", p.bytes,
                        p.parts.size()));
}

void Executor::progress(bool all) {
  for (auto &p : pending)
    if (!p->done && (all || p->work->test()))
      finishPending(*p);
  pending.erase(
      std::remove_if(pending.begin(), pending.end(),
                     [](const std::unique_ptr<Pending> &p) { return p->done; }),
      pending.end());
}

void Executor::waitFor(int v) {
  auto it = pendingOf.find(v);
  if (it == pendingOf.end())
    return;
  if (!it->second) {
    // In the open bucket: a reader needs it now.
    throw Error(fmt::format("internal error: value {} is read while its "
                            "gradient bucket is open",
                            v));
  }
  finishPending(*it->second);
}

void Executor::accumulate(const OpInfo &op, Comm &comm) {
  const Tensor &in = input(op, 0);
  int j = currentMicroBatch, m = plan.numMicroBatches;
  Accumulator &acc = accumulators[op.index];
  if (j != acc.count)
    throw Error(fmt::format("accumulates over micro-batches, but micro-batch "
                            "{} runs after {} of them; the schedule must run "
                            "an accumulating AllReduce for micro-batches 0 "
                            "to {} in order",
                            j, acc.count, m - 1));
  if (memory.accumulatedFrom[op.index] >= 0) {
    // Its product summed itself into acc.sum (runKernel).
  } else if (j == 0) {
    // The step's sum lives in micro-batch 0's buffer of the output.
    int saved = currentMicroBatch;
    currentMicroBatch = 0;
    acc.sum = resultBuffer(op.outputs[0]);
    currentMicroBatch = saved;
    device.copy(in, acc.sum);
  } else {
    device.addInto(acc.sum, in);
  }
  ++acc.count;
  // Before the last micro-batch: the running partial sum (which the plan
  // reads only at the last micro-batch).
  values[op.outputs[0]] = acc.sum;
  // Later tasks of this micro-batch (the optimizer's) import the sum.
  if (memory.residence[op.outputs[0]] == Residence::Kept)
    kept[{op.outputs[0], j}] = acc.sum;
  if (j == m - 1) {
    std::vector<int> rest;
    for (int a : op.attrs.meshAxes)
      if (a != plan.mesh.microBatchAxis())
        rest.push_back(a);
    if (!rest.empty()) {
      bool async = plan.lastUse[op.outputs[0]] >= 0 &&
                   !readNext(plan, op.outputs[0], op.index);
      bool bucketable = async && options.gradBucketBytes > 0 &&
                        plan.training.present && gradientOnly[op.outputs[0]];
      startAllReduce(op, acc.sum, rest, comm, bucketable);
      if (!async)
        waitFor(op.outputs[0]);
    }
    accumulators.erase(op.index);
  }
}

void Executor::reduceScatter(const OpInfo &op, Comm &comm) {
  std::vector<int> axes;
  bool micro = false;
  for (int a : op.attrs.meshAxes) {
    if (a == plan.mesh.microBatchAxis())
      micro = true;
    else
      axes.push_back(a);
  }
  Tensor in = input(op, 0);
  if (micro) {
    int j = currentMicroBatch, m = plan.numMicroBatches;
    Accumulator &acc = accumulators[op.index];
    if (j != acc.count)
      throw Error(fmt::format("accumulates over micro-batches, but micro-batch "
                              "{} runs after {} of them",
                              j, acc.count));
    if (j == 0) {
      acc.sum = device.allocate(in.type());
      device.copy(in, acc.sum);
      scatterAccumBytes += acc.sum.numBytes();
      scatterAccumPeak = std::max(scatterAccumPeak, scatterAccumBytes);
    } else {
      device.addInto(acc.sum, in);
    }
    ++acc.count;
    if (j < m - 1)
      return; // Read only at the last micro-batch.
    in = acc.sum;
  }
  auto start = Clock::now();
  Tensor out = resultBuffer(op.outputs[0]);
  if (device.memory() != MemoryKind::Host && comm.group(axes).deviceMemory()) {
    // Device buffers (NCCL): the blocks packed on the device when they are
    // not already consecutive (dim 0 and even), then scattered.
    int64_t n = comm.mesh().numBlocks(axes), dim = op.attrs.dim;
    int64_t size = in.shape()[dim], block = (size + n - 1) / n, outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= in.shape()[d];
    Tensor src = in;
    if (block * n != size || (outer > 1 && n > 1)) {
      src = device.temporary({in.dtype(), {n * out.numElements()}});
      device.packBlocks(in, n, dim, src);
    }
    device.synchronize(); // the operand is written on the compute stream
    comm.group(axes)
        .reduceScatter(src.rawData(), out.rawData(), out.numElements(),
                       in.dtype())
        ->wait();
  } else {
    Tensor hostIn = device.toHost(in);
    Tensor hostOut = device.memory() == MemoryKind::Host
                         ? out
                         : Tensor::uninitialized(out.type());
    comm.reduceScatter(hostIn, hostOut, op.attrs.dim, axes);
    if (device.memory() != MemoryKind::Host)
      device.copyFromHost(hostOut, out);
  }
  values[op.outputs[0]] = out;
  if (micro) {
    scatterAccumBytes -= accumulators[op.index].sum.numBytes();
    accumulators.erase(op.index);
  }
  commEvent(
      fmt::format("ReduceScatter over {}", axesName(plan.mesh, axes)), start,
      Clock::now(),
      fmt::format("{{\"op\": {}, \"bytes\": {}}}", op.index, in.numBytes()));
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

void Executor::defer(const OpInfo &op) {
  DeferredUpdate d;
  d.op = &op;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] < 0) {
      d.operands.emplace_back();
      continue;
    }
    // Gradients may still be in a bucket: read them at the end of the step.
    int v = op.inputs[i];
    d.operands.push_back(pendingOf.count(v) ? Tensor() : input(op, i));
  }
  // SGD without momentum may have no buffer.
  d.operands.resize(op.kind == OpKind::AdamW ? 4
                    : op.kind == OpKind::SGD ? 3
                                             : 2);
  deferred.push_back(std::move(d));
}

void Executor::applyOptimizers(Comm &comm) {
  // Every gradient is reduced by now (run() waited); read the ones that were
  // in flight when their optimizer op ran.
  for (DeferredUpdate &d : deferred)
    for (std::size_t i = 0; i < d.op->inputs.size(); ++i)
      if (!d.operands[i].defined() && d.op->inputs[i] >= 0)
        d.operands[i] = input(*d.op, i);
  // The global norm, every step (clipping uses it; a NaN or Inf one stops
  // the run before any update is applied, see lastGradNorm()). Every rank
  // joins, with or without optimizer ops of its own.
  gradNorm = 0;
  lastLr = std::numeric_limits<double>::quiet_NaN();
  {
    double local = 0;
    for (const DeferredUpdate &d : deferred) {
      if (d.op->kind == OpKind::Assign || d.op->attrs.optimizer.mirror)
        continue;
      int w = d.op->inputs[0];
      auto it = weightOfValue.find(w);
      int64_t replicas = 1;
      const std::vector<int> &zeroAxes = d.op->attrs.zeroAxes;
      for (std::size_t a = 0; a < plan.mesh.numAxes(); ++a) {
        if (static_cast<int>(a) == plan.mesh.microBatchAxis())
          continue;
        // Under ZeRO 1/2 the gradient is this rank's block over its axes.
        if (std::find(zeroAxes.begin(), zeroAxes.end(), static_cast<int>(a)) !=
            zeroAxes.end())
          continue;
        if (it == weightOfValue.end() ||
            !it->second->sharding.uses(static_cast<int>(a)))
          replicas *= plan.mesh.axisSize(a);
      }
      local += deviceSumOfSquares(device, d.operands[1]) /
               static_cast<double>(replicas);
    }
    gradNorm = std::sqrt((global ? *global : comm.communicator()).sum(local));
  }
  // Under loss scaling the gradients are `scale` times too large.
  const double lossScale = scaler.active ? scaler.scale : 1.0;
  gradNorm /= lossScale;
  scaler.lastSkipped = false;
  if (!std::isfinite(gradNorm)) {
    // An overflow: skip the update and back off, unless the scale is at its
    // minimum already (then the caller stops the run, as without a scaler).
    const TrainingInfo::LossScale &ls = plan.training.lossScale;
    if (scaler.active && scaler.scale > ls.min) {
      scaler.scale = std::max(ls.min, scaler.scale * ls.backoffFactor);
      scaler.cleanSteps = 0;
      ++scaler.skippedSteps;
      scaler.lastSkipped = true;
      deferred.clear();
    }
    return; // no update
  }
  // Skipped steps do not count for the schedule and the bias correction
  // (torch.cuda.amp.GradScaler skips optimizer.step() altogether).
  int64_t step = completedSteps + 1 - scaler.skippedSteps;
  for (DeferredUpdate &d : deferred) {
    const OpInfo &op = *d.op;
    if (op.kind != OpKind::Assign && std::isnan(lastLr))
      lastLr = learningRate(op.attrs.optimizer, step);
    try {
      const OptimizerParams &params = op.attrs.optimizer;
      float scale = static_cast<float>(clipScale(params, gradNorm) / lossScale);
      std::vector<Tensor> t = d.operands;
      if (!op.attrs.zeroAxes.empty()) {
        // ZeRO 1/2: this rank's rows of w; g and the state are its block
        // (zero-padded past the end of w).
        auto [first, rows] = zeroRows(op, t[0], t[1].shape()[0], comm);
        // A plain copy: lambdas cannot capture structured bindings in C++17.
        const int64_t count = rows;
        if (count == 0)
          continue;
        auto rowsOf = [&](const Tensor &x, int64_t begin) {
          if (!x.defined())
            return x;
          Shape shape = x.shape();
          std::size_t rowBytes = x.numBytes() / shape[0];
          shape[0] = count;
          auto *base = const_cast<uint8_t *>(x.bytes());
          return Tensor::view({x.dtype(), shape},
                              std::shared_ptr<uint8_t>(x.storageHandle(),
                                                       base + begin * rowBytes),
                              x.memory());
        };
        t[0] = rowsOf(t[0], first);
        for (std::size_t i = 1; i < t.size(); ++i)
          t[i] = rowsOf(t[i], 0);
      }
      if (op.kind == OpKind::Assign)
        device.copy(t[1], t[0]);
      else if (op.kind == OpKind::AdamW)
        deviceAdamW(device, params, step, scale, t[0], t[1], t[2], t[3]);
      else
        deviceSgd(device, params, step, scale, t[0], t[1], t[2]);
    } catch (const Error &e) {
      throw Error(fmt::format("{}: {}", op.describe(), e.what()));
    }
  }
  // ZeRO 1/2: every rank has updated its block; the weights are whole again
  // once gathered.
  for (DeferredUpdate &d : deferred)
    if (!d.op->attrs.zeroAxes.empty())
      gatherZeroWeight(*d.op, d.operands[0], d.operands[1].shape()[0], comm);
  deferred.clear();
  if (scaler.active &&
      ++scaler.cleanSteps >= plan.training.lossScale.growthInterval) {
    scaler.scale *= plan.training.lossScale.growthFactor;
    scaler.cleanSteps = 0;
  }
}

std::pair<int64_t, int64_t> Executor::zeroRows(const OpInfo &op,
                                               const Tensor &w, int64_t block,
                                               Comm &comm) const {
  int64_t first = comm.groupIndex(op.attrs.zeroAxes) * block;
  return {first, std::max<int64_t>(0, std::min(block, w.shape()[0] - first))};
}

void Executor::gatherZeroWeight(const OpInfo &op, const Tensor &w,
                                int64_t block, Comm &comm) {
  auto start = Clock::now();
  int64_t rows = w.shape()[0];
  int64_t n = op.attrs.zeroGroupSize;
  auto [first, count] = zeroRows(op, w, block, comm);
  if (device.memory() != MemoryKind::Host &&
      comm.group(op.attrs.zeroAxes).deviceMemory()) {
    // Device buffers (NCCL): this rank's rows (zero-padded to a block)
    // gathered from every rank, then the weight's rows copied back.
    std::size_t rowBytes = rows ? w.numBytes() / rows : 0;
    Shape blockShape = w.shape();
    blockShape[0] = block;
    Shape allShape = w.shape();
    allShape[0] = block * n;
    Tensor mine = device.temporary({w.dtype(), blockShape});
    Tensor all = device.temporary({w.dtype(), allShape});
    auto rowsOf = [&](const Tensor &t, int64_t from, int64_t count) {
      Shape shape = w.shape();
      shape[0] = count;
      return Tensor::view(
          {w.dtype(), shape},
          std::shared_ptr<uint8_t>(t.storageHandle(),
                                   const_cast<uint8_t *>(t.bytes()) +
                                       from * rowBytes),
          t.memory());
    };
    if (count > 0) {
      Tensor part = rowsOf(mine, 0, count);
      device.copy(rowsOf(w, first, count), part);
    }
    device.synchronize();
    comm.group(op.attrs.zeroAxes)
        .allGather(mine.rawData(), all.rawData(), mine.numBytes())
        ->wait();
    Tensor target = w;
    device.copy(rowsOf(all, 0, rows), target);
    commEvent(
        fmt::format("AllGather over {} (ZeRO weight)",
                    axesName(plan.mesh, op.attrs.zeroAxes)),
        start, Clock::now(),
        fmt::format("{{\"op\": {}, \"bytes\": {}}}", op.index, all.numBytes()));
    return;
  }
  Tensor host = device.toHost(w);
  std::size_t rowBytes = rows ? host.numBytes() / rows : 0;
  Shape blockShape = w.shape();
  blockShape[0] = block;
  Tensor mine(TensorType{w.dtype(), blockShape});
  if (count > 0)
    std::memcpy(mine.rawData(), host.bytes() + first * rowBytes,
                count * rowBytes);
  Shape allShape = w.shape();
  allShape[0] = block * n;
  Tensor all = Tensor::uninitialized({w.dtype(), allShape});
  comm.allGather(mine, all, 0, op.attrs.zeroAxes);
  std::memcpy(host.rawData(), all.rawData(), rows * rowBytes);
  if (device.memory() != MemoryKind::Host) {
    Tensor target = w;
    device.copyFromHost(host, target);
  }
  commEvent(
      fmt::format("AllGather over {} (ZeRO weight)",
                  axesName(plan.mesh, op.attrs.zeroAxes)),
      start, Clock::now(),
      fmt::format("{{\"op\": {}, \"bytes\": {}}}", op.index, all.numBytes()));
}

//===----------------------------------------------------------------------===//
// Send and Recv
//===----------------------------------------------------------------------===//

namespace {

/// The box of `msg` relative to a block at `blockOffsets`.
Shape relativeOffsets(const TransferMessage &msg, const Shape &blockOffsets) {
  Shape rel(msg.offsets.size());
  for (std::size_t d = 0; d < rel.size(); ++d)
    rel[d] = msg.offsets[d] - blockOffsets[d];
  return rel;
}

} // namespace

void Executor::send(const OpInfo &op, Comm &comm) {
  // A gradient summed over the micro-batches goes to an optimizer
  // TaskGraph, which runs (and receives) once, at the last micro-batch.
  if (op.attrs.lastMicroBatchOnly &&
      currentMicroBatch != plan.numMicroBatches - 1)
    return;
  auto start = Clock::now();
  const TransferInfo &t = plan.transfers[op.transfer];
  Tensor in = device.toHost(input(op, 0));
  int mb = currentMicroBatch;
  int tag = t.id * kMaxMicroBatches + mb;
  std::size_t elem = dtypeSize(in.dtype());
  std::vector<int64_t> peers;
  std::size_t total = 0;
  Communicator &world = global ? *global : comm.communicator();
  for (const TransferMessage &msg : t.messages) {
    if (msg.src != worldRank)
      continue;
    Tensor buf = Tensor::uninitialized({in.dtype(), msg.shape});
    copyBox(in.rawData(), in.shape(), relativeOffsets(msg, t.blockOffsets),
            buf.rawData(), msg.shape, Shape(msg.shape.size(), 0), msg.shape,
            elem);
    peers.push_back(msg.dst);
    total += buf.numBytes();
    if (msg.dst == worldRank) {
      // Buffered: this rank's Recv may run later in the schedule.
      selfMessages[{t.id, mb}] = std::move(buf);
      continue;
    }
    sendWork.push_back(world.send(buf.rawData(), buf.numBytes(),
                                  static_cast<int>(msg.dst), tag));
    sendBuffers.push_back(std::move(buf));
  }
  auto end = Clock::now();
  if (profiling) {
    TransferTime tt{t.id, mb, true, usSinceStart(start), usSinceStart(end),
                    0,    {}};
    for (const TransferMessage &msg : t.messages)
      if (msg.src == worldRank && msg.dst != worldRank) {
        tt.bytes += msg.numElements() * static_cast<int64_t>(elem);
        tt.peers.push_back(msg.dst);
      }
    if (!tt.peers.empty())
      stepProfile.transfers.push_back(std::move(tt));
  }
  commEvent(fmt::format("Send {}", t.id), start, end,
            fmt::format("{{\"transfer\": {}, \"micro_batch\": {}, \"to\": "
                        "[{}], \"bytes\": {}}}",
                        t.id, mb, fmt::join(peers, ", "), total));
}

void Executor::recv(const OpInfo &op, Comm &comm) {
  auto start = Clock::now();
  const TransferInfo &t = plan.transfers[op.transfer];
  int mb = currentMicroBatch;
  int tag = t.id * kMaxMicroBatches + mb;
  Tensor out = resultBuffer(op.outputs[0]);
  // A sum over the micro-batches comes once, at the last one; before it,
  // zeros (read only by ops whose results matter at the last one).
  if (op.attrs.lastMicroBatchOnly && mb != plan.numMicroBatches - 1) {
    device.zero(out);
    values[op.outputs[0]] = out;
    return;
  }
  Tensor hostOut =
      device.memory() == MemoryKind::Host ? out : Tensor(out.type());
  if (device.memory() == MemoryKind::Host)
    device.zero(out);
  std::size_t elem = dtypeSize(out.dtype());
  std::vector<const TransferMessage *> mine;
  for (const TransferMessage &msg : t.messages)
    if (msg.dst == worldRank)
      mine.push_back(&msg);
  std::vector<Tensor> bufs(mine.size());
  std::vector<std::unique_ptr<Work>> work;
  std::vector<int64_t> peers;
  std::size_t total = 0;
  Communicator &world = global ? *global : comm.communicator();
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const TransferMessage &msg = *mine[i];
    peers.push_back(msg.src);
    if (msg.src == worldRank) {
      auto it = selfMessages.find({t.id, mb});
      if (it == selfMessages.end())
        throw Error(fmt::format("receives part of transfer {} for "
                                "micro-batch {} from this rank itself, but "
                                "this rank has not sent it yet (the schedule "
                                "runs the Recv before the Send)",
                                t.id, mb));
      bufs[i] = std::move(it->second);
      selfMessages.erase(it);
      total += bufs[i].numBytes();
      continue;
    }
    bufs[i] = Tensor::uninitialized({out.dtype(), msg.shape});
    total += bufs[i].numBytes();
    work.push_back(world.recv(bufs[i].rawData(), bufs[i].numBytes(),
                              static_cast<int>(msg.src), tag));
  }
  auto waitStart = Clock::now();
  for (auto &w : work)
    w->wait();
  auto waitEnd = Clock::now();
  recvWaitSeconds += secondsBetween(waitStart, waitEnd);
  if (profiling && !work.empty()) {
    TransferTime tt{t.id, mb, false, usSinceStart(start), usSinceStart(waitEnd),
                    0,    {}};
    for (const TransferMessage *msg : mine)
      if (msg->src != worldRank) {
        tt.bytes += msg->numElements() * static_cast<int64_t>(elem);
        tt.peers.push_back(msg->src);
      }
    stepProfile.transfers.push_back(std::move(tt));
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const TransferMessage &msg = *mine[i];
    copyBox(bufs[i].rawData(), msg.shape, Shape(msg.shape.size(), 0),
            hostOut.rawData(), hostOut.shape(),
            relativeOffsets(msg, t.blockOffsets), msg.shape, elem);
  }
  if (device.memory() != MemoryKind::Host)
    device.copyFromHost(hostOut, out);
  values[op.outputs[0]] = out;
  commEvent(fmt::format("Recv {}", t.id), start, Clock::now(),
            fmt::format("{{\"transfer\": {}, \"micro_batch\": {}, \"from\": "
                        "[{}], \"bytes\": {}}}",
                        t.id, mb, fmt::join(peers, ", "), total));
}

void Executor::progressSends(bool wait) {
  if (sendWork.empty())
    return;
  bool done = true;
  for (auto &w : sendWork) {
    if (wait)
      w->wait();
    else if (!w->test())
      done = false;
  }
  if (done) {
    sendWork.clear();
    sendBuffers.clear();
  }
}
