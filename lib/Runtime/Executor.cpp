//===- Executor.cpp - Running a program's ops -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "Comm.h"
#include "cpu/Kernels.h"
#include "cpu/Optimizers.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace shoal::rt;

Executor::Executor(const LoadedPlan &plan)
    : plan(plan), values(plan.values.size()),
      persistent(plan.values.size(), false) {
  for (const WeightInfo &w : plan.weights)
    weightOfValue[w.value] = &w;
}

void Executor::setValue(int id, Tensor tensor) {
  if (id < 0 || id >= static_cast<int>(values.size()))
    throw Error(fmt::format("value id {} out of range", id));
  if (tensor.type() != plan.values[id])
    throw Error(fmt::format("value {} is {} but was given a {} tensor", id,
                            plan.values[id].str(), tensor.type().str()));
  values[id] = std::move(tensor);
  persistent[id] = true;
}

const Tensor &Executor::input(const OpInfo &op, std::size_t i) const {
  const Tensor &t = values[op.inputs[i]];
  if (!t.defined())
    throw Error(
        fmt::format("input #{} (value {}) has no data", i, op.inputs[i]));
  return t;
}

void Executor::setMicroBatchValue(int id, int microBatch, Tensor tensor) {
  if (microBatch < 0 || microBatch >= plan.numMicroBatches)
    throw Error(fmt::format("micro-batch {} out of range (the program has {})",
                            microBatch, plan.numMicroBatches));
  setValue(id, tensor);
  std::vector<Tensor> &blocks = microBatchInputs[id];
  blocks.resize(plan.numMicroBatches);
  blocks[microBatch] = std::move(tensor);
}

Tensor Executor::fetchOutput(int id, int microBatch) {
  auto out = outputs.find(id);
  if (out != outputs.end() &&
      microBatch < static_cast<int>(out->second.size()) &&
      out->second[microBatch].defined())
    return out->second[microBatch];
  auto in = microBatchInputs.find(id);
  if (in != microBatchInputs.end())
    return in->second.at(microBatch);
  return values.at(id);
}

double Executor::usSinceStart(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - stepStart).count();
}

std::string shoal::rt::jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else
      out += c;
  }
  return out + "\"";
}

namespace {

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

void Executor::run(Comm &comm, bool verbose) {
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  bool print = verbose && worldRank == 0;
  // Values nothing reads (and that are no outputs) can go right away.
  for (std::size_t v = 0; v < values.size(); ++v)
    if (plan.lastUse[v] == -1 && !persistent[v])
      values[v] = Tensor();
  stepStart = Clock::now();
  recvWaitSeconds = 0;
  stepProfile = StepProfile();
  double taskSeconds = 0;
  deferred.clear();
  accumulators.clear();
  for (const ScheduleEntry &e : plan.schedule) {
    auto start = Clock::now();
    runTask(e.task, e.microBatch, comm, print);
    auto end = Clock::now();
    taskSeconds += secondsBetween(start, end);
    const TaskInfo &task = plan.tasks[e.task];
    std::string name =
        task.name.empty() ? fmt::format("task{}", e.task) : task.name;
    stepProfile.events.push_back(
        {fmt::format("{}{} {}", e.backward ? 'B' : 'F', e.microBatch, name), 0,
         usSinceStart(start), usSinceStart(end) - usSinceStart(start),
         fmt::format("{{\"task\": {}, \"task_name\": {}, \"micro_batch\": "
                     "{}, \"backward\": {}}}",
                     e.task, jsonString(name), e.microBatch,
                     e.backward ? "true" : "false")});
    progressSends(false);
  }
  progressSends(true);
  stash.clear();
  selfMessages.clear();
  accumulators.clear();
  if (plan.training.present) {
    auto start = Clock::now();
    applyOptimizers();
    taskSeconds += secondsBetween(start, Clock::now());
    ++completedSteps;
  }
  stepProfile.busySeconds = std::max(0.0, taskSeconds - recvWaitSeconds);
}

void Executor::runTask(int taskIndex, int microBatch, Comm &comm, bool print) {
  const TaskInfo &task = plan.tasks[taskIndex];
  currentMicroBatch = microBatch;
  comm.setMicroBatch(microBatch);
  for (auto &entry : microBatchInputs)
    values[entry.first] = entry.second[microBatch];
  for (int v : task.imports) {
    auto it = stash.find({microBatch, v});
    if (it == stash.end())
      throw Error(fmt::format("task '{}' of micro-batch {} reads value {}, "
                              "which the task defining it has not made",
                              task.name, microBatch, v));
    values[v] = it->second;
  }
  for (int i = task.begin; i < task.end; ++i) {
    const OpInfo &op = plan.ops[i];
    auto start = Clock::now();
    try {
      runOp(op, comm);
    } catch (const Error &e) {
      // Kernel messages start with the op kind, which describe() has too.
      std::string msg = e.what();
      std::string kind = op.kindName + ": ";
      if (msg.compare(0, kind.size(), kind) == 0)
        msg = msg.substr(kind.size());
      throw Error(fmt::format("{}: {}", op.describe(), msg));
    }
    if (profiling)
      stepProfile.ops.push_back(
          {op.index, microBatch, secondsBetween(start, Clock::now())});
    for (int v : op.inputs)
      if (v >= 0 && plan.lastUse[v] == op.index && !persistent[v])
        values[v] = Tensor();
    for (int v : op.outputs)
      if (v >= 0 && plan.lastUse[v] == -1 && !persistent[v])
        values[v] = Tensor();
    if (print) {
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      std::string what = op.describe();
      if (plan.numMicroBatches > 1)
        what += fmt::format(" mb {}", microBatch);
      std::fprintf(stderr, "shoal-run: %-60s %10.3f ms\n", what.c_str(), ms);
    }
  }
  for (int v : task.exports)
    stash[{microBatch, v}] = values[v];
  for (const PortInfo &port : plan.outputs)
    if (plan.definingTask[port.value] == taskIndex) {
      std::vector<Tensor> &perMicroBatch = outputs[port.value];
      perMicroBatch.resize(plan.numMicroBatches);
      perMicroBatch[microBatch] = values[port.value];
    }
}

void Executor::runOp(const OpInfo &op, Comm &comm) {
  if (op.kind == OpKind::Send) {
    send(op);
    return;
  }
  if (op.kind == OpKind::Recv) {
    recv(op);
    return;
  }
  if (op.kind == OpKind::AdamW || op.kind == OpKind::SGD) {
    defer(op);
    return;
  }
  int mbAxis = plan.mesh.microBatchAxis();
  if (op.kind == OpKind::AllReduce && mbAxis >= 0 &&
      std::find(op.attrs.meshAxes.begin(), op.attrs.meshAxes.end(), mbAxis) !=
          op.attrs.meshAxes.end()) {
    accumulate(op, comm);
    return;
  }
  std::vector<const Tensor *> inputs;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    inputs.push_back(op.inputs[i] < 0 ? nullptr : &input(op, i));
  std::vector<Tensor> outs;
  runOnCpu(plan, op, inputs, outs, comm);
  for (std::size_t i = 0; i < op.outputs.size(); ++i)
    if (op.outputs[i] >= 0)
      values[op.outputs[i]] = std::move(outs[i]);
}

namespace {

template <typename T> void addInto(Tensor &acc, const Tensor &in) {
  T *a = acc.data<T>();
  const T *b = in.data<T>();
  for (int64_t i = 0, n = acc.numElements(); i < n; ++i)
    a[i] = T(a[i] + b[i]); // 8-bit integers wrap
}

} // namespace

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
  if (j == 0) {
    // A copy: the input may be a weight or a value read elsewhere.
    acc.sum = Tensor(in.type());
    if (in.numBytes())
      std::memcpy(acc.sum.rawData(), in.rawData(), in.numBytes());
  } else {
    switch (in.dtype()) {
    case DType::F32:
      addInto<float>(acc.sum, in);
      break;
    case DType::I64:
      addInto<int64_t>(acc.sum, in);
      break;
    case DType::I32:
      addInto<int32_t>(acc.sum, in);
      break;
    case DType::F64:
      addInto<double>(acc.sum, in);
      break;
    case DType::I8:
      addInto<int8_t>(acc.sum, in);
      break;
    case DType::U8:
      addInto<uint8_t>(acc.sum, in);
      break;
    case DType::Bool:
    case DType::F16:
    case DType::BF16:
      throw Error(fmt::format("AllReduce is not supported on {} tensors",
                              dtypeName(in.dtype())));
    }
  }
  ++acc.count;
  Tensor out = acc.sum;
  if (j == m - 1) {
    std::vector<int> rest;
    for (int a : op.attrs.meshAxes)
      if (a != plan.mesh.microBatchAxis())
        rest.push_back(a);
    if (!rest.empty())
      comm.allReduce(out, out, rest);
    accumulators.erase(op.index);
  }
  // Before the last micro-batch: the running partial sum (which the plan
  // reads only at the last micro-batch).
  values[op.outputs[0]] = std::move(out);
}

void Executor::defer(const OpInfo &op) {
  DeferredUpdate d;
  d.op = &op;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    d.operands.push_back(op.inputs[i] < 0 ? Tensor() : input(op, i));
  // SGD without momentum may have no buffer.
  d.operands.resize(op.kind == OpKind::AdamW ? 4 : 3);
  deferred.push_back(std::move(d));
}

void Executor::applyOptimizers() {
  gradNorm = 0;
  if (plan.training.clipping) {
    // Every rank joins, with or without optimizer ops of its own.
    double local = 0;
    for (const DeferredUpdate &d : deferred) {
      int w = d.op->inputs[0];
      auto it = weightOfValue.find(w);
      int64_t replicas = 1;
      for (std::size_t a = 0; a < plan.mesh.numAxes(); ++a) {
        if (static_cast<int>(a) == plan.mesh.microBatchAxis())
          continue;
        if (it == weightOfValue.end() ||
            !it->second->sharding.uses(static_cast<int>(a)))
          replicas *= plan.mesh.axisSize(a);
      }
      local += cpu::sumOfSquares(d.operands[1]) / static_cast<double>(replicas);
    }
    double global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    gradNorm = std::sqrt(global);
  }
  int64_t step = completedSteps + 1;
  for (DeferredUpdate &d : deferred) {
    const OpInfo &op = *d.op;
    try {
      const cpu::OptimizerParams &params = op.attrs.optimizer;
      float scale = cpu::clipScale(params, gradNorm);
      std::vector<Tensor> &t = d.operands;
      if (op.kind == OpKind::AdamW)
        cpu::adamwUpdate(params, step, scale, t[0], t[1], t[2], t[3]);
      else
        cpu::sgdUpdate(params, step, scale, t[0], t[1], t[2]);
    } catch (const Error &e) {
      throw Error(fmt::format("{}: {}", op.describe(), e.what()));
    }
  }
  deferred.clear();
}

namespace {

/// The box of `msg` relative to a block at `blockOffsets`.
Shape relativeOffsets(const TransferMessage &msg, const Shape &blockOffsets) {
  Shape rel(msg.offsets.size());
  for (std::size_t d = 0; d < rel.size(); ++d)
    rel[d] = msg.offsets[d] - blockOffsets[d];
  return rel;
}

int messageBytes(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX))
    throw Error(fmt::format("messages of {} bytes (over 2 GiB) are not "
                            "supported yet",
                            bytes));
  return static_cast<int>(bytes);
}

} // namespace

void Executor::send(const OpInfo &op) {
  auto start = Clock::now();
  const TransferInfo &t = plan.transfers[op.transfer];
  const Tensor &in = input(op, 0);
  int mb = currentMicroBatch;
  int tag = t.id * kMaxMicroBatches + mb;
  std::size_t elem = dtypeSize(in.dtype());
  std::vector<int64_t> peers;
  std::size_t total = 0;
  for (const TransferMessage &msg : t.messages) {
    if (msg.src != worldRank)
      continue;
    std::vector<uint8_t> buf(static_cast<std::size_t>(msg.numElements()) *
                             elem);
    copyBox(in.rawData(), in.shape(), relativeOffsets(msg, t.blockOffsets),
            buf.data(), msg.shape, Shape(msg.shape.size(), 0), msg.shape, elem);
    peers.push_back(msg.dst);
    total += buf.size();
    if (msg.dst == worldRank) {
      // Buffered: this rank's Recv may run later in the schedule.
      selfMessages[{t.id, mb}] = std::move(buf);
      continue;
    }
    MPI_Request req;
    MPI_Isend(buf.data(), messageBytes(buf.size()), MPI_BYTE,
              static_cast<int>(msg.dst), tag, MPI_COMM_WORLD, &req);
    sendRequests.push_back(req);
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
  stepProfile.events.push_back(
      {fmt::format("Send {}", t.id), 1, usSinceStart(start),
       usSinceStart(end) - usSinceStart(start),
       fmt::format("{{\"transfer\": {}, \"micro_batch\": {}, \"to\": [{}], "
                   "\"bytes\": {}}}",
                   t.id, mb, fmt::join(peers, ", "), total)});
}

void Executor::recv(const OpInfo &op) {
  auto start = Clock::now();
  const TransferInfo &t = plan.transfers[op.transfer];
  int mb = currentMicroBatch;
  int tag = t.id * kMaxMicroBatches + mb;
  Tensor out(plan.values[op.outputs[0]]);
  std::size_t elem = dtypeSize(out.dtype());
  std::vector<const TransferMessage *> mine;
  for (const TransferMessage &msg : t.messages)
    if (msg.dst == worldRank)
      mine.push_back(&msg);
  std::vector<std::vector<uint8_t>> bufs(mine.size());
  std::vector<MPI_Request> reqs;
  std::vector<int64_t> peers;
  std::size_t total = 0;
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
      total += bufs[i].size();
      continue;
    }
    bufs[i].resize(static_cast<std::size_t>(msg.numElements()) * elem);
    total += bufs[i].size();
    reqs.emplace_back();
    MPI_Irecv(bufs[i].data(), messageBytes(bufs[i].size()), MPI_BYTE,
              static_cast<int>(msg.src), tag, MPI_COMM_WORLD, &reqs.back());
  }
  auto waitStart = Clock::now();
  if (!reqs.empty())
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(),
                MPI_STATUSES_IGNORE);
  auto waitEnd = Clock::now();
  recvWaitSeconds += secondsBetween(waitStart, waitEnd);
  if (profiling && !reqs.empty()) {
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
    copyBox(bufs[i].data(), msg.shape, Shape(msg.shape.size(), 0),
            out.rawData(), out.shape(), relativeOffsets(msg, t.blockOffsets),
            msg.shape, elem);
  }
  values[op.outputs[0]] = std::move(out);
  auto end = Clock::now();
  stepProfile.events.push_back(
      {fmt::format("Recv {}", t.id), 1, usSinceStart(start),
       usSinceStart(end) - usSinceStart(start),
       fmt::format("{{\"transfer\": {}, \"micro_batch\": {}, \"from\": [{}], "
                   "\"bytes\": {}}}",
                   t.id, mb, fmt::join(peers, ", "), total)});
}

void Executor::progressSends(bool wait) {
  if (sendRequests.empty())
    return;
  int done = 0;
  if (wait) {
    MPI_Waitall(static_cast<int>(sendRequests.size()), sendRequests.data(),
                MPI_STATUSES_IGNORE);
    done = 1;
  } else {
    MPI_Testall(static_cast<int>(sendRequests.size()), sendRequests.data(),
                &done, MPI_STATUSES_IGNORE);
  }
  if (done) {
    sendRequests.clear();
    sendBuffers.clear();
  }
}

void Executor::runOnCpu(const LoadedPlan &plan, const OpInfo &op,
                        const std::vector<const Tensor *> &inputs,
                        std::vector<Tensor> &outs, Comm &comm) {
  const OpAttrs &a = op.attrs;
  // Allocate the outputs with their declared local types, except for ops
  // that alias their input.
  bool aliases =
      op.kind == OpKind::Reshape ||
      ((op.kind == OpKind::ReduceMean || op.kind == OpKind::ReduceSum) &&
       a.reduceIsIdentity);
  outs.clear();
  for (int v : op.outputs)
    outs.push_back(v >= 0 && !aliases ? Tensor(plan.values[v]) : Tensor());
  auto input = [&](const OpInfo &, std::size_t i) -> const Tensor & {
    if (i >= inputs.size() || !inputs[i] || !inputs[i]->defined())
      throw Error(fmt::format("input #{} has no data", i));
    return *inputs[i];
  };
  auto optionalInput = [&](std::size_t i) -> const Tensor * {
    if (i >= inputs.size() || !inputs[i])
      return nullptr;
    return &input(op, i);
  };
  auto optionalOutput = [&](std::size_t i) -> Tensor * {
    if (i >= outs.size() || !outs[i].defined())
      return nullptr;
    return &outs[i];
  };

  switch (op.kind) {
  case OpKind::MatMul:
    cpu::matmul(input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Gemm:
    cpu::gemm(input(op, 0), input(op, 1), optionalInput(2), a.alpha, a.beta,
              a.transA, a.transB, outs[0]);
    break;
  case OpKind::Add:
    cpu::binary(cpu::BinaryOp::Add, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Sub:
    cpu::binary(cpu::BinaryOp::Sub, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Mul:
    cpu::binary(cpu::BinaryOp::Mul, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Div:
    cpu::binary(cpu::BinaryOp::Div, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Pow:
    cpu::binary(cpu::BinaryOp::Pow, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Erf:
    cpu::unary(cpu::UnaryOp::Erf, input(op, 0), outs[0]);
    break;
  case OpKind::Tanh:
    cpu::unary(cpu::UnaryOp::Tanh, input(op, 0), outs[0]);
    break;
  case OpKind::Relu:
    cpu::unary(cpu::UnaryOp::Relu, input(op, 0), outs[0]);
    break;
  case OpKind::Sqrt:
    cpu::unary(cpu::UnaryOp::Sqrt, input(op, 0), outs[0]);
    break;
  case OpKind::Exp:
    cpu::unary(cpu::UnaryOp::Exp, input(op, 0), outs[0]);
    break;
  case OpKind::Neg:
    cpu::unary(cpu::UnaryOp::Neg, input(op, 0), outs[0]);
    break;
  case OpKind::Sigmoid:
    cpu::unary(cpu::UnaryOp::Sigmoid, input(op, 0), outs[0]);
    break;
  case OpKind::Softmax:
    cpu::softmax(input(op, 0), a.axis, outs[0]);
    break;
  case OpKind::LayerNormalization:
    cpu::layerNorm(input(op, 0), input(op, 1), optionalInput(2), a.axis,
                   a.epsilon, outs[0], optionalOutput(1), optionalOutput(2));
    break;
  case OpKind::Gather:
    cpu::gather(input(op, 0), input(op, 1), a.axis, outs[0]);
    break;
  case OpKind::Reshape:
    // Shares the input's buffer.
    outs[0] = Tensor::alias(input(op, 0), plan.values[op.outputs[0]].shape);
    break;
  case OpKind::Transpose:
    cpu::transpose(input(op, 0), a.perm, outs[0]);
    break;
  case OpKind::ReduceMean:
  case OpKind::ReduceSum:
    if (a.reduceIsIdentity) {
      outs[0] = Tensor::alias(input(op, 0), input(op, 0).shape());
      break;
    }
    cpu::reduce(op.kind == OpKind::ReduceSum ? cpu::ReduceOp::Sum
                                             : cpu::ReduceOp::Mean,
                input(op, 0), a.axes, outs[0]);
    break;
  case OpKind::AllReduce:
    comm.allReduce(input(op, 0), outs[0], a.meshAxes);
    break;
  case OpKind::AllGather:
    comm.allGather(input(op, 0), outs[0], a.dim, a.meshAxes);
    break;
  case OpKind::AllToAll:
    comm.allToAll(input(op, 0), outs[0], a.dim, a.concatDim, a.meshAxes);
    break;
  case OpKind::Gelu:
    cpu::gelu(input(op, 0), optionalInput(1), outs[0]);
    break;
  case OpKind::AddLayerNorm:
    cpu::addLayerNorm(input(op, 0), input(op, 1), input(op, 2),
                      optionalInput(3), a.axis, a.epsilon, outs[0], outs[1]);
    break;
  case OpKind::Attention:
    cpu::attention(input(op, 0), input(op, 1), input(op, 2), optionalInput(3),
                   a.scale, outs[0]);
    break;
  case OpKind::LocalSlice:
    cpu::sliceBlock(input(op, 0), a.dim, a.groupSize,
                    comm.groupIndex(a.meshAxes), outs[0]);
    break;
  case OpKind::Cast:
    cpu::cast(input(op, 0), outs[0]);
    break;
  case OpKind::Where:
    cpu::where(input(op, 0), input(op, 1), input(op, 2), outs[0]);
    break;
  case OpKind::Equal:
  case OpKind::Less:
  case OpKind::Greater:
  case OpKind::LessOrEqual:
  case OpKind::GreaterOrEqual: {
    static const cpu::CompareOp cmp[] = {
        cpu::CompareOp::Equal, cpu::CompareOp::Less, cpu::CompareOp::Greater,
        cpu::CompareOp::LessOrEqual, cpu::CompareOp::GreaterOrEqual};
    cpu::compare(
        cmp[static_cast<int>(op.kind) - static_cast<int>(OpKind::Equal)],
        input(op, 0), input(op, 1), outs[0]);
    break;
  }
  case OpKind::And:
    cpu::logical(cpu::LogicOp::And, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Or:
    cpu::logical(cpu::LogicOp::Or, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Xor:
    cpu::logical(cpu::LogicOp::Xor, input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::Not:
    cpu::logicalNot(input(op, 0), outs[0]);
    break;
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Abs:
  case OpKind::Log:
  case OpKind::Reciprocal:
  case OpKind::Floor:
  case OpKind::Ceil: {
    static const cpu::MathOp math[] = {
        cpu::MathOp::Sin, cpu::MathOp::Cos,        cpu::MathOp::Abs,
        cpu::MathOp::Log, cpu::MathOp::Reciprocal, cpu::MathOp::Floor,
        cpu::MathOp::Ceil};
    cpu::math(math[static_cast<int>(op.kind) - static_cast<int>(OpKind::Sin)],
              input(op, 0), outs[0]);
    break;
  }
  case OpKind::Max:
  case OpKind::Min:
  case OpKind::Concat: {
    std::vector<const Tensor *> all;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      all.push_back(&input(op, i));
    if (op.kind == OpKind::Concat)
      cpu::concat(all, a.axis, outs[0]);
    else
      cpu::minMax(op.kind == OpKind::Max ? cpu::MinMaxOp::Max
                                         : cpu::MinMaxOp::Min,
                  all, outs[0]);
    break;
  }
  case OpKind::Split: {
    std::vector<Tensor *> parts;
    for (std::size_t i = 0; i < outs.size(); ++i)
      parts.push_back(optionalOutput(i));
    cpu::split(input(op, 0), a.axis, a.split, parts);
    break;
  }
  case OpKind::Slice:
    cpu::slice(input(op, 0), a.starts, a.steps, outs[0]);
    break;
  case OpKind::Expand:
    cpu::expand(input(op, 0), outs[0]);
    break;
  case OpKind::Pad:
    cpu::pad(input(op, 0), a.pads, a.padMode, a.padValue, outs[0]);
    break;
  case OpKind::Conv:
    cpu::conv(input(op, 0), input(op, 1), optionalInput(2), a.window, a.group,
              outs[0]);
    break;
  case OpKind::BatchNormalization:
    cpu::batchNorm(input(op, 0), input(op, 1), input(op, 2), input(op, 3),
                   input(op, 4), a.epsilon, outs[0]);
    break;
  case OpKind::MaxPool:
    cpu::pool(cpu::PoolOp::Max, input(op, 0), a.window, false, outs[0]);
    break;
  case OpKind::AveragePool:
    cpu::pool(cpu::PoolOp::Average, input(op, 0), a.window, a.countIncludePad,
              outs[0]);
    break;
  case OpKind::GlobalAveragePool:
    cpu::globalPool(cpu::PoolOp::Average, input(op, 0), outs[0]);
    break;
  case OpKind::GlobalMaxPool:
    cpu::globalPool(cpu::PoolOp::Max, input(op, 0), outs[0]);
    break;
  case OpKind::GatherElements:
    cpu::gatherElements(input(op, 0), input(op, 1), a.axis, outs[0]);
    break;
  case OpKind::ScatterElements:
    cpu::scatterElements(input(op, 0), input(op, 1), input(op, 2), a.axis,
                         a.reduction, outs[0]);
    break;
  case OpKind::TopK:
    cpu::topK(input(op, 0), a.k, a.axis, a.largest, outs[0], optionalOutput(1));
    break;
  case OpKind::Trilu:
    cpu::trilu(input(op, 0), a.upper, a.k, outs[0]);
    break;
  case OpKind::SoftmaxCrossEntropy:
    cpu::softmaxCrossEntropy(input(op, 0), input(op, 1), a.ignoreIndex,
                             outs[0]);
    break;
  case OpKind::SoftmaxCrossEntropyGrad:
    cpu::softmaxCrossEntropyGrad(input(op, 0), input(op, 1), input(op, 2),
                                 a.ignoreIndex, outs[0]);
    break;
  case OpKind::SoftmaxGrad:
    cpu::softmaxGrad(input(op, 0), input(op, 1), a.axis, outs[0]);
    break;
  case OpKind::LayerNormalizationGrad:
    cpu::layerNormGrad(input(op, 0), input(op, 1), input(op, 2), a.axis,
                       a.epsilon, outs[0]);
    break;
  case OpKind::LayerNormalizationScaleGrad:
    cpu::layerNormScaleGrad(input(op, 0), input(op, 1), a.axis, a.epsilon,
                            outs[0]);
    break;
  case OpKind::GatherGrad:
    cpu::gatherGrad(input(op, 0), input(op, 1), outs[0]);
    break;
  case OpKind::AdamW:
  case OpKind::SGD:
    throw Error("optimizer ops run in the CPU executor's optimizer step only");
  case OpKind::Send:
  case OpKind::Recv:
    throw Error("Send and Recv run in the CPU executor's schedule only");
  }
}
