//===- Elementwise.cpp - Type rules: element-wise ops -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

using namespace shoal;
using namespace shoal::rt;

namespace {

/// ONNX TensorProto.DataType names, for messages.
std::string onnxDataTypeName(int64_t t) {
  static const char *names[] = {
      "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
      "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
      "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < static_cast<int64_t>(sizeof(names) / sizeof(names[0])))
    return fmt::format("{} ({})", t, names[t]);
  return fmt::format("{}", t);
}

} // namespace

/// Add, Sub, Mul, Div, Pow.
void shoal::rt::arithmeticRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  const TensorType &y = *ctx.in(1);
  // ONNX's Pow takes any numeric base and exponent; the result has the
  // base's type.
  bool mixedPow =
      ctx.kind() == OpKind::Pow && isNumeric(x.dtype) && isNumeric(y.dtype);
  if (x.dtype != y.dtype && !mixedPow)
    throw Error(
        fmt::format("inputs have different dtypes ({})", ctx.typesStr()));
  if (!isNumeric(x.dtype))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  ctx.expected.push_back({x.dtype, broadcastShape(x.shape, y.shape)});
}

/// Mod.
void shoal::rt::modRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  const TensorType &y = *ctx.in(1);
  if (x.dtype != y.dtype)
    throw Error(
        fmt::format("inputs have different dtypes ({})", ctx.typesStr()));
  if (!isNumeric(x.dtype))
    throw Error(
        fmt::format("Mod is not supported on {} tensors", dtypeName(x.dtype)));
  ctx.a().fmod = ctx.attrs.getBool("fmod", false);
  ctx.expected.push_back({x.dtype, broadcastShape(x.shape, y.shape)});
}

/// Erf, Tanh, Relu, Sqrt, Exp, Neg, Sigmoid, HardSigmoid, HardSwish.
void shoal::rt::activationRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  if (ctx.kind() == OpKind::HardSigmoid) {
    ctx.a().alpha = ctx.attrs.getFloat("alpha", 0.2f);
    ctx.a().beta = ctx.attrs.getFloat("beta", 0.5f);
  } else if (ctx.kind() == OpKind::HardSwish) {
    ctx.a().alpha = 1.f / 6.f;
    ctx.a().beta = 0.5f;
  }
  bool intOk = ctx.kind() == OpKind::Neg || ctx.kind() == OpKind::Relu;
  bool signedInt =
      x.dtype == DType::I64 || x.dtype == DType::I32 || x.dtype == DType::I8;
  if (!isFloat(x.dtype) && !(intOk && signedInt))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  ctx.expected.push_back(x);
}

/// Sin, Cos, Abs, Log, Reciprocal, Floor, Ceil.
void shoal::rt::mathRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  if (!isFloat(x.dtype) && !(ctx.kind() == OpKind::Abs && isNumeric(x.dtype)))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  ctx.expected.push_back(x);
}

/// Max, Min.
void shoal::rt::minMaxRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  if (!isNumeric(x.dtype))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  Shape shape = x.shape;
  for (std::size_t i = 1; i < ctx.info.inputs.size(); ++i) {
    if (ctx.in(i)->dtype != x.dtype)
      throw Error(
          fmt::format("inputs have different dtypes ({})", ctx.typesStr()));
    shape = broadcastShape(shape, ctx.in(i)->shape);
  }
  ctx.expected.push_back({x.dtype, shape});
}

/// Equal, Less, Greater, LessOrEqual, GreaterOrEqual.
void shoal::rt::compareRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  const TensorType &y = *ctx.in(1);
  if (x.dtype != y.dtype)
    throw Error(
        fmt::format("inputs have different dtypes ({})", ctx.typesStr()));
  if (!isNumeric(x.dtype) &&
      !(ctx.kind() == OpKind::Equal && x.dtype == DType::Bool))
    throw Error(fmt::format("{} is not supported on {} tensors", ctx.op.kind(),
                            dtypeName(x.dtype)));
  ctx.expected.push_back({DType::Bool, broadcastShape(x.shape, y.shape)});
}

/// And, Or, Xor.
void shoal::rt::logicRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireDType(x, DType::Bool, "input A");
  ctx.requireDType(*ctx.in(1), DType::Bool, "input B");
  ctx.expected.push_back(
      {DType::Bool, broadcastShape(x.shape, ctx.in(1)->shape)});
}

/// Not.
void shoal::rt::notRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireDType(x, DType::Bool, "input");
  ctx.expected.push_back(x);
}

/// Where.
void shoal::rt::whereRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireDType(x, DType::Bool, "input condition");
  const TensorType &tx = *ctx.in(1), &ty = *ctx.in(2);
  if (tx.dtype != ty.dtype)
    throw Error(fmt::format("inputs X and Y have different dtypes ({})",
                            ctx.typesStr()));
  ctx.expected.push_back(
      {tx.dtype, broadcastShape(broadcastShape(x.shape, tx.shape), ty.shape)});
}

/// Cast.
void shoal::rt::castRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("to");
  int64_t to = ctx.attrs.getInt("to", 0);
  switch (to) {
  case 1:
    a.to = DType::F32;
    break;
  case 6:
    a.to = DType::I32;
    break;
  case 7:
    a.to = DType::I64;
    break;
  case 9:
    a.to = DType::Bool;
    break;
  case 2:
    a.to = DType::U8;
    break;
  case 3:
    a.to = DType::I8;
    break;
  case 10:
    a.to = DType::F16;
    break;
  case 11:
    a.to = DType::F64;
    break;
  case 16:
    a.to = DType::BF16;
    break;
  default:
    throw Error(fmt::format("attribute 'to' is {}; only FLOAT (1), UINT8 "
                            "(2), INT8 (3), INT32 (6), INT64 (7), BOOL (9), "
                            "FLOAT16 (10), DOUBLE (11) and BFLOAT16 (16) "
                            "are supported",
                            onnxDataTypeName(to)));
  }
  ctx.expected.push_back({a.to, x.shape});
}

namespace {
/// Gelu's and GeluGrad's `approximate` and `bias` (input `biasIndex`, which
/// broadcasts to x; x's dtype or, for f16/bf16 x, f32).
void geluAttrsAndBias(TypeRuleContext &ctx, const TensorType &x,
                      int biasIndex) {
  std::string form = ctx.attrs.getString("approximate", "none");
  if (form != "none" && form != "tanh")
    throw Error(fmt::format(
        "attribute 'approximate' is '{}'; expected 'none' or 'tanh'", form));
  ctx.a().tanhGelu = form == "tanh";
  if (const TensorType *b = ctx.in(biasIndex)) {
    ctx.requireDTypeOrF32(*b, x.dtype, "bias", "x");
    if (!broadcastsTo(b->shape, x.shape))
      throw Error(fmt::format("bias of shape {} does not broadcast to {}",
                              formatShape(b->shape), formatShape(x.shape)));
  }
}
} // namespace

/// Gelu.
void shoal::rt::geluRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireFloat(x, "input");
  geluAttrsAndBias(ctx, x, 1);
  ctx.expected.push_back(x);
}

/// GeluGrad: dy, x, bias; dz has dy's type, which is x's.
void shoal::rt::geluGradRule(TypeRuleContext &ctx) {
  const TensorType &dy = ctx.x();
  ctx.requireFloat(dy, "input dy");
  const TensorType &x = *ctx.in(1);
  if (x != dy)
    throw Error(fmt::format("inputs dy and x must have the same type, got {}",
                            ctx.typesStr()));
  geluAttrsAndBias(ctx, x, 2);
  ctx.expected.push_back(dy);
}
