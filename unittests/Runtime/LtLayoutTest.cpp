//===- LtLayoutTest.cpp - Row-major products as cuBLASLt calls --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// lt::toLt against a column-major emulation of what cuBLASLt computes for
// the call it describes (its documented semantics: column-major operands
// with leading dimensions, op() by the transpose flags, strided batches,
// and the epilogues), compared with the row-major product computed
// directly, for every transpose, batched and broadcast operands, odd sizes
// and each epilogue. No GPU: the translation is what is checked.
//
//===----------------------------------------------------------------------===//

#include "LtLayout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace shoal::rt::lt;

namespace {

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double geluGrad(double x) {
  double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * phi;
}

struct Buffers {
  std::vector<double> a, b, c, bias, aux, grad;
};

/// What cuBLASLt computes for `lt` (column-major), with first/second read
/// from the row-major product's B and A buffers.
void emulate(const LtMatmul &lt, const Buffers &in, Buffers &out) {
  const std::vector<double> &f = lt.first == 'B' ? in.b : in.a;
  const std::vector<double> &s = lt.second == 'A' ? in.a : in.b;
  bool bgradA = lt.epilogue == "BGRADA", bgradB = lt.epilogue == "BGRADB";
  if (bgradA || bgradB)
    out.grad.assign(lt.batch * lt.biasLength, 0);
  for (int64_t b = 0; b < lt.batch; ++b)
    for (int64_t j = 0; j < lt.n; ++j)
      for (int64_t i = 0; i < lt.m; ++i) {
        double acc = 0;
        for (int64_t kk = 0; kk < lt.k; ++kk) {
          double x = lt.transFirst
                         ? f[b * lt.strideFirst + kk + i * lt.ldFirst]
                         : f[b * lt.strideFirst + i + kk * lt.ldFirst];
          double y = lt.transSecond
                         ? s[b * lt.strideSecond + j + kk * lt.ldSecond]
                         : s[b * lt.strideSecond + kk + j * lt.ldSecond];
          acc += x * y;
          if (bgradA && j == 0)
            out.grad[b * lt.biasLength + i] += x;
          if (bgradB && i == 0)
            out.grad[b * lt.biasLength + j] += y;
        }
        int64_t at = b * lt.strideC + i + j * lt.ldC;
        int64_t auxAt = b * lt.strideC + i + j * lt.ldAux;
        if (lt.epilogue == "BIAS" || lt.epilogue == "GELU_AUX_BIAS")
          acc += in.bias[i];
        if (lt.epilogue == "GELU_AUX" || lt.epilogue == "GELU_AUX_BIAS") {
          out.aux[auxAt] = acc;
          acc = gelu(acc);
        }
        if (lt.epilogue == "DGELU")
          acc *= geluGrad(in.aux[auxAt]);
        out.c[at] = acc;
      }
}

/// The row-major product itself.
void reference(const RowMajorProduct &p, const Buffers &in, Buffers &out) {
  bool gradA = p.epilogue == Epilogue::BiasGradOfA,
       gradB = p.epilogue == Epilogue::BiasGradOfB;
  if (gradA || gradB)
    out.grad.assign(p.batch * (gradA ? p.m : p.n), 0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t c = 0; c < p.n; ++c) {
        double acc = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          double x = p.transA ? in.a[b * p.strideA + kk * p.m + r]
                              : in.a[b * p.strideA + r * p.k + kk];
          double y = p.transB ? in.b[b * p.strideB + c * p.k + kk]
                              : in.b[b * p.strideB + kk * p.n + c];
          acc += x * y;
          if (gradA && c == 0)
            out.grad[b * p.m + r] += x;
          if (gradB && r == 0)
            out.grad[b * p.n + c] += y;
        }
        int64_t at = b * p.strideC + r * p.n + c;
        if (p.epilogue == Epilogue::Bias || p.epilogue == Epilogue::GeluBias)
          acc += in.bias[c];
        if (p.epilogue == Epilogue::Gelu || p.epilogue == Epilogue::GeluBias) {
          out.aux[at] = acc;
          acc = gelu(acc);
        }
        if (p.epilogue == Epilogue::DGelu)
          acc *= geluGrad(in.aux[at]);
        out.c[at] = acc;
      }
}

} // namespace

TEST(LtLayout, RowMajorProductsAreTheSwappedColumnMajorOnes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  int cases = 0;
  for (Epilogue e :
       {Epilogue::None, Epilogue::Bias, Epilogue::Gelu, Epilogue::GeluBias,
        Epilogue::DGelu, Epilogue::BiasGradOfA, Epilogue::BiasGradOfB})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        for (int batched = 0; batched < 3; ++batched) {
          // 0: one matrix; 1: a batch of 3; 2: a batch of 3 with A
          // broadcast (stride 0), as a weight read by every entry.
          RowMajorProduct p;
          p.m = 5;
          p.n = 7;
          p.k = 3;
          p.transA = transA;
          p.transB = transB;
          p.epilogue = e;
          p.batch = batched ? 3 : 1;
          p.strideA = batched == 1 ? p.m * p.k : 0;
          p.strideB = p.k * p.n;
          p.strideC = p.m * p.n;
          Buffers in;
          auto fill = [&](std::vector<double> &v, std::size_t size) {
            v.resize(size);
            for (double &x : v)
              x = u(rng);
          };
          fill(in.a, std::max<int64_t>(1, p.strideA) * p.batch + p.m * p.k);
          fill(in.b, p.strideB * p.batch);
          fill(in.bias, p.n);
          fill(in.aux, p.strideC * p.batch);
          Buffers want, got;
          want.c.assign(p.strideC * p.batch, 0);
          want.aux = in.aux;
          got = want;
          reference(p, in, want);
          LtMatmul lt = toLt(p);
          EXPECT_EQ(lt.first, 'B');
          EXPECT_EQ(lt.second, 'A');
          emulate(lt, in, got);
          SCOPED_TRACE(::testing::Message()
                       << "epilogue " << lt.epilogue << " transA " << transA
                       << " transB " << transB << " batched " << batched);
          ASSERT_EQ(got.c.size(), want.c.size());
          for (std::size_t i = 0; i < want.c.size(); ++i)
            ASSERT_NEAR(got.c[i], want.c[i], 1e-12) << "element " << i;
          for (std::size_t i = 0; i < want.aux.size(); ++i)
            ASSERT_NEAR(got.aux[i], want.aux[i], 1e-12) << "aux " << i;
          ASSERT_EQ(got.grad.size(), want.grad.size());
          for (std::size_t i = 0; i < want.grad.size(); ++i)
            ASSERT_NEAR(got.grad[i], want.grad[i], 1e-12) << "grad " << i;
          ++cases;
        }
  EXPECT_EQ(cases, 7 * 2 * 2 * 3);
}

TEST(LtLayout, EpiloguesAndLeadingDimensions) {
  RowMajorProduct p;
  p.m = 4096; // tokens
  p.n = 3072; // columns of a column-parallel product's shard
  p.k = 1024;
  p.epilogue = Epilogue::GeluBias;
  LtMatmul lt = toLt(p);
  EXPECT_EQ(lt.m, 3072);
  EXPECT_EQ(lt.n, 4096);
  EXPECT_EQ(lt.ldFirst, 3072);
  EXPECT_EQ(lt.ldSecond, 1024);
  EXPECT_EQ(lt.ldC, 3072);
  EXPECT_EQ(lt.epilogue, "GELU_AUX_BIAS");
  EXPECT_EQ(lt.biasLength, 3072);
  EXPECT_EQ(lt.ldAux, 3072);
  // A Linear's weight gradient X^T dY with its bias gradient (dY's column
  // sums): dY is the row-major B, cuBLASLt's first operand.
  RowMajorProduct w;
  w.m = 1024;
  w.n = 3072;
  w.k = 4096;
  w.transA = true;
  w.epilogue = Epilogue::BiasGradOfB;
  LtMatmul wl = toLt(w);
  EXPECT_EQ(wl.epilogue, "BGRADA");
  EXPECT_EQ(wl.biasLength, 3072);
  EXPECT_TRUE(wl.transSecond);
  EXPECT_EQ(wl.ldSecond, 1024);
  RowMajorProduct bad;
  bad.m = -1;
  EXPECT_THROW(toLt(bad), std::invalid_argument);
}
