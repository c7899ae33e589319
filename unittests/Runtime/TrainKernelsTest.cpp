//===- TrainKernelsTest.cpp - Training kernels and optimizers ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The loss and gradient kernels against their forward formulas in double
// (gradients by central differences), the AdamW and SGD updates against the
// formulas of docs/Training.md computed here step by step, and the type
// rules and error paths of the new op kinds.
//
//===----------------------------------------------------------------------===//

#include "Ops.h"
#include "Updates.h"
#include "cpu/Kernels.h"
#include "cpu/Optimizers.h"

#include "OpCheck.h"
#include "TestUtil.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

std::vector<double> toDouble(const Tensor &t) {
  const float *p = t.data<float>();
  return std::vector<double>(p, p + t.numElements());
}

/// The gradient of `f` at `x` by central differences in double.
std::vector<double>
numericGradient(const std::function<double(const std::vector<double> &)> &f,
                std::vector<double> x, double h = 1e-4) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + h;
    double up = f(x);
    x[i] = x0 - h;
    double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// logsumexp(row) - row[label] in double, the definition.
double refCrossEntropy(const double *row, int64_t v, int64_t label) {
  double mx = row[0];
  for (int64_t j = 1; j < v; ++j)
    mx = std::max(mx, row[j]);
  double sum = 0;
  for (int64_t j = 0; j < v; ++j)
    sum += std::exp(row[j] - mx);
  return mx + std::log(sum) - row[label];
}

/// LayerNormalization (no bias) of x over its last `n` elements per row, in
/// double; scale has n entries. With `rms`: RMSNorm (no mean subtracted).
std::vector<double> refLayerNorm(const std::vector<double> &x,
                                 const std::vector<double> &scale, int64_t n,
                                 double eps, bool rms = false) {
  std::vector<double> y(x.size());
  for (std::size_t o = 0; o < x.size() / n; ++o) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < n && !rms; ++j)
      mu += x[o * n + j];
    mu /= n;
    for (int64_t j = 0; j < n; ++j)
      var += (x[o * n + j] - mu) * (x[o * n + j] - mu);
    var /= n;
    for (int64_t j = 0; j < n; ++j)
      y[o * n + j] = (x[o * n + j] - mu) / std::sqrt(var + eps) * scale[j];
  }
  return y;
}

} // namespace

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

TEST(TrainKernels, SoftmaxCrossEntropyIsLogSumExpMinusTheLabel) {
  std::mt19937 rng(11);
  Shape s = {2, 3, 7};
  Tensor logits = randomF32(s, rng, -4.f, 4.f);
  Tensor labels =
      makeTensor<int64_t>({2, 3}, {0, 6, -100, 3, 2, 5}); // one ignored
  Tensor loss(DType::F32, {2, 3});
  softmaxCrossEntropy(logits, labels, -100, loss);
  std::vector<double> x = toDouble(logits), ref;
  for (int64_t r = 0; r < 6; ++r) {
    int64_t label = labels.data<int64_t>()[r];
    ref.push_back(label == -100 ? 0.0 : refCrossEntropy(&x[r * 7], 7, label));
  }
  expectAllNear(loss, ref);
  EXPECT_EQ(loss.data<float>()[2], 0.f);

  // Stable for large logits; another ignore_index, which may be a class.
  Tensor big = makeTensor<float>({2, 2}, {1000.f, 0.f, -1000.f, 5.f});
  Tensor lab = makeTensor<int64_t>({2}, {1, 0});
  Tensor out(DType::F32, {2});
  softmaxCrossEntropy(big, lab, -1, out);
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1000.f);
  EXPECT_FLOAT_EQ(out.data<float>()[1], 1005.f);
  softmaxCrossEntropy(big, lab, 0, out);
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1000.f);
  EXPECT_EQ(out.data<float>()[1], 0.f);
}

TEST(TrainKernels, SoftmaxCrossEntropyGradMatchesFiniteDifferences) {
  std::mt19937 rng(12);
  Shape s = {4, 5};
  Tensor logits = randomF32(s, rng, -3.f, 3.f);
  Tensor labels = makeTensor<int64_t>({4}, {2, -100, 0, 4});
  Tensor dloss = randomF32({4}, rng, 0.5f, 2.f);
  Tensor dlogits(DType::F32, s);
  softmaxCrossEntropyGrad(logits, labels, dloss, -100, dlogits);
  // d/dx of sum over rows of dloss * CE, from the forward formula.
  auto total = [&](const std::vector<double> &x) {
    double sum = 0;
    for (int64_t r = 0; r < 4; ++r) {
      int64_t label = labels.data<int64_t>()[r];
      if (label != -100)
        sum += dloss.data<float>()[r] * refCrossEntropy(&x[r * 5], 5, label);
    }
    return sum;
  };
  expectAllNear(dlogits, numericGradient(total, toDouble(logits)));
  for (int64_t j = 0; j < 5; ++j)
    EXPECT_EQ(dlogits.data<float>()[5 + j], 0.f); // the ignored row

  // The forward kernel agrees with the formula the differences used.
  Tensor loss(DType::F32, {4});
  softmaxCrossEntropy(logits, labels, -100, loss);
  double sum = 0;
  for (int64_t r = 0; r < 4; ++r)
    sum += double(dloss.data<float>()[r]) * loss.data<float>()[r];
  EXPECT_NEAR(sum, total(toDouble(logits)), 1e-5);
}

TEST(TrainKernels, SoftmaxCrossEntropyRejectsBadLabels) {
  Tensor logits(DType::F32, {2, 3});
  Tensor loss(DType::F32, {2}), dlogits(DType::F32, {2, 3});
  Tensor dloss = makeTensor<float>({2}, {1.f, 1.f});
  for (int64_t bad : {3, -1}) {
    Tensor labels = makeTensor<int64_t>({2}, {0, bad});
    EXPECT_EQ(errorOf([&] { softmaxCrossEntropy(logits, labels, -100, loss); }),
              fmt::format("SoftmaxCrossEntropy: label {} (at position 1 of "
                          "the labels) is out of range [0, 3) and not the "
                          "ignore_index -100",
                          bad));
    EXPECT_CONTAINS(errorOf([&] {
                      softmaxCrossEntropyGrad(logits, labels, dloss, -100,
                                              dlogits);
                    }),
                    fmt::format("SoftmaxCrossEntropyGrad: label {}", bad));
  }
  Tensor wrongShape = makeTensor<int64_t>({3}, {0, 0, 0});
  EXPECT_CONTAINS(
      errorOf([&] { softmaxCrossEntropy(logits, wrongShape, -100, loss); }),
      "do not fit logits");
}

/// The vocabulary-parallel pieces over `n` ranks, combined as the
/// all-reduces do (max, then sums), give the loss and the gradient of the
/// definition, for even and uneven (padded) blocks.
TEST(TrainKernels, VocabParallelCrossEntropyMatchesTheDefinition) {
  std::mt19937 rng(21);
  const int64_t rows = 6, v = 7;
  Tensor logits = randomF32({rows, v}, rng, -5.f, 5.f);
  Tensor labels = makeTensor<int64_t>({rows}, {0, 6, -100, 3, 4, 1});
  Tensor dloss = randomF32({rows}, rng, 0.5f, 2.f);
  std::vector<double> x = toDouble(logits);
  for (int64_t n : {1, 2, 3}) {
    SCOPED_TRACE(fmt::format("{} blocks", n));
    int64_t c = (v + n - 1) / n; // ceil-sized, the last block padded
    std::vector<Tensor> blocks, maxes;
    std::vector<VocabBlock> where;
    for (int64_t b = 0; b < n; ++b) {
      Tensor blk(DType::F32, {rows, c});
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c; ++j) {
          int64_t col = b * c + j;
          // Padding holds garbage: the kernels must skip it.
          blk.data<float>()[r * c + j] =
              col < v ? logits.data<float>()[r * v + col] : 1e4f;
        }
      blocks.push_back(blk);
      where.push_back(VocabBlock{v, b * c});
      Tensor m(DType::F32, {rows});
      vocabMax(blk, where.back(), m);
      maxes.push_back(m);
    }
    Tensor gmax(DType::F32, {rows});
    for (int64_t r = 0; r < rows; ++r) {
      float m = -INFINITY;
      for (const Tensor &t : maxes)
        m = std::max(m, t.data<float>()[r]);
      gmax.data<float>()[r] = m;
    }
    Tensor stats(DType::F32, {rows, 2});
    for (int64_t b = 0; b < n; ++b) {
      Tensor part(DType::F32, {rows, 2});
      vocabStats(blocks[b], labels, gmax, where[b], -100, part);
      for (int64_t i = 0; i < rows * 2; ++i)
        stats.data<float>()[i] += part.data<float>()[i];
    }
    Tensor loss(DType::F32, {rows});
    vocabCrossEntropy(gmax, stats, labels, -100, loss);
    std::vector<double> ref;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t label = labels.data<int64_t>()[r];
      ref.push_back(label == -100 ? 0.0 : refCrossEntropy(&x[r * v], v, label));
    }
    expectAllNear(loss, ref);
    // The gradient blocks, put together, are the whole gradient.
    Tensor whole(DType::F32, {rows, v});
    softmaxCrossEntropyGrad(logits, labels, dloss, -100, whole);
    for (int64_t b = 0; b < n; ++b) {
      Tensor g(DType::F32, {rows, c});
      vocabCrossEntropyGrad(blocks[b], labels, dloss, gmax, stats, where[b],
                            -100, g);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c; ++j) {
          int64_t col = b * c + j;
          float got = g.data<float>()[r * c + j];
          if (col >= v)
            EXPECT_EQ(got, 0.f) << "padding at row " << r;
          else
            EXPECT_NEAR(got, whole.data<float>()[r * v + col], 1e-6)
                << "row " << r << " class " << col;
        }
    }
  }
  // Labels are checked against the whole vocabulary.
  Tensor blk(DType::F32, {rows, 4}), part(DType::F32, {rows, 2});
  Tensor bad = makeTensor<int64_t>({rows}, {0, 7, 1, 1, 1, 1});
  EXPECT_EQ(errorOf([&] {
              vocabStats(blk, bad, dloss, VocabBlock{7, 4}, -100, part);
            }),
            "VocabStats: label 7 (at position 1 of the labels) is out of "
            "range [0, 7) and not the ignore_index -100");
}

/// A vocabulary-parallel lookup and its gradient: rows outside the block
/// give zeros and are skipped; indices count in the whole table.
TEST(TrainKernels, VocabParallelGatherTakesItsBlock) {
  Tensor table = makeTensor<float>({2, 2}, {1.f, 2.f, 3.f, 4.f}); // rows 2, 3
  Tensor ids = makeTensor<int64_t>({4}, {3, 0, -3, 2});           // -3 is 2
  Tensor out(DType::F32, {4, 2});
  VocabBlock block{5, 2};
  gather(table, ids, 0, out, &block);
  expectAllNear(out, {3, 4, 0, 0, 1, 2, 1, 2});
  Tensor dy = makeTensor<float>({4, 2}, {1, 1, 5, 5, 2, 2, 3, 3});
  Tensor grad(DType::F32, {2, 2});
  gatherGrad(ids, dy, grad, &block);
  expectAllNear(grad, {5, 5, 1, 1});
  Tensor far = makeTensor<int64_t>({1}, {5});
  Tensor one(DType::F32, {1, 2});
  EXPECT_EQ(errorOf([&] { gather(table, far, 0, one, &block); }),
            "Gather: index 5 (at position 0 of the indices) is out of range "
            "for axis 0 of size 5");
}

// GeluGrad against central differences of the Gelu kernel itself in
// float64 terms: (gelu(z + h) - gelu(z - h)) / 2h of the double definition,
// both forms, with a bias (and the half-precision path rounding once).
TEST(TrainKernels, GeluGradMatchesFiniteDifferences) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-5.f, 5.f);
  const Shape shape{3, 17};
  Tensor dy(DType::F32, shape), x(DType::F32, shape), bias(DType::F32, {17});
  for (Tensor *t : {&dy, &x, &bias})
    for (int64_t i = 0; i < t->numElements(); ++i)
      t->data<float>()[i] = u(rng);
  for (bool tanhForm : {false, true}) {
    auto gelu = [&](double z) {
      return tanhForm ? 0.5 * z *
                            (1 + std::tanh(std::sqrt(2 / M_PI) *
                                           (z + 0.044715 * z * z * z)))
                      : 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    };
    Tensor dz(DType::F32, shape);
    geluGrad(dy, x, &bias, dz, tanhForm);
    for (int64_t i = 0; i < x.numElements(); ++i) {
      double z = double(x.data<float>()[i]) + bias.data<float>()[i % 17];
      double h = 1e-5;
      double want = dy.data<float>()[i] * (gelu(z + h) - gelu(z - h)) / (2 * h);
      EXPECT_NEAR(dz.data<float>()[i], want, 1e-5 * (1 + std::fabs(want)))
          << z << (tanhForm ? " tanh" : " erf");
    }
  }
  Tensor bad(DType::F32, {3, 16});
  Tensor out(DType::F32, shape);
  EXPECT_THROW(geluGrad(dy, bad, nullptr, out), Error);
}

TEST(TrainKernels, SoftmaxGradMatchesFiniteDifferences) {
  std::mt19937 rng(13);
  Shape s = {2, 4, 3};
  Tensor x = randomF32(s, rng, -2.f, 2.f);
  Tensor dy = randomF32(s, rng);
  for (int64_t axis : {1, 2}) {
    Tensor y(DType::F32, s), dx(DType::F32, s);
    softmax(x, axis, y);
    softmaxGrad(y, dy, axis, dx);
    // L = sum(dy * softmax(x)) in double.
    auto total = [&](const std::vector<double> &xv) {
      double sum = 0;
      for (int64_t i = 0; i < numElements(s); ++i) {
        auto c = unravel(i, s);
        double denom = 0;
        for (int64_t j = 0; j < s[axis]; ++j) {
          auto cj = c;
          cj[axis] = j;
          denom += std::exp(xv[broadcastIndex(cj, s)]);
        }
        sum += dy.data<float>()[i] * std::exp(xv[i]) / denom;
      }
      return sum;
    };
    expectAllNear(dx, numericGradient(total, toDouble(x)));
  }
  // A scalar's softmax is constant.
  Tensor one = makeTensor<float>({}, {1.f}), d = makeTensor<float>({}, {3.f});
  Tensor out = makeTensor<float>({}, {7.f});
  softmaxGrad(one, d, 0, out);
  EXPECT_EQ(out.data<float>()[0], 0.f);
}

TEST(TrainKernels, LayerNormalizationGradsMatchFiniteDifferences) {
  std::mt19937 rng(14);
  Shape s = {2, 3, 4};
  Tensor x = randomF32(s, rng, -2.f, 2.f);
  Tensor dy = randomF32(s, rng);
  double eps = 1e-5;
  for (bool rms : {false, true})
    for (int64_t axis : {1, 2}) {
      SCOPED_TRACE(rms ? "RMSNorm" : "LayerNorm");
      Shape norm(s.begin() + axis, s.end());
      int64_t n = numElements(norm);
      Tensor scale = randomF32(norm, rng, 0.5f, 1.5f);
      // L = sum(dy * LayerNorm(x, scale)).
      auto total = [&](const std::vector<double> &xv,
                       const std::vector<double> &sv) {
        std::vector<double> y = refLayerNorm(xv, sv, n, eps, rms);
        double sum = 0;
        for (std::size_t i = 0; i < y.size(); ++i)
          sum += dy.data<float>()[i] * y[i];
        return sum;
      };
      std::vector<double> xd = toDouble(x), sd = toDouble(scale);

      Tensor dx(DType::F32, s);
      layerNormGrad(x, scale, dy, axis, float(eps), dx, rms);
      expectAllNear(
          dx,
          numericGradient(
              [&](const std::vector<double> &v) { return total(v, sd); }, xd));

      Tensor dscale(DType::F32, norm);
      layerNormScaleGrad(x, dy, axis, float(eps), dscale, rms);
      expectAllNear(
          dscale,
          numericGradient(
              [&](const std::vector<double> &v) { return total(xd, v); }, sd));
    }
  // A scale that broadcasts to the normalized shape [3, 4].
  Tensor scale = makeTensor<float>({4}, {0.5f, 1.f, 2.f, -1.f});
  Tensor full(DType::F32, {3, 4});
  expand(scale, full);
  Tensor a(DType::F32, s), b(DType::F32, s);
  layerNormGrad(x, scale, dy, 1, 1e-5f, a);
  layerNormGrad(x, full, dy, 1, 1e-5f, b);
  EXPECT_EQ(toVector<float>(a), toVector<float>(b));
  Tensor wrong(DType::F32, {3, 3});
  EXPECT_CONTAINS(errorOf([&] { layerNormScaleGrad(x, dy, 1, 1e-5f, wrong); }),
                  "LayerNormalizationScaleGrad: output is f32[3, 3] but the "
                  "inputs give f32[3, 4]");
}

/// sum(dy * softmax(scale * q kt + mask) v) in double, with the mask
/// already expanded to the scores [batch, T, S] (q [batch, T, D], kt
/// [batch, D, S], v [batch, S, E], dy [batch, T, E]).
double refAttentionLoss(const std::vector<double> &q,
                        const std::vector<double> &kt,
                        const std::vector<double> &v, const float *mask,
                        const float *dy, int64_t batch, int64_t t, int64_t d,
                        int64_t sk, int64_t e, double scale) {
  double loss = 0;
  std::vector<double> p(sk);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < t; ++i) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < sk; ++j) {
        double s = 0;
        for (int64_t k = 0; k < d; ++k)
          s += q[(b * t + i) * d + k] * kt[(b * d + k) * sk + j];
        p[j] = scale * s + mask[(b * t + i) * sk + j];
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < sk; ++j)
        sum += p[j] = std::exp(p[j] - mx);
      for (int64_t c = 0; c < e; ++c) {
        double o = 0;
        for (int64_t j = 0; j < sk; ++j)
          o += p[j] / sum * v[(b * sk + j) * e + c];
        loss += dy[(b * t + i) * e + c] * o;
      }
    }
  return loss;
}

TEST(TrainKernels, AttentionGradMatchesFiniteDifferences) {
  std::mt19937 rng(21);
  struct Case {
    Shape batch;
    int64_t t, d, sk, e;
    Shape mask; // empty: none
    bool causal = false;
  };
  // 70 query rows cross a block of 64; a [T, S] mask, a [B, 1, 1, S]
  // padding mask, none, and a causal mask (-1e9 above the diagonal), with
  // which each block skips the keys after its last row.
  for (const Case &c :
       {Case{{2}, 70, 3, 9, 2, {70, 9}}, Case{{2, 3}, 5, 4, 6, 3, {2, 1, 1, 6}},
        Case{{3}, 4, 2, 5, 4, {}}, Case{{2}, 70, 3, 70, 2, {70, 70}, true}}) {
    SCOPED_TRACE(fmt::format("batch {} T {} mask {}", formatShape(c.batch), c.t,
                             formatShape(c.mask)));
    auto shape = [&](int64_t a, int64_t b) {
      Shape s = c.batch;
      s.push_back(a);
      s.push_back(b);
      return s;
    };
    int64_t batch = numElements(c.batch);
    Tensor q = randomF32(shape(c.t, c.d), rng),
           kt = randomF32(shape(c.d, c.sk), rng),
           v = randomF32(shape(c.sk, c.e), rng),
           dy = randomF32(shape(c.t, c.e), rng);
    Tensor mask, full(DType::F32, shape(c.t, c.sk));
    if (!c.mask.empty()) {
      mask = randomF32(c.mask, rng, -2.f, 1.f);
      if (c.causal)
        for (int64_t i = 0; i < c.t; ++i)
          for (int64_t j = 0; j < c.sk; ++j)
            mask.data<float>()[i * c.sk + j] = j > i ? -1e9f : 0.f;
      expand(mask, full);
    } else {
      std::fill(full.data<float>(), full.data<float>() + full.numElements(),
                0.f);
    }
    const Tensor *m = c.mask.empty() ? nullptr : &mask;
    float scale = 0.7f;
    std::vector<double> qd = toDouble(q), kd = toDouble(kt), vd = toDouble(v);
    auto loss = [&](const std::vector<double> &a, const std::vector<double> &b,
                    const std::vector<double> &x) {
      return refAttentionLoss(a, b, x, full.data<float>(), dy.data<float>(),
                              batch, c.t, c.d, c.sk, c.e, scale);
    };

    // The forward, blocked with the mask read in place.
    Tensor out(DType::F32, shape(c.t, c.e));
    attention(q, kt, v, m, scale, out);
    double sum = 0;
    for (int64_t i = 0; i < out.numElements(); ++i)
      sum += double(out.data<float>()[i]) * dy.data<float>()[i];
    EXPECT_NEAR(sum, loss(qd, kd, vd), 1e-4 * std::max(1.0, std::fabs(sum)));

    Tensor dq(DType::F32, q.shape()), dkt(DType::F32, kt.shape()),
        dv(DType::F32, v.shape());
    attentionGrad(dy, q, kt, v, m, scale, dq, dkt, dv);
    expectAllNear(
        dq,
        numericGradient(
            [&](const std::vector<double> &x) { return loss(x, kd, vd); }, qd),
        1e-4);
    expectAllNear(
        dkt,
        numericGradient(
            [&](const std::vector<double> &x) { return loss(qd, x, vd); }, kd),
        1e-4);
    expectAllNear(
        dv,
        numericGradient(
            [&](const std::vector<double> &x) { return loss(qd, kd, x); }, vd),
        1e-4);
  }
  Tensor q(DType::F32, {2, 4, 3}), kt(DType::F32, {2, 3, 5}),
      v(DType::F32, {2, 5, 2}), bad(DType::F32, {2, 4, 3});
  Tensor dq, dkt, dv;
  EXPECT_CONTAINS(
      errorOf([&] { attentionGrad(bad, q, kt, v, nullptr, 1.f, dq, dkt, dv); }),
      "AttentionGrad: dy must be f32[2, 4, 2], got f32[2, 4, 3]");
}

TEST(TrainKernels, GatherGradScatterAddsRows) {
  // Rows 0 and 2 are hit twice (once as -1), row 1 never.
  Tensor idx = makeTensor<int64_t>({2, 2}, {2, 0, -1, 0});
  Tensor dy = makeTensor<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor out = makeTensor<float>({3, 2}, {9, 9, 9, 9, 9, 9});
  gatherGrad(idx, dy, out);
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{3 + 7, 4 + 8, 0, 0, 1 + 5, 2 + 6}));

  // The adjoint of Gather: <gather(w, i), dy> = <w, gatherGrad(i, dy)>.
  std::mt19937 rng(15);
  Tensor w = randomF32({5, 3}, rng);
  Tensor i32(DType::I32, {4});
  for (int k = 0; k < 4; ++k)
    i32.data<int32_t>()[k] = (k * 3) % 5;
  Tensor g(DType::F32, {4, 3}), d = randomF32({4, 3}, rng);
  gather(w, i32, 0, g);
  Tensor back(DType::F32, {5, 3});
  gatherGrad(i32, d, back);
  double lhs = 0, rhs = 0;
  for (int k = 0; k < 12; ++k)
    lhs += double(g.data<float>()[k]) * d.data<float>()[k];
  for (int k = 0; k < 15; ++k)
    rhs += double(w.data<float>()[k]) * back.data<float>()[k];
  EXPECT_NEAR(lhs, rhs, 1e-5);

  Tensor bad = makeTensor<int64_t>({2, 2}, {0, 3, 1, 1});
  EXPECT_EQ(errorOf([&] { gatherGrad(bad, dy, out); }),
            "GatherGrad: index 3 (at position 1 of the indices) is out of "
            "range for 3 rows");
  Tensor neg = makeTensor<int64_t>({2, 2}, {0, 1, -4, 1});
  EXPECT_CONTAINS(errorOf([&] { gatherGrad(neg, dy, out); }), "index -4");
  Tensor wrongRows(DType::F32, {3, 3});
  EXPECT_CONTAINS(errorOf([&] { gatherGrad(idx, dy, wrongRows); }),
                  "GatherGrad: dy f32[2, 2, 2] must be [2, 2, 3]");
}

TEST(TrainKernels, ExpandRejectsIncompatibleShapes) {
  Tensor x = makeTensor<float>({3}, {1, 2, 3});
  Tensor ok(DType::F32, {2, 3});
  expand(x, ok);
  EXPECT_EQ(toVector<float>(ok), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  Tensor bad(DType::F32, {3, 2});
  EXPECT_EQ(errorOf([&] { expand(x, bad); }),
            "Expand: input f32[3] does not broadcast to the output f32[3, 2]");
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

TEST(Optimizers, LearningRateWarmsUpThenDecays) {
  OptimizerParams p;
  p.lr = 1.0;
  p.minLr = 0.1;
  p.warmupSteps = 2;
  p.totalSteps = 6;
  const double pi = 3.14159265358979323846;
  EXPECT_DOUBLE_EQ(learningRate(p, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(p, 2), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(p, 3), 1.0); // s = 2: cosine at 0
  EXPECT_DOUBLE_EQ(learningRate(p, 4), 0.1 + 0.45 * (1 + std::cos(pi * 1 / 4)));
  EXPECT_DOUBLE_EQ(learningRate(p, 5), 0.55); // halfway
  EXPECT_DOUBLE_EQ(learningRate(p, 6), 0.1 + 0.45 * (1 + std::cos(pi * 3 / 4)));
  EXPECT_DOUBLE_EQ(learningRate(p, 7), 0.1);
  EXPECT_DOUBLE_EQ(learningRate(p, 1000), 0.1);
  p.totalSteps = 0; // constant after warmup
  EXPECT_DOUBLE_EQ(learningRate(p, 2), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(p, 50), 1.0);
  p.warmupSteps = 0;
  EXPECT_DOUBLE_EQ(learningRate(p, 1), 1.0);
}

// lr_schedule linear: from lr to min_lr over [warmup, total), as
// Megatron-LM's linear decay; constant: lr after the warmup whatever
// total_steps says.
TEST(Optimizers, LinearAndConstantSchedules) {
  OptimizerParams p;
  p.lr = 1.0;
  p.minLr = 0.2;
  p.warmupSteps = 2;
  p.totalSteps = 6;
  p.schedule = OptimizerParams::Linear;
  EXPECT_DOUBLE_EQ(learningRate(p, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(p, 3), 1.0); // s = 2: progress 0
  EXPECT_DOUBLE_EQ(learningRate(p, 4), 0.8); // progress 1/4
  EXPECT_DOUBLE_EQ(learningRate(p, 5), 0.6); // halfway
  EXPECT_DOUBLE_EQ(learningRate(p, 6), 0.4); // progress 3/4
  EXPECT_DOUBLE_EQ(learningRate(p, 7), 0.2); // s = total
  EXPECT_DOUBLE_EQ(learningRate(p, 99), 0.2);
  p.schedule = OptimizerParams::Constant;
  EXPECT_DOUBLE_EQ(learningRate(p, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(p, 5), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(p, 99), 1.0);
}

TEST(Optimizers, ClipScaleAndSumOfSquares) {
  Tensor g = makeTensor<float>({2, 2}, {3, 4, 0, 12});
  EXPECT_EQ(sumOfSquares(g), 169.0);
  OptimizerParams p;
  EXPECT_EQ(clipScale(p, 13.0), 1.f); // off
  p.clipNorm = 1.0;
  EXPECT_FLOAT_EQ(clipScale(p, 13.0), float(1.0 / (13.0 + 1e-6)));
  p.clipNorm = 100.0;
  EXPECT_EQ(clipScale(p, 13.0), 1.f);
}

TEST(Optimizers, AdamWTwoStepsByHand) {
  OptimizerParams p;
  p.kind = OptimizerParams::AdamW;
  p.lr = 0.1;
  p.beta1 = 0.8;
  p.beta2 = 0.95;
  p.eps = 1e-3;
  p.weightDecay = 0.5;
  // Warmup 0.05, 0.1; cosine from step 3 (s = 2): 0.1, then halfway
  // between 0.1 and 0.02.
  p.warmupSteps = 2;
  p.totalSteps = 4;
  p.minLr = 0.02;
  const double lrs[] = {0.05, 0.1, 0.1, 0.06};
  const float scale = 0.5f;
  std::vector<double> w0 = {1.0, -2.0, 0.5, 3.0}, m0(4, 0.0), v0(4, 0.0);
  std::vector<std::vector<double>> grads = {{0.2, -0.4, 0.0, 1.5},
                                            {-0.1, 0.3, 2.0, 1.0},
                                            {0.7, 0.3, -1.0, 0.0},
                                            {0.2, -0.6, 0.25, -2.0}};
  Tensor w(DType::F32, {4}), m(DType::F32, {4}), v(DType::F32, {4});
  for (int i = 0; i < 4; ++i)
    w.data<float>()[i] = float(w0[i]);
  std::vector<double> rw = w0, rm = m0, rv = v0;
  for (int t = 1; t <= 4; ++t) {
    double lr = lrs[t - 1];
    EXPECT_NEAR(learningRate(p, t), lr, 1e-15);
    Tensor g(DType::F32, {4});
    for (int i = 0; i < 4; ++i)
      g.data<float>()[i] = float(grads[t - 1][i]);
    adamwUpdate(p, t, scale, w, g, m, v);
    for (int i = 0; i < 4; ++i) {
      double gi = grads[t - 1][i] * scale;
      rw[i] *= 1 - lr * 0.5;
      rm[i] = 0.8 * rm[i] + 0.2 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      double mhat = rm[i] / (1 - std::pow(0.8, t));
      double vhat = rv[i] / (1 - std::pow(0.95, t));
      rw[i] -= lr * mhat / (std::sqrt(vhat) + 1e-3);
    }
    expectAllNear(w, rw, 1e-6);
    expectAllNear(m, rm, 1e-6);
    expectAllNear(v, rv, 1e-6);
  }
  // Step 1 by hand for element 0: lr 0.05, g = 0.1, m = 0.2 * 0.1,
  // v = 0.05 * 0.01, so mhat = 0.1, sqrt(vhat) = 0.1 and
  // w = 1 * (1 - 0.05 * 0.5) - 0.05 * 0.1 / (0.1 + 1e-3).
  Tensor w1 = makeTensor<float>({1}, {1.f}), g1 = makeTensor<float>({1}, {.2f});
  Tensor m1(DType::F32, {1}), v1(DType::F32, {1});
  adamwUpdate(p, 1, scale, w1, g1, m1, v1);
  EXPECT_NEAR(w1.data<float>()[0], 0.975 - 0.005 / 0.101, 1e-6);

  Tensor wrong(DType::F32, {3});
  Tensor g(DType::F32, {4});
  EXPECT_CONTAINS(errorOf([&] { adamwUpdate(p, 1, 1.f, w, g, wrong, v); }),
                  "AdamW: the first moment is f32[3], but the gradient is "
                  "f32[4]");
  EXPECT_CONTAINS(errorOf([&] { adamwUpdate(p, 0, 1.f, w, g, m, v); }),
                  "step 0 is not 1-based");
}

TEST(Optimizers, SgdTwoStepsByHand) {
  OptimizerParams p;
  p.kind = OptimizerParams::SGD;
  p.lr = 0.5;
  p.momentum = 0.9;
  p.weightDecay = 0.1;
  p.warmupSteps = 2; // 0.25, then 0.5
  const float scale = 2.f;
  std::vector<double> w0 = {1.0, -1.0, 2.0};
  std::vector<std::vector<double>> grads = {{0.5, 0.25, -1.0},
                                            {1.0, -0.5, 0.0}};
  Tensor w = makeTensor<float>({3}, {1.f, -1.f, 2.f});
  // A nonzero buffer is overwritten at step 1 (buf = g).
  Tensor buf = makeTensor<float>({3}, {7.f, 7.f, 7.f});
  std::vector<double> rw = w0, rb(3, 0.0);
  for (int t = 1; t <= 2; ++t) {
    double lr = 0.25 * t;
    Tensor g(DType::F32, {3});
    for (int i = 0; i < 3; ++i)
      g.data<float>()[i] = float(grads[t - 1][i]);
    sgdUpdate(p, t, scale, w, g, buf);
    for (int i = 0; i < 3; ++i) {
      double d = grads[t - 1][i] * scale + 0.1 * rw[i];
      rb[i] = t == 1 ? d : 0.9 * rb[i] + d;
      rw[i] -= lr * rb[i];
    }
    expectAllNear(w, rw, 1e-6);
    expectAllNear(buf, rb, 1e-6);
  }
  // By hand, element 0: d1 = 1 + 0.1 = 1.1, w1 = 1 - 0.25 * 1.1 = 0.725;
  // d2 = 2 + 0.0725 = 2.0725, buf = 0.99 + 2.0725, w2 = w1 - 0.5 * buf.
  EXPECT_NEAR(w.data<float>()[0], 0.725 - 0.5 * (0.99 + 2.0725), 1e-6);

  // Without momentum the buffer is not needed.
  p.momentum = 0;
  Tensor w2 = makeTensor<float>({1}, {1.f}), g2 = makeTensor<float>({1}, {1.f});
  Tensor none;
  sgdUpdate(p, 3, 1.f, w2, g2, none);
  EXPECT_NEAR(w2.data<float>()[0], 1 - 0.5 * (1 + 0.1), 1e-7);
}

//===----------------------------------------------------------------------===//
// Type rules
//===----------------------------------------------------------------------===//

TEST(TrainOps, LossAndGradientTypes) {
  {
    OpCheck c("SoftmaxCrossEntropy");
    c.in(DType::F32, {2, 3, 5}).in(DType::I64, {2, 3}).out(DType::F32, {2, 3});
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.ignoreIndex, -100);
    c.i("ignore_index", 0);
    EXPECT_EQ(c.info().attrs.ignoreIndex, 0);
    c.types[1] = {DType::I32, {2, 3}};
    EXPECT_CONTAINS(c.error(), "input labels must be i64, got i32[2, 3]");
    c.types[1] = {DType::I64, {2, 5}};
    EXPECT_CONTAINS(c.error(), "input labels must have the shape of the "
                               "logits without the last dimension, [2, 3]");
    OpCheck g("SoftmaxCrossEntropyGrad");
    g.in(DType::F32, {4, 5}).in(DType::I64, {4}).in(DType::F32, {4});
    g.out(DType::F32, {4, 5});
    EXPECT_EQ(g.error(), "");
    g.types[2].shape = {};
    EXPECT_CONTAINS(g.error(), "input dloss must be f32[4] (one per label)");
    OpCheck bad("SoftmaxCrossEntropy");
    bad.in(DType::F32, {4}).in(DType::I64, {}).out(DType::F32, {});
    bad.f("ignore_index", 1.5);
    EXPECT_CONTAINS(bad.error(), "attribute 'ignore_index' must be an integer");
  }
  {
    OpCheck c("GeluGrad");
    c.in(DType::F32, {2, 3}).in(DType::F32, {2, 3}).in(DType::F32, {3});
    c.out(DType::F32, {2, 3});
    EXPECT_EQ(c.error(), "");
    EXPECT_FALSE(c.info().attrs.tanhGelu);
    (*c.op.mutable_attrs())["approximate"].set_s("tanh");
    EXPECT_EQ(c.error(), "");
    EXPECT_TRUE(c.info().attrs.tanhGelu);
    (*c.op.mutable_attrs())["approximate"].set_s("fast");
    EXPECT_CONTAINS(c.error(), "attribute 'approximate' is 'fast'; expected "
                               "'none' or 'tanh'");
    (*c.op.mutable_attrs())["approximate"].set_s("none");
    c.types[2].shape = {2};
    EXPECT_CONTAINS(c.error(),
                    "bias of shape [2] does not broadcast to [2, 3]");
    c.types[2].shape = {3};
    c.types[1].shape = {3, 2};
    EXPECT_CONTAINS(c.error(), "inputs dy and x must have the same type");
  }
  {
    OpCheck c("SoftmaxGrad");
    c.in(DType::F32, {2, 3}).in(DType::F32, {2, 3}).out(DType::F32, {2, 3});
    EXPECT_EQ(c.info().attrs.axis, 1);
    c.i("axis", -2);
    EXPECT_EQ(c.info().attrs.axis, 0);
    c.types[1].shape = {3, 2};
    EXPECT_CONTAINS(c.error(), "inputs y and dy must have the same type");
  }
  {
    OpCheck c("LayerNormalizationGrad");
    c.in(DType::F32, {2, 3, 4}).in(DType::F32, {4}).in(DType::F32, {2, 3, 4});
    c.out(DType::F32, {2, 3, 4}).i("axis", -2).f("epsilon", 1e-6);
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.axis, 1);
    EXPECT_FLOAT_EQ(c.info().attrs.epsilon, 1e-6f);
    EXPECT_FALSE(c.info().attrs.rms);
    c.i("rms", 1);
    EXPECT_TRUE(c.info().attrs.rms);
    c.op.mutable_attrs()->at("rms").set_i(2);
    EXPECT_CONTAINS(c.error(), "rms must be 0 or 1, got 2");
    c.op.mutable_attrs()->at("rms").set_i(0);
    c.types[1].shape = {3};
    EXPECT_CONTAINS(c.error(), "scale of shape [3] does not broadcast to the "
                               "normalized shape [3, 4]");
    c.types[1].shape = {4};
    c.op.mutable_attrs()->at("axis").set_i(3);
    EXPECT_CONTAINS(c.error(), "axis 3 is out of range for rank 3");
    OpCheck s("LayerNormalizationScaleGrad");
    s.in(DType::F32, {2, 3, 4}).in(DType::F32, {2, 3, 4});
    s.out(DType::F32, {3, 4}).i("axis", 1);
    EXPECT_EQ(s.error(), "");
    s.types[2].shape = {4};
    EXPECT_CONTAINS(s.error(), "is declared f32[4], but the inputs "
                               "(f32[2, 3, 4], f32[2, 3, 4]) give f32[3, 4]");
  }
  {
    // dy, q, kt, v, mask -> dq, dkt, dv.
    OpCheck c("AttentionGrad");
    c.in(DType::F32, {2, 5, 3}).in(DType::F32, {2, 5, 4});
    c.in(DType::F32, {2, 4, 6})
        .in(DType::F32, {2, 6, 3})
        .in(DType::F32, {5, 6});
    c.out(DType::F32, {2, 5, 4}).out(DType::F32, {2, 4, 6});
    c.out(DType::F32, {2, 6, 3}).f("scale", 0.5);
    EXPECT_EQ(c.error(), "");
    EXPECT_FLOAT_EQ(c.info().attrs.scale, 0.5f);
    c.types[0].shape = {2, 5, 4};
    EXPECT_CONTAINS(c.error(), "input dy must be the attention's result, "
                               "f32[2, 5, 3], got f32[2, 5, 4]");
    c.types[0].shape = {2, 5, 3};
    c.types[4].shape = {4, 6};
    EXPECT_CONTAINS(c.error(), "mask of shape [4, 6] does not broadcast to "
                               "the scores [2, 5, 6]");
    c.types[4].shape = {5, 6};
    // bf16 q, kt and v take a bf16 dy and give bf16 gradients
    // (HalfTrainingKernelsTest.cpp has the rest of the half rules).
    c.types[1].dtype = c.types[2].dtype = c.types[3].dtype = DType::BF16;
    EXPECT_CONTAINS(c.error(), "input dy must be the attention's result, "
                               "bf16[2, 5, 3], got f32[2, 5, 3]");
    c.types[1].dtype = c.types[2].dtype = c.types[3].dtype = DType::F64;
    EXPECT_CONTAINS(c.error(), "input q must be f32, f16 or bf16, got f64");
  }
  {
    OpCheck c("GatherGrad");
    c.in(DType::I64, {2, 5}).in(DType::F32, {2, 5, 8}).out(DType::F32, {50, 8});
    EXPECT_EQ(c.error(), "");
    c.i("axis", 1);
    EXPECT_CONTAINS(c.error(), "axis 1 is not supported (only 0)");
    c.op.mutable_attrs()->at("axis").set_i(0);
    c.types[1].shape = {2, 5, 7};
    EXPECT_CONTAINS(c.error(), "input dy must be the indices' shape followed "
                               "by the output's row shape, [2, 5, 8], got "
                               "f32[2, 5, 7]");
    c.types[1].shape = {2, 5, 8};
    c.types[0].dtype = DType::F32;
    EXPECT_CONTAINS(c.error(), "indices must be i64 or i32");
  }
  {
    // Vocabulary-parallel ops: shard_axes on the mesh, blocks of
    // ceil(shard_size / group) classes.
    OpCheck c("VocabStats");
    c.mesh = Mesh({"dp", "tp"}, {1, 2});
    c.in(DType::F32, {2, 3, 5}).in(DType::I64, {2, 3}).in(DType::F32, {2, 3});
    c.out(DType::F32, {2, 3, 2}).strs("shard_axes", {"tp"}).i("shard_size", 9);
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.shardSize, 9);
    EXPECT_EQ(c.info().attrs.groupSize, 2);
    c.op.mutable_attrs()->at("shard_size").set_i(11);
    EXPECT_CONTAINS(c.error(), "a block of 5 rows (classes) is not one of the "
                               "2 blocks of 11 over shard_axes (each 6)");
    c.op.mutable_attrs()->at("shard_size").set_i(9);
    c.strs("shard_axes", {"pp"});
    EXPECT_CONTAINS(c.error(), "mesh axis 'pp' is not in the mesh");
    OpCheck m("VocabMax");
    m.mesh = Mesh({"tp"}, {2});
    m.in(DType::F32, {4, 5}).out(DType::F32, {4}).strs("shard_axes", {"tp"});
    EXPECT_CONTAINS(m.error(), "attribute 'shard_size'");
    OpCheck l("VocabCrossEntropy");
    l.in(DType::F32, {4}).in(DType::F32, {4, 3}).in(DType::I64, {4});
    l.out(DType::F32, {4});
    EXPECT_CONTAINS(l.error(), "input stats must be f32[4, 2], got f32[4, 3]");
    OpCheck g("Gather");
    g.mesh = Mesh({"tp"}, {2});
    g.in(DType::F32, {5, 4}).in(DType::I64, {3}).out(DType::F32, {5, 3});
    g.i("axis", 1).strs("shard_axes", {"tp"}).i("shard_size", 10);
    EXPECT_CONTAINS(g.error(), "a vocabulary-parallel Gather must be along "
                               "axis 0, not 1");
    OpCheck r("AllReduce");
    r.mesh = Mesh({"tp"}, {2});
    r.in(DType::F32, {4}).out(DType::F32, {4}).strs("axes", {"tp"});
    r.op.mutable_attrs()->insert({"reduction", plan::Attribute()});
    r.op.mutable_attrs()->at("reduction").set_s("min");
    EXPECT_CONTAINS(r.error(), "reduction 'min' is not sum or max");
    r.op.mutable_attrs()->at("reduction").set_s("max");
    EXPECT_EQ(r.error(), "");
    EXPECT_TRUE(r.info().attrs.reduceMax);
  }
  {
    OpCheck c("Expand");
    c.in(DType::F32, {3}).out(DType::F32, {2, 2}).ints("shape", {2, 2});
    EXPECT_EQ(c.error(), "input f32[3] does not broadcast to attribute "
                         "'shape' [2, 2]");
  }
}

TEST(TrainOps, OptimizerTypesAndAttributes) {
  {
    OpCheck c("AdamW");
    for (int i = 0; i < 4; ++i)
      c.in(DType::F32, {3, 4});
    c.f("lr", 3e-4).f("beta1", 0.8).f("beta2", 0.99).f("eps", 1e-6);
    c.f("weight_decay", 0.1).f("clip_norm", 1.0).i("warmup_steps", 10);
    c.i("total_steps", 100).f("min_lr", 1e-5);
    EXPECT_EQ(c.error(), "");
    OptimizerParams p = optimizerParams(c.info());
    EXPECT_EQ(p.kind, OptimizerParams::AdamW);
    EXPECT_EQ(p.lr, 3e-4); // kept in double
    EXPECT_EQ(p.beta1, 0.8);
    EXPECT_EQ(p.beta2, 0.99);
    EXPECT_EQ(p.eps, 1e-6);
    EXPECT_EQ(p.weightDecay, 0.1);
    EXPECT_EQ(p.clipNorm, 1.0);
    EXPECT_EQ(p.warmupSteps, 10);
    EXPECT_EQ(p.totalSteps, 100);
    EXPECT_EQ(p.minLr, 1e-5);
    c.op.mutable_attrs()->at("beta2").set_f(1.0);
    EXPECT_CONTAINS(c.error(), "attribute 'beta2' must be in [0, 1), got 1");
    c.op.mutable_attrs()->at("beta2").set_f(0.99);
    c.types[3].shape = {4, 3};
    EXPECT_CONTAINS(c.error(), "input v must have the type of w, f32[3, 4], "
                               "got f32[4, 3]");
    c.types[3].shape = {3, 4};
    c.op.mutable_attrs()->erase("lr");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'lr'");
    c.f("lr", -1);
    EXPECT_CONTAINS(c.error(), "attribute 'lr' must be >= 0, got -1");
    c.op.mutable_attrs()->at("lr").set_f(1e-3);
    EXPECT_EQ(optimizerParams(c.info()).schedule, OptimizerParams::Cosine);
    c.s("lr_schedule", "linear");
    EXPECT_EQ(optimizerParams(c.info()).schedule, OptimizerParams::Linear);
    c.op.mutable_attrs()->at("lr_schedule").set_s("step");
    EXPECT_CONTAINS(c.error(), "attribute 'lr_schedule' must be cosine, "
                               "linear or constant, got 'step'");
    c.op.mutable_attrs()->erase("lr_schedule");
    c.f("momentum", 0.9);
    EXPECT_CONTAINS(c.error(), "unknown attribute 'momentum'");

    OpCheck z("AdamW"); // ZeRO 1/2: g, m, v are w's block of dim 0
    z.in(DType::F32, {5, 2}).in(DType::F32, {3, 2}).in(DType::F32, {3, 2});
    z.in(DType::F32, {3, 2}).f("lr", 1e-3);
    PlanBuilder::attrStrings(z.op, "zero_axes", {"x"});
    Mesh mesh({"x"}, {2});
    EXPECT_EQ(errorOf([&] { checkOp(z.op, 0, z.types, mesh); }), "");
    EXPECT_EQ(checkOp(z.op, 0, z.types, mesh).attrs.zeroGroupSize, 2);
    z.types[2].shape = {5, 2};
    EXPECT_CONTAINS(errorOf([&] { checkOp(z.op, 0, z.types, mesh); }),
                    "input m must have the type of w's block of dimension 0 "
                    "over zero_axes, f32[3, 2], got f32[5, 2]");
    z.types[2].shape = {3, 2};
    EXPECT_CONTAINS(errorOf([&] { checkOp(z.op, 0, z.types, Mesh()); }),
                    "mesh axis 'x' is not in the mesh");

    OpCheck d("AdamW"); // PyTorch's defaults
    for (int i = 0; i < 4; ++i)
      d.in(DType::F32, {2});
    d.f("lr", 1e-3);
    OptimizerParams q = optimizerParams(d.info());
    EXPECT_EQ(q.beta1, 0.9);
    EXPECT_EQ(q.beta2, 0.999);
    EXPECT_EQ(q.eps, 1e-8);
    EXPECT_EQ(q.weightDecay, 0.01);
    EXPECT_EQ(q.clipNorm, 0.0);
    OpCheck o("AdamW");
    o.in(DType::F32, {2}).in(DType::F32, {2}).in(DType::F32, {2});
    o.in(DType::F32, {2}).out(DType::F32, {2}).f("lr", 1e-3);
    EXPECT_CONTAINS(o.error(), "expects 0 outputs, got 1");
  }
  {
    OpCheck c("SGD");
    c.in(DType::F32, {5}).in(DType::F32, {5}).in(DType::F32, {5});
    c.f("lr", 0.1).f("momentum", 0.9);
    EXPECT_EQ(c.error(), "");
    OptimizerParams p = optimizerParams(c.info());
    EXPECT_EQ(p.kind, OptimizerParams::SGD);
    EXPECT_EQ(p.momentum, 0.9);
    EXPECT_EQ(p.weightDecay, 0.0);
    c.types[1].dtype = DType::I64;
    EXPECT_CONTAINS(c.error(), "input g must have the type of w");
    OpCheck n("SGD"); // no buffer without momentum
    n.in(DType::F32, {5}).in(DType::F32, {5}).absentIn().f("lr", 0.1);
    EXPECT_EQ(n.error(), "");
    n.f("momentum", 0.5);
    EXPECT_CONTAINS(n.error(), "momentum 0.5 needs the input buf (#2)");
    OpCheck i("SGD");
    i.in(DType::I64, {5}).in(DType::I64, {5}).f("lr", 0.1);
    EXPECT_CONTAINS(i.error(), "input w must be f32, got i64[5]");
  }
  OpCheck m("MatMul");
  m.in(DType::F32, {2, 2}).in(DType::F32, {2, 2}).out(DType::F32, {2, 2});
  EXPECT_EQ(errorOf([&] { optimizerParams(m.info()); }),
            "op #0 (MatMul): is not an optimizer op (AdamW or SGD)");
}

// What a checkpoint records of the optimizer ops, and what a resume
// compares: every setting, weight_decay only where both sides decay.
TEST(Optimizers, SettingsRecordedAndCompared) {
  OpInfo decayed, plain;
  decayed.kind = plain.kind = OpKind::AdamW;
  decayed.attrs.optimizer.lr = plain.attrs.optimizer.lr = 0.001;
  decayed.attrs.optimizer.weightDecay = 0.1;
  plain.attrs.optimizer.weightDecay = 0;
  OpInfo other;
  other.kind = OpKind::MatMul;
  std::string line = optimizerSettings({other, decayed, plain});
  EXPECT_EQ(line, "optimizer=adamw lr=0.001 lr_schedule=cosine "
                  "warmup_steps=0 total_steps=0 min_lr=0 beta1=0.9 "
                  "beta2=0.999 eps=1e-08 clip_norm=0 weight_decay=0.1");
  EXPECT_EQ(optimizerSettings({other}), "");
  EXPECT_EQ(settingsChange(line, line), "");
  // A stage without decayed weights (weight_decay 0) is no change.
  EXPECT_EQ(settingsChange(line, optimizerSettings({plain})), "");
  OpInfo faster = decayed;
  faster.attrs.optimizer.lr = 0.002;
  faster.attrs.optimizer.weightDecay = 0.01;
  EXPECT_EQ(settingsChange(line, optimizerSettings({faster})),
            "lr 0.001 -> 0.002, weight_decay 0.1 -> 0.01");
  // Ops that disagree list every value.
  EXPECT_NE(optimizerSettings({decayed, faster}).find("lr=0.001,0.002"),
            std::string::npos);
  // A checkpoint from before the settings were recorded: nothing to
  // compare.
  EXPECT_EQ(settingsChange("", line), "");
  OpInfo sgd;
  sgd.kind = OpKind::SGD;
  sgd.attrs.optimizer.weightDecay = 0;
  EXPECT_EQ(settingsChange(line, optimizerSettings({sgd})),
            "beta1 0.9 -> -, beta2 0.999 -> -, eps 1e-08 -> -, optimizer "
            "adamw -> sgd, momentum - -> 0");
}
