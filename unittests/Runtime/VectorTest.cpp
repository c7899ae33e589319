//===- VectorTest.cpp - FastMath, the vectorized loops, parallelFor -------===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The accuracy FastMath.h documents, over dense sweeps against libm in
// double; every instruction set's loops (Vector.h) that this CPU runs
// against double-precision references, at lengths that leave vector tails;
// the blocked attention against its definition; parallelFor's split.
//
//===----------------------------------------------------------------------===//

#include "cpu/Vector.h"
#include "cpu/Common.h"
#include "cpu/FastMath.h"
#include "cpu/Kernels.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#ifdef __linux__
#include <sched.h>
#endif

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

/// |a - ref| in units of the float spacing at ref.
double ulpError(float a, double ref) {
  float r = static_cast<float>(std::fabs(ref));
  double ulp = std::nextafter(r, std::numeric_limits<float>::infinity()) - r;
  return std::fabs(double(a) - ref) / ulp;
}

TEST(FastMath, ExpWithinTwoUlpWhereNormal) {
  double worst = 0;
  for (double x = -87.3; x < 88.7; x += 3.7e-4) {
    float xf = static_cast<float>(x);
    worst = std::max(worst, ulpError(fastExp(xf), std::exp(double(xf))));
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(fastExp(0.f), 1.f);
  EXPECT_EQ(fastExp(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(fastExp(-100.f), 0.f);
  EXPECT_EQ(fastExp(89.f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fastExp(std::nanf(""))));
  // Next to ln(FLT_MAX), where 2^n needs the exponent 128.
  EXPECT_LE(ulpError(fastExp(88.72f), std::exp(double(88.72f))), 2.0);
}

TEST(FastMath, ErfWithinItsBounds) {
  double worstSmall = 0, worstAbs = 0;
  for (double x = -9; x < 9; x += 1.3e-4) {
    float xf = static_cast<float>(x);
    double ref = std::erf(double(xf));
    float got = fastErf(xf);
    worstAbs = std::max(worstAbs, std::fabs(got - ref));
    if (std::fabs(xf) < 0.8f && xf != 0)
      worstSmall = std::max(worstSmall, ulpError(got, ref));
  }
  EXPECT_LE(worstSmall, 3.0);
  EXPECT_LE(worstAbs, 3e-7);
  // Tiny arguments keep their relative accuracy.
  EXPECT_NEAR(fastErf(1e-20f) / (1.1283791670955126 * 1e-20), 1.0, 1e-6);
  EXPECT_EQ(fastErf(std::numeric_limits<float>::infinity()), 1.f);
  EXPECT_EQ(fastErf(-std::numeric_limits<float>::infinity()), -1.f);
  EXPECT_TRUE(std::signbit(fastErf(-0.f)));
  EXPECT_TRUE(std::isnan(fastErf(std::nanf(""))));
}

TEST(FastMath, TanhWithinItsBounds) {
  double worst = 0;
  for (double x = -12; x < 12; x += 1.1e-4) {
    float xf = static_cast<float>(x);
    double ref = std::tanh(double(xf));
    if (xf != 0)
      worst = std::max(worst, std::fabs(fastTanh(xf) - ref) / std::fabs(ref));
  }
  EXPECT_LE(worst, 5e-7);
  EXPECT_EQ(fastTanh(100.f), 1.f);
  EXPECT_EQ(fastTanh(-std::numeric_limits<float>::infinity()), -1.f);
  EXPECT_TRUE(std::signbit(fastTanh(-0.f)));
  EXPECT_TRUE(std::isnan(fastTanh(std::nanf(""))));
}

/// Every instruction set this build and CPU have.
std::vector<const VectorKernels *> isas() {
  std::vector<const VectorKernels *> out;
  for (const char *isa : {"baseline", "avx2", "avx512"})
    if (const VectorKernels *k = vectorKernelsFor(isa))
      out.push_back(k);
  return out;
}

std::vector<float> randomVector(int64_t n, std::mt19937 &rng, float lo,
                                float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

/// The max of x[0..n) and the sum of exp(x[j] - max), in double: the
/// softmax and cross-entropy references.
std::pair<double, double> maxAndExpSum(const float *x, int64_t n) {
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j)
    mx = std::max(mx, double(x[j]));
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(x[j] - mx);
  return {mx, sum};
}

/// The mean of x[0..n) and 1 / sqrt(var + epsilon) (biased variance), in
/// double: the LayerNorm references.
std::pair<double, double> meanAndInvStd(const float *x, int64_t n,
                                        double epsilon, bool rms = false) {
  double mu = 0, var = 0;
  for (int64_t j = 0; j < n && !rms; ++j)
    mu += x[j];
  mu /= n;
  for (int64_t j = 0; j < n; ++j)
    var += (x[j] - mu) * (x[j] - mu);
  return {mu, 1 / std::sqrt(var / n + epsilon)};
}

TEST(VectorKernels, BaselineIsAlwaysThere) {
  ASSERT_NE(vectorKernelsFor("baseline"), nullptr);
  EXPECT_STREQ(vectorKernelsFor("baseline")->isa, "baseline");
  EXPECT_EQ(vectorKernelsFor("sse9"), nullptr);
  EXPECT_FALSE(isas().empty());
}

TEST(VectorKernels, ElementwiseMatchesFastMathOnEveryIsa) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    std::vector<float> x = randomVector(n, rng, -10.f, 10.f), y(n);
    for (const VectorKernels *k : isas()) {
      SCOPED_TRACE(k->isa);
      k->exp(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_LE(ulpError(y[i], std::exp(double(x[i]))), 2.0) << x[i];
      k->erf(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[i], std::erf(double(x[i])), 3e-7) << x[i];
      k->tanh(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[i], std::tanh(double(x[i])), 5e-7) << x[i];
    }
  }
}

TEST(VectorKernels, GeluBothFormsWithAndWithoutBias) {
  std::mt19937 rng(2);
  const int64_t rows = 5, n = 37;
  std::vector<float> x = randomVector(rows * n, rng, -6.f, 6.f);
  std::vector<float> b = randomVector(n, rng, -1.f, 1.f), y(rows * n);
  for (const VectorKernels *k : isas()) {
    SCOPED_TRACE(k->isa);
    for (bool withBias : {true, false})
      for (bool tanhForm : {false, true}) {
        k->gelu(x.data(), withBias ? b.data() : nullptr, y.data(), n, 0, rows,
                tanhForm);
        for (int64_t i = 0; i < rows * n; ++i) {
          double z = double(x[i]) + (withBias ? b[i % n] : 0.f);
          double ref = tanhForm
                           ? 0.5 * z *
                                 (1 + std::tanh(std::sqrt(2 / M_PI) *
                                                (z + 0.044715 * z * z * z)))
                           : 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
          EXPECT_NEAR(y[i], ref, 2e-6 * (1 + std::fabs(ref))) << z;
        }
      }
  }
}

// The derivative in double, written out (not from the kernel's algebra):
// the erf form's Phi(z) + z phi(z), the tanh form's by the product rule.
TEST(VectorKernels, GeluGradBothFormsWithBias) {
  std::mt19937 rng(5);
  const int64_t rows = 4, n = 45;
  std::vector<float> x = randomVector(rows * n, rng, -7.f, 7.f);
  std::vector<float> dy = randomVector(rows * n, rng, -2.f, 2.f);
  std::vector<float> b = randomVector(n, rng, -1.f, 1.f), dz(rows * n);
  for (const VectorKernels *k : isas()) {
    SCOPED_TRACE(k->isa);
    for (bool tanhForm : {false, true})
      for (bool withBias : {false, true}) {
        k->geluGrad(dy.data(), x.data(), withBias ? b.data() : nullptr,
                    dz.data(), n, 1, rows, tanhForm);
        for (int64_t i = n; i < rows * n; ++i) {
          double z = double(x[i]) + (withBias ? b[i % n] : 0.0), d;
          if (tanhForm) {
            double c = std::sqrt(2 / M_PI), u = c * (z + 0.044715 * z * z * z);
            double t = std::tanh(u);
            d = 0.5 * (1 + t) +
                0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z);
          } else {
            d = 0.5 * (1 + std::erf(z / std::sqrt(2.0))) +
                z * std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
          }
          EXPECT_NEAR(dz[i], dy[i] * d, 3e-6 * (1 + std::fabs(dy[i] * d)))
              << z << (tanhForm ? " tanh" : " erf");
        }
      }
  }
}

// SoftmaxGrad and LayerNorm's input gradient on every ISA against their
// definitions in double (the statistics recomputed in double).
TEST(VectorKernels, SoftmaxGradAndLayerNormGrad) {
  std::mt19937 rng(7);
  const int64_t rows = 5, n = 203;
  std::vector<float> x = randomVector(rows * n, rng, -3.f, 3.f);
  std::vector<float> dy = randomVector(rows * n, rng, -1.f, 1.f);
  std::vector<float> g = randomVector(n, rng, 0.5f, 1.5f), out(rows * n);
  // A softmax output: positive rows summing to 1.
  std::vector<float> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j)
      sum += std::exp(double(x[r * n + j]));
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = static_cast<float>(std::exp(double(x[r * n + j])) / sum);
  }
  for (const VectorKernels *k : isas()) {
    SCOPED_TRACE(k->isa);
    k->softmaxGrad(y.data(), dy.data(), out.data(), n, 1, rows);
    for (int64_t r = 1; r < rows; ++r) {
      double dot = 0;
      for (int64_t j = 0; j < n; ++j)
        dot += double(y[r * n + j]) * dy[r * n + j];
      for (int64_t j = 0; j < n; ++j) {
        double want = y[r * n + j] * (dy[r * n + j] - dot);
        EXPECT_NEAR(out[r * n + j], want, 1e-7 + 1e-5 * std::fabs(want));
      }
    }
    // LayerNorm's and RMSNorm's (no mean, no mean(g) term).
    for (bool rms : {false, true}) {
      k->layerNormGrad(x.data(), g.data(), dy.data(), out.data(), n, 1e-5f, rms,
                       1, rows);
      for (int64_t r = 1; r < rows; ++r) {
        const float *xr = x.data() + r * n, *dr = dy.data() + r * n;
        auto [mu, inv] = meanAndInvStd(xr, n, 1e-5, rms);
        double sumG = 0, sumGX = 0;
        for (int64_t j = 0; j < n; ++j) {
          sumG += double(dr[j]) * g[j];
          sumGX += double(dr[j]) * g[j] * (xr[j] - mu) * inv;
        }
        double meanG = rms ? 0 : sumG / n;
        for (int64_t j = 0; j < n; ++j) {
          double xhat = (xr[j] - mu) * inv;
          double want = (double(dr[j]) * g[j] - meanG - xhat * sumGX / n) * inv;
          EXPECT_NEAR(out[r * n + j], want, 2e-5 * (1 + std::fabs(want)))
              << rms;
        }
      }
    }
  }
}

TEST(VectorKernels, SoftmaxLayerNormAndLogSumExp) {
  std::mt19937 rng(3);
  const int64_t rows = 4, n = 1001;
  std::vector<float> x = randomVector(rows * n, rng, -20.f, 20.f);
  // A row of -inf but one element, and a masked row like attention's.
  for (int64_t j = 1; j < n; ++j)
    x[n + j] = -std::numeric_limits<float>::infinity();
  std::vector<float> g = randomVector(n, rng, 0.5f, 1.5f);
  std::vector<float> b = randomVector(n, rng, -1.f, 1.f);
  std::vector<float> y(rows * n), mean(rows), inv(rows), lse(rows);
  for (const VectorKernels *k : isas()) {
    SCOPED_TRACE(k->isa);
    k->softmax(x.data(), y.data(), n, 0, rows);
    k->logSumExp(x.data(), lse.data(), n, 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x.data() + r * n;
      auto [mx, sum] = maxAndExpSum(xr, n);
      for (int64_t j = 0; j < n; ++j)
        EXPECT_NEAR(y[r * n + j], std::exp(xr[j] - mx) / sum, 1e-6);
      EXPECT_NEAR(lse[r], mx + std::log(sum), 1e-5 * (1 + std::fabs(mx)));
    }
    for (bool rms : {false, true}) {
      k->layerNorm(x.data() + 2 * n, g.data(), b.data(), y.data(), n, 1e-5f,
                   rms, 0, 2, mean.data(), inv.data());
      for (int64_t r = 0; r < 2; ++r) {
        const float *xr = x.data() + (r + 2) * n;
        auto [mu, is] = meanAndInvStd(xr, n, 1e-5, rms);
        EXPECT_NEAR(mean[r], mu, 1e-5) << rms;
        EXPECT_NEAR(inv[r], is, 1e-6 * is) << rms;
        for (int64_t j = 0; j < n; ++j)
          EXPECT_NEAR(y[r * n + j], (xr[j] - mu) * is * g[j] + b[j], 2e-5)
              << rms;
      }
    }
  }
}

TEST(VectorKernels, CrossEntropyGradWithIgnoredRows) {
  std::mt19937 rng(4);
  const int64_t rows = 3, n = 70;
  std::vector<float> x = randomVector(rows * n, rng, -8.f, 8.f);
  std::vector<int64_t> label = {5, -100, 69};
  std::vector<float> d = {0.5f, 1.f, -2.f}, dx(rows * n);
  for (const VectorKernels *k : isas()) {
    SCOPED_TRACE(k->isa);
    k->crossEntropyGrad(x.data(), label.data(), d.data(), dx.data(), n, -100, 0,
                        rows);
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x.data() + r * n;
      auto [mx, sum] = maxAndExpSum(xr, n);
      for (int64_t j = 0; j < n; ++j) {
        double ref =
            label[r] == -100
                ? 0.0
                : (std::exp(xr[j] - mx) / sum - (j == label[r])) * d[r];
        EXPECT_NEAR(dx[r * n + j], ref, 1e-6) << r << " " << j;
      }
    }
  }
}

TEST(VectorKernels, BlockedAttentionMatchesItsDefinition) {
  // Tq = 70 (a block of 64 and a partial one), a causal mask.
  std::mt19937 rng(5);
  const int64_t b = 2, h = 3, tq = 70, tk = 70, d = 8;
  Tensor q = randomF32({b, h, tq, d}, rng), kt = randomF32({b, h, d, tk}, rng),
         v = randomF32({b, h, tk, d}, rng);
  Tensor mask(DType::F32, {tq, tk});
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j)
      mask.data<float>()[i * tk + j] = j > i ? -1e9f : 0.f;
  const float scale = 0.35f;
  Tensor out(DType::F32, {b, h, tq, d});
  attention(q, kt, v, &mask, scale, out);
  for (int64_t bh = 0; bh < b * h; ++bh)
    for (int64_t i = 0; i < tq; ++i) {
      std::vector<double> s(tk);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d; ++c)
          acc += double(q.data<float>()[(bh * tq + i) * d + c]) *
                 kt.data<float>()[(bh * d + c) * tk + j];
        s[j] = acc * scale + mask.data<float>()[i * tk + j];
        mx = std::max(mx, s[j]);
      }
      for (double &e : s)
        sum += (e = std::exp(e - mx));
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t j = 0; j < tk; ++j)
          o += s[j] / sum * v.data<float>()[(bh * tk + j) * d + c];
        EXPECT_NEAR(out.data<float>()[(bh * tq + i) * d + c], o, 1e-5);
      }
    }
}

TEST(VectorKernels, AdamWIsTheScalarLoopBitForBitOnEveryIsa) {
  std::mt19937 rng(7);
  const int64_t n = 1001; // vector tails on every ISA
  std::vector<float> w0 = randomVector(n, rng, -1.f, 1.f),
                     g = randomVector(n, rng, -3.f, 3.f),
                     m0 = randomVector(n, rng, -0.1f, 0.1f),
                     v0 = randomVector(n, rng, 0.f, 0.05f);
  for (bool scaled : {false, true}) {
    AdamWScalars s;
    s.gradScale = 0.37f;
    s.scaled = scaled;
    s.decay = static_cast<float>(1.0 - 1e-3 * 0.01);
    s.beta1 = 0.9f;
    s.oneMinusBeta1 = static_cast<float>(1.0 - 0.9);
    s.beta2 = 0.999f;
    s.oneMinusBeta2 = static_cast<float>(1.0 - 0.999);
    s.bc2Sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 3.0)));
    s.eps = 1e-8f;
    s.negStepSize = static_cast<float>(-1e-3 / (1.0 - std::pow(0.9, 3.0)));
    // torch's _single_tensor_adamw on float32 tensors, one op at a time;
    // its two FMAs in double, where the products are exact.
    std::vector<float> wr = w0, mr = m0, vr = v0;
    for (int64_t i = 0; i < n; ++i) {
      float grad = scaled ? g[i] * s.gradScale : g[i];
      float param = wr[i] * s.decay;
      float expAvg = static_cast<float>(double(grad) * s.oneMinusBeta1 +
                                        double(mr[i] * s.beta1));
      float expAvgSq = static_cast<float>(
          double(s.oneMinusBeta2 * grad) * grad + double(vr[i] * s.beta2));
      volatile float denom = std::sqrt(expAvgSq) / s.bc2Sqrt;
      float step = s.negStepSize * expAvg;
      volatile float update = step / (denom + s.eps);
      wr[i] = param + update;
      mr[i] = expAvg;
      vr[i] = expAvgSq;
    }
    for (const VectorKernels *k : isas()) {
      SCOPED_TRACE(k->isa);
      std::vector<float> w = w0, m = m0, v = v0;
      // In two ranges, as two threads would.
      k->adamw(s, w.data(), g.data(), m.data(), v.data(), 0, 400);
      k->adamw(s, w.data(), g.data(), m.data(), v.data(), 400, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(w[i], wr[i]) << i;
        ASSERT_EQ(m[i], mr[i]) << i;
        ASSERT_EQ(v[i], vr[i]) << i;
      }
    }
  }
}

// A process pinned to fewer cores than the machine has (taskset, mpirun
// --bind-to core) runs that many kernel threads, not threads that take
// turns on one core.
TEST(ParallelKernels, UsableCoresAreTheAffinityMasks) {
  EXPECT_GE(cpu::usableCores(), 1);
  EXPECT_LE(cpu::usableCores(),
            static_cast<int>(std::thread::hardware_concurrency()));
#ifdef __linux__
  // A child pinned to one core (as taskset -c 0 pins shoal-run) sees one.
  EXPECT_EXIT(
      {
        cpu_set_t mask;
        CPU_ZERO(&mask);
        sched_getaffinity(0, sizeof mask, &mask);
        int first = 0;
        while (!CPU_ISSET(first, &mask))
          ++first;
        CPU_ZERO(&mask);
        CPU_SET(first, &mask);
        if (sched_setaffinity(0, sizeof mask, &mask) != 0)
          std::_Exit(2);
        std::_Exit(cpu::usableCores() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
#endif
}

TEST(ParallelKernels, TransposeMatchesItsDefinitionOnAnyThreadCount) {
  std::mt19937 rng(8);
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  // Attention's layouts, a plain matrix, tails past the 16 x 16 tiles, a
  // size-1 input-last dimension, a rank-1 identity.
  std::vector<Case> cases = {
      {{2, 37, 3, 20}, {0, 2, 1, 3}},
      {{2, 37, 3, 20}, {0, 2, 3, 1}},
      {{2, 3, 37, 41}, {0, 1, 3, 2}},
      {{65, 17}, {1, 0}},
      {{3, 5, 18}, {2, 0, 1}},
      {{4, 6, 1}, {2, 1, 0}},
      {{9}, {0}},
      // Large enough to be split over the threads, both paths.
      {{8, 128, 8, 32}, {0, 2, 1, 3}},
      {{4, 8, 70, 90}, {0, 1, 3, 2}}};
  for (int threads : {1, 3}) {
    setCpuThreads(threads);
    for (const Case &c : cases) {
      Tensor x = randomF32(c.shape, rng);
      Shape outShape;
      for (int64_t d : c.perm)
        outShape.push_back(c.shape[d]);
      Tensor out(DType::F32, outShape);
      transpose(x, c.perm, out);
      // out[i] = x[j] with j the input index of output index i.
      std::size_t rank = c.shape.size();
      std::vector<int64_t> idx(rank, 0);
      for (int64_t i = 0; i < out.numElements(); ++i) {
        int64_t rest = i;
        for (std::size_t d = rank; d-- > 0;) {
          idx[c.perm[d]] = rest % outShape[d];
          rest /= outShape[d];
        }
        int64_t j = 0;
        for (std::size_t d = 0; d < rank; ++d)
          j = j * c.shape[d] + idx[d];
        ASSERT_EQ(out.data<float>()[i], x.data<float>()[j])
            << "perm case of rank " << rank << ", element " << i;
      }
    }
  }
  setCpuThreads(0);
}

TEST(ParallelKernels, BatchedMatMulSplitOverBatchesWithBroadcasting) {
  std::mt19937 rng(10);
  // A [2, 1, 40, 70] times B [3, 70, 60]: batch [2, 3], B broadcast over the
  // first batch dimension and A over the second; small enough products to
  // be split over the threads.
  Tensor a = randomF32({2, 1, 40, 70}, rng), b = randomF32({3, 70, 60}, rng);
  for (int threads : {1, 2, 5}) {
    setCpuThreads(threads);
    Tensor c(DType::F32, {2, 3, 40, 60});
    matmul(a, b, c);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t r = 0; r < 40; ++r)
          for (int64_t col = 0; col < 60; ++col) {
            double ref = 0;
            for (int64_t t = 0; t < 70; ++t)
              ref += double(a.data<float>()[(i * 40 + r) * 70 + t]) *
                     b.data<float>()[(j * 70 + t) * 60 + col];
            ASSERT_NEAR(c.data<float>()[((i * 3 + j) * 40 + r) * 60 + col], ref,
                        1e-4)
                << threads << " threads, batch " << i << "," << j;
          }
  }
  setCpuThreads(0);
}

TEST(ParallelKernels, LayerNormScaleGradDoesNotDependOnTheThreads) {
  std::mt19937 rng(9);
  // 300 rows: several blocks of 64 and a partial one.
  Tensor x = randomF32({3, 100, 24}, rng, -2.f, 2.f);
  Tensor dy = randomF32({3, 100, 24}, rng);
  std::vector<double> ref(24, 0.0);
  for (int64_t r = 0; r < 300; ++r) {
    const float *row = x.data<float>() + r * 24;
    double mu = 0, var = 0;
    for (int64_t j = 0; j < 24; ++j)
      mu += row[j] / 24.0;
    for (int64_t j = 0; j < 24; ++j)
      var += (row[j] - mu) * (row[j] - mu) / 24.0;
    for (int64_t j = 0; j < 24; ++j)
      ref[j] +=
          dy.data<float>()[r * 24 + j] * (row[j] - mu) / std::sqrt(var + 1e-5);
  }
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    setCpuThreads(threads);
    Tensor ds(DType::F32, {24});
    layerNormScaleGrad(x, dy, 2, 1e-5f, ds);
    for (int64_t j = 0; j < 24; ++j)
      EXPECT_NEAR(ds.data<float>()[j], ref[j], 1e-4 * (1 + std::fabs(ref[j])));
    std::vector<float> got(ds.data<float>(), ds.data<float>() + 24);
    if (first.empty())
      first = got;
    EXPECT_EQ(got, first) << threads << " threads";
  }
  setCpuThreads(0);
}

TEST(ParallelFor, CoversEveryItemOnceAndPassesErrorsOn) {
  setCpuThreads(4);
  const int64_t n = 100000;
  std::vector<std::atomic<int>> hits(n);
  parallelFor(n, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      hits[i]++;
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[i].load(), 1) << i;
  EXPECT_THROW(parallelFor(n, 100,
                           [&](int64_t b, int64_t) {
                             if (b > 0 || n > 0)
                               throw std::runtime_error("kernel failed");
                           }),
               std::runtime_error);
  // Small work runs on the calling thread.
  int calls = 0;
  parallelFor(10, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
  setCpuThreads(0);
}

} // namespace
