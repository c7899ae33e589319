//===- Executor.cpp - Running a program's ops -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "Comm.h"
#include "cpu/Kernels.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>

using namespace shoal::rt;

Executor::Executor(const LoadedPlan &plan)
    : plan(plan), values(plan.values.size()),
      persistent(plan.values.size(), false) {}

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

void Executor::run(Comm &comm, bool verbose) {
  bool print = verbose && comm.rank() == 0;
  // Values nothing reads (and that are no outputs) can go right away.
  for (std::size_t v = 0; v < values.size(); ++v)
    if (plan.lastUse[v] == -1 && !persistent[v])
      values[v] = Tensor();
  for (const OpInfo &op : plan.ops) {
    auto start = std::chrono::steady_clock::now();
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
      std::fprintf(stderr, "shoal-run: %-60s %10.3f ms\n",
                   op.describe().c_str(), ms);
    }
  }
}

void Executor::runOp(const OpInfo &op, Comm &comm) {
  std::vector<const Tensor *> inputs;
  for (std::size_t i = 0; i < op.inputs.size(); ++i)
    inputs.push_back(op.inputs[i] < 0 ? nullptr : &input(op, i));
  std::vector<Tensor> outs;
  runOnCpu(plan, op, inputs, outs, comm);
  for (std::size_t i = 0; i < op.outputs.size(); ++i)
    if (op.outputs[i] >= 0)
      values[op.outputs[i]] = std::move(outs[i]);
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
  }
}
