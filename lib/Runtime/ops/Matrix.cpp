//===- Matrix.cpp - Type rules: matrix products -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <algorithm>

using namespace shoal;
using namespace shoal::rt;

/// MatMul: the result has A's dtype or, for f16/bf16 operands, f32 (a
/// weight gradient: computed in f32 and not rounded).
void shoal::rt::matmulRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireFloat(x, "input A", /*f64=*/true);
  ctx.requireDType(*ctx.in(1), x.dtype, "input B");
  ctx.expected.push_back({ctx.f32OrDType(0, x.dtype, "output Y", "A"),
                          matmulShape(x.shape, ctx.in(1)->shape)});
}

/// Gemm: dtypes as MatMul's, C of A's dtype.
void shoal::rt::gemmRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  a.alpha = ctx.attrs.getFloat("alpha", 1.f);
  a.beta = ctx.attrs.getFloat("beta", 1.f);
  a.transA = ctx.attrs.getBool("transA", false);
  a.transB = ctx.attrs.getBool("transB", false);
  ctx.requireFloat(x, "input A", /*f64=*/true);
  ctx.requireDType(*ctx.in(1), x.dtype, "input B");
  Shape shape = gemmShape(x.shape, ctx.in(1)->shape, a.transA, a.transB);
  if (const TensorType *c = ctx.in(2)) {
    ctx.requireDType(*c, x.dtype, "input C");
    if (!broadcastsTo(c->shape, shape))
      throw Error(fmt::format("input C of shape {} does not broadcast to "
                              "the result shape {}",
                              formatShape(c->shape), formatShape(shape)));
  }
  ctx.expected.push_back({ctx.f32OrDType(0, x.dtype, "output Y", "A"), shape});
}

namespace {
/// Checks q [.., T, D], kt [.., D, S], v [.., S, E] (one dtype) and the
/// mask (optional: q's dtype, or f32 for f16/bf16 q) of Attention(Grad),
/// inputs q at `first`; returns the result shape [.., T, E].
Shape attentionShape(TypeRuleContext &ctx, int first) {
  const TensorType &q = *ctx.in(first), &kt = *ctx.in(first + 1),
                   &v = *ctx.in(first + 2);
  for (const TensorType *t : {&kt, &v})
    ctx.requireDType(*t, q.dtype, "kt and v");
  std::size_t r = q.shape.size();
  if (r < 2 || kt.shape.size() != r || v.shape.size() != r ||
      !std::equal(q.shape.begin(), q.shape.end() - 2, kt.shape.begin()) ||
      !std::equal(q.shape.begin(), q.shape.end() - 2, v.shape.begin()) ||
      q.shape[r - 1] != kt.shape[r - 2] || kt.shape[r - 1] != v.shape[r - 2])
    throw Error(fmt::format("q [.., T, D], kt [.., D, S] and v [.., S, E] "
                            "do not fit: {}",
                            ctx.typesStr()));
  Shape scores(q.shape.begin(), q.shape.end() - 1);
  scores.push_back(kt.shape[r - 1]);
  if (const TensorType *m = ctx.in(first + 3)) {
    ctx.requireDTypeOrF32(*m, q.dtype, "mask", "q");
    if (!broadcastsTo(m->shape, scores))
      throw Error(fmt::format("mask of shape {} does not broadcast to the "
                              "scores {}",
                              formatShape(m->shape), formatShape(scores)));
  }
  ctx.a().scale = ctx.attrs.getFloat("scale", 1.f);
  Shape out(q.shape.begin(), q.shape.end() - 1);
  out.push_back(v.shape[r - 1]);
  return out;
}
} // namespace

/// Attention.
void shoal::rt::attentionRule(TypeRuleContext &ctx) {
  ctx.requireFloat(ctx.x(), "q");
  ctx.expected.push_back({ctx.x().dtype, attentionShape(ctx, 0)});
}

/// AttentionGrad: dy, q, kt, v, mask -> dq, dkt, dv, of q's dtype (f32,
/// f16 or bf16; computed in f32).
void shoal::rt::attentionGradRule(TypeRuleContext &ctx) {
  const TensorType &q = *ctx.in(1);
  ctx.requireFloat(q, "input q");
  TensorType out{q.dtype, attentionShape(ctx, 1)};
  if (ctx.x() != out)
    throw Error(fmt::format("input dy must be the attention's result, {}, "
                            "got {}",
                            out.str(), ctx.x().str()));
  ctx.expected = {q, *ctx.in(2), *ctx.in(3)};
}
