//===- Training.cpp - Type rules: training ops ------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <utility>

using namespace shoal;
using namespace shoal::rt;

/// SoftmaxCrossEntropy, SoftmaxCrossEntropyGrad: logits f32, f16 or bf16;
/// the loss and dloss f32, dlogits of the logits' dtype.
void shoal::rt::crossEntropyRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input logits");
  const TensorType &labels = *ctx.in(1);
  ctx.requireDType(labels, DType::I64, "input labels");
  if (x.shape.empty())
    throw Error(fmt::format("input logits must be [..., V] with rank >= 1, "
                            "got {}",
                            x.str()));
  Shape rows(x.shape.begin(), x.shape.end() - 1);
  if (labels.shape != rows)
    throw Error(fmt::format("input labels must have the shape of the logits "
                            "without the last dimension, {}, got {}",
                            formatShape(rows), labels.str()));
  a.ignoreIndex = ctx.attrs.getInt("ignore_index", -100);
  if (ctx.kind() == OpKind::SoftmaxCrossEntropy) {
    ctx.expected.push_back({DType::F32, rows});
    return;
  }
  const TensorType &dloss = *ctx.in(2);
  if (dloss != TensorType{DType::F32, rows})
    throw Error(fmt::format("input dloss must be {} (one per label), got {}",
                            TensorType{DType::F32, rows}.str(), dloss.str()));
  ctx.expected.push_back(x);
}

/// SoftmaxGrad: y and dy of one dtype (f32, f16 or bf16), dx of theirs.
void shoal::rt::softmaxGradRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input y");
  if (*ctx.in(1) != x)
    throw Error(fmt::format("inputs y and dy must have the same type, got {}",
                            ctx.typesStr()));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  a.axis =
      rank == 0 ? 0 : normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  ctx.expected.push_back(x);
}

/// LayerNormalizationGrad, LayerNormalizationScaleGrad: x and dy of one
/// dtype (f32, f16 or bf16); scale of x's dtype or f32; dx of x's dtype;
/// dscale f32 or x's dtype.
void shoal::rt::layerNormGradRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.requireFloat(x, "input x");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input x must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", -1), rank, "axis");
  a.epsilon = ctx.attrs.getFloat("epsilon", 1e-5f);
  checkEpsilon(a.epsilon);
  a.rms = rmsAttr(ctx.attrs);
  Shape norm(x.shape.begin() + a.axis, x.shape.end());
  bool isScale = ctx.kind() == OpKind::LayerNormalizationScaleGrad;
  const TensorType &dy = *ctx.in(isScale ? 1 : 2);
  if (dy != x)
    throw Error(fmt::format("input dy must have the type of x, {}, got {}",
                            x.str(), dy.str()));
  if (isScale) {
    ctx.expected.push_back(
        {ctx.f32OrDType(0, x.dtype, "output dscale", "x"), norm});
    return;
  }
  const TensorType &scale = *ctx.in(1);
  ctx.requireDTypeOrF32(scale, x.dtype, "input scale", "x");
  if (!broadcastsTo(scale.shape, norm))
    throw Error(fmt::format("scale of shape {} does not broadcast to the "
                            "normalized shape {}",
                            formatShape(scale.shape), formatShape(norm)));
  ctx.expected.push_back(x);
}

/// GatherGrad: dy f32, f16 or bf16; the output f32 or dy's dtype.
void shoal::rt::gatherGradRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  // x is the indices; the output's declared type gives the row count.
  if (x.dtype != DType::I64 && x.dtype != DType::I32)
    throw Error(fmt::format("indices must be i64 or i32, got {}", x.str()));
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis != 0)
    throw Error(fmt::format("axis {} is not supported (only 0)", axis));
  a.axis = 0;
  const TensorType &dy = *ctx.in(1);
  ctx.requireFloat(dy, "input dy");
  const TensorType &out = ctx.types[ctx.info.outputs[0]];
  if ((out.dtype != DType::F32 && out.dtype != dy.dtype) || out.shape.empty())
    throw Error(
        fmt::format("output value {} must be {} [rows, ...], got "
                    "{}",
                    ctx.info.outputs[0],
                    dy.dtype == DType::F32
                        ? std::string("f32")
                        : fmt::format("f32 or {} (dy's)", dtypeName(dy.dtype)),
                    out.str()));
  Shape want = x.shape;
  want.insert(want.end(), out.shape.begin() + 1, out.shape.end());
  if (dy.shape != want)
    throw Error(fmt::format("input dy must be the indices' shape followed "
                            "by the output's row shape, {}, got {}",
                            formatShape(want), dy.str()));
  readVocabShard(ctx, out.shape[0], /*required=*/false);
  ctx.expected.push_back(out);
}

/// VocabMax, VocabStats, VocabCrossEntropy, VocabCrossEntropyGrad: logits
/// f32, f16 or bf16; max, stats, dloss and the loss f32; dlogits of the
/// logits' dtype.
void shoal::rt::vocabRule(TypeRuleContext &ctx) {
  OpAttrs &a = ctx.a();
  OpKind kind = ctx.kind();
  a.ignoreIndex = ctx.attrs.getInt("ignore_index", -100);
  // The positions: the max's shape.
  Shape pos;
  if (kind == OpKind::VocabCrossEntropy) {
    pos = ctx.x().shape;
  } else {
    const TensorType &logits = ctx.x();
    ctx.requireFloat(logits, "input logits");
    if (logits.shape.empty())
      throw Error(fmt::format("input logits must be [..., C] with rank >= 1, "
                              "got {}",
                              logits.str()));
    pos.assign(logits.shape.begin(), logits.shape.end() - 1);
    readVocabShard(ctx, logits.shape.back(), /*required=*/true);
  }
  TensorType posType{DType::F32, pos};
  Shape statsShape = pos;
  statsShape.push_back(2);
  TensorType statsType{DType::F32, statsShape};
  auto require = [&](int i, const TensorType &want, const char *what) {
    if (*ctx.in(i) != want)
      throw Error(fmt::format("input {} must be {}, got {}", what, want.str(),
                              ctx.in(i)->str()));
  };
  TensorType labelsType{DType::I64, pos};
  switch (kind) {
  case OpKind::VocabMax:
    ctx.expected.push_back(posType);
    return;
  case OpKind::VocabStats:
    require(1, labelsType, "labels");
    require(2, posType, "max");
    ctx.expected.push_back(statsType);
    return;
  case OpKind::VocabCrossEntropy:
    ctx.requireDType(ctx.x(), DType::F32, "input max");
    require(1, statsType, "stats");
    require(2, labelsType, "labels");
    ctx.expected.push_back(posType);
    return;
  default:
    require(1, labelsType, "labels");
    require(2, posType, "dloss");
    require(3, posType, "max");
    require(4, statsType, "stats");
    ctx.expected.push_back(ctx.x());
    return;
  }
}

/// AdamW, SGD, Assign.
void shoal::rt::optimizerRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (ctx.kind() == OpKind::Assign) {
    ctx.requireDType(x, DType::F32, "input w");
    if (const TensorType *t = ctx.in(1); t && *t != x)
      throw Error(fmt::format("input value must have the type of w, {}, got "
                              "{}",
                              x.str(), t->str()));
    return;
  }
  bool adam = ctx.kind() == OpKind::AdamW;
  const char *names[] = {"w", "g", adam ? "m" : "buf", "v"};
  ctx.requireDType(x, DType::F32, "input w");
  // ZeRO 1/2: g and the state are this rank's block of w's dimension 0.
  TensorType block = x;
  if (ctx.attrs.has("zero_axes")) {
    readMeshAxes(ctx.attrs, ctx.mesh, "zero_axes", a.zeroAxes, a.zeroGroupSize,
                 /*allowMicroBatch=*/false);
    if (x.shape.empty())
      throw Error("zero_axes needs a weight of rank >= 1");
    block.shape[0] = (x.shape[0] + a.zeroGroupSize - 1) / a.zeroGroupSize;
  }
  for (std::size_t i = 1; i < ctx.info.inputs.size(); ++i)
    if (const TensorType *t = ctx.in(static_cast<int>(i)))
      if (*t != block)
        throw Error(fmt::format(
            "input {} must have the type of {}, {}, got {}", names[i],
            a.zeroAxes.empty() ? "w"
                               : "w's block of dimension 0 over zero_axes",
            block.str(), t->str()));
  OptimizerParams &p = a.optimizer;
  p.kind = adam ? OptimizerParams::AdamW : OptimizerParams::SGD;
  ctx.attrs.require("lr");
  p.lr = ctx.attrs.getDouble("lr", 0);
  p.weightDecay = ctx.attrs.getDouble("weight_decay", adam ? 1e-2 : 0.0);
  p.clipNorm = ctx.attrs.getDouble("clip_norm", 0);
  p.minLr = ctx.attrs.getDouble("min_lr", 0);
  p.warmupSteps = ctx.attrs.getInt("warmup_steps", 0);
  p.totalSteps = ctx.attrs.getInt("total_steps", 0);
  p.mirror = ctx.attrs.getInt("mirror", 0) != 0;
  std::string schedule = ctx.attrs.getString("lr_schedule", "cosine");
  if (schedule == "cosine")
    p.schedule = OptimizerParams::Cosine;
  else if (schedule == "linear")
    p.schedule = OptimizerParams::Linear;
  else if (schedule == "constant")
    p.schedule = OptimizerParams::Constant;
  else
    throw Error(fmt::format("attribute 'lr_schedule' must be cosine, linear "
                            "or constant, got '{}'",
                            schedule));
  auto nonNegative = [](const char *name, double v) {
    if (!(v >= 0)) // also NaN
      throw Error(fmt::format("attribute '{}' must be >= 0, got {}", name, v));
  };
  nonNegative("lr", p.lr);
  nonNegative("weight_decay", p.weightDecay);
  nonNegative("clip_norm", p.clipNorm);
  nonNegative("min_lr", p.minLr);
  nonNegative("warmup_steps", static_cast<double>(p.warmupSteps));
  nonNegative("total_steps", static_cast<double>(p.totalSteps));
  if (adam) {
    p.beta1 = ctx.attrs.getDouble("beta1", 0.9);
    p.beta2 = ctx.attrs.getDouble("beta2", 0.999);
    p.eps = ctx.attrs.getDouble("eps", 1e-8);
    for (auto [name, beta] : {std::pair<const char *, double>{"beta1", p.beta1},
                              {"beta2", p.beta2}})
      if (!(beta >= 0 && beta < 1))
        throw Error(fmt::format("attribute '{}' must be in [0, 1), got {}",
                                name, beta));
    nonNegative("eps", p.eps);
  } else {
    p.momentum = ctx.attrs.getDouble("momentum", 0);
    nonNegative("momentum", p.momentum);
    if (p.momentum != 0 && !ctx.in(2))
      throw Error(
          fmt::format("momentum {} needs the input buf (#2)", p.momentum));
  }
}
