//===- KernelsTest.cpp - CPU kernels against naive loops --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every kernel is compared with a straightforward reference loop written here
// from the ONNX definition, on small random data.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

std::vector<double> refBinary(const Tensor &a, const Tensor &b,
                              const std::function<double(double, double)> &f) {
  Shape out = broadcastShape(a.shape(), b.shape());
  std::vector<double> r(numElements(out));
  for (int64_t i = 0; i < numElements(out); ++i) {
    auto c = unravel(i, out);
    r[i] = f(a.data<float>()[broadcastIndex(c, a.shape())],
             b.data<float>()[broadcastIndex(c, b.shape())]);
  }
  return r;
}

/// numpy.matmul by definition.
std::vector<double> refMatmul(const Tensor &a, const Tensor &b) {
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape batch = broadcastShape(Shape(as.begin(), as.end() - 2),
                               Shape(bs.begin(), bs.end() - 2));
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  std::vector<double> r;
  for (int64_t bi = 0; bi < numElements(batch); ++bi) {
    auto c = unravel(bi, batch);
    int64_t ao = broadcastIndex(c, aBatch) * m * k;
    int64_t bo = broadcastIndex(c, bBatch) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += double(a.data<float>()[ao + i * k + l]) *
               b.data<float>()[bo + l * n + j];
        r.push_back(s);
      }
  }
  return r;
}

Tensor run(const std::function<void(Tensor &)> &kernel, DType dtype,
           const Shape &shape) {
  Tensor out(dtype, shape);
  kernel(out);
  return out;
}

} // namespace

TEST(Kernels, BinaryBroadcastingF32) {
  std::mt19937 rng(1);
  struct Case {
    Shape a, b;
  };
  std::vector<Case> cases = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},       {{2, 1, 4}, {3, 1}},
      {{}, {2, 3}},           {{3, 1, 5}, {1, 4, 1}}, {{5}, {}},
      {{2, 3, 1}, {2, 1, 6}}, {{0, 3}, {3}},
  };
  std::vector<std::pair<BinaryOp, std::function<double(double, double)>>> ops =
      {{BinaryOp::Add, [](double x, double y) { return x + y; }},
       {BinaryOp::Sub, [](double x, double y) { return x - y; }},
       {BinaryOp::Mul, [](double x, double y) { return x * y; }},
       {BinaryOp::Div, [](double x, double y) { return x / y; }},
       {BinaryOp::Pow, [](double x, double y) { return std::pow(x, y); }}};
  for (const Case &c : cases) {
    for (const auto &op : ops) {
      bool pow = op.first == BinaryOp::Pow;
      Tensor a = randomF32(c.a, rng, pow ? 0.5f : -2.f, 2.f);
      Tensor b = randomF32(c.b, rng, 0.5f, 2.f);
      Tensor out = run([&](Tensor &o) { binary(op.first, a, b, o); },
                       DType::F32, broadcastShape(c.a, c.b));
      expectAllNear(out, refBinary(a, b, op.second));
    }
  }
}

// Gelu (erf form), alone and with the bias shoal-fuse folds into it,
// against the definition in double: the reference for faster kernels.
TEST(Kernels, GeluWithAndWithoutBias) {
  std::mt19937 rng(3);
  auto ref = [](double z) {
    return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  };
  for (const Shape &shape : {Shape{4, 33}, Shape{2, 3, 64}, Shape{7}}) {
    Tensor x = randomF32(shape, rng, -6.f, 6.f);
    Tensor bias = randomF32({shape.back()}, rng, -1.f, 1.f);
    int64_t n = x.numElements(), last = shape.back();
    std::vector<double> plain(n), biased(n);
    for (int64_t i = 0; i < n; ++i) {
      plain[i] = ref(x.data<float>()[i]);
      biased[i] = ref(double(x.data<float>()[i]) +
                      double(bias.data<float>()[i % last]));
    }
    expectAllNear(
        run([&](Tensor &o) { gelu(x, nullptr, o); }, DType::F32, shape), plain,
        1e-6);
    expectAllNear(run([&](Tensor &o) { gelu(x, &bias, o); }, DType::F32, shape),
                  biased, 1e-6);
  }
}

TEST(Kernels, BinaryIntegerAndMixedPow) {
  Tensor a = makeTensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = makeTensor<int64_t>({3}, {10, 20, 30});
  Tensor out(DType::I64, {2, 3});
  binary(BinaryOp::Add, a, b, out);
  EXPECT_EQ(toVector<int64_t>(out),
            (std::vector<int64_t>{11, 22, 33, 14, 25, 36}));
  binary(BinaryOp::Mul, a, b, out);
  EXPECT_EQ(toVector<int64_t>(out),
            (std::vector<int64_t>{10, 40, 90, 40, 100, 180}));
  binary(BinaryOp::Sub, a, b, out);
  EXPECT_EQ(toVector<int64_t>(out)[5], 6 - 30);
  // Integer Div truncates toward zero; a zero divisor is an Error.
  binary(BinaryOp::Div, b, a, out);
  EXPECT_EQ(toVector<int64_t>(out),
            (std::vector<int64_t>{10, 10, 10, 2, 4, 5}));
  Tensor zero = makeTensor<int64_t>({}, {0});
  EXPECT_THROW(binary(BinaryOp::Div, a, zero, out), Error);

  Tensor x = makeTensor<float>({3}, {1.f, 2.f, 3.f});
  Tensor e = makeTensor<int64_t>({}, {2});
  Tensor y(DType::F32, {3});
  binary(BinaryOp::Pow, x, e, y);
  EXPECT_EQ(toVector<float>(y), (std::vector<float>{1.f, 4.f, 9.f}));
}

TEST(Kernels, BinaryRejectsBadShapes) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {4}), out(DType::F32, {2, 3});
  try {
    binary(BinaryOp::Add, a, b, out);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("do not broadcast"),
              std::string::npos);
  }
  Tensor c(DType::F32, {3}), wrong(DType::F32, {3, 2});
  EXPECT_THROW(binary(BinaryOp::Add, a, c, wrong), Error);
}

TEST(Kernels, Unary) {
  std::mt19937 rng(2);
  Tensor x = randomF32({3, 7}, rng, -3.f, 3.f);
  Tensor pos = randomF32({3, 7}, rng, 0.f, 4.f);
  std::vector<std::pair<UnaryOp, std::function<double(double)>>> ops = {
      {UnaryOp::Erf, [](double v) { return std::erf(v); }},
      {UnaryOp::Tanh, [](double v) { return std::tanh(v); }},
      {UnaryOp::Relu, [](double v) { return v > 0 ? v : 0; }},
      {UnaryOp::Exp, [](double v) { return std::exp(v); }},
      {UnaryOp::Neg, [](double v) { return -v; }},
      {UnaryOp::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {UnaryOp::Sqrt, [](double v) { return std::sqrt(v); }},
  };
  for (const auto &op : ops) {
    const Tensor &in = op.first == UnaryOp::Sqrt ? pos : x;
    Tensor out(DType::F32, in.shape());
    unary(op.first, in, out);
    std::vector<double> ref;
    for (float v : toVector<float>(in))
      ref.push_back(op.second(v));
    expectAllNear(out, ref);
  }
  // Sigmoid stays finite far out.
  Tensor big = makeTensor<float>({2}, {-200.f, 200.f});
  Tensor s(DType::F32, {2});
  unary(UnaryOp::Sigmoid, big, s);
  EXPECT_EQ(toVector<float>(s), (std::vector<float>{0.f, 1.f}));
}

TEST(Kernels, MatMulShapesAndValues) {
  std::mt19937 rng(3);
  struct Case {
    Shape a, b, out;
  };
  std::vector<Case> cases = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},          // B shared: one tall GEMM
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},       // batched
      {{2, 1, 3, 4}, {5, 4, 6}, {2, 5, 3, 6}}, // batch broadcasting
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},          // A broadcast
      {{4}, {4, 5}, {5}},
      {{3, 4}, {4}, {3}},
      {{4}, {4}, {}},
      {{2, 3, 4}, {4}, {2, 3}},
      {{0, 4}, {4, 2}, {0, 2}},
      {{3, 0}, {0, 2}, {3, 2}},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(matmulShape(c.a, c.b), c.out);
    Tensor a = randomF32(c.a, rng), b = randomF32(c.b, rng);
    Tensor out = run([&](Tensor &o) { matmul(a, b, o); }, DType::F32, c.out);
    expectAllNear(out, refMatmul(a, b), 1e-4);
  }
  EXPECT_THROW(matmulShape({3, 4}, {5, 6}), Error);
  EXPECT_THROW(matmulShape({2, 3, 4}, {3, 4, 5}), Error);
}

TEST(Kernels, GemmTransposesAndBias) {
  std::mt19937 rng(4);
  int64_t m = 3, k = 5, n = 4;
  for (int transA = 0; transA < 2; ++transA)
    for (int transB = 0; transB < 2; ++transB)
      for (const Shape &cShape :
           std::vector<Shape>{{}, {n}, {m, 1}, {m, n}, {1, n}, {1}}) {
        Tensor a = randomF32(transA ? Shape{k, m} : Shape{m, k}, rng);
        Tensor b = randomF32(transB ? Shape{n, k} : Shape{k, n}, rng);
        Tensor c = randomF32(cShape, rng);
        float alpha = 0.75f, beta = 1.5f;
        Tensor out(DType::F32, {m, n});
        gemm(a, b, &c, alpha, beta, transA, transB, out);
        std::vector<double> ref;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t l = 0; l < k; ++l) {
              float av = transA ? a.data<float>()[l * m + i]
                                : a.data<float>()[i * k + l];
              float bv = transB ? b.data<float>()[j * k + l]
                                : b.data<float>()[l * n + j];
              s += double(av) * bv;
            }
            ref.push_back(alpha * s +
                          beta *
                              c.data<float>()[broadcastIndex({i, j}, cShape)]);
          }
        expectAllNear(out, ref, 1e-4);
      }
  // Without C.
  Tensor a = randomF32({2, 3}, rng), b = randomF32({3, 2}, rng);
  Tensor out(DType::F32, {2, 2});
  gemm(a, b, nullptr, 1.f, 1.f, false, false, out);
  expectAllNear(out, refMatmul(a, b), 1e-5);
}

TEST(Kernels, Softmax) {
  std::mt19937 rng(5);
  Shape s = {3, 4, 5};
  Tensor x = randomF32(s, rng, -5.f, 5.f);
  for (int64_t axis = 0; axis < 3; ++axis) {
    Tensor out(DType::F32, s);
    softmax(x, axis, out);
    std::vector<double> ref(numElements(s));
    for (int64_t i = 0; i < numElements(s); ++i) {
      auto c = unravel(i, s);
      double denom = 0;
      for (int64_t j = 0; j < s[axis]; ++j) {
        auto cj = c;
        cj[axis] = j;
        denom += std::exp(double(x.data<float>()[broadcastIndex(cj, s)]));
      }
      ref[i] = std::exp(double(x.data<float>()[i])) / denom;
    }
    expectAllNear(out, ref);
  }
  // Large values do not overflow.
  Tensor big = makeTensor<float>({2}, {1000.f, 1000.f});
  Tensor out(DType::F32, {2});
  softmax(big, 0, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{0.5f, 0.5f}));
}

TEST(Kernels, LayerNormalization) {
  std::mt19937 rng(6);
  Shape s = {2, 3, 4};
  Tensor x = randomF32(s, rng, -3.f, 3.f);
  // LayerNorm, and RMSNorm (rms: the mean taken as 0).
  for (bool rms : {false, true})
    for (int64_t axis : {2, 1}) {
      Shape norm(s.begin() + axis, s.end());
      for (bool withBias : {false, true}) {
        SCOPED_TRACE(rms ? "RMSNorm" : "LayerNorm");
        Tensor scale = randomF32(norm, rng), bias = randomF32({4}, rng);
        Shape stat(s.begin(), s.begin() + axis);
        stat.resize(3, 1);
        Tensor out(DType::F32, s), mean(DType::F32, stat),
            inv(DType::F32, stat);
        float eps = 1e-3f;
        layerNorm(x, scale, withBias ? &bias : nullptr, axis, eps, out, &mean,
                  &inv, rms);
        int64_t n = numElements(norm), outer = numElements(s) / n;
        std::vector<double> ref, refMean, refInv;
        for (int64_t o = 0; o < outer; ++o) {
          double mu = 0, var = 0;
          for (int64_t j = 0; j < n && !rms; ++j)
            mu += x.data<float>()[o * n + j];
          mu /= n;
          for (int64_t j = 0; j < n; ++j)
            var += std::pow(x.data<float>()[o * n + j] - mu, 2);
          var /= n;
          for (int64_t j = 0; j < n; ++j) {
            double y = (x.data<float>()[o * n + j] - mu) /
                       std::sqrt(var + eps) * scale.data<float>()[j];
            if (withBias)
              y += bias.data<float>()[j % 4];
            ref.push_back(y);
          }
          refMean.push_back(mu);
          refInv.push_back(1 / std::sqrt(var + eps));
        }
        expectAllNear(out, ref);
        expectAllNear(mean, refMean);
        expectAllNear(inv, refInv);
      }
    }
}

TEST(Kernels, GatherWithNegativeAndInt32Indices) {
  std::mt19937 rng(7);
  Tensor data = randomF32({5, 3}, rng);
  Tensor idx = makeTensor<int64_t>({2, 2}, {0, -1, 4, 2});
  Tensor out(DType::F32, {2, 2, 3});
  gather(data, idx, 0, out);
  std::vector<double> ref;
  for (int64_t r : {0, 4, 4, 2})
    for (int64_t j = 0; j < 3; ++j)
      ref.push_back(data.data<float>()[r * 3 + j]);
  expectAllNear(out, ref);

  Tensor idx32 = makeTensor<int32_t>({3}, {2, 0, -3});
  Tensor out1(DType::F32, {5, 3});
  gather(data, idx32, 1, out1);
  ref.clear();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t c : {2, 0, 0})
      ref.push_back(data.data<float>()[i * 3 + c]);
  expectAllNear(out1, ref);

  // i64 data (e.g. shape tensors) is gathered by bytes.
  Tensor ids = makeTensor<int64_t>({4}, {10, 11, 12, 13});
  Tensor pick = makeTensor<int64_t>({2}, {3, 1});
  Tensor got(DType::I64, {2});
  gather(ids, pick, 0, got);
  EXPECT_EQ(toVector<int64_t>(got), (std::vector<int64_t>{13, 11}));

  Tensor bad = makeTensor<int64_t>({2}, {1, 5});
  Tensor badOut(DType::F32, {2, 3});
  try {
    gather(data, bad, 0, badOut);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("index 5"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("out of range for axis 0 of size 5"),
              std::string::npos)
        << e.what();
  }
}

TEST(Kernels, Transpose) {
  std::mt19937 rng(8);
  Shape s = {2, 3, 4};
  Tensor x = randomF32(s, rng);
  for (const std::vector<int64_t> &perm : std::vector<std::vector<int64_t>>{
           {0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {0, 2, 1}, {2, 0, 1}}) {
    Shape os = transposeShape(s, perm);
    Tensor out(DType::F32, os);
    transpose(x, perm, out);
    std::vector<double> ref(numElements(os));
    for (int64_t i = 0; i < numElements(os); ++i) {
      auto c = unravel(i, os);
      std::vector<int64_t> ic(3);
      for (int d = 0; d < 3; ++d)
        ic[perm[d]] = c[d];
      ref[i] = x.data<float>()[broadcastIndex(ic, s)];
    }
    expectAllNear(out, ref, 0);
  }
  Tensor i = makeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  Tensor it(DType::I64, {2, 2});
  transpose(i, {1, 0}, it);
  EXPECT_EQ(toVector<int64_t>(it), (std::vector<int64_t>{1, 3, 2, 4}));
}

TEST(Kernels, ReduceSumAndMean) {
  std::mt19937 rng(9);
  Shape s = {2, 3, 4};
  Tensor x = randomF32(s, rng);
  for (const std::vector<int64_t> &axes : std::vector<std::vector<int64_t>>{
           {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}) {
    for (bool keep : {true, false}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        Shape kept = reduceShape(s, axes, true);
        Tensor out(DType::F32, reduceShape(s, axes, keep));
        reduce(op, x, axes, out);
        std::vector<double> ref(numElements(kept), 0.0);
        int64_t count = numElements(s) / numElements(kept);
        for (int64_t i = 0; i < numElements(s); ++i) {
          auto c = unravel(i, s);
          for (int64_t a : axes)
            c[a] = 0;
          ref[broadcastIndex(c, kept)] += x.data<float>()[i];
        }
        if (op == ReduceOp::Mean)
          for (double &v : ref)
            v /= count;
        expectAllNear(out, ref);
      }
    }
  }
}

TEST(Kernels, SliceAndConcatBlocks) {
  std::mt19937 rng(10);
  Tensor x = randomF32({4, 6}, rng);
  for (int64_t dim : {0, 1}) {
    int64_t blocks = 2;
    Shape bs = x.shape();
    bs[dim] /= blocks;
    std::vector<uint8_t> all;
    for (int64_t g = 0; g < blocks; ++g) {
      Tensor part(DType::F32, bs);
      sliceBlock(x, dim, blocks, g, part);
      for (int64_t i = 0; i < part.numElements(); ++i) {
        auto c = unravel(i, bs);
        c[dim] += g * bs[dim];
        ASSERT_EQ(part.data<float>()[i],
                  x.data<float>()[broadcastIndex(c, x.shape())]);
      }
      all.insert(all.end(), part.bytes(), part.bytes() + part.numBytes());
    }
    Tensor back(DType::F32, x.shape());
    concatBlocks(all.data(), blocks, dim, back);
    EXPECT_EQ(toVector<float>(back), toVector<float>(x));
  }
  Tensor out(DType::F32, {4, 4});
  EXPECT_THROW(sliceBlock(x, 1, 4, 0, out), Error);
}
