//===- Ops.cpp - Op kinds and the checking of plan ops ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Ops.h"

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <set>

using namespace shoal;
using namespace shoal::rt;

namespace {

/// The type rule of every kind, indexed by kind.
constexpr TypeRule kTypeRules[] = {
#define SHOAL_OP(Kind, Name, MinIn, MaxIn, MinOut, MaxOut, Flags, Rule) Rule,
#include "shoal/Schema/Ops.def"
};
static_assert(sizeof(kTypeRules) / sizeof(kTypeRules[0]) == kNumOpKinds,
              "one type rule per op kind");

struct AttrRow {
  OpKind kind;
  const char *name;
  AttrType type;
};
constexpr AttrRow kAttrRows[] = {
#define SHOAL_OP_ATTR(Kind, Name, Type) {OpKind::Kind, Name, AttrType::Type},
#include "shoal/Schema/Ops.def"
};

/// The attributes `kind` takes.
std::map<std::string, AttrType> allowedAttrs(OpKind kind) {
  std::map<std::string, AttrType> allowed;
  for (const AttrRow &row : kAttrRows)
    if (row.kind == kind)
      allowed.emplace(row.name, row.type);
  return allowed;
}

} // namespace

bool shoal::rt::parseOpKind(const std::string &name, OpKind &kind) {
  return lookupOpKind(name, kind);
}

std::string shoal::rt::knownOpKinds() {
  std::vector<std::string> names;
  for (const OpKindInfo &info : kOpKindTable)
    names.push_back(info.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string OpInfo::describe() const {
  if (name.empty())
    return fmt::format("op #{} ({})", index, kindName);
  return fmt::format("op #{} '{}' ({})", index, name, kindName);
}

OpInfo shoal::rt::checkOp(const plan::Op &op, int index,
                          const std::vector<TensorType> &types,
                          const Mesh &mesh) {
  OpInfo info;
  info.index = index;
  info.kindName = op.kind();
  info.name = op.name();
  info.flops = static_cast<double>(op.flops());
  info.bytes = static_cast<double>(op.bytes());
  if (!parseOpKind(op.kind(), info.kind))
    throw Error(fmt::format("unknown op kind '{}' (known: {})", op.kind(),
                            knownOpKinds()));
  const OpKindInfo &row = opKindInfo(info.kind);

  // Arity: [minIn, maxIn] inputs and [minOut, maxOut] outputs, of which
  // the first reqIn / reqOut may not be absent (-1); every input of a
  // variadic op is required.
  int minIn = row.minInputs, maxIn = row.maxInputs;
  int minOut = row.minOutputs, maxOut = row.maxOutputs;
  int reqIn = maxIn == kMany ? kMany : minIn, reqOut = minOut;
  auto arity = [&](int lo, int hi) {
    if (hi == kMany)
      return fmt::format("at least {}", lo);
    return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (op.inputs_size() < minIn || op.inputs_size() > maxIn)
    throw Error(fmt::format("expects {} inputs, got {}", arity(minIn, maxIn),
                            op.inputs_size()));
  if (op.outputs_size() < minOut || op.outputs_size() > maxOut)
    throw Error(fmt::format("expects {} outputs, got {}", arity(minOut, maxOut),
                            op.outputs_size()));
  int numValues = static_cast<int>(types.size());
  auto checkId = [&](int id, int pos, int required, const char *what,
                     std::vector<int> &dst) {
    if (id == -1 && pos >= required) {
      dst.push_back(-1); // absent optional operand
      return;
    }
    if (id < 0 || id >= numValues)
      throw Error(fmt::format("{} #{} is value id {}, out of range (the "
                              "program has {} values)",
                              what, pos, id, numValues));
    dst.push_back(id);
  };
  for (int i = 0; i < op.inputs_size(); ++i)
    checkId(op.inputs(i), i, reqIn, "input", info.inputs);
  for (int i = 0; i < op.outputs_size(); ++i)
    checkId(op.outputs(i), i, reqOut, "output", info.outputs);
  {
    std::set<int> outs;
    for (int v : info.outputs)
      if (v >= 0 && !outs.insert(v).second)
        throw Error(fmt::format("value {} is written twice", v));
  }

  AttrReader attrs(op, allowedAttrs(info.kind));
  if (op.has_transfer() && !info.has(kTransfer))
    throw Error("only Send and Recv carry a transfer");
  TypeRuleContext ctx{op, info, types, mesh, attrs, {}};
  kTypeRules[static_cast<int>(info.kind)](ctx);
  if (info.aliasesInput && !info.has(kMayAlias))
    throw Error(fmt::format("internal error: the type rule of {} makes it "
                            "alias its input, but Ops.def does not flag it "
                            "kMayAlias",
                            op.kind()));

  if (ctx.expected.size() < info.outputs.size())
    throw Error(fmt::format("internal error: the type rule of {} gives {} "
                            "output types for {} outputs",
                            op.kind(), ctx.expected.size(),
                            info.outputs.size()));
  for (std::size_t i = 0; i < info.outputs.size(); ++i) {
    int v = info.outputs[i];
    if (v < 0)
      continue;
    if (types[v] != ctx.expected[i])
      throw Error(fmt::format("output #{} (value {}) is declared {}, but the "
                              "inputs ({}) give {}",
                              i, v, types[v].str(), ctx.typesStr(),
                              ctx.expected[i].str()));
  }
  return info;
}
