//===- Normalization.cpp - Type rules: normalizations -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

using namespace shoal;
using namespace shoal::rt;

/// Softmax.
void shoal::rt::softmaxRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  a.axis =
      rank == 0 ? 0 : normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  ctx.expected.push_back(x);
}

/// LayerNormalization: Scale and B of X's dtype or, for f16/bf16 X, f32.
void shoal::rt::layerNormRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input X");
  ctx.requireDTypeOrF32(*ctx.in(1), x.dtype, "input Scale", "X");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input X must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  a.epsilon = ctx.attrs.getFloat("epsilon", 1e-5f);
  checkEpsilon(a.epsilon);
  a.rms = rmsAttr(ctx.attrs);
  int64_t stash = ctx.attrs.getInt("stash_type", 1);
  if (stash != 1)
    throw Error(fmt::format("stash_type {} is not supported (only 1, "
                            "float)",
                            stash));
  Shape norm(x.shape.begin() + a.axis, x.shape.end());
  if (!broadcastsTo(ctx.in(1)->shape, norm))
    throw Error(fmt::format("Scale of shape {} does not broadcast to the "
                            "normalized shape {}",
                            formatShape(ctx.in(1)->shape), formatShape(norm)));
  if (const TensorType *b = ctx.in(2)) {
    ctx.requireDTypeOrF32(*b, x.dtype, "input B", "X");
    if (!broadcastsTo(b->shape, norm))
      throw Error(fmt::format("B of shape {} does not broadcast to the "
                              "normalized shape {}",
                              formatShape(b->shape), formatShape(norm)));
  }
  Shape stat(x.shape.begin(), x.shape.begin() + a.axis);
  stat.resize(x.shape.size(), 1);
  ctx.expected = {x, {DType::F32, stat}, {DType::F32, stat}};
}

/// AddLayerNorm: Scale and B as LayerNormalization's, like A.
void shoal::rt::addLayerNormRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input A");
  if (*ctx.in(1) != x)
    throw Error(fmt::format("inputs A and B must have the same type, got "
                            "{}",
                            ctx.typesStr()));
  ctx.requireDTypeOrF32(*ctx.in(2), x.dtype, "input Scale", "A");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input A must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  a.epsilon = ctx.attrs.getFloat("epsilon", 1e-5f);
  checkEpsilon(a.epsilon);
  Shape norm(x.shape.begin() + a.axis, x.shape.end());
  for (int i : {2, 3})
    if (const TensorType *t = ctx.in(i)) {
      ctx.requireDTypeOrF32(*t, x.dtype, i == 2 ? "input Scale" : "input B",
                            "A");
      if (!broadcastsTo(t->shape, norm))
        throw Error(fmt::format("{} of shape {} does not broadcast to the "
                                "normalized shape {}",
                                i == 2 ? "Scale" : "B", formatShape(t->shape),
                                formatShape(norm)));
    }
  ctx.expected = {x, x};
}

/// BatchNormalization.
void shoal::rt::batchNormRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireDType(x, DType::F32, "input X");
  if (x.shape.size() < 2)
    throw Error(fmt::format("input X must be [N, C, ...], got {}", x.str()));
  const char *names[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 1; i <= 4; ++i)
    if (ctx.in(i)->dtype != DType::F32 || ctx.in(i)->shape != Shape{x.shape[1]})
      throw Error(fmt::format("input {} must be f32[{}] (one per channel), "
                              "got {}",
                              names[i - 1], x.shape[1], ctx.in(i)->str()));
  a.epsilon = ctx.attrs.getFloat("epsilon", 1e-5f);
  checkEpsilon(a.epsilon);
  ctx.attrs.getFloat("momentum", 0.9f); // training only
  int64_t training = ctx.attrs.getInt("training_mode", 0);
  if (training != 0)
    throw Error(fmt::format("training_mode {} is not supported (inference "
                            "only: 0)",
                            training));
  for (std::size_t i = 1; i < ctx.info.outputs.size(); ++i)
    if (ctx.info.outputs[i] >= 0)
      throw Error("outputs running_mean and running_var (training mode) "
                  "are not supported");
  ctx.expected.assign(ctx.info.outputs.size(), x);
}
