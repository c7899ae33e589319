//===- Indexing.cpp - Type rules: indexing ----------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

using namespace shoal;
using namespace shoal::rt;

/// Gather.
void shoal::rt::gatherRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  const TensorType &idx = *ctx.in(1);
  if (idx.dtype != DType::I64 && idx.dtype != DType::I32)
    throw Error(fmt::format("indices must be i64 or i32, got {}", idx.str()));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("data must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  if (readVocabShard(ctx, x.shape[0], /*required=*/false) && a.axis != 0)
    throw Error(fmt::format("a vocabulary-parallel Gather must be along axis "
                            "0, not {}",
                            a.axis));
  ctx.expected.push_back({x.dtype, gatherShape(x.shape, idx.shape, a.axis)});
}

namespace {
/// The `reduction` attribute of ScatterElements and ScatterND.
ScatterReduction parseReduction(TypeRuleContext &ctx, const TensorType &x) {
  OpAttrs &a = ctx.a();
  std::string red = ctx.attrs.getString("reduction", "none");
  if (red == "none")
    a.reduction = ScatterReduction::None;
  else if (red == "add")
    a.reduction = ScatterReduction::Add;
  else if (red == "mul")
    a.reduction = ScatterReduction::Mul;
  else if (red == "max")
    a.reduction = ScatterReduction::Max;
  else if (red == "min")
    a.reduction = ScatterReduction::Min;
  else
    throw Error(fmt::format("reduction '{}' is not one of none, add, mul, "
                            "max, min",
                            red));
  if (a.reduction != ScatterReduction::None && !isNumeric(x.dtype))
    throw Error(fmt::format("reduction '{}' is not supported on {} data", red,
                            dtypeName(x.dtype)));
  return a.reduction;
}
} // namespace

/// GatherElements, ScatterElements.
void shoal::rt::elementsRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  const TensorType &idx = *ctx.in(1);
  if (idx.dtype != DType::I64 && idx.dtype != DType::I32)
    throw Error(fmt::format("indices must be i64 or i32, got {}", idx.str()));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("data must have rank >= 1");
  if (static_cast<int64_t>(idx.shape.size()) != rank)
    throw Error(fmt::format("indices {} must have the rank of data {}",
                            idx.str(), x.str()));
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  for (int64_t d = 0; d < rank; ++d)
    if (d != a.axis && idx.shape[d] > x.shape[d])
      throw Error(fmt::format("indices {} are larger than data {} along "
                              "dimension {}",
                              idx.str(), x.str(), d));
  if (ctx.kind() == OpKind::GatherElements) {
    ctx.expected.push_back({x.dtype, idx.shape});
    return;
  }
  const TensorType &upd = *ctx.in(2);
  if (upd.dtype != x.dtype || upd.shape != idx.shape)
    throw Error(fmt::format("updates must be {} (data's dtype, the "
                            "indices' shape), got {}",
                            TensorType{x.dtype, idx.shape}.str(), upd.str()));
  a.reduction = parseReduction(ctx, x);
  ctx.expected.push_back(x);
}

/// ScatterND.
void shoal::rt::scatterNDRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  const TensorType &idx = *ctx.in(1);
  const TensorType &upd = *ctx.in(2);
  if (idx.dtype != DType::I64 && idx.dtype != DType::I32)
    throw Error(fmt::format("indices must be i64 or i32, got {}", idx.str()));
  if (idx.shape.empty())
    throw Error("indices must have rank >= 1");
  int64_t k = idx.shape.back();
  if (k < 0 || k > static_cast<int64_t>(x.shape.size()))
    throw Error(fmt::format("indices {} index {} dimensions of data {}",
                            idx.str(), k, x.str()));
  Shape want(idx.shape.begin(), idx.shape.end() - 1);
  want.insert(want.end(), x.shape.begin() + k, x.shape.end());
  // No index at all writes nothing, whatever the updates' shape (PyTorch
  // exports an empty slice assignment with the updates of the full slice).
  int64_t count = 1;
  for (std::size_t d = 0; d + 1 < idx.shape.size(); ++d)
    count *= idx.shape[d];
  if (upd.dtype != x.dtype || (upd.shape != want && count != 0))
    throw Error(fmt::format("updates must be {}, got {}",
                            TensorType{x.dtype, want}.str(), upd.str()));
  a.reduction = parseReduction(ctx, x);
  ctx.expected.push_back(x);
}

/// OneHot.
void shoal::rt::oneHotRule(TypeRuleContext &ctx) {
  const TensorType &idx = ctx.x();
  OpAttrs &a = ctx.a();
  const TensorType &values = *ctx.in(1);
  if (!isNumeric(idx.dtype))
    throw Error(fmt::format("indices must be numeric, got {}", idx.str()));
  if (values.numElements() != 2 || values.shape.size() != 1)
    throw Error(fmt::format("values must have shape [2] (off, on), got {}",
                            values.str()));
  ctx.attrs.require("depth");
  a.depth = ctx.attrs.getInt("depth", 0);
  if (a.depth < 1)
    throw Error(fmt::format("depth {} must be at least 1", a.depth));
  int64_t rank = static_cast<int64_t>(idx.shape.size()) + 1;
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  Shape shape = idx.shape;
  shape.insert(shape.begin() + a.axis, a.depth);
  ctx.expected.push_back({values.dtype, shape});
}

/// TopK.
void shoal::rt::topKRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (!isNumeric(x.dtype))
    throw Error(
        fmt::format("TopK is not supported on {} tensors", dtypeName(x.dtype)));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  ctx.attrs.require("k");
  a.k = ctx.attrs.getInt("k", 0);
  if (a.k < 0 || a.k > x.shape[a.axis])
    throw Error(fmt::format("k = {} is out of range for axis {} of the "
                            "input {}",
                            a.k, a.axis, x.str()));
  a.largest = ctx.attrs.getBool("largest", true);
  a.sorted = ctx.attrs.getBool("sorted", true);
  Shape shape = x.shape;
  shape[a.axis] = a.k;
  ctx.expected = {{x.dtype, shape}, {DType::I64, shape}};
  ctx.expected.resize(ctx.info.outputs.size());
}
