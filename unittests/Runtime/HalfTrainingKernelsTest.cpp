//===- HalfTrainingKernelsTest.cpp - A training step on bf16/f16 -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels and type rules of the ops of a mixed-precision training
// step (Megatron-LM's and TransformerEngine's: f16/bf16 activations, f32
// inside the ops that need it, f32 weight gradients). Each kernel runs on
// 16-bit inputs and is compared with the f32 kernel run on the same values
// widened to f32 (exact): a 16-bit result must be that f32 result rounded
// once (nearest, ties to even), an f32 result from 16-bit inputs must be it
// bit for bit. The kernels that sum in double (the reductions, the scale
// gradient, GatherGrad) round the double once; they are compared with the
// exact sums computed here, or with the f32 result away from a 16-bit tie.
// The expected 16-bit values come from Half.h's conversions, not from the
// kernels' staging. Then every relaxed type rule and kernel check still
// rejects mixed 16-bit dtypes with a message that says what it accepts.
//
//===----------------------------------------------------------------------===//

#include "BackendRegistry.h"
#include "Half.h"
#include "KernelRegistry.h"
#include "Ops.h"
#include "PlanLoader.h"
#include "cpu/Backend.h"
#include "cpu/Kernels.h"

#include "OpCheck.h"
#include "TestUtil.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

constexpr DType kBF16 = DType::BF16, kF16 = DType::F16, kF32 = DType::F32;

//===----------------------------------------------------------------------===//
// 16-bit values by Half.h
//===----------------------------------------------------------------------===//

float halfValue(uint16_t h, DType d) {
  return d == kBF16 ? bf16ToFloat(h) : halfToFloat(h);
}

uint16_t halfBits(float f, DType d) {
  return d == kBF16 ? floatToBF16(f) : floatToHalf(f);
}

/// f32 `t` rounded once to `d` (f32: a copy).
Tensor roundTo(const Tensor &t, DType d) {
  Tensor out(d, t.shape());
  const float *p = t.data<float>();
  if (d == kF32) {
    std::copy(p, p + t.numElements(), out.data<float>());
    return out;
  }
  uint16_t *o = out.data<uint16_t>();
  for (int64_t i = 0; i < t.numElements(); ++i)
    o[i] = halfBits(p[i], d);
  return out;
}

/// 16-bit (or f32) `t` as f32, exactly.
Tensor widened(const Tensor &t) {
  Tensor out(kF32, t.shape());
  float *o = out.data<float>();
  if (t.dtype() == kF32) {
    std::copy(t.data<float>(), t.data<float>() + t.numElements(), o);
    return out;
  }
  const uint16_t *p = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numElements(); ++i)
    o[i] = halfValue(p[i], t.dtype());
  return out;
}

Tensor randomOf(DType d, const Shape &shape, std::mt19937 &rng, float lo = -1.f,
                float hi = 1.f) {
  return roundTo(randomF32(shape, rng, lo, hi), d);
}

/// Expects `actual` to have `expected`'s type and the same bits.
void expectSameBits(const Tensor &actual, const Tensor &expected,
                    const std::string &what) {
  ASSERT_EQ(actual.type(), expected.type()) << what;
  std::size_t size = dtypeSize(actual.dtype());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < actual.numElements(); ++i)
    if (std::memcmp(actual.bytes() + i * size, expected.bytes() + i * size,
                    size) != 0 &&
        differ++ == 0)
      first = i;
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of "
                       << actual.numElements()
                       << " elements differ, the first at flat index " << first;
}

/// The f16/bf16 nearest to `v` (ties to even), found among the neighbours
/// of f32's rounding by distance in double.
uint16_t nearestHalf(double v, DType d) {
  uint16_t h = halfBits(static_cast<float>(v), d);
  uint16_t best = h;
  double bestErr = std::fabs(double(halfValue(h, d)) - v);
  for (int step : {-1, 1}) {
    uint16_t c = static_cast<uint16_t>(h + step);
    if ((c & 0x7fff) == 0x7fff || (c ^ h) & 0x8000) // no sign or NaN crossing
      continue;
    double err = std::fabs(double(halfValue(c, d)) - v);
    if (err < bestErr || (err == bestErr && (c & 1) == 0)) {
      best = c;
      bestErr = err;
    }
  }
  return best;
}

/// Whether f32 `f` lies within one f32 ulp of the midpoint of two adjacent
/// values of `d`: there a double that f rounds can round to `d` the other
/// way than `f` does (the double rounding that the double-summing kernels
/// avoid).
bool nearHalfTie(float f, DType d) {
  uint16_t h = halfBits(f, d);
  float hv = halfValue(h, d);
  if (hv == f)
    return false;
  uint16_t other =
      static_cast<uint16_t>(std::fabs(f) > std::fabs(hv) ? h + 1 : h - 1);
  double mid = (double(hv) + double(halfValue(other, d))) / 2;
  double ulp = std::nextafter(std::fabs(f), INFINITY) - std::fabs(f);
  return std::fabs(double(f) - mid) <= ulp;
}

/// Expects 16-bit `actual` to be f32 `ref` rounded once, except where ref
/// is within an f32 ulp of a tie (returns how many such elements; the
/// callers' inputs have none or few).
int64_t expectRoundedAwayFromTies(const Tensor &actual, const Tensor &ref,
                                  const std::string &what) {
  EXPECT_EQ(actual.shape(), ref.shape()) << what;
  const uint16_t *a = actual.data<uint16_t>();
  const float *r = ref.data<float>();
  int64_t ties = 0, differ = 0;
  for (int64_t i = 0; i < ref.numElements(); ++i) {
    if (nearHalfTie(r[i], actual.dtype())) {
      ++ties;
      continue;
    }
    if (a[i] != halfBits(r[i], actual.dtype()) && differ++ == 0)
      ADD_FAILURE() << what << ": element " << i << " is " << a[i]
                    << ", expected " << halfBits(r[i], actual.dtype())
                    << " (f32 " << r[i] << ")";
  }
  return ties;
}

/// A [t, s] causal mask: 0 on and below the diagonal, -1e9 above.
Tensor causalMask(int64_t t, int64_t s) {
  Tensor m(kF32, {t, s});
  float *p = m.data<float>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j)
      p[i * s + j] = j <= i ? 0.f : -1e9f;
  return m;
}

} // namespace

//===----------------------------------------------------------------------===//
// 1. MatMul and Gemm: f32 results from 16-bit operands
//===----------------------------------------------------------------------===//

TEST(HalfTraining, MatMulRoundsOnceOrKeepsF32) {
  std::mt19937 rng(1);
  for (DType d : {kBF16, kF16}) {
    for (Shape bs : {Shape{5, 4}, Shape{2, 5, 4}}) {
      Tensor a = randomOf(d, {2, 3, 5}, rng), b = randomOf(d, bs, rng);
      Tensor ref(kF32, {2, 3, 4});
      matmul(widened(a), widened(b), ref);
      Tensor half(d, {2, 3, 4}), full(kF32, {2, 3, 4});
      matmul(a, b, half);
      matmul(a, b, full);
      expectSameBits(half, roundTo(ref, d), "MatMul 16-bit result");
      expectSameBits(full, ref, "MatMul f32 result");
    }
  }
}

TEST(HalfTraining, GemmRoundsOnceOrKeepsF32) {
  std::mt19937 rng(2);
  for (DType d : {kBF16, kF16})
    for (bool transA : {false, true})
      for (bool transB : {false, true}) {
        Tensor a = randomOf(d, transA ? Shape{6, 3} : Shape{3, 6}, rng);
        Tensor b = randomOf(d, transB ? Shape{4, 6} : Shape{6, 4}, rng);
        Tensor c = randomOf(d, {4}, rng);
        Tensor c32 = widened(c);
        for (const Tensor *cp :
             std::initializer_list<const Tensor *>{nullptr, &c}) {
          Tensor ref(kF32, {3, 4}), half(d, {3, 4}), full(kF32, {3, 4});
          gemm(widened(a), widened(b), cp ? &c32 : nullptr, 1.5f, 0.5f, transA,
               transB, ref);
          gemm(a, b, cp, 1.5f, 0.5f, transA, transB, half);
          gemm(a, b, cp, 1.5f, 0.5f, transA, transB, full);
          expectSameBits(half, roundTo(ref, d), "Gemm 16-bit result");
          expectSameBits(full, ref, "Gemm f32 result");
        }
      }
}

TEST(HalfTraining, GemmAddsIntoItsOutput) {
  // A weight gradient summing itself over micro-batches (addInto): out +=
  // alpha op(A) op(B), from f32 and from 16-bit operands into f32, and
  // into a 16-bit output (rounded once from the f32 sum).
  std::mt19937 rng(4);
  for (DType d : {kF32, kBF16, kF16})
    for (bool transA : {false, true}) {
      Tensor a = randomOf(d, transA ? Shape{6, 3} : Shape{3, 6}, rng);
      Tensor b = randomOf(d, {6, 4}, rng);
      Tensor start = randomOf(kF32, {3, 4}, rng);
      Tensor product(kF32, {3, 4});
      gemm(widened(a), widened(b), nullptr, 1.5f, 0.f, transA, false, product);
      Tensor ref(kF32, {3, 4});
      for (int64_t i = 0; i < 12; ++i)
        ref.data<float>()[i] =
            start.data<float>()[i] + product.data<float>()[i];
      Tensor out = roundTo(start, kF32);
      gemm(a, b, nullptr, 1.5f, 0.f, transA, false, out, /*addInto=*/true);
      for (int64_t i = 0; i < 12; ++i)
        EXPECT_NEAR(out.data<float>()[i], ref.data<float>()[i],
                    1e-5f * (1 + std::fabs(ref.data<float>()[i])))
            << dtypeName(d) << " transA " << transA << " at " << i;
      if (d == kF32)
        continue;
      // Into a 16-bit output: the sum so far widened, added to, rounded.
      Tensor low = roundTo(start, d),
             lowRef = roundTo(
                 [&] {
                   Tensor r = widened(low);
                   for (int64_t i = 0; i < 12; ++i)
                     r.data<float>()[i] += product.data<float>()[i];
                   return r;
                 }(),
                 d);
      gemm(a, b, nullptr, 1.5f, 0.f, transA, false, low, /*addInto=*/true);
      expectSameBits(low, lowRef, "Gemm adding into a 16-bit output");
    }
  // With C it cannot add into its output.
  Tensor a = randomOf(kF32, {2, 2}, rng), c = randomOf(kF32, {2}, rng);
  Tensor out(kF32, {2, 2});
  EXPECT_THROW(gemm(a, a, &c, 1.f, 1.f, false, false, out, true), Error);
}

TEST(HalfTraining, MatMulRuleTakesAnF32ResultThroughTheRegistry) {
  std::mt19937 rng(3);
  // A weight gradient: x^T dy with bf16 activations, f32 result.
  OpCheck c("Gemm");
  c.in(kBF16, {8, 3}).in(kBF16, {8, 5}).out(kF32, {3, 5}).i("transA", 1);
  ASSERT_EQ(c.error(), "");
  Tensor x = randomOf(kBF16, {8, 3}, rng), dy = randomOf(kBF16, {8, 5}, rng);
  std::vector<Tensor> out = c.run({&x, &dy});
  Tensor ref(kF32, {3, 5});
  gemm(widened(x), widened(dy), nullptr, 1.f, 1.f, true, false, ref);
  expectSameBits(out[0], ref, "Gemm through the registry");
  OpCheck m("MatMul");
  m.in(kBF16, {2, 8, 3}).in(kBF16, {3, 5}).out(kF32, {2, 8, 5});
  EXPECT_EQ(m.error(), "");
  m.types[2].dtype = kBF16;
  EXPECT_EQ(m.error(), "");
}

TEST(HalfTraining, MatMulRuleRejectsMixedDTypes) {
  OpCheck m("MatMul");
  m.in(kBF16, {4, 3}).in(kBF16, {3, 5}).out(kF16, {4, 5});
  EXPECT_CONTAINS(m.error(),
                  "output Y must be f32 or bf16 (like A), got f16[4, 5]");
  m.types[2].dtype = kF32;
  m.types[1].dtype = kF16;
  EXPECT_CONTAINS(m.error(), "input B must be bf16, got f16[3, 5]");
  // f32 and f64 operands keep their own dtype.
  m.types[0].dtype = m.types[1].dtype = DType::F64;
  EXPECT_CONTAINS(m.error(), "is declared f32[4, 5], but the inputs "
                             "(f64[4, 3], f64[3, 5]) give f64[4, 5]");
  OpCheck g("Gemm");
  g.in(kBF16, {4, 3}).in(kBF16, {3, 5}).in(kF32, {5}).out(kF32, {4, 5});
  EXPECT_CONTAINS(g.error(), "input C must be bf16, got f32[5]");
  // The kernels check the same.
  Tensor a(kBF16, {4, 3}), b(kF16, {3, 5}), out(kF32, {4, 5});
  EXPECT_CONTAINS(errorOf([&] { matmul(a, b, out); }),
                  "MatMul: B must be bf16, got f16[3, 5]");
  Tensor b16(kBF16, {3, 5}), out16(kF16, {4, 5});
  EXPECT_CONTAINS(errorOf([&] { matmul(a, b16, out16); }),
                  "MatMul: output is f16[4, 5] but the inputs give bf16[4, 5]");
}

//===----------------------------------------------------------------------===//
// 2. ReduceSum and ReduceMean
//===----------------------------------------------------------------------===//

TEST(HalfTraining, ReduceKeepsF32OrRoundsTheDoubleSumOnce) {
  std::mt19937 rng(4);
  for (DType d : {kBF16, kF16}) {
    Tensor x = randomOf(d, {4, 6, 5}, rng, -2.f, 2.f);
    Tensor x32 = widened(x);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean})
      for (std::vector<int64_t> axes :
           {std::vector<int64_t>{1}, std::vector<int64_t>{0, 2}}) {
        Shape kept = reduceShape(x.shape(), axes, true);
        Tensor ref(kF32, kept), full(kF32, kept), half(d, kept);
        reduce(op, x32, axes, ref);
        reduce(op, x, axes, full);
        reduce(op, x, axes, half);
        expectSameBits(full, ref, "reduce to f32");
        // The sums of these 16-bit values are exact in double; the result
        // is that sum (or the double mean) rounded once.
        Tensor want(d, kept);
        const float *px = x32.data<float>();
        int64_t count = x.numElements() / want.numElements();
        for (int64_t o = 0; o < want.numElements(); ++o) {
          std::vector<int64_t> oc = unravel(o, kept);
          double sum = 0;
          for (int64_t i = 0; i < x.numElements(); ++i) {
            std::vector<int64_t> ic = unravel(i, x.shape());
            bool hit = true;
            for (std::size_t k = 0; k < ic.size(); ++k)
              if (kept[k] != 1 && ic[k] != oc[k])
                hit = false;
            if (hit)
              sum += px[i];
          }
          want.data<uint16_t>()[o] =
              nearestHalf(op == ReduceOp::Mean ? sum / double(count) : sum, d);
        }
        expectSameBits(half, want, "reduce to 16 bits");
      }
  }
}

TEST(HalfTraining, ReduceSumRoundsOnceNotThroughF32) {
  // bf16: 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7;
  // through f32 it would be the tie itself and round to even (1).
  Tensor x = roundTo(makeTensor<float>({3}, {1.f, 0x1p-8f, 0x1p-30f}), kBF16);
  Tensor out(kBF16, {1});
  reduce(ReduceOp::Sum, x, {0}, out);
  EXPECT_EQ(out.data<uint16_t>()[0], 0x3f81);
  // f16: 1 + 2^-11 + 2^-24 above the tie between 1 and 1 + 2^-10.
  Tensor h = roundTo(makeTensor<float>({3}, {1.f, 0x1p-11f, 0x1p-24f}), kF16);
  Tensor outH(kF16, {1});
  reduce(ReduceOp::Sum, h, {0}, outH);
  EXPECT_EQ(outH.data<uint16_t>()[0], 0x3c01);
  // f32 results keep f32's single rounding as before.
  Tensor out32(kF32, {1});
  reduce(ReduceOp::Sum, x, {0}, out32);
  EXPECT_EQ(out32.data<float>()[0], 1.f + 0x1p-8f);
}

TEST(HalfTraining, ReduceRuleTakesAnF32Result) {
  OpCheck r("ReduceSum");
  r.in(kBF16, {4, 6}).out(kF32, {1, 6}).ints("axes", {0});
  EXPECT_EQ(r.error(), "");
  r.types[1].dtype = kBF16;
  EXPECT_EQ(r.error(), "");
  r.types[1].dtype = kF16;
  EXPECT_CONTAINS(r.error(), "the output must be f32 or bf16 (like the "
                             "input), got f16[1, 6]");
  OpCheck m("ReduceMean");
  m.in(kF32, {4, 6}).out(kBF16, {1, 6}).ints("axes", {0});
  EXPECT_CONTAINS(m.error(), "is declared bf16[1, 6], but the inputs "
                             "(f32[4, 6]) give f32[1, 6]");
  Tensor x(kBF16, {4, 6}), out(kF16, {1, 6});
  EXPECT_CONTAINS(errorOf([&] { reduce(ReduceOp::Sum, x, {0}, out); }),
                  "ReduceSum: output is f16[1, 6] but the inputs give "
                  "bf16[1, 6]");
}

//===----------------------------------------------------------------------===//
// 3. LayerNormalization (and RMSNorm) and AddLayerNorm with f32 parameters
//===----------------------------------------------------------------------===//

TEST(HalfTraining, LayerNormTakesF32ScaleAndBias) {
  std::mt19937 rng(5);
  for (DType d : {kBF16, kF16})
    for (bool rms : {false, true}) {
      Tensor x = randomOf(d, {3, 4, 8}, rng, -2.f, 2.f);
      Tensor scale = randomF32({8}, rng, 0.5f, 1.5f);
      Tensor bias = randomF32({8}, rng);
      Tensor ref(kF32, x.shape()), refMean(kF32, {3, 4, 1}),
          refInv(kF32, {3, 4, 1});
      layerNorm(widened(x), scale, rms ? nullptr : &bias, 2, 1e-5f, ref,
                &refMean, &refInv, rms);
      Tensor out(d, x.shape()), mean(kF32, {3, 4, 1}), inv(kF32, {3, 4, 1});
      layerNorm(x, scale, rms ? nullptr : &bias, 2, 1e-5f, out, &mean, &inv,
                rms);
      expectSameBits(out, roundTo(ref, d), "LayerNormalization Y");
      expectSameBits(mean, refMean, "LayerNormalization Mean");
      expectSameBits(inv, refInv, "LayerNormalization InvStdDev");
    }
}

TEST(HalfTraining, AddLayerNormTakesF32ScaleAndBias) {
  std::mt19937 rng(6);
  Tensor a = randomOf(kBF16, {4, 8}, rng), b = randomOf(kBF16, {4, 8}, rng);
  Tensor scale = randomF32({8}, rng, 0.5f, 1.5f), bias = randomF32({8}, rng);
  Tensor sum(kBF16, {4, 8}), out(kBF16, {4, 8});
  addLayerNorm(a, b, scale, &bias, 1, 1e-5f, sum, out);
  // The sum is rounded to bf16 (the residual stream), then normalized.
  Tensor refSum(kF32, {4, 8}), ref(kF32, {4, 8});
  binary(BinaryOp::Add, widened(a), widened(b), refSum);
  expectSameBits(sum, roundTo(refSum, kBF16), "AddLayerNorm sum");
  layerNorm(widened(sum), scale, &bias, 1, 1e-5f, ref, nullptr, nullptr);
  expectSameBits(out, roundTo(ref, kBF16), "AddLayerNorm Y");
}

TEST(HalfTraining, LayerNormRulesTakeF32Parameters) {
  OpCheck l("LayerNormalization");
  l.in(kBF16, {2, 8}).in(kF32, {8}).in(kF32, {8}).out(kBF16, {2, 8});
  l.out(kF32, {2, 1}).out(kF32, {2, 1}).i("rms", 0);
  EXPECT_EQ(l.error(), "");
  l.types[1].dtype = kBF16;
  EXPECT_EQ(l.error(), "");
  l.types[1].dtype = kF16;
  EXPECT_CONTAINS(l.error(),
                  "input Scale must be f32 or bf16 (like X), got f16[8]");
  l.types[1].dtype = kF32;
  l.types[2].dtype = kF16;
  EXPECT_CONTAINS(l.error(),
                  "input B must be f32 or bf16 (like X), got f16[8]");
  // f32 X keeps f32 parameters only.
  l.types[0].dtype = l.types[3].dtype = kF32;
  l.types[2].dtype = kBF16;
  EXPECT_CONTAINS(l.error(), "input B must be f32, got bf16[8]");
  OpCheck a("AddLayerNorm");
  a.in(kBF16, {2, 8}).in(kBF16, {2, 8}).in(kF32, {8}).in(kF32, {8});
  a.out(kBF16, {2, 8}).out(kBF16, {2, 8});
  EXPECT_EQ(a.error(), "");
  a.types[2].dtype = kF16;
  EXPECT_CONTAINS(a.error(),
                  "input Scale must be f32 or bf16 (like A), got f16[8]");
  a.types[2].dtype = kF32;
  a.types[1].dtype = kF16;
  EXPECT_CONTAINS(a.error(), "inputs A and B must have the same type");
}

//===----------------------------------------------------------------------===//
// 4. Gelu and GeluGrad with an f32 bias
//===----------------------------------------------------------------------===//

TEST(HalfTraining, GeluAndGeluGradTakeAnF32Bias) {
  std::mt19937 rng(7);
  for (DType d : {kBF16, kF16})
    for (bool tanhForm : {false, true}) {
      Tensor x = randomOf(d, {3, 8}, rng, -3.f, 3.f);
      Tensor dy = randomOf(d, {3, 8}, rng);
      Tensor bias = randomF32({8}, rng);
      Tensor ref(kF32, {3, 8}), out(d, {3, 8});
      gelu(widened(x), &bias, ref, tanhForm);
      gelu(x, &bias, out, tanhForm);
      expectSameBits(out, roundTo(ref, d), "Gelu");
      Tensor refGrad(kF32, {3, 8}), grad(d, {3, 8});
      geluGrad(widened(dy), widened(x), &bias, refGrad, tanhForm);
      geluGrad(dy, x, &bias, grad, tanhForm);
      expectSameBits(grad, roundTo(refGrad, d), "GeluGrad");
    }
}

TEST(HalfTraining, GeluRulesTakeAnF32Bias) {
  OpCheck g("Gelu");
  g.in(kBF16, {3, 8}).in(kF32, {8}).out(kBF16, {3, 8});
  EXPECT_EQ(g.error(), "");
  g.types[1].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "bias must be f32 or bf16 (like x), got f16[8]");
  OpCheck gg("GeluGrad");
  gg.in(kBF16, {3, 8}).in(kBF16, {3, 8}).in(kF32, {8}).out(kBF16, {3, 8});
  EXPECT_EQ(gg.error(), "");
  gg.types[2].dtype = kF16;
  EXPECT_CONTAINS(gg.error(), "bias must be f32 or bf16 (like x), got f16[8]");
  gg.types[2].dtype = kF32;
  gg.types[0].dtype = kF16;
  EXPECT_CONTAINS(gg.error(), "inputs dy and x must have the same type");
  OpCheck f("Gelu");
  f.in(kF32, {3, 8}).in(kBF16, {8}).out(kF32, {3, 8});
  EXPECT_CONTAINS(f.error(), "bias must be f32, got bf16[8]");
}

//===----------------------------------------------------------------------===//
// 5, 6. Attention with an f32 mask, and AttentionGrad
//===----------------------------------------------------------------------===//

TEST(HalfTraining, AttentionTakesAnF32Mask) {
  std::mt19937 rng(8);
  Tensor mask = causalMask(5, 5);
  for (DType d : {kBF16, kF16}) {
    Tensor q = randomOf(d, {2, 5, 4}, rng), kt = randomOf(d, {2, 4, 5}, rng),
           v = randomOf(d, {2, 5, 3}, rng);
    Tensor ref(kF32, {2, 5, 3}), out(d, {2, 5, 3});
    attention(widened(q), widened(kt), widened(v), &mask, 0.5f, ref);
    attention(q, kt, v, &mask, 0.5f, out);
    expectSameBits(out, roundTo(ref, d), "Attention");
  }
}

TEST(HalfTraining, AttentionGradRoundsEachGradientOnce) {
  std::mt19937 rng(9);
  for (DType d : {kBF16, kF16})
    for (DType maskType : {kF32, d}) {
      // 70 query rows: more than one block of rows.
      int64_t t = 70;
      Tensor mask = roundTo(causalMask(t, t), maskType);
      Tensor q = randomOf(d, {2, t, 4}, rng), kt = randomOf(d, {2, 4, t}, rng),
             v = randomOf(d, {2, t, 3}, rng), dy = randomOf(d, {2, t, 3}, rng);
      Tensor rq(kF32, q.shape()), rk(kF32, kt.shape()), rv(kF32, v.shape());
      Tensor mask32 = widened(mask);
      attentionGrad(widened(dy), widened(q), widened(kt), widened(v), &mask32,
                    0.5f, rq, rk, rv);
      Tensor dq(d, q.shape()), dkt(d, kt.shape()), dv(d, v.shape());
      attentionGrad(dy, q, kt, v, &mask, 0.5f, dq, dkt, dv);
      expectSameBits(dq, roundTo(rq, d), "AttentionGrad dq");
      expectSameBits(dkt, roundTo(rk, d), "AttentionGrad dkt");
      expectSameBits(dv, roundTo(rv, d), "AttentionGrad dv");
    }
}

TEST(HalfTraining, AttentionRulesTakeHalfOperands) {
  OpCheck a("Attention");
  a.in(kBF16, {2, 5, 4}).in(kBF16, {2, 4, 6}).in(kBF16, {2, 6, 3});
  a.in(kF32, {5, 6}).out(kBF16, {2, 5, 3});
  EXPECT_EQ(a.error(), "");
  a.types[3].dtype = kF16;
  EXPECT_CONTAINS(a.error(),
                  "mask must be f32 or bf16 (like q), got f16[5, 6]");
  // dy, q, kt, v, mask -> dq, dkt, dv.
  OpCheck g("AttentionGrad");
  g.in(kBF16, {2, 5, 3}).in(kBF16, {2, 5, 4}).in(kBF16, {2, 4, 6});
  g.in(kBF16, {2, 6, 3}).in(kF32, {5, 6});
  g.out(kBF16, {2, 5, 4}).out(kBF16, {2, 4, 6}).out(kBF16, {2, 6, 3});
  EXPECT_EQ(g.error(), "");
  g.types[4].dtype = kBF16;
  EXPECT_EQ(g.error(), "");
  g.types[4].dtype = kF16;
  EXPECT_CONTAINS(g.error(),
                  "mask must be f32 or bf16 (like q), got f16[5, 6]");
  g.types[4].dtype = kF32;
  g.types[0].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "input dy must be the attention's result, "
                             "bf16[2, 5, 3], got f16[2, 5, 3]");
  g.types[0].dtype = kBF16;
  g.types[3].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "kt and v must be bf16, got f16[2, 6, 3]");
  g.types[3].dtype = kBF16;
  g.types[5].dtype = kF32;
  EXPECT_CONTAINS(g.error(), "is declared f32[2, 5, 4], but the inputs");
  // The kernel checks the same.
  Tensor q(kBF16, {2, 5, 4}), kt(kBF16, {2, 4, 6}), v(kF16, {2, 6, 3}),
      dy(kBF16, {2, 5, 3}), dq, dkt, dv;
  EXPECT_CONTAINS(
      errorOf([&] { attentionGrad(dy, q, kt, v, nullptr, 1.f, dq, dkt, dv); }),
      "AttentionGrad: v must be bf16 like q, got f16[2, 6, 3]");
  Tensor v16(kBF16, {2, 6, 3}), m(kF16, {5, 6});
  EXPECT_CONTAINS(
      errorOf([&] { attentionGrad(dy, q, kt, v16, &m, 1.f, dq, dkt, dv); }),
      "AttentionGrad: mask must be f32 or bf16 like q, got f16[5, 6]");
  Tensor badDy(kBF16, {2, 5, 4});
  EXPECT_CONTAINS(errorOf([&] {
                    attentionGrad(badDy, q, kt, v16, nullptr, 1.f, dq, dkt, dv);
                  }),
                  "AttentionGrad: dy must be bf16[2, 5, 3], got bf16[2, 5, 4]");
}

//===----------------------------------------------------------------------===//
// 7. SoftmaxGrad
//===----------------------------------------------------------------------===//

TEST(HalfTraining, SoftmaxGradRoundsOnce) {
  std::mt19937 rng(10);
  for (DType d : {kBF16, kF16})
    for (int64_t axis : {2, 1}) {
      Tensor logits = randomF32({2, 6, 7}, rng, -3.f, 3.f);
      Tensor y32(kF32, logits.shape());
      softmax(logits, axis, y32);
      Tensor y = roundTo(y32, d), dy = randomOf(d, logits.shape(), rng);
      Tensor ref(kF32, y.shape()), out(d, y.shape());
      softmaxGrad(widened(y), widened(dy), axis, ref);
      softmaxGrad(y, dy, axis, out);
      expectSameBits(out, roundTo(ref, d), "SoftmaxGrad");
    }
}

TEST(HalfTraining, SoftmaxGradRuleTakesOneHalfDType) {
  OpCheck s("SoftmaxGrad");
  s.in(kBF16, {2, 7}).in(kBF16, {2, 7}).out(kBF16, {2, 7});
  EXPECT_EQ(s.error(), "");
  s.types[1].dtype = kF16;
  EXPECT_CONTAINS(s.error(), "inputs y and dy must have the same type, got "
                             "bf16[2, 7], f16[2, 7]");
  s.types[1].dtype = kBF16;
  s.types[2].dtype = kF32;
  EXPECT_CONTAINS(s.error(), "is declared f32[2, 7], but the inputs");
  Tensor y(kBF16, {2, 7}), dy(kF16, {2, 7}), dx(kBF16, {2, 7});
  EXPECT_CONTAINS(errorOf([&] { softmaxGrad(y, dy, 1, dx); }),
                  "SoftmaxGrad: dy f16[2, 7] must have the type of y "
                  "bf16[2, 7]");
  Tensor y64(DType::F64, {2, 7});
  EXPECT_CONTAINS(errorOf([&] { softmaxGrad(y64, y64, 1, dx); }),
                  "SoftmaxGrad: y must be f32, f16 or bf16, got f64[2, 7]");
}

//===----------------------------------------------------------------------===//
// 8. LayerNormalizationGrad and LayerNormalizationScaleGrad
//===----------------------------------------------------------------------===//

TEST(HalfTraining, LayerNormGradRoundsOnce) {
  std::mt19937 rng(11);
  for (DType d : {kBF16, kF16})
    for (bool rms : {false, true})
      for (DType scaleType : {kF32, d}) {
        Tensor x = randomOf(d, {3, 4, 8}, rng, -2.f, 2.f);
        Tensor dy = randomOf(d, x.shape(), rng);
        Tensor scale = roundTo(randomF32({8}, rng, 0.5f, 1.5f), scaleType);
        Tensor ref(kF32, x.shape()), dx(d, x.shape());
        layerNormGrad(widened(x), widened(scale), widened(dy), 2, 1e-5f, ref,
                      rms);
        layerNormGrad(x, scale, dy, 2, 1e-5f, dx, rms);
        expectSameBits(dx, roundTo(ref, d), "LayerNormalizationGrad dx");
      }
}

TEST(HalfTraining, LayerNormScaleGradKeepsF32OrRoundsOnce) {
  std::mt19937 rng(12);
  for (DType d : {kBF16, kF16})
    for (bool rms : {false, true}) {
      Tensor x = randomOf(d, {6, 5, 8}, rng, -2.f, 2.f);
      Tensor dy = randomOf(d, x.shape(), rng);
      for (int64_t axis : {1, 2}) {
        Shape norm(x.shape().begin() + axis, x.shape().end());
        Tensor ref(kF32, norm), full(kF32, norm), half(d, norm);
        layerNormScaleGrad(widened(x), widened(dy), axis, 1e-5f, ref, rms);
        layerNormScaleGrad(x, dy, axis, 1e-5f, full, rms);
        layerNormScaleGrad(x, dy, axis, 1e-5f, half, rms);
        expectSameBits(full, ref, "LayerNormalizationScaleGrad f32");
        // The double sums round once to 16 bits: the f32 result rounded,
        // but for a value within an f32 ulp of a tie (none here).
        EXPECT_EQ(
            expectRoundedAwayFromTies(half, ref, "LayerNormalizationScaleGrad"),
            0);
      }
    }
}

TEST(HalfTraining, LayerNormGradRulesTakeHalfOperands) {
  OpCheck g("LayerNormalizationGrad");
  g.in(kBF16, {2, 8}).in(kF32, {8}).in(kBF16, {2, 8}).out(kBF16, {2, 8});
  for (int64_t rms : {0, 1}) {
    g.op.mutable_attrs()->erase("rms");
    g.i("rms", rms);
    EXPECT_EQ(g.error(), "");
  }
  g.types[1].dtype = kBF16;
  EXPECT_EQ(g.error(), "");
  g.types[1].dtype = kF16;
  EXPECT_CONTAINS(g.error(),
                  "input scale must be f32 or bf16 (like x), got f16[8]");
  g.types[1].dtype = kF32;
  g.types[2].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "input dy must have the type of x, bf16[2, 8], "
                             "got f16[2, 8]");
  g.types[2].dtype = kBF16;
  g.types[3].dtype = kF32;
  EXPECT_CONTAINS(g.error(), "is declared f32[2, 8], but the inputs");
  OpCheck s("LayerNormalizationScaleGrad");
  s.in(kBF16, {2, 8}).in(kBF16, {2, 8}).out(kF32, {8}).i("rms", 1);
  EXPECT_EQ(s.error(), "");
  s.types[2].dtype = kBF16;
  EXPECT_EQ(s.error(), "");
  s.types[2].dtype = kF16;
  EXPECT_CONTAINS(s.error(),
                  "output dscale must be f32 or bf16 (like x), got f16[8]");
  s.types[2].dtype = kF32;
  s.types[1].dtype = kF16;
  EXPECT_CONTAINS(s.error(), "input dy must have the type of x, bf16[2, 8], "
                             "got f16[2, 8]");
  // The kernels check the same.
  Tensor x(kBF16, {2, 8}), dy(kF16, {2, 8}), dx(kBF16, {2, 8}), sc(kF16, {8});
  EXPECT_CONTAINS(errorOf([&] { layerNormGrad(x, sc, x, 1, 1e-5f, dx); }),
                  "LayerNormalizationGrad: scale must be f32 or bf16 like x, "
                  "got f16[8]");
  EXPECT_CONTAINS(errorOf([&] { layerNormScaleGrad(x, dy, 1, 1e-5f, sc); }),
                  "LayerNormalizationScaleGrad: dy f16[2, 8] must have the "
                  "type of x bf16[2, 8]");
  EXPECT_CONTAINS(errorOf([&] { layerNormScaleGrad(x, x, 1, 1e-5f, sc); }),
                  "LayerNormalizationScaleGrad: output is f16[8] but the "
                  "inputs give bf16[8]");
}

//===----------------------------------------------------------------------===//
// 9. GatherGrad
//===----------------------------------------------------------------------===//

TEST(HalfTraining, GatherGradAccumulatesInDouble) {
  std::mt19937 rng(13);
  for (DType d : {kBF16, kF16}) {
    // 40 positions over rows 0-4 of 6 (row 5 stays 0), every other index
    // counted from the end.
    Tensor idx = randomI64({5, 8}, rng, 0, 4);
    for (int64_t i = 1; i < 40; i += 2)
      idx.data<int64_t>()[i] -= 6;
    Tensor dy = randomOf(d, {5, 8, 3}, rng, -2.f, 2.f);
    Tensor ref(kF32, {6, 3}), full(kF32, {6, 3}), half(d, {6, 3});
    gatherGrad(idx, widened(dy), ref);
    gatherGrad(idx, dy, full);
    gatherGrad(idx, dy, half);
    expectSameBits(full, ref, "GatherGrad f32");
    // The row sums of these values are exact in double.
    Tensor want(d, {6, 3});
    Tensor dy32 = widened(dy);
    const float *pd = dy32.data<float>();
    std::vector<double> sums(18, 0.0);
    for (int64_t i = 0; i < 40; ++i) {
      int64_t r = idx.data<int64_t>()[i];
      r = r < 0 ? r + 6 : r;
      for (int64_t j = 0; j < 3; ++j)
        sums[r * 3 + j] += pd[i * 3 + j];
    }
    for (int64_t i = 0; i < 18; ++i)
      want.data<uint16_t>()[i] = nearestHalf(sums[i], d);
    expectSameBits(half, want, "GatherGrad 16 bits");
  }
  // One rounding: 1 + 2^-8 + 2^-30 is bf16's 1 + 2^-7, not the tie's even 1.
  Tensor idx = makeTensor<int64_t>({3}, {0, 0, 0});
  Tensor dy =
      roundTo(makeTensor<float>({3, 1}, {1.f, 0x1p-8f, 0x1p-30f}), kBF16);
  Tensor out(kBF16, {1, 1});
  gatherGrad(idx, dy, out);
  EXPECT_EQ(out.data<uint16_t>()[0], 0x3f81);
}

TEST(HalfTraining, GatherGradRuleTakesAnF32OrHalfTable) {
  std::mt19937 rng(14);
  OpCheck g("GatherGrad");
  g.in(DType::I64, {2, 5}).in(kBF16, {2, 5, 8}).out(kF32, {50, 8});
  ASSERT_EQ(g.error(), "");
  Tensor idx = randomI64({2, 5}, rng, 0, 49),
         dy = randomOf(kBF16, {2, 5, 8}, rng);
  std::vector<Tensor> out = g.run({&idx, &dy});
  Tensor ref(kF32, {50, 8});
  gatherGrad(idx, widened(dy), ref);
  expectSameBits(out[0], ref, "GatherGrad through the registry");
  g.types[2].dtype = kBF16;
  EXPECT_EQ(g.error(), "");
  g.types[2].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "output value 2 must be f32 or bf16 (dy's) "
                             "[rows, ...], got f16[50, 8]");
  g.types[1].dtype = kF32;
  EXPECT_CONTAINS(g.error(), "output value 2 must be f32 [rows, ...], got "
                             "f16[50, 8]");
  Tensor bad(kF16, {50, 8});
  EXPECT_CONTAINS(errorOf([&] { gatherGrad(idx, dy, bad); }),
                  "GatherGrad: output must be f32 or bf16 (dy's) [rows, ...], "
                  "got f16[50, 8]");
}

//===----------------------------------------------------------------------===//
// 10. SoftmaxCrossEntropy and its gradient
//===----------------------------------------------------------------------===//

TEST(HalfTraining, CrossEntropyOnHalfLogits) {
  std::mt19937 rng(15);
  for (DType d : {kBF16, kF16}) {
    Tensor logits = randomOf(d, {2, 3, 11}, rng, -4.f, 4.f);
    Tensor labels = makeTensor<int64_t>({2, 3}, {0, 10, -100, 3, 2, 5});
    Tensor dloss = randomF32({2, 3}, rng);
    Tensor ref(kF32, {2, 3}), loss(kF32, {2, 3});
    softmaxCrossEntropy(widened(logits), labels, -100, ref);
    softmaxCrossEntropy(logits, labels, -100, loss);
    expectSameBits(loss, ref, "SoftmaxCrossEntropy loss (f32)");
    Tensor refGrad(kF32, logits.shape()), grad(d, logits.shape());
    softmaxCrossEntropyGrad(widened(logits), labels, dloss, -100, refGrad);
    softmaxCrossEntropyGrad(logits, labels, dloss, -100, grad);
    expectSameBits(grad, roundTo(refGrad, d), "SoftmaxCrossEntropyGrad");
  }
}

TEST(HalfTraining, CrossEntropyRulesKeepTheLossF32) {
  OpCheck l("SoftmaxCrossEntropy");
  l.in(kBF16, {4, 11}).in(DType::I64, {4}).out(kF32, {4});
  EXPECT_EQ(l.error(), "");
  l.types[2].dtype = kBF16;
  EXPECT_CONTAINS(l.error(), "is declared bf16[4], but the inputs "
                             "(bf16[4, 11], i64[4]) give f32[4]");
  l.types[0].dtype = DType::F64;
  EXPECT_CONTAINS(l.error(), "input logits must be f32, f16 or bf16, got "
                             "f64[4, 11]");
  OpCheck g("SoftmaxCrossEntropyGrad");
  g.in(kBF16, {4, 11}).in(DType::I64, {4}).in(kF32, {4}).out(kBF16, {4, 11});
  EXPECT_EQ(g.error(), "");
  g.types[2].dtype = kBF16;
  EXPECT_CONTAINS(g.error(), "input dloss must be f32[4] (one per label), "
                             "got bf16[4]");
  g.types[2].dtype = kF32;
  g.types[3].dtype = kF32;
  EXPECT_CONTAINS(g.error(), "is declared f32[4, 11], but the inputs");
  Tensor logits(kBF16, {4, 11}), labels(DType::I64, {4}), dloss(kF32, {4}),
      wrong(kF16, {4, 11});
  EXPECT_CONTAINS(errorOf([&] {
                    softmaxCrossEntropyGrad(logits, labels, dloss, -100, wrong);
                  }),
                  "SoftmaxCrossEntropyGrad: output is f16[4, 11] but the "
                  "inputs give bf16[4, 11]");
}

//===----------------------------------------------------------------------===//
// 11. Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// The four Vocab* kernels on 16-bit logits against the f32 kernels on the
/// same logits widened: max, stats and the loss bit for bit, dlogits the
/// f32 result rounded once; on a whole block and on the padded last block
/// of an uneven split (its padding holds garbage the kernels must skip).
TEST(HalfTraining, VocabCrossEntropyOnHalfLogits) {
  std::mt19937 rng(16);
  const int64_t c = 7;
  // Classes 0-6 of 14, and the last block of 12 over two ranks (classes
  // 7-11, two columns of padding). Each block holds some labels, the other
  // block others; one is ignored.
  Tensor labels = makeTensor<int64_t>({2, 4}, {0, 3, 8, -100, 11, 6, 7, 2});
  for (DType d : {kBF16, kF16})
    for (VocabBlock block : {VocabBlock{14, 0}, VocabBlock{12, 7}}) {
      SCOPED_TRACE(fmt::format("{}, block at {} of {}", dtypeName(d),
                               block.offset, block.size));
      Tensor logits = randomOf(d, {2, 4, c}, rng, -4.f, 4.f);
      int64_t valid = std::min(c, block.size - block.offset);
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t j = valid; j < c; ++j)
          logits.data<uint16_t>()[r * c + j] = halfBits(1e4f, d);
      Tensor x32 = widened(logits);
      Tensor refMax(kF32, {2, 4}), mx(kF32, {2, 4});
      vocabMax(x32, block, refMax);
      vocabMax(logits, block, mx);
      expectSameBits(mx, refMax, "VocabMax");
      // The max over all ranks (the all-reduce's) is above some rows' own.
      Tensor gmax = widened(refMax);
      for (int64_t r = 1; r < 8; r += 2)
        gmax.data<float>()[r] += 0.75f;
      Tensor refStats(kF32, {2, 4, 2}), stats(kF32, {2, 4, 2});
      vocabStats(x32, labels, gmax, block, -100, refStats);
      vocabStats(logits, labels, gmax, block, -100, stats);
      expectSameBits(stats, refStats, "VocabStats");
      Tensor refLoss(kF32, {2, 4}), loss(kF32, {2, 4});
      vocabCrossEntropy(gmax, refStats, labels, -100, refLoss);
      vocabCrossEntropy(gmax, stats, labels, -100, loss);
      expectSameBits(loss, refLoss, "VocabCrossEntropy");
      Tensor dloss = randomF32({2, 4}, rng, 0.5f, 2.f);
      Tensor refGrad(kF32, logits.shape()), grad(d, logits.shape());
      vocabCrossEntropyGrad(x32, labels, dloss, gmax, refStats, block, -100,
                            refGrad);
      vocabCrossEntropyGrad(logits, labels, dloss, gmax, stats, block, -100,
                            grad);
      expectSameBits(grad, roundTo(refGrad, d), "VocabCrossEntropyGrad");
      // The padding and the ignored row are 0.
      for (int64_t j = 0; j < c; ++j)
        EXPECT_EQ(grad.data<uint16_t>()[3 * c + j], 0) << "ignored row";
      for (int64_t j = valid; j < c; ++j)
        EXPECT_EQ(grad.data<uint16_t>()[j], 0) << "padding";
    }
}

TEST(HalfTraining, VocabRulesTakeHalfLogitsThroughTheRegistry) {
  std::mt19937 rng(17);
  // Rank 1 of two over tp: classes 7-12 of 13 and one column of padding.
  auto vocab = [](const char *kind) {
    OpCheck o(kind);
    o.mesh = Mesh({"tp"}, {2});
    o.strs("shard_axes", {"tp"}).i("shard_size", 13);
    return o;
  };
  VocabBlock block{13, 7};
  Tensor labels = makeTensor<int64_t>({2, 3}, {0, 9, -100, 12, 7, 6});
  for (DType d : {kBF16, kF16}) {
    SCOPED_TRACE(dtypeName(d));
    Tensor logits = randomOf(d, {2, 3, 7}, rng, -4.f, 4.f);
    Tensor x32 = widened(logits);
    OpCheck m = vocab("VocabMax");
    m.in(d, {2, 3, 7}).out(kF32, {2, 3});
    ASSERT_EQ(m.error(), "");
    Tensor mx = m.run({&logits}, BackendKind::CPU, 1)[0];
    Tensor refMax(kF32, {2, 3});
    vocabMax(x32, block, refMax);
    expectSameBits(mx, refMax, "VocabMax through the registry");
    OpCheck s = vocab("VocabStats");
    s.i("ignore_index", -100);
    s.in(d, {2, 3, 7}).in(DType::I64, {2, 3}).in(kF32, {2, 3});
    s.out(kF32, {2, 3, 2});
    ASSERT_EQ(s.error(), "");
    Tensor stats = s.run({&logits, &labels, &mx}, BackendKind::CPU, 1)[0];
    Tensor refStats(kF32, {2, 3, 2});
    vocabStats(x32, labels, refMax, block, -100, refStats);
    expectSameBits(stats, refStats, "VocabStats through the registry");
    OpCheck g = vocab("VocabCrossEntropyGrad");
    g.in(d, {2, 3, 7}).in(DType::I64, {2, 3}).in(kF32, {2, 3});
    g.in(kF32, {2, 3}).in(kF32, {2, 3, 2}).out(d, {2, 3, 7});
    ASSERT_EQ(g.error(), "");
    Tensor dloss = randomF32({2, 3}, rng, 0.5f, 2.f);
    Tensor grad =
        g.run({&logits, &labels, &dloss, &mx, &stats}, BackendKind::CPU, 1)[0];
    Tensor refGrad(kF32, {2, 3, 7});
    vocabCrossEntropyGrad(x32, labels, dloss, refMax, refStats, block, -100,
                          refGrad);
    expectSameBits(grad, roundTo(refGrad, d),
                   "VocabCrossEntropyGrad through the registry");
  }
}

TEST(HalfTraining, VocabRulesAndKernelsRejectOtherDTypes) {
  auto vocab = [](const char *kind) {
    OpCheck o(kind);
    o.mesh = Mesh({"tp"}, {2});
    o.strs("shard_axes", {"tp"}).i("shard_size", 13);
    return o;
  };
  OpCheck m = vocab("VocabMax");
  m.in(DType::F64, {4, 7}).out(kF32, {4});
  EXPECT_CONTAINS(m.error(), "input logits must be f32, f16 or bf16, got "
                             "f64[4, 7]");
  m.types[0].dtype = kBF16;
  m.types[1].dtype = kBF16;
  EXPECT_CONTAINS(m.error(), "is declared bf16[4], but the inputs "
                             "(bf16[4, 7]) give f32[4]");
  OpCheck s = vocab("VocabStats");
  s.in(kF16, {4, 7}).in(DType::I64, {4}).in(kF16, {4}).out(kF32, {4, 2});
  EXPECT_CONTAINS(s.error(), "input max must be f32[4], got f16[4]");
  s.types[2].dtype = kF32;
  s.types[3].dtype = kF16;
  EXPECT_CONTAINS(s.error(), "is declared f16[4, 2], but the inputs");
  OpCheck g = vocab("VocabCrossEntropyGrad");
  g.in(kF16, {4, 7}).in(DType::I64, {4}).in(kF32, {4}).in(kF32, {4});
  g.in(kF32, {4, 2}).out(kBF16, {4, 7});
  EXPECT_CONTAINS(g.error(), "is declared bf16[4, 7], but the inputs");
  g.types[5].dtype = kF32; // dlogits are the logits' dtype, not f32
  EXPECT_CONTAINS(g.error(), "is declared f32[4, 7], but the inputs");
  g.types[5].dtype = kF16;
  EXPECT_EQ(g.error(), "");
  g.types[2].dtype = kF16;
  EXPECT_CONTAINS(g.error(), "input dloss must be f32[4], got f16[4]");
  // VocabCrossEntropy stays f32.
  OpCheck l("VocabCrossEntropy");
  l.in(kBF16, {4}).in(kF32, {4, 2}).in(DType::I64, {4}).out(kF32, {4});
  EXPECT_CONTAINS(l.error(), "input max must be f32, got bf16[4]");
  // The kernels check the same.
  VocabBlock block{13, 0};
  Tensor x16(kF16, {4, 7}), x64(DType::F64, {4, 7}), labels(DType::I64, {4}),
      f32s(kF32, {4}), stats(kF32, {4, 2}), max16(kF16, {4});
  Tensor out(kF32, {4}), wrong(kBF16, {4, 7}), out32(kF32, {4, 7});
  EXPECT_CONTAINS(errorOf([&] { vocabMax(x64, block, out); }),
                  "VocabMax: logits must be f32, f16 or bf16, got f64[4, 7]");
  EXPECT_CONTAINS(
      errorOf([&] { vocabStats(x16, labels, max16, block, -100, stats); }),
      "VocabStats: max must be f32, got f16[4]");
  for (Tensor *dl : {&wrong, &out32})
    EXPECT_CONTAINS(errorOf([&] {
                      vocabCrossEntropyGrad(x16, labels, f32s, f32s, stats,
                                            block, -100, *dl);
                    }),
                    fmt::format("VocabCrossEntropyGrad: output is {} but the "
                                "inputs give f16[4, 7]",
                                dl->type().str()));
}

//===----------------------------------------------------------------------===//
// 12. What stays f32
//===----------------------------------------------------------------------===//

TEST(HalfTraining, OptimizerAndBatchNormStayF32) {
  OpCheck a("AdamW");
  a.in(kBF16, {5}).in(kBF16, {5}).in(kBF16, {5}).in(kBF16, {5});
  EXPECT_CONTAINS(a.error(), "input w must be f32, got bf16[5]");
  OpCheck b("BatchNormalization");
  b.in(kBF16, {2, 3}).in(kF32, {3}).in(kF32, {3}).in(kF32, {3}).in(kF32, {3});
  b.out(kBF16, {2, 3});
  EXPECT_CONTAINS(b.error(), "input X must be f32, got bf16[2, 3]");
}

//===----------------------------------------------------------------------===//
// The CUDA kernels compute f32: 16-bit operands are widened on the device
//===----------------------------------------------------------------------===//

TEST(HalfTraining, CudaKernelsWidenHalfOperandsOnTheDevice) {
  registerAllBackends();
  if (!findBackend(BackendKind::CUDA))
    GTEST_SKIP() << "this build has no CUDA backend";
  registerBackendKernels(BackendKind::CUDA);
  // The f32 CUDA kernels take 16-bit operands: each is widened to f32 on
  // the device, the f32 kernel runs and each 16-bit result is rounded
  // once (cuda/Registry.cpp widenedKernel), as the CPU kernels compute
  // them; their checks say so (the plan audit's answer), and a 16-bit
  // result a product would add into stays on the CPU.
  std::vector<OpCheck> ops;
  ops.reserve(17);
  ops.emplace_back("VocabMax");
  ops.back().mesh = Mesh({"tp"}, {2});
  ops.back().strs("shard_axes", {"tp"}).i("shard_size", 13);
  ops.back().in(kBF16, {4, 7}).out(kF32, {4});
  ops.emplace_back("SoftmaxGrad");
  ops.back().in(kBF16, {2, 8}).in(kBF16, {2, 8}).out(kBF16, {2, 8});
  ops.back().i("axis", 1);
  ops.emplace_back("AttentionGrad");
  ops.back().in(kBF16, {2, 5, 3}).in(kBF16, {2, 5, 4}).in(kBF16, {2, 4, 6});
  ops.back().in(kBF16, {2, 6, 3}).out(kBF16, {2, 5, 4}).out(kBF16, {2, 4, 6});
  ops.back().out(kBF16, {2, 6, 3});
  ops.emplace_back("GatherGrad");
  ops.back().in(DType::I64, {2, 3}).in(kBF16, {2, 3, 4}).out(kF32, {10, 4});
  ops.emplace_back("LayerNormalizationGrad");
  ops.back().in(kBF16, {2, 8}).in(kF32, {8}).in(kBF16, {2, 8});
  ops.back().out(kBF16, {2, 8});
  ops.emplace_back("LayerNormalizationScaleGrad");
  ops.back().in(kBF16, {2, 8}).in(kBF16, {2, 8}).out(kF32, {8});
  ops.emplace_back("SoftmaxCrossEntropy");
  ops.back().in(kBF16, {4, 11}).in(DType::I64, {4}).out(kF32, {4});
  ops.emplace_back("SoftmaxCrossEntropyGrad");
  ops.back().in(kBF16, {4, 11}).in(DType::I64, {4}).in(kF32, {4});
  ops.back().out(kBF16, {4, 11});
  ops.emplace_back("MatMul");
  ops.back().in(kBF16, {4, 3}).in(kBF16, {3, 5}).out(kF32, {4, 5});
  ops.emplace_back("Gemm");
  ops.back().in(kBF16, {4, 3}).in(kBF16, {3, 5}).out(kF32, {4, 5});
  ops.emplace_back("ReduceSum");
  ops.back().in(kBF16, {4, 6}).out(kF32, {1, 6}).ints("axes", {0});
  ops.emplace_back("ReduceMean");
  ops.back().in(kBF16, {4, 6}).out(kBF16, {1, 6}).ints("axes", {0});
  ops.emplace_back("LayerNormalization");
  ops.back().in(kBF16, {2, 8}).in(kF32, {8}).in(kF32, {8}).out(kBF16, {2, 8});
  ops.emplace_back("AddLayerNorm");
  ops.back().in(kBF16, {2, 8}).in(kBF16, {2, 8}).in(kF32, {8}).in(kF32, {8});
  ops.back().out(kBF16, {2, 8}).out(kBF16, {2, 8});
  ops.emplace_back("Gelu");
  ops.back().in(kBF16, {2, 8}).in(kF32, {8}).out(kBF16, {2, 8});
  ops.emplace_back("GeluGrad");
  ops.back().in(kBF16, {2, 8}).in(kBF16, {2, 8}).in(kF32, {8});
  ops.back().out(kBF16, {2, 8});
  ops.emplace_back("Attention");
  ops.back().in(kBF16, {2, 5, 4}).in(kBF16, {2, 4, 6}).in(kBF16, {2, 6, 3});
  ops.back().in(kF32, {5, 6}).out(kBF16, {2, 5, 3});
  for (OpCheck &c : ops) {
    ASSERT_EQ(c.error(), "") << c.op.kind();
    OpInfo info = c.info();
    std::vector<OperandDesc> in, out;
    for (int v : info.inputs)
      in.push_back(v >= 0
                       ? OperandDesc{true, c.types[v].dtype, c.types[v].shape}
                       : OperandDesc{});
    for (int v : info.outputs)
      out.push_back(v >= 0
                        ? OperandDesc{true, c.types[v].dtype, c.types[v].shape}
                        : OperandDesc{});
    EXPECT_EQ(kernelWhyNot(BackendKind::CUDA, info, in, out, false), "")
        << c.op.kind();
  }
  // A bf16 product adding into its bf16 result (a weight gradient summing
  // itself over micro-batches) runs on cuBLASLt as it is (beta = 1); one
  // that widens (mixed operand types) cannot add into a 16-bit result.
  OpCheck g("Gemm");
  g.in(kBF16, {4, 3}).in(kBF16, {3, 5}).out(kBF16, {4, 5});
  OpInfo info = g.info();
  std::vector<OperandDesc> in = {{true, kBF16, {4, 3}}, {true, kBF16, {3, 5}}};
  std::vector<OperandDesc> out = {{true, kBF16, {4, 5}}};
  EXPECT_EQ(kernelWhyNot(BackendKind::CUDA, info, in, out, true), "");
  std::vector<OperandDesc> mixed = {{true, kBF16, {4, 3}},
                                    {true, kF32, {3, 5}}};
  EXPECT_EQ(kernelWhyNot(BackendKind::CUDA, info, mixed, out, true),
            "Gemm adding into a 16-bit result");
  // The plan audit names the library: cuBLASLt for 16-bit operands as they
  // are, cuBLAS for f32 ones and for widened ones.
  EXPECT_EQ(kernelLabel(BackendKind::CUDA, info, in, out), "cuBLASLt");
  EXPECT_EQ(kernelLabel(BackendKind::CUDA, info, mixed, out),
            "cuBLAS (operands widened to f32)");
  std::vector<OperandDesc> f32In = {{true, kF32, {4, 3}}, {true, kF32, {3, 5}}};
  std::vector<OperandDesc> f32Out = {{true, kF32, {4, 5}}};
  EXPECT_EQ(kernelLabel(BackendKind::CUDA, info, f32In, f32Out), "cuBLAS");
}
