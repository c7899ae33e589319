//===- Reduction.cpp - Type rules: reductions -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <set>

using namespace shoal;
using namespace shoal::rt;

/// ReduceMean, ReduceSum: the result has the input's dtype or, for an f16
/// or bf16 input, f32 (summed in double, rounded once either way).
void shoal::rt::reduceRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  a.keepdims = ctx.attrs.getBool("keepdims", true);
  bool noop = ctx.attrs.getBool("noop_with_empty_axes", false);
  std::set<int64_t> axes;
  for (int64_t ax : ctx.attrs.getInts("axes"))
    if (!axes.insert(normalizeAxis(ax, rank, "reduction axis")).second)
      throw Error(fmt::format("reduction axis {} is listed twice", ax));
  if (axes.empty() && noop) {
    a.reduceIsIdentity = true;
    ctx.info.aliasesInput = true;
    ctx.expected.push_back(x);
    return;
  }
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.insert(d);
  a.axes.assign(axes.begin(), axes.end());
  ctx.expected.push_back({ctx.f32OrDType(0, x.dtype, "the output", "the input"),
                          reduceShape(x.shape, a.axes, a.keepdims)});
}

/// ArgMax, ArgMin.
void shoal::rt::argReduceRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (!isNumeric(x.dtype))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  a.keepdims = ctx.attrs.getBool("keepdims", true);
  a.selectLastIndex = ctx.attrs.getBool("select_last_index", false);
  ctx.expected.push_back(
      {DType::I64, reduceShape(x.shape, {a.axis}, a.keepdims)});
}

/// CumSum: the input's type and shape.
void shoal::rt::cumSumRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (!isNumeric(x.dtype) && x.dtype != DType::F16 && x.dtype != DType::BF16)
    throw Error(fmt::format("CumSum is not supported on {} tensors",
                            dtypeName(x.dtype)));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  a.exclusive = ctx.attrs.getBool("exclusive", false);
  a.reverse = ctx.attrs.getBool("reverse", false);
  ctx.expected.push_back(x);
}
