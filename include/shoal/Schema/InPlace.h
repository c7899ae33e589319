//===- InPlace.h - Results that share another value's buffer ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Where ops share a buffer beyond a view: an AllReduce that sums its operand
// where the operand lies, as NCCL and Megatron-LM do (no copy, no second
// buffer), and the casts of a weight that share one copy per step. The
// runtime's buffer plan (lib/Runtime/MemoryPlan) and shoal-sim's timing
// (lib/Planner) share these rules, header-only, so that the memory and the
// time they charge agree.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_INPLACE_H
#define SHOAL_SCHEMA_INPLACE_H

#include "shoal/Schema/OpTable.h"

#include <algorithm>
#include <map>
#include <vector>

namespace shoal {
namespace rt {

/// What the rule needs of one op of a program.
struct InPlaceOp {
  OpKind kind = OpKind::AllReduce;
  const std::vector<int> *inputs = nullptr;
  const std::vector<int> *outputs = nullptr;
  /// Its task (TaskGraph) in the program.
  int task = -1;
  /// Its result shares its input's buffer already (a Reshape, an identity
  /// reduction).
  bool aliases = false;
  /// An AllReduce over the micro-batch axis (a sum over the step's
  /// micro-batches, kept in an accumulator of its own).
  bool overMicroBatches = false;
};

namespace detail {
/// For an AllReduce (op `i`): the op of its task that computes its operand,
/// when the AllReduce is the operand's only reader and neither value is a
/// program output; -1 otherwise (and for every other op).
inline std::vector<int> soleProducers(const std::vector<InPlaceOp> &ops,
                                      const std::vector<bool> &programOutput) {
  std::size_t numValues = programOutput.size();
  auto valid = [&](int v) {
    return v >= 0 && static_cast<std::size_t>(v) < numValues;
  };
  std::vector<int> readers(numValues, 0), producer(numValues, -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (int v : *ops[i].inputs)
      if (valid(v))
        ++readers[v];
    for (int v : *ops[i].outputs)
      if (valid(v))
        producer[v] = static_cast<int>(i);
  }
  std::vector<int> sole(ops.size(), -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const InPlaceOp &op = ops[i];
    if (op.kind != OpKind::AllReduce || op.inputs->empty() ||
        op.outputs->empty())
      continue;
    int in = (*op.inputs)[0], out = (*op.outputs)[0];
    if (valid(in) && valid(out) && readers[in] == 1 && !programOutput[in] &&
        !programOutput[out] && producer[in] >= 0 &&
        ops[producer[in]].task == op.task)
      sole[i] = producer[in];
  }
  return sole;
}
} // namespace detail

/// Per op, the op whose result it shares as the step's copy of a weight in
/// another element type (itself for the first), or -1. A Cast of a weight
/// (`weightBuffer`, per value: for a value the plan's weights set, which
/// change only when the optimizer runs, after the step's last task, the id
/// of the buffer it is loaded into, shared by the values of one weight in
/// one layout in different tasks; -1 for other values) to `dtype` (per
/// value) is one, unless its result leaves its task (another task reads it,
/// or it is a program output). The casts of one weight buffer to one type
/// share the first one's result, in whichever task they are (the forward's
/// and the backward's read the same copy): the executor computes it once
/// per step, at whichever runs first, and keeps it until the step ends
/// (Megatron-LM's persistent 16-bit weights). Its buffer is then the weight
/// copy's, not an activation.
inline std::vector<int> weightCopies(const std::vector<InPlaceOp> &ops,
                                     const std::vector<int> &weightBuffer,
                                     const std::vector<int> &dtype,
                                     const std::vector<bool> &programOutput) {
  std::size_t numValues = std::min(weightBuffer.size(), dtype.size());
  auto valid = [&](int v) {
    return v >= 0 && static_cast<std::size_t>(v) < numValues;
  };
  std::vector<int> producerTask(numValues, -1);
  for (const InPlaceOp &op : ops)
    for (int v : *op.outputs)
      if (valid(v))
        producerTask[v] = op.task;
  std::vector<bool> leaves(numValues, false);
  for (std::size_t v = 0; v < numValues && v < programOutput.size(); ++v)
    leaves[v] = programOutput[v];
  for (const InPlaceOp &op : ops)
    for (int v : *op.inputs)
      if (valid(v) && producerTask[v] >= 0 && producerTask[v] != op.task)
        leaves[v] = true;
  std::vector<int> copyOf(ops.size(), -1);
  std::map<std::pair<int, int>, int> first; // (buffer, type) -> first cast
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const InPlaceOp &op = ops[i];
    if (op.kind != OpKind::Cast || op.inputs->size() != 1 ||
        op.outputs->size() != 1)
      continue;
    int in = (*op.inputs)[0], out = (*op.outputs)[0];
    if (!valid(in) || !valid(out) || weightBuffer[in] < 0 || leaves[out] ||
        dtype[in] == dtype[out])
      continue;
    copyOf[i] = first
                    .emplace(std::make_pair(weightBuffer[in], dtype[out]),
                             static_cast<int>(i))
                    .first->second;
  }
  return copyOf;
}

/// Per op, whether it is an AllReduce that reduces in its operand's buffer:
/// its result then is its operand's buffer. It does when nothing else could
/// see the operand change: the AllReduce is the operand's only reader; an op
/// of the same task computes the operand (a kernel, not a collective or a
/// transfer, whose buffers the scheduler manages, nor a view of another
/// value, nor a weight's copy shared by other ops, `weightCopyOf` above);
/// neither the operand nor the result is a program output (`programOutput`,
/// per value); and it does not sum over micro-batches.
inline std::vector<bool>
allReducesInPlace(const std::vector<InPlaceOp> &ops,
                  const std::vector<bool> &programOutput,
                  const std::vector<int> &weightCopyOf) {
  std::vector<int> sole = detail::soleProducers(ops, programOutput);
  std::vector<bool> inPlace(ops.size(), false);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    int p = sole[i];
    if (p < 0 || ops[i].overMicroBatches)
      continue;
    const InPlaceOp &def = ops[p];
    bool copy = static_cast<std::size_t>(p) < weightCopyOf.size() &&
                weightCopyOf[p] >= 0;
    inPlace[i] = !def.aliases && !opKindHas(def.kind, kSchedulerOps) && !copy;
  }
  return inPlace;
}

/// Per op, for a matrix product that sums itself into an AllReduce's
/// accumulator over micro-batches, that AllReduce's index; -1 for the
/// others. A Gemm without C (a weight gradient's product, alpha A B) whose
/// only reader is an AllReduce over the micro-batch axis in the same task
/// writes micro-batch 0's product into the step's sum and adds each later
/// one into it (out += alpha A B), as Megatron-LM's gradient accumulation
/// fusion does: no float32 temporary, no copy, no addition. Neither value
/// is a program output.
inline std::vector<int>
productsAccumulatingInPlace(const std::vector<InPlaceOp> &ops,
                            const std::vector<bool> &programOutput) {
  std::vector<int> sole = detail::soleProducers(ops, programOutput);
  std::vector<int> into(ops.size(), -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    int p = sole[i];
    if (p < 0 || !ops[i].overMicroBatches)
      continue;
    const InPlaceOp &def = ops[p];
    bool withC = def.inputs->size() > 2 && (*def.inputs)[2] >= 0;
    if (def.kind == OpKind::Gemm && !withC && def.outputs->size() == 1)
      into[p] = static_cast<int>(i);
  }
  return into;
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_INPLACE_H
