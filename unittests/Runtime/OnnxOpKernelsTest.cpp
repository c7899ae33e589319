//===- OnnxOpKernelsTest.cpp - More ONNX ops' CPU kernels -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of Cast, Where, comparisons and logic, more element-wise
// math, Max/Min, Concat, Split, Slice, Expand, Pad, Conv, BatchNormalization,
// the pools, GatherElements, ScatterElements and TopK against hand-computed
// values (from the ONNX operator documentation where it has examples) or
// naive loops written here from the ONNX definitions; the type rules of
// Ops.cpp for those ops; and a few plans run through the Executor, to check
// the dispatch.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Executor.h"
#include "IndexMath.h"
#include "MemoryPlan.h"
#include "Ops.h"
#include "PlanLoader.h"
#include "cpu/Kernels.h"

#include "OpCheck.h"
#include "TestUtil.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

/// Row-major flat index of `c` in `shape`.
int64_t flatIndex(const std::vector<int64_t> &c, const Shape &shape) {
  int64_t idx = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    idx = idx * shape[d] + c[d];
  return idx;
}

WindowParams window(Shape kernel, Shape strides, Shape pads, Shape dilations,
                    bool ceilMode = false) {
  WindowParams w;
  w.kernel = kernel;
  w.strides = strides;
  w.pads = pads;
  w.dilations = dilations;
  w.ceilMode = ceilMode;
  return w;
}

/// ONNX's output size formula written out with floating point division;
/// with ceil mode a last window starting in the end padding is dropped.
int64_t refOutSize(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe,
                   int64_t d, bool ceilMode) {
  double v = double(in + pb + pe - ((k - 1) * d + 1)) / double(s) + 1;
  int64_t out = int64_t(ceilMode ? std::ceil(v) : std::floor(v));
  if (ceilMode && (out - 1) * s >= in + pb)
    --out;
  return out;
}

Shape refOutSpatial(const Shape &in, const WindowParams &w) {
  Shape out;
  std::size_t sr = in.size();
  for (std::size_t d = 0; d < sr; ++d)
    out.push_back(refOutSize(in[d], w.kernel[d], w.strides[d], w.pads[d],
                             w.pads[d + sr], w.dilations[d], w.ceilMode));
  return out;
}

/// Direct convolution by the ONNX definition, in double.
std::vector<double> refConv(const Tensor &x, const Tensor &w, const Tensor *b,
                            const WindowParams &p, int64_t group,
                            Shape &outShape) {
  const Shape &xs = x.shape(), &ws = w.shape();
  std::size_t sr = xs.size() - 2;
  int64_t n = xs[0], c = xs[1], m = ws[0], cg = c / group, mg = m / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end());
  Shape os = refOutSpatial(in, p);
  outShape = {n, m};
  outShape.insert(outShape.end(), os.begin(), os.end());
  const float *px = x.data<float>(), *pw = w.data<float>();
  std::vector<double> r;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t mo = 0; mo < m; ++mo)
      for (int64_t o = 0; o < numElements(os); ++o) {
        std::vector<int64_t> oc = unravel(o, os);
        double sum = b ? b->data<float>()[mo] : 0.0;
        int64_t g = mo / mg;
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t kf = 0; kf < numElements(k); ++kf) {
            std::vector<int64_t> kc = unravel(kf, k);
            std::vector<int64_t> ic(sr);
            bool inside = true;
            for (std::size_t d = 0; d < sr; ++d) {
              ic[d] = oc[d] * p.strides[d] - p.pads[d] + kc[d] * p.dilations[d];
              if (ic[d] < 0 || ic[d] >= in[d])
                inside = false;
            }
            if (!inside)
              continue;
            double xv =
                px[(i * c + g * cg + ci) * numElements(in) + flatIndex(ic, in)];
            double wv = pw[(mo * cg + ci) * numElements(k) + kf];
            sum += xv * wv;
          }
        r.push_back(sum);
      }
  return r;
}

/// Max or average pooling by the ONNX definition.
std::vector<double> refPool(bool isMax, const Tensor &x, const WindowParams &p,
                            bool countIncludePad, Shape &outShape) {
  const Shape &xs = x.shape();
  std::size_t sr = xs.size() - 2;
  Shape in(xs.begin() + 2, xs.end());
  Shape os = refOutSpatial(in, p);
  outShape = {xs[0], xs[1]};
  outShape.insert(outShape.end(), os.begin(), os.end());
  const float *px = x.data<float>();
  std::vector<double> r;
  for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane)
    for (int64_t o = 0; o < numElements(os); ++o) {
      std::vector<int64_t> oc = unravel(o, os);
      double mx = -INFINITY, sum = 0;
      int64_t inside = 0, padded = 0;
      for (int64_t kf = 0; kf < numElements(p.kernel); ++kf) {
        std::vector<int64_t> kc = unravel(kf, p.kernel);
        std::vector<int64_t> ic(sr);
        bool in1 = true, in2 = true;
        for (std::size_t d = 0; d < sr; ++d) {
          ic[d] = oc[d] * p.strides[d] - p.pads[d] + kc[d] * p.dilations[d];
          if (ic[d] < 0 || ic[d] >= in[d])
            in1 = false;
          if (ic[d] < -p.pads[d] || ic[d] >= in[d] + p.pads[d + sr])
            in2 = false;
        }
        padded += in2;
        if (!in1)
          continue;
        ++inside;
        double v = px[plane * numElements(in) + flatIndex(ic, in)];
        mx = std::max(mx, v);
        sum += v;
      }
      r.push_back(isMax ? mx : sum / double(countIncludePad ? padded : inside));
    }
  return r;
}

} // namespace

//===----------------------------------------------------------------------===//
// Cast, Where, comparisons, logic, math
//===----------------------------------------------------------------------===//

TEST(Kernels2, CastTruncatesTowardZeroAndSaturates) {
  Tensor x = makeTensor<float>(
      {10}, {-1.7f, -0.5f, -0.f, 0.5f, 1.5f, 2.9f, kNaN, 1e20f, -1e20f, 7.f});
  Tensor i32(DType::I32, {10});
  cast(x, i32);
  EXPECT_EQ(
      toVector<int32_t>(i32),
      (std::vector<int32_t>{-1, 0, 0, 0, 1, 2, 0, INT32_MAX, INT32_MIN, 7}));
  Tensor i64(DType::I64, {10});
  cast(x, i64);
  EXPECT_EQ(
      toVector<int64_t>(i64),
      (std::vector<int64_t>{-1, 0, 0, 0, 1, 2, 0, INT64_MAX, INT64_MIN, 7}));
  Tensor b(DType::Bool, {10});
  cast(x, b);
  EXPECT_EQ(toVector<uint8_t>(b),
            (std::vector<uint8_t>{1, 1, 0, 1, 1, 1, 1, 1, 1, 1}));

  Tensor big = makeTensor<int64_t>({4}, {-3, 0, 16777217, (int64_t(1) << 40)});
  Tensor f(DType::F32, {4});
  cast(big, f);
  EXPECT_EQ(toVector<float>(f),
            (std::vector<float>{-3.f, 0.f, 16777216.f, 1099511627776.f}));
  Tensor narrow(DType::I32, {4});
  cast(makeTensor<int64_t>({4}, {-3, 0, 5, 2147483647}), narrow);
  EXPECT_EQ(toVector<int32_t>(narrow),
            (std::vector<int32_t>{-3, 0, 5, 2147483647}));
  Tensor wide(DType::I64, {2});
  cast(makeTensor<int32_t>({2}, {-7, 9}), wide);
  EXPECT_EQ(toVector<int64_t>(wide), (std::vector<int64_t>{-7, 9}));
  Tensor flags = makeTensor<uint8_t>({3}, {1, 0, 1});
  Tensor ff(DType::F32, {3});
  cast(flags, ff);
  EXPECT_EQ(toVector<float>(ff), (std::vector<float>{1.f, 0.f, 1.f}));
  Tensor fi(DType::I64, {3});
  cast(flags, fi);
  EXPECT_EQ(toVector<int64_t>(fi), (std::vector<int64_t>{1, 0, 1}));
  Tensor ib(DType::Bool, {4});
  cast(makeTensor<int32_t>({4}, {0, -1, 2, 0}), ib);
  EXPECT_EQ(toVector<uint8_t>(ib), (std::vector<uint8_t>{0, 1, 1, 0}));
  // Same dtype is a copy.
  Tensor same(DType::F32, {3});
  cast(makeTensor<float>({3}, {1.25f, -2.5f, 3.f}), same);
  EXPECT_EQ(toVector<float>(same), (std::vector<float>{1.25f, -2.5f, 3.f}));
  Tensor wrong(DType::F32, {2});
  EXPECT_THROW(cast(flags, wrong), Error);
}

TEST(Kernels2, WhereBroadcastsAllThreeOperands) {
  std::mt19937 rng(3);
  struct Case {
    Shape c, x, y;
  };
  std::vector<Case> cases = {{{2, 3}, {2, 3}, {2, 3}},
                             {{2, 1}, {3}, {}},
                             {{1, 4}, {3, 1}, {1}},
                             {{}, {2, 2}, {2, 1}},
                             {{2, 1, 3}, {4, 1}, {1, 1, 1}}};
  for (const Case &k : cases) {
    Tensor cond(DType::Bool, k.c);
    for (int64_t i = 0; i < cond.numElements(); ++i)
      cond.data<uint8_t>()[i] = rng() % 2;
    Tensor x = randomI64(k.x, rng, -100, 100);
    Tensor y = randomI64(k.y, rng, -100, 100);
    Shape shape = broadcastShape(broadcastShape(k.c, k.x), k.y);
    Tensor out(DType::I64, shape);
    where(cond, x, y, out);
    for (int64_t i = 0; i < out.numElements(); ++i) {
      auto c = unravel(i, shape);
      int64_t expect = cond.data<uint8_t>()[broadcastIndex(c, k.c)]
                           ? x.data<int64_t>()[broadcastIndex(c, k.x)]
                           : y.data<int64_t>()[broadcastIndex(c, k.y)];
      ASSERT_EQ(out.data<int64_t>()[i], expect) << formatShape(shape) << i;
    }
    // The same for f32 values.
    Tensor xf = randomF32(k.x, rng), yf = randomF32(k.y, rng);
    Tensor outf(DType::F32, shape);
    where(cond, xf, yf, outf);
    for (int64_t i = 0; i < outf.numElements(); ++i) {
      auto c = unravel(i, shape);
      float expect = cond.data<uint8_t>()[broadcastIndex(c, k.c)]
                         ? xf.data<float>()[broadcastIndex(c, k.x)]
                         : yf.data<float>()[broadcastIndex(c, k.y)];
      ASSERT_EQ(outf.data<float>()[i], expect);
    }
  }
  // Bool and i32 values.
  Tensor cond = makeTensor<uint8_t>({3}, {1, 0, 1});
  Tensor out(DType::Bool, {3});
  where(cond, makeTensor<uint8_t>({1}, {1}),
        makeTensor<uint8_t>({3}, {0, 0, 1}), out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{1, 0, 1}));
  Tensor o32(DType::I32, {2, 3});
  where(cond, makeTensor<int32_t>({2, 1}, {5, 6}),
        makeTensor<int32_t>({}, {-1}), o32);
  EXPECT_EQ(toVector<int32_t>(o32), (std::vector<int32_t>{5, -1, 5, 6, -1, 6}));
  EXPECT_THROW(where(makeTensor<float>({3}, {1, 0, 1}),
                     makeTensor<int32_t>({1}, {1}),
                     makeTensor<int32_t>({1}, {1}), o32),
               Error);
}

TEST(Kernels2, ComparisonsBroadcast) {
  std::mt19937 rng(5);
  std::vector<std::pair<CompareOp, std::function<bool(double, double)>>> ops = {
      {CompareOp::Equal, [](double a, double b) { return a == b; }},
      {CompareOp::Less, [](double a, double b) { return a < b; }},
      {CompareOp::Greater, [](double a, double b) { return a > b; }},
      {CompareOp::LessOrEqual, [](double a, double b) { return a <= b; }},
      {CompareOp::GreaterOrEqual, [](double a, double b) { return a >= b; }}};
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{4, 1}, {1, 5}}, {{}, {3}}};
  for (const auto &op : ops)
    for (const auto &sh : shapes) {
      Shape shape = broadcastShape(sh.first, sh.second);
      // Small integers, so that equal values are common.
      Tensor a = randomI64(sh.first, rng, -2, 2);
      Tensor b = randomI64(sh.second, rng, -2, 2);
      Tensor out(DType::Bool, shape);
      compare(op.first, a, b, out);
      Tensor a32(DType::I32, sh.first), b32(DType::I32, sh.second);
      cast(a, a32);
      cast(b, b32);
      Tensor af(DType::F32, sh.first), bf(DType::F32, sh.second);
      cast(a, af);
      cast(b, bf);
      Tensor out32(DType::Bool, shape), outf(DType::Bool, shape);
      compare(op.first, a32, b32, out32);
      compare(op.first, af, bf, outf);
      for (int64_t i = 0; i < out.numElements(); ++i) {
        auto c = unravel(i, shape);
        bool expect =
            op.second(double(a.data<int64_t>()[broadcastIndex(c, sh.first)]),
                      double(b.data<int64_t>()[broadcastIndex(c, sh.second)]));
        ASSERT_EQ(out.data<uint8_t>()[i], expect ? 1 : 0);
        ASSERT_EQ(out32.data<uint8_t>()[i], expect ? 1 : 0);
        ASSERT_EQ(outf.data<uint8_t>()[i], expect ? 1 : 0);
      }
    }
  // NaN compares unequal and unordered.
  Tensor n = makeTensor<float>({2}, {kNaN, 1.f});
  Tensor out(DType::Bool, {2});
  compare(CompareOp::Equal, n, n, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 1}));
  compare(CompareOp::GreaterOrEqual, n, makeTensor<float>({}, {0.f}), out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 1}));
  // Equal also takes bools; the others do not.
  Tensor bools = makeTensor<uint8_t>({2}, {1, 0});
  compare(CompareOp::Equal, bools, makeTensor<uint8_t>({}, {1}), out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{1, 0}));
  EXPECT_THROW(compare(CompareOp::Less, bools, bools, out), Error);
  EXPECT_THROW(compare(CompareOp::Less, n, bools, out), Error);
}

TEST(Kernels2, LogicalOps) {
  Tensor a = makeTensor<uint8_t>({2, 2}, {0, 0, 1, 1});
  Tensor b = makeTensor<uint8_t>({2}, {0, 1});
  Tensor out(DType::Bool, {2, 2});
  logical(LogicOp::And, a, b, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 0, 0, 1}));
  logical(LogicOp::Or, a, b, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 1, 1, 1}));
  logical(LogicOp::Xor, a, b, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 1, 1, 0}));
  Tensor col = makeTensor<uint8_t>({2, 1}, {1, 0});
  logical(LogicOp::And, col, b, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{0, 1, 0, 0}));
  logicalNot(a, out);
  EXPECT_EQ(toVector<uint8_t>(out), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_THROW(logical(LogicOp::Or, makeTensor<float>({2}, {1, 0}), b, out),
               Error);
}

TEST(Kernels2, MathOps) {
  std::vector<float> v = {-2.5f, -0.5f, 0.3f, 1.f, 2.7f, -0.f};
  Tensor x = makeTensor<float>({2, 3}, v);
  std::vector<std::pair<MathOp, std::function<double(double)>>> ops = {
      {MathOp::Sin, [](double a) { return std::sin(a); }},
      {MathOp::Cos, [](double a) { return std::cos(a); }},
      {MathOp::Abs, [](double a) { return std::fabs(a); }},
      {MathOp::Floor, [](double a) { return std::floor(a); }},
      {MathOp::Ceil, [](double a) { return std::ceil(a); }}};
  for (const auto &op : ops) {
    Tensor out(DType::F32, {2, 3});
    math(op.first, x, out);
    std::vector<double> expect;
    for (float f : v)
      expect.push_back(op.second(f));
    expectAllNear(out, expect);
  }
  Tensor pos = makeTensor<float>({4}, {0.5f, 1.f, 2.f, 10.f});
  Tensor out(DType::F32, {4});
  math(MathOp::Log, pos, out);
  expectAllNear(out, {std::log(0.5), 0.0, std::log(2.0), std::log(10.0)});
  math(MathOp::Reciprocal, pos, out);
  expectAllNear(out, {2.0, 1.0, 0.5, 0.1});
  math(MathOp::Log, makeTensor<float>({4}, {0.f, -1.f, 1.f, kInf}), out);
  EXPECT_EQ(out.data<float>()[0], -kInf);
  EXPECT_TRUE(std::isnan(out.data<float>()[1]));
  math(MathOp::Reciprocal, makeTensor<float>({4}, {0.f, -0.f, 4.f, -kInf}),
       out);
  EXPECT_EQ(out.data<float>()[0], kInf);
  EXPECT_EQ(out.data<float>()[1], -kInf);
  // Abs on integers; the minimum wraps as in numpy.
  Tensor i64(DType::I64, {3});
  math(MathOp::Abs, makeTensor<int64_t>({3}, {-5, 7, INT64_MIN}), i64);
  EXPECT_EQ(toVector<int64_t>(i64), (std::vector<int64_t>{5, 7, INT64_MIN}));
  Tensor i32(DType::I32, {2});
  math(MathOp::Abs, makeTensor<int32_t>({2}, {-3, 0}), i32);
  EXPECT_EQ(toVector<int32_t>(i32), (std::vector<int32_t>{3, 0}));
  EXPECT_THROW(math(MathOp::Sin, makeTensor<int32_t>({2}, {1, 2}), i32), Error);
}

TEST(Kernels2, MaxAndMin) {
  std::mt19937 rng(7);
  Tensor a = randomF32({2, 3}, rng), b = randomF32({3}, rng),
         c = randomF32({2, 1}, rng);
  Tensor out(DType::F32, {2, 3});
  minMax(MinMaxOp::Max, {&a, &b}, out);
  for (int64_t i = 0; i < 6; ++i)
    ASSERT_EQ(out.data<float>()[i],
              std::max(a.data<float>()[i], b.data<float>()[i % 3]));
  minMax(MinMaxOp::Min, {&a, &b, &c}, out);
  for (int64_t i = 0; i < 6; ++i) {
    auto co = unravel(i, {2, 3});
    float e = std::min(
        {a.data<float>()[i], b.data<float>()[co[1]], c.data<float>()[co[0]]});
    ASSERT_EQ(out.data<float>()[i], e);
  }
  // Integers, a single input, and NaN propagation.
  Tensor ia = makeTensor<int32_t>({2, 2}, {1, -5, 7, 3});
  Tensor ib = makeTensor<int32_t>({2}, {2, -6});
  Tensor io(DType::I32, {2, 2});
  minMax(MinMaxOp::Max, {&ia, &ib}, io);
  EXPECT_EQ(toVector<int32_t>(io), (std::vector<int32_t>{2, -5, 7, 3}));
  minMax(MinMaxOp::Min, {&ia, &ib}, io);
  EXPECT_EQ(toVector<int32_t>(io), (std::vector<int32_t>{1, -6, 2, -6}));
  Tensor l = makeTensor<int64_t>({2}, {4, -9});
  Tensor lo(DType::I64, {2});
  minMax(MinMaxOp::Max, {&l}, lo);
  EXPECT_EQ(toVector<int64_t>(lo), (std::vector<int64_t>{4, -9}));
  Tensor n = makeTensor<float>({3}, {kNaN, 1.f, 2.f});
  Tensor m = makeTensor<float>({3}, {0.f, kNaN, 1.f});
  Tensor no(DType::F32, {3});
  minMax(MinMaxOp::Max, {&n, &m}, no);
  EXPECT_TRUE(std::isnan(no.data<float>()[0]));
  EXPECT_TRUE(std::isnan(no.data<float>()[1]));
  EXPECT_EQ(no.data<float>()[2], 2.f);
  EXPECT_THROW(minMax(MinMaxOp::Max, {&a, &l}, out), Error);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(Kernels2, ConcatAlongEveryAxis) {
  std::mt19937 rng(9);
  for (int64_t axis = 0; axis < 3; ++axis) {
    Shape s0 = {2, 3, 4}, s1 = s0, s2 = s0;
    s1[axis] = 1;
    s2[axis] = 0; // empty inputs take no room
    Tensor a = randomI64(s0, rng, -50, 50), b = randomI64(s1, rng, -50, 50),
           c = randomI64(s2, rng, 0, 0);
    std::vector<Shape> shapes = {s0, s1, s2, s0};
    Shape shape = concatShape(shapes, axis);
    Shape expectShape = s0;
    expectShape[axis] = 2 * s0[axis] + 1;
    ASSERT_EQ(shape, expectShape);
    Tensor out(DType::I64, shape);
    concat({&a, &b, &c, &a}, axis, out);
    for (int64_t i = 0; i < out.numElements(); ++i) {
      auto co = unravel(i, shape);
      int64_t p = co[axis];
      int64_t expect;
      if (p < s0[axis]) {
        expect = a.data<int64_t>()[flatIndex(co, s0)];
      } else if (p < s0[axis] + 1) {
        co[axis] = p - s0[axis];
        expect = b.data<int64_t>()[flatIndex(co, s1)];
      } else {
        co[axis] = p - s0[axis] - 1;
        expect = a.data<int64_t>()[flatIndex(co, s0)];
      }
      ASSERT_EQ(out.data<int64_t>()[i], expect) << "axis " << axis;
    }
  }
  Tensor x = makeTensor<uint8_t>({2}, {1, 0}),
         y = makeTensor<uint8_t>({1}, {1});
  Tensor bo(DType::Bool, {3});
  concat({&x, &y}, 0, bo);
  EXPECT_EQ(toVector<uint8_t>(bo), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_THROW(concatShape({{2, 3}, {2, 4}}, 0), Error);
  EXPECT_THROW(concatShape({{2, 3}, {2}}, 1), Error);
}

TEST(Kernels2, SplitIntoSizes) {
  Tensor x(DType::F32, {2, 6});
  for (int64_t i = 0; i < 12; ++i)
    x.data<float>()[i] = float(i);
  Tensor a(DType::F32, {2, 1}), b(DType::F32, {2, 3}), c(DType::F32, {2, 0}),
      d(DType::F32, {2, 2});
  split(x, 1, {1, 3, 0, 2}, {&a, &b, &c, &d});
  EXPECT_EQ(toVector<float>(a), (std::vector<float>{0, 6}));
  EXPECT_EQ(toVector<float>(b), (std::vector<float>{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(toVector<float>(d), (std::vector<float>{4, 5, 10, 11}));
  // A piece nobody reads may be left out.
  Tensor top(DType::F32, {1, 6});
  split(x, 0, {1, 1}, {nullptr, &top});
  EXPECT_EQ(toVector<float>(top), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_THROW(split(x, 1, {1, 3}, {&a, &b}), Error);
  EXPECT_THROW(split(x, 1, {2, 4}, {&a, &b}), Error);
}

namespace {
/// Slice of a 1-D arange(n) with the resolved parameters of sliceShape.
std::vector<int64_t> slice1d(int64_t n, int64_t start, int64_t end,
                             int64_t step) {
  Tensor x(DType::I64, {n});
  for (int64_t i = 0; i < n; ++i)
    x.data<int64_t>()[i] = i;
  std::vector<int64_t> first, steps;
  Shape shape = sliceShape({n}, {start}, {end}, {}, {step}, first, steps);
  Tensor out(DType::I64, shape);
  slice(x, first, steps, out);
  return toVector<int64_t>(out);
}
} // namespace

TEST(Kernels2, SliceClampsAndSteps) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(slice1d(10, 2, 1000, 1), (V{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(slice1d(10, -3, INT64_MAX, 1), (V{7, 8, 9}));
  EXPECT_EQ(slice1d(10, 1, -1, 3), (V{1, 4, 7}));
  EXPECT_EQ(slice1d(10, 5, 2, 1), V{});
  EXPECT_EQ(slice1d(10, -100, 2, 1), (V{0, 1}));
  // Negative steps: start clamps to dim - 1, end to -1.
  EXPECT_EQ(slice1d(10, -1, INT64_MIN, -1), (V{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(slice1d(10, 8, 1, -3), (V{8, 5, 2}));
  EXPECT_EQ(slice1d(10, 100, -100, -4), (V{9, 5, 1}));
  EXPECT_EQ(slice1d(10, 3, 3, -1), V{});
  EXPECT_EQ(slice1d(10, 2, 5, -1), V{});
  EXPECT_EQ(slice1d(10, 4, -8, -1), (V{4, 3}));
  EXPECT_EQ(slice1d(10, 0, 10, INT64_MAX), (V{0}));
  EXPECT_EQ(slice1d(10, 9, -11, INT64_MIN), (V{9}));
  EXPECT_EQ(slice1d(0, 0, 5, -1), V{});

  // 2-D with negative axes: x[0:3:2, 3:0:-2] of a 3x4 arange.
  Tensor x(DType::F32, {3, 4});
  for (int64_t i = 0; i < 12; ++i)
    x.data<float>()[i] = float(i);
  std::vector<int64_t> first, steps;
  Shape shape =
      sliceShape({3, 4}, {3, 0}, {0, 3}, {-1, 0}, {-2, 2}, first, steps);
  ASSERT_EQ(shape, (Shape{2, 2}));
  Tensor out(DType::F32, shape);
  slice(x, first, steps, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{3, 1, 11, 9}));
  // Only some axes: the others are whole.
  shape = sliceShape({3, 4}, {1}, {2}, {1}, {}, first, steps);
  ASSERT_EQ(shape, (Shape{3, 1}));
  Tensor col(DType::F32, shape);
  slice(x, first, steps, col);
  EXPECT_EQ(toVector<float>(col), (std::vector<float>{1, 5, 9}));

  EXPECT_THROW(sliceShape({3, 4}, {0}, {1}, {2}, {}, first, steps), Error);
  EXPECT_THROW(sliceShape({3, 4}, {0, 0}, {1, 1}, {1, -1}, {}, first, steps),
               Error);
  EXPECT_THROW(sliceShape({3, 4}, {0}, {1}, {}, {0}, first, steps), Error);
  EXPECT_THROW(sliceShape({3, 4}, {0}, {1, 2}, {}, {}, first, steps), Error);
  // The kernel refuses a slice that would read outside the input.
  Tensor bad(DType::F32, {3, 4});
  EXPECT_THROW(slice(x, {1, 0}, {1, 1}, bad), Error);
}

TEST(Kernels2, ExpandBroadcasts) {
  Tensor x = makeTensor<int32_t>({3, 1}, {1, 2, 3});
  Tensor out(DType::I32, {2, 3, 4});
  expand(x, out);
  for (int64_t i = 0; i < out.numElements(); ++i)
    ASSERT_EQ(out.data<int32_t>()[i], 1 + unravel(i, {2, 3, 4})[1]);
  Tensor s = makeTensor<float>({}, {2.5f});
  Tensor so(DType::F32, {2, 2});
  expand(s, so);
  EXPECT_EQ(toVector<float>(so), (std::vector<float>(4, 2.5f)));
  Tensor row = makeTensor<uint8_t>({1, 3}, {1, 0, 1});
  Tensor ro(DType::Bool, {2, 3});
  expand(row, ro);
  EXPECT_EQ(toVector<uint8_t>(ro), (std::vector<uint8_t>{1, 0, 1, 1, 0, 1}));
  Tensor i64 = makeTensor<int64_t>({2}, {4, 5});
  Tensor same(DType::I64, {2});
  expand(i64, same);
  EXPECT_EQ(toVector<int64_t>(same), (std::vector<int64_t>{4, 5}));
  Tensor bad(DType::I32, {2, 3, 5});
  EXPECT_THROW(expand(makeTensor<int32_t>({2}, {1, 2}), bad), Error);
}

TEST(Kernels2, PadModes) {
  Tensor x = makeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<int64_t> pads = {1, 2, 0, 1}; // rows (1, 0), cols (2, 1)
  Tensor out(DType::F32, {3, 6});
  pad(x, pads, PadMode::Constant, 9.0, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{9, 9, 9, 9, 9, 9, //
                                                      9, 9, 1, 2, 3, 9, //
                                                      9, 9, 4, 5, 6, 9}));
  // numpy.pad(x, ((1, 0), (2, 1)), mode='reflect')
  pad(x, pads, PadMode::Reflect, 0.0, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{6, 5, 4, 5, 6, 5, //
                                                      3, 2, 1, 2, 3, 2, //
                                                      6, 5, 4, 5, 6, 5}));
  // numpy.pad(x, ((1, 0), (2, 1)), mode='edge')
  pad(x, pads, PadMode::Edge, 0.0, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{1, 1, 1, 2, 3, 3, //
                                                      1, 1, 1, 2, 3, 3, //
                                                      4, 4, 4, 5, 6, 6}));
  // Negative pads crop.
  Tensor crop(DType::F32, {2, 1});
  pad(x, {0, -1, 0, -1}, PadMode::Constant, 0.0, crop);
  EXPECT_EQ(toVector<float>(crop), (std::vector<float>{2, 5}));
  // Integer constants.
  Tensor xi = makeTensor<int64_t>({2}, {7, 8});
  Tensor oi(DType::I64, {5});
  pad(xi, {2, 1}, PadMode::Constant, -3.0, oi);
  EXPECT_EQ(toVector<int64_t>(oi), (std::vector<int64_t>{-3, -3, 7, 8, -3}));
  // Reflect wider than the input repeats the reflection.
  Tensor wide(DType::I64, {7});
  pad(makeTensor<int64_t>({3}, {0, 1, 2}), {4, 0}, PadMode::Reflect, 0.0, wide);
  EXPECT_EQ(toVector<int64_t>(wide),
            (std::vector<int64_t>{0, 1, 2, 1, 0, 1, 2}));
  EXPECT_THROW(pad(x, {0, 0}, PadMode::Constant, 0.0, out), Error);
}

TEST(Kernels2, GatherElementsLikeTheOnnxExamples) {
  Tensor data = makeTensor<float>({2, 2}, {1, 2, 3, 4});
  Tensor idx = makeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
  Tensor out(DType::F32, {2, 2});
  gatherElements(data, idx, 1, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{1, 1, 4, 3}));

  Tensor d3 = makeTensor<int64_t>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor i3 = makeTensor<int32_t>({2, 3}, {1, 2, 0, 2, 0, 0});
  Tensor o3(DType::I64, {2, 3});
  gatherElements(d3, i3, 0, o3);
  EXPECT_EQ(toVector<int64_t>(o3), (std::vector<int64_t>{4, 8, 3, 7, 2, 3}));
  // Negative indices wrap; indices may be smaller than data elsewhere.
  Tensor ineg = makeTensor<int64_t>({2, 1}, {-1, -3});
  Tensor oneg(DType::I64, {2, 1});
  gatherElements(d3, ineg, 1, oneg);
  EXPECT_EQ(toVector<int64_t>(oneg), (std::vector<int64_t>{3, 4}));
  // A 3-D case against a naive loop.
  std::mt19937 rng(13);
  Tensor d = randomF32({3, 4, 5}, rng);
  for (int64_t axis = 0; axis < 3; ++axis) {
    Shape is = {2, 3, 4};
    Tensor ix = randomI64(is, rng, -d.shape()[axis], d.shape()[axis] - 1);
    Tensor o(DType::F32, is);
    gatherElements(d, ix, axis, o);
    for (int64_t i = 0; i < o.numElements(); ++i) {
      auto c = unravel(i, is);
      int64_t v = ix.data<int64_t>()[i];
      c[axis] = v < 0 ? v + d.shape()[axis] : v;
      ASSERT_EQ(o.data<float>()[i], d.data<float>()[flatIndex(c, d.shape())]);
    }
  }
  Tensor bad = makeTensor<int64_t>({2, 2}, {0, 2, 0, 0});
  try {
    gatherElements(data, bad, 1, out);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_CONTAINS(e.what(), "GatherElements: index 2 (at position 1 of the "
                              "indices) is out of range for axis 1 of size 2");
  }
  EXPECT_THROW(gatherElements(data, makeTensor<int64_t>({2}, {0, 0}), 0, out),
               Error);
}

TEST(Kernels2, ScatterElementsLikeTheOnnxExamples) {
  Tensor data(DType::F32, {3, 3});
  Tensor idx = makeTensor<int64_t>({2, 3}, {1, 0, 2, 0, 2, 1});
  Tensor upd = makeTensor<float>({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f});
  Tensor out(DType::F32, {3, 3});
  scatterElements(data, idx, upd, 0, ScatterReduction::None, out);
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f,
                                1.2f}));

  Tensor row = makeTensor<float>({1, 5}, {1, 2, 3, 4, 5});
  Tensor ri = makeTensor<int32_t>({1, 2}, {1, 3});
  Tensor ru = makeTensor<float>({1, 2}, {1.1f, 2.1f});
  Tensor ro(DType::F32, {1, 5});
  scatterElements(row, ri, ru, 1, ScatterReduction::None, ro);
  EXPECT_EQ(toVector<float>(ro), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  // Negative indices, and the reductions with a repeated index.
  Tensor dup = makeTensor<int64_t>({1, 2}, {1, -4});
  scatterElements(row, dup, ru, 1, ScatterReduction::Add, ro);
  expectAllNear(ro, {1, 2 + 1.1 + 2.1, 3, 4, 5});
  scatterElements(row, dup, ru, 1, ScatterReduction::Mul, ro);
  expectAllNear(ro, {1, 2 * 1.1 * 2.1, 3, 4, 5});
  scatterElements(row, dup, ru, 1, ScatterReduction::Max, ro);
  expectAllNear(ro, {1, 2.1, 3, 4, 5});
  scatterElements(row, dup, ru, 1, ScatterReduction::Min, ro);
  expectAllNear(ro, {1, 1.1, 3, 4, 5});
  Tensor di = makeTensor<int64_t>({4}, {10, 20, 30, 40});
  Tensor dio(DType::I64, {4});
  scatterElements(di, makeTensor<int64_t>({3}, {0, 0, 3}),
                  makeTensor<int64_t>({3}, {1, 2, 3}), 0, ScatterReduction::Add,
                  dio);
  EXPECT_EQ(toVector<int64_t>(dio), (std::vector<int64_t>{13, 20, 30, 43}));
  // Without a reduction the last update wins.
  scatterElements(di, makeTensor<int64_t>({3}, {0, 0, 3}),
                  makeTensor<int64_t>({3}, {1, 2, 3}), 0,
                  ScatterReduction::None, dio);
  EXPECT_EQ(toVector<int64_t>(dio), (std::vector<int64_t>{2, 20, 30, 3}));
  EXPECT_THROW(scatterElements(row, makeTensor<int64_t>({1, 2}, {0, 5}), ru, 1,
                               ScatterReduction::None, ro),
               Error);
}

namespace {
/// TopK by std::stable_sort of (value, index) pairs: ties keep the lower
/// index first.
template <typename T>
void refTopK(const Tensor &x, int64_t k, int64_t axis, bool largest,
             std::vector<T> &values, std::vector<int64_t> &indices) {
  const Shape &s = x.shape();
  Shape os = s;
  os[axis] = k;
  values.assign(numElements(os), T());
  indices.assign(numElements(os), 0);
  for (int64_t o = 0; o < numElements(os); ++o) {
    auto c = unravel(o, os);
    if (c[axis] != 0)
      continue;
    std::vector<std::pair<T, int64_t>> row;
    for (int64_t j = 0; j < s[axis]; ++j) {
      auto ci = c;
      ci[axis] = j;
      row.push_back({x.data<T>()[flatIndex(ci, s)], j});
    }
    std::stable_sort(row.begin(), row.end(), [&](const auto &p, const auto &q) {
      return largest ? p.first > q.first : p.first < q.first;
    });
    for (int64_t j = 0; j < k; ++j) {
      auto co = c;
      co[axis] = j;
      values[flatIndex(co, os)] = row[j].first;
      indices[flatIndex(co, os)] = row[j].second;
    }
  }
}
} // namespace

TEST(Kernels2, TopKMatchesAStableSort) {
  std::mt19937 rng(17);
  for (int64_t axis = 0; axis < 3; ++axis)
    for (bool largest : {true, false})
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(3)}) {
        Shape s = {4, 5, 6};
        // Few distinct values, so that ties are common.
        Tensor x = randomI64(s, rng, -3, 3);
        Shape os = s;
        os[axis] = k;
        Tensor v(DType::I64, os), ix(DType::I64, os);
        topK(x, k, axis, largest, v, &ix);
        std::vector<int64_t> ev, ei;
        refTopK<int64_t>(x, k, axis, largest, ev, ei);
        EXPECT_EQ(toVector<int64_t>(v), ev);
        EXPECT_EQ(toVector<int64_t>(ix), ei);
        // The same on f32, without the indices output.
        Tensor xf(DType::F32, s);
        cast(x, xf);
        Tensor vf(DType::F32, os);
        topK(xf, k, axis, largest, vf, nullptr);
        std::vector<float> efv;
        std::vector<int64_t> efi;
        refTopK<float>(xf, k, axis, largest, efv, efi);
        EXPECT_EQ(toVector<float>(vf), efv);
      }
  // k above kTopKRowSelect: a partial sort in the same order (k passes
  // over the row below it, as the CUDA kernel).
  for (bool largest : {true, false}) {
    Tensor x = randomI64({3, 40}, rng, -4, 4);
    int64_t k = kTopKRowSelect + 4;
    Tensor v(DType::I64, {3, k}), ix(DType::I64, {3, k});
    topK(x, k, 1, largest, v, &ix);
    std::vector<int64_t> ev, ei;
    refTopK<int64_t>(x, k, 1, largest, ev, ei);
    EXPECT_EQ(toVector<int64_t>(v), ev);
    EXPECT_EQ(toVector<int64_t>(ix), ei);
  }
  // Ties: lower index first, whether largest or smallest.
  Tensor t = makeTensor<float>({6}, {2, 5, 2, 5, 1, 2});
  Tensor v(DType::F32, {4}), ix(DType::I64, {4});
  topK(t, 4, 0, true, v, &ix);
  EXPECT_EQ(toVector<float>(v), (std::vector<float>{5, 5, 2, 2}));
  EXPECT_EQ(toVector<int64_t>(ix), (std::vector<int64_t>{1, 3, 0, 2}));
  topK(t, 4, 0, false, v, &ix);
  EXPECT_EQ(toVector<float>(v), (std::vector<float>{1, 2, 2, 2}));
  EXPECT_EQ(toVector<int64_t>(ix), (std::vector<int64_t>{4, 0, 2, 5}));
  // NaN counts as larger than every number.
  Tensor n = makeTensor<float>({4}, {1, kNaN, 3, -kInf});
  Tensor nv(DType::F32, {2}), ni(DType::I64, {2});
  topK(n, 2, 0, true, nv, &ni);
  EXPECT_TRUE(std::isnan(nv.data<float>()[0]));
  EXPECT_EQ(toVector<int64_t>(ni), (std::vector<int64_t>{1, 2}));
  topK(n, 2, 0, false, nv, &ni);
  EXPECT_EQ(toVector<int64_t>(ni), (std::vector<int64_t>{3, 0}));
  Tensor i32 = makeTensor<int32_t>({2, 3}, {3, 1, 2, -1, -2, 0});
  Tensor v32(DType::I32, {2, 2}), i64(DType::I64, {2, 2});
  topK(i32, 2, 1, true, v32, &i64);
  EXPECT_EQ(toVector<int32_t>(v32), (std::vector<int32_t>{3, 2, 0, -1}));
  EXPECT_EQ(toVector<int64_t>(i64), (std::vector<int64_t>{0, 2, 2, 0}));
  EXPECT_THROW(topK(t, 7, 0, true, v, &ix), Error);
}

//===----------------------------------------------------------------------===//
// Convolution, normalization, pooling
//===----------------------------------------------------------------------===//

TEST(Kernels2, WindowOutputSizes) {
  // floor((5 - 2) / 2) + 1 = 2; ceil mode: 3 (the last window starts at 4).
  EXPECT_EQ(windowOutputSize(5, 2, 2, 0, 0, 1, false), 2);
  EXPECT_EQ(windowOutputSize(5, 2, 2, 0, 0, 1, true), 3);
  // ceil((6 + 1 - 2) / 3) + 1 = 3, but the third window would start at 6,
  // in the end padding: dropped.
  EXPECT_EQ(windowOutputSize(6, 2, 3, 0, 1, 1, true), 2);
  EXPECT_EQ(windowOutputSize(6, 2, 3, 0, 1, 1, false), 2);
  // Dilation 2 widens a 3-kernel to 5.
  EXPECT_EQ(windowOutputSize(7, 3, 1, 0, 0, 2, false), 3);
  EXPECT_EQ(windowOutputSize(7, 3, 1, 1, 1, 2, false), 5);
  EXPECT_THROW(windowOutputSize(3, 3, 1, 0, 0, 2, false), Error);
  EXPECT_EQ(windowOutputShape({2, 3, 8, 9}, 5,
                              window({3, 3}, {2, 1}, {1, 0, 1, 0}, {1, 1})),
            (Shape{2, 5, 4, 7}));
}

TEST(Kernels2, ConvMatchesADirectLoop) {
  std::mt19937 rng(19);
  struct Case {
    Shape x, w;
    WindowParams p;
    int64_t group;
    bool bias;
  };
  std::vector<Case> cases = {
      // 2-D: plain, padded and strided, dilated, grouped, depthwise, 1x1.
      {{1, 2, 5, 5},
       {3, 2, 3, 3},
       window({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}),
       1,
       false},
      {{2, 3, 7, 6},
       {4, 3, 3, 2},
       window({3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 1}),
       1,
       true},
      {{1, 2, 9, 8},
       {2, 2, 3, 3},
       window({3, 3}, {1, 2}, {2, 2, 2, 2}, {2, 3}),
       1,
       true},
      {{2, 4, 6, 6},
       {6, 2, 3, 3},
       window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}),
       2,
       true},
      {{1, 3, 5, 4},
       {3, 1, 3, 3},
       window({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}),
       3,
       false},
      {{2, 3, 4, 5},
       {5, 3, 1, 1},
       window({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}),
       1,
       true},
      {{1, 3, 4, 5},
       {2, 3, 1, 1},
       window({1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}),
       1,
       true},
      // 1-D.
      {{2, 3, 10}, {4, 3, 3}, window({3}, {2}, {1, 2}, {1}), 1, true},
      {{1, 4, 9}, {4, 2, 2}, window({2}, {1}, {0, 0}, {3}), 2, false},
      // 3-D.
      {{1, 2, 4, 5, 3},
       {3, 2, 2, 3, 2},
       window({2, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {1, 1, 2}),
       1,
       true},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case &k = cases[ci];
    Tensor x = randomF32(k.x, rng), w = randomF32(k.w, rng);
    Tensor b = randomF32({k.w[0]}, rng);
    Shape refShape;
    std::vector<double> expect =
        refConv(x, w, k.bias ? &b : nullptr, k.p, k.group, refShape);
    ASSERT_EQ(windowOutputShape(k.x, k.w[0], k.p), refShape) << "case " << ci;
    Tensor out(DType::F32, refShape);
    conv(x, w, k.bias ? &b : nullptr, k.p, k.group, out);
    SCOPED_TRACE(fmt::format("case {}", ci));
    expectAllNear(out, expect, 1e-4);
  }
  // Mismatched operands are refused.
  Tensor x = randomF32({1, 2, 5, 5}, rng), w = randomF32({3, 2, 3, 3}, rng);
  Tensor out(DType::F32, {1, 3, 3, 3});
  WindowParams p = window({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  EXPECT_THROW(conv(x, w, nullptr, p, 2, out), Error);
  Tensor b2 = randomF32({2}, rng);
  EXPECT_THROW(conv(x, w, &b2, p, 1, out), Error);
  Tensor wrong(DType::F32, {1, 3, 4, 4});
  EXPECT_THROW(conv(x, w, nullptr, p, 1, wrong), Error);
}

/// sum(a * b) in double.
double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numElements(); ++i)
    s += double(a.data<float>()[i]) * double(b.data<float>()[i]);
  return s;
}

TEST(Kernels2, ConvGradientsAreAdjoints) {
  // Conv is linear in X and in W: <conv(x, w), dy> = <x, dX> = <w, dW>.
  std::mt19937 rng(29);
  struct Case {
    Shape x, w;
    WindowParams p;
    int64_t group;
  };
  std::vector<Case> cases = {
      {{2, 4, 9, 8},
       {6, 2, 3, 3},
       window({3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}),
       2},
      {{2, 3, 7, 6},
       {4, 3, 3, 2},
       window({3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 1}),
       1},
      {{2, 3, 4, 5},
       {5, 3, 1, 1},
       window({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}),
       1},
      {{2, 3, 10}, {4, 3, 3}, window({3}, {2}, {1, 2}, {1}), 1},
      {{1, 2, 4, 5, 3},
       {3, 2, 2, 3, 2},
       window({2, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {1, 1, 2}),
       1},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    SCOPED_TRACE(fmt::format("case {}", ci));
    const Case &k = cases[ci];
    Tensor x = randomF32(k.x, rng), w = randomF32(k.w, rng);
    Tensor y(DType::F32, windowOutputShape(k.x, k.w[0], k.p));
    conv(x, w, nullptr, k.p, k.group, y);
    Tensor dy = randomF32(y.shape(), rng);
    Tensor dx(DType::F32, k.x), dw(DType::F32, k.w);
    convInputGrad(x, w, dy, k.p, k.group, dx);
    convWeightGrad(x, dy, k.p, k.group, dw);
    double ref = dot(y, dy);
    EXPECT_NEAR(dot(x, dx), ref, 1e-4 * (1 + std::abs(ref)));
    EXPECT_NEAR(dot(w, dw), ref, 1e-4 * (1 + std::abs(ref)));
  }
  Tensor x = randomF32({1, 2, 5, 5}, rng), w = randomF32({3, 2, 3, 3}, rng);
  Tensor dy = randomF32({1, 3, 4, 4}, rng), dx(DType::F32, {1, 2, 5, 5});
  WindowParams p = window({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  EXPECT_THROW(convInputGrad(x, w, dy, p, 1, dx), Error);
}

TEST(Kernels2, PoolGradients) {
  // The max goes to the first maximum of each window (PyTorch's ties).
  Tensor x = makeTensor<float>({1, 1, 2, 3}, {5, 1, 5, 2, 5, 0});
  Tensor dy = makeTensor<float>({1, 1, 1, 2}, {1, 10});
  Tensor dx(DType::F32, {1, 1, 2, 3});
  WindowParams p = window({2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  poolGrad(PoolOp::Max, x, dy, p, false, dx);
  expectAllNear(dx, {1, 0, 10, 0, 0, 0}, 0);
  // Average and max are linear on x's pieces: <pool(x), dy> = <x, dx>.
  std::mt19937 rng(31);
  for (bool cip : {false, true}) {
    SCOPED_TRACE(fmt::format("count_include_pad {}", cip));
    Tensor xr = randomF32({2, 3, 7, 6}, rng);
    WindowParams q = window({3, 2}, {2, 2}, {1, 1, 1, 1}, {1, 1});
    for (PoolOp op : {PoolOp::Max, PoolOp::Average}) {
      Tensor y(DType::F32, windowOutputShape(xr.shape(), 3, q));
      pool(op, xr, q, cip, y);
      Tensor g = randomF32(y.shape(), rng), gx(DType::F32, xr.shape());
      poolGrad(op, xr, g, q, cip, gx);
      EXPECT_NEAR(dot(xr, gx), dot(y, g), 1e-4);
    }
  }
}

TEST(Kernels2, BatchNormalizationInference) {
  std::mt19937 rng(23);
  Tensor x = randomF32({2, 3, 4, 2}, rng);
  Tensor scale = randomF32({3}, rng), bias = randomF32({3}, rng),
         mean = randomF32({3}, rng), var = randomF32({3}, rng, 0.1f, 2.f);
  Tensor out(DType::F32, x.shape());
  batchNorm(x, scale, bias, mean, var, 1e-3f, out);
  std::vector<double> expect;
  for (int64_t i = 0; i < x.numElements(); ++i) {
    int64_t c = unravel(i, x.shape())[1];
    expect.push_back((x.data<float>()[i] - mean.data<float>()[c]) /
                         std::sqrt(double(var.data<float>()[c]) + 1e-3) *
                         scale.data<float>()[c] +
                     bias.data<float>()[c]);
  }
  expectAllNear(out, expect);
  // Rank 2: [N, C].
  Tensor x2 = makeTensor<float>({1, 3}, {1, 2, 3});
  Tensor o2(DType::F32, {1, 3});
  batchNorm(x2, makeTensor<float>({3}, {1, 2, 3}),
            makeTensor<float>({3}, {0, 1, 0}),
            makeTensor<float>({3}, {1, 1, 1}),
            makeTensor<float>({3}, {1, 4, 0.25f}), 0.f, o2);
  expectAllNear(o2, {0, 2 * 0.5 + 1, 3 * 4});
  Tensor short3 = randomF32({2}, rng);
  EXPECT_THROW(batchNorm(x, short3, bias, mean, var, 1e-5f, out), Error);
}

TEST(Kernels2, PoolsMatchNaiveLoops) {
  std::mt19937 rng(29);
  struct Case {
    Shape x;
    WindowParams p;
  };
  std::vector<Case> cases = {
      {{1, 2, 6, 6}, window({2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1})},
      {{2, 3, 7, 5}, window({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1})},
      {{1, 2, 7, 5}, window({3, 2}, {2, 2}, {1, 0, 1, 1}, {1, 1}, true)},
      {{1, 1, 6, 7}, window({2, 3}, {3, 2}, {0, 1, 1, 1}, {1, 1}, true)},
      {{1, 2, 5, 5}, window({3, 3}, {1, 1}, {2, 2, 2, 2}, {1, 1})},
      {{2, 2, 9}, window({3}, {2}, {1, 1}, {1})},
      {{1, 3, 10}, window({4}, {3}, {2, 1}, {1}, true)},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case &k = cases[ci];
    SCOPED_TRACE(fmt::format("case {}", ci));
    Tensor x = randomF32(k.x, rng, -3.f, 3.f);
    Shape shape;
    std::vector<double> expectMax = refPool(true, x, k.p, false, shape);
    ASSERT_EQ(windowOutputShape(k.x, k.x[1], k.p), shape);
    Tensor out(DType::F32, shape);
    pool(PoolOp::Max, x, k.p, false, out);
    expectAllNear(out, expectMax);
    for (bool include : {false, true}) {
      std::vector<double> expectAvg = refPool(false, x, k.p, include, shape);
      pool(PoolOp::Average, x, k.p, include, out);
      expectAllNear(out, expectAvg);
    }
  }
  // MaxPool with dilations.
  for (const WindowParams &p :
       {window({2, 2}, {1, 1}, {0, 0, 0, 0}, {2, 2}),
        window({3, 2}, {2, 1}, {1, 1, 1, 0}, {2, 3}, true)}) {
    Tensor x = randomF32({1, 2, 8, 7}, rng);
    Shape shape;
    std::vector<double> expect = refPool(true, x, p, false, shape);
    Tensor out(DType::F32, shape);
    pool(PoolOp::Max, x, p, false, out);
    expectAllNear(out, expect);
  }
  // A hand-checked 1-D case: x = [1, 2, 3, 4, 5], kernel 2, stride 2, pads
  // (1, 1), ceil mode: windows [pad, 1], [2, 3], [4, 5].
  Tensor x = makeTensor<float>({1, 1, 5}, {1, 2, 3, 4, 5});
  WindowParams p = window({2}, {2}, {1, 1}, {1}, true);
  Tensor out(DType::F32, {1, 1, 3});
  pool(PoolOp::Max, x, p, false, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{1, 3, 5}));
  pool(PoolOp::Average, x, p, false, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{1, 2.5f, 4.5f}));
  pool(PoolOp::Average, x, p, true, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{0.5f, 2.5f, 4.5f}));
  // Padding never wins a max, even over negative values.
  Tensor neg = makeTensor<float>({1, 1, 2}, {-5, -7});
  Tensor no(DType::F32, {1, 1, 2});
  pool(PoolOp::Max, neg, window({2}, {1}, {1, 0}, {1}), false, no);
  EXPECT_EQ(toVector<float>(no), (std::vector<float>{-5, -5}));
  // NaN propagates through the max.
  Tensor withNaN = makeTensor<float>({1, 1, 4}, {1, kNaN, 3, 2});
  Tensor nanOut(DType::F32, {1, 1, 2});
  pool(PoolOp::Max, withNaN, window({2}, {2}, {0, 0}, {1}), false, nanOut);
  EXPECT_TRUE(std::isnan(nanOut.data<float>()[0]));
  EXPECT_EQ(nanOut.data<float>()[1], 3.f);
  Tensor dil(DType::F32, {1, 1, 2});
  EXPECT_THROW(
      pool(PoolOp::Average, neg, window({2}, {1}, {1, 0}, {2}), false, dil),
      Error);
}

TEST(Kernels2, GlobalPools) {
  std::mt19937 rng(31);
  Tensor x = randomF32({2, 3, 4, 5}, rng);
  Tensor avg(DType::F32, {2, 3, 1, 1}), mx(DType::F32, {2, 3, 1, 1});
  globalPool(PoolOp::Average, x, avg);
  globalPool(PoolOp::Max, x, mx);
  std::vector<double> ea, em;
  for (int64_t p = 0; p < 6; ++p) {
    double s = 0, m = -INFINITY;
    for (int64_t j = 0; j < 20; ++j) {
      s += x.data<float>()[p * 20 + j];
      m = std::max(m, double(x.data<float>()[p * 20 + j]));
    }
    ea.push_back(s / 20);
    em.push_back(m);
  }
  expectAllNear(avg, ea);
  expectAllNear(mx, em);
  Tensor x1 = makeTensor<float>({1, 2, 3}, {1, 2, 3, -1, -2, -6});
  Tensor o1(DType::F32, {1, 2, 1});
  globalPool(PoolOp::Average, x1, o1);
  EXPECT_EQ(toVector<float>(o1), (std::vector<float>{2, -3}));
  globalPool(PoolOp::Max, x1, o1);
  EXPECT_EQ(toVector<float>(o1), (std::vector<float>{3, -1}));
}

//===----------------------------------------------------------------------===//
// Type rules (plan validation)
//===----------------------------------------------------------------------===//

TEST(Kernels2Ops, CastWhereAndElementWiseTypes) {
  {
    OpCheck c("Cast");
    c.in(DType::F32, {2, 3}).out(DType::I64, {2, 3}).i("to", 7);
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.to, DType::I64);
    c.op.mutable_attrs()->at("to").set_i(10);
    EXPECT_CONTAINS(c.error(), "is declared i64[2, 3], but the inputs "
                               "(f32[2, 3]) give f16[2, 3]");
    c.op.mutable_attrs()->at("to").set_i(8); // STRING
    EXPECT_CONTAINS(c.error(), "attribute 'to' is 8 (STRING); only FLOAT "
                               "(1), UINT8 (2), INT8 (3), INT32 (6), INT64 "
                               "(7), BOOL (9), FLOAT16 (10), DOUBLE (11) and "
                               "BFLOAT16 (16)");
    c.op.mutable_attrs()->at("to").set_i(9);
    EXPECT_CONTAINS(c.error(), "is declared i64[2, 3], but the inputs "
                               "(f32[2, 3]) give bool[2, 3]");
    c.op.mutable_attrs()->erase("to");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'to'");
  }
  {
    OpCheck c("Where");
    c.in(DType::Bool, {2, 1}).in(DType::I32, {3}).in(DType::I32, {});
    c.out(DType::I32, {2, 3});
    EXPECT_EQ(c.error(), "");
    c.types[1].dtype = DType::F32;
    EXPECT_CONTAINS(c.error(), "inputs X and Y have different dtypes");
    c.types[1].dtype = DType::I32;
    c.types[0].dtype = DType::I64;
    EXPECT_CONTAINS(c.error(), "input condition must be bool");
  }
  {
    OpCheck c("Less");
    c.in(DType::F32, {4, 1}).in(DType::F32, {3}).out(DType::Bool, {4, 3});
    EXPECT_EQ(c.error(), "");
    c.types[2].dtype = DType::F32;
    EXPECT_CONTAINS(c.error(), "give bool[4, 3]");
    OpCheck e("Equal");
    e.in(DType::Bool, {2}).in(DType::Bool, {2}).out(DType::Bool, {2});
    EXPECT_EQ(e.error(), "");
    e.op.set_kind("Greater");
    EXPECT_CONTAINS(e.error(), "Greater is not supported on bool tensors");
  }
  {
    OpCheck c("Xor");
    c.in(DType::Bool, {2}).in(DType::Bool, {3, 1}).out(DType::Bool, {3, 2});
    EXPECT_EQ(c.error(), "");
    c.types[1].dtype = DType::I32;
    EXPECT_CONTAINS(c.error(), "input B must be bool");
    OpCheck n("Not");
    n.in(DType::Bool, {2}).out(DType::Bool, {2});
    EXPECT_EQ(n.error(), "");
  }
  {
    OpCheck c("Abs");
    c.in(DType::I32, {2}).out(DType::I32, {2});
    EXPECT_EQ(c.error(), "");
    c.op.set_kind("Log");
    EXPECT_CONTAINS(c.error(), "Log is not supported on i32 tensors");
  }
  {
    OpCheck c("Max");
    c.in(DType::I64, {2, 1}).in(DType::I64, {3}).in(DType::I64, {1});
    c.out(DType::I64, {2, 3});
    EXPECT_EQ(c.error(), "");
    c.op.set_inputs(2, -1);
    EXPECT_CONTAINS(c.error(), "input #2 is value id -1");
    OpCheck none("Min");
    none.out(DType::F32, {1});
    EXPECT_CONTAINS(none.error(), "expects at least 1 inputs, got 0");
  }
}

TEST(Kernels2Ops, ConcatSplitSliceExpandPadTypes) {
  {
    OpCheck c("Concat");
    c.in(DType::F32, {2, 3}).in(DType::F32, {2, 1}).out(DType::F32, {2, 4});
    c.i("axis", -1);
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.axis, 1);
    c.op.mutable_attrs()->at("axis").set_i(0);
    EXPECT_CONTAINS(c.error(), "does not match input #0 of shape [2, 3] "
                               "outside axis 0");
    c.op.mutable_attrs()->erase("axis");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'axis'");
  }
  {
    OpCheck c("Split");
    c.in(DType::I64, {2, 6}).out(DType::I64, {2, 1}).out(DType::I64, {2, 5});
    c.i("axis", -1).ints("split", {1, 5});
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.split, (std::vector<int64_t>{1, 5}));
    c.op.mutable_attrs()->at("split").mutable_ints()->set_values(1, 4);
    EXPECT_CONTAINS(c.error(), "attribute 'split' [1, 4] adds up to 5, but "
                               "axis 1 of the input i64[2, 6] has size 6");
    c.op.mutable_attrs()->erase("split");
    EXPECT_CONTAINS(c.error(), "output #0 (value 1) is declared i64[2, 1], "
                               "but the inputs (i64[2, 6]) give i64[2, 3]");
    OpCheck e("Split");
    e.in(DType::F32, {5}).out(DType::F32, {2}).out(DType::F32, {2});
    EXPECT_CONTAINS(e.error(), "does not split into 2 equal parts");
    // Pieces nobody reads are absent.
    OpCheck a("Split");
    a.in(DType::F32, {6}).out(DType::F32, {2}).absentOut().out(DType::F32, {2});
    EXPECT_EQ(a.error(), "");
  }
  {
    OpCheck c("Slice");
    // Elements 9, 6, 3, 0 of the last axis.
    c.in(DType::F32, {3, 10}).out(DType::F32, {3, 4});
    c.ints("starts", {-1}).ints("ends", {INT64_MIN}).ints("axes", {-1});
    c.ints("steps", {-3});
    EXPECT_EQ(c.error(), "");
    OpInfo info = c.info();
    EXPECT_EQ(info.attrs.starts, (std::vector<int64_t>{0, 9}));
    EXPECT_EQ(info.attrs.steps, (std::vector<int64_t>{1, -3}));
    c.types[1].shape = {3, 3};
    EXPECT_CONTAINS(c.error(), "give f32[3, 4]");
    c.op.mutable_attrs()->at("steps").mutable_ints()->set_values(0, 0);
    EXPECT_CONTAINS(c.error(), "the step along axis 1 is 0");
    c.op.mutable_attrs()->erase("ends");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'ends'");
  }
  {
    OpCheck c("Expand");
    c.in(DType::F32, {3, 1}).out(DType::F32, {2, 3, 4});
    EXPECT_EQ(c.error(), "");
    c.ints("shape", {2, 1, 4});
    EXPECT_EQ(c.error(), "");
    c.op.mutable_attrs()->at("shape").mutable_ints()->set_values(2, 5);
    EXPECT_CONTAINS(c.error(), "give f32[2, 3, 5]");
    c.op.mutable_attrs()->erase("shape");
    c.types[1].shape = {2, 2, 4};
    EXPECT_CONTAINS(c.error(), "does not broadcast to output value 1");
  }
  {
    OpCheck c("Pad");
    c.in(DType::F32, {2, 3}).out(DType::F32, {3, 6});
    c.ints("pads", {1, 2, 0, 1}).s("mode", "reflect");
    EXPECT_EQ(c.error(), "");
    OpCheck a("Pad");
    a.in(DType::I32, {2, 3}).out(DType::I32, {2, 8});
    a.ints("pads", {2, 3}).ints("axes", {-1}).f("constant_value", 1);
    EXPECT_EQ(a.error(), "");
    EXPECT_EQ(a.info().attrs.pads, (std::vector<int64_t>{0, 2, 0, 3}));
    a.s("mode", "wrap");
    EXPECT_CONTAINS(a.error(), "mode 'wrap' is not supported");
    OpCheck e("Pad");
    e.in(DType::F32, {2, 3}).out(DType::F32, {2, 3}).ints("pads", {1, 1});
    EXPECT_CONTAINS(e.error(), "attribute 'pads' [1, 1] has 2 entries, "
                               "expected 4");
  }
}

TEST(Kernels2Ops, ConvAndPoolGradTypes) {
  OpCheck c("ConvWeightGrad");
  c.in(DType::F32, {2, 4, 9, 8}).in(DType::F32, {2, 6, 5, 4});
  c.out(DType::F32, {6, 2, 3, 3});
  c.ints("strides", {2, 2}).ints("pads", {1, 1, 1, 0}).i("group", 2);
  EXPECT_CONTAINS(c.error(), "kernel_shape");
  c.ints("kernel_shape", {3, 3});
  EXPECT_EQ(c.error(), "");
  c.types[1].shape = {2, 6, 5, 5};
  EXPECT_CONTAINS(c.error(), "dy must be [2, 6, 5, 4] for x f32[2, 4, 9, 8], "
                             "got f32[2, 6, 5, 5]");
  OpCheck d("ConvInputGrad");
  d.in(DType::F32, {2, 4, 9, 8}).in(DType::F32, {6, 2, 3, 3});
  d.in(DType::F32, {2, 6, 5, 4}).out(DType::F32, {2, 4, 9, 8});
  d.ints("strides", {2, 2}).ints("pads", {1, 1, 1, 0}).i("group", 2);
  EXPECT_EQ(d.error(), "");
  d.i("group", 1);
  EXPECT_CONTAINS(d.error(), "W f32[6, 2, 3, 3] does not fit");
  OpCheck m("MaxPoolGrad");
  m.in(DType::F32, {1, 2, 6, 7}).in(DType::F32, {1, 2, 2, 4});
  m.out(DType::F32, {1, 2, 6, 7});
  m.ints("kernel_shape", {2, 3}).ints("strides", {3, 2});
  m.ints("pads", {0, 1, 1, 1});
  EXPECT_EQ(m.error(), "");
  OpCheck a("AveragePoolGrad");
  a.in(DType::F32, {1, 2, 6, 7}).in(DType::F32, {1, 2, 2, 3});
  a.out(DType::F32, {1, 2, 6, 7});
  a.ints("kernel_shape", {2, 3}).ints("strides", {3, 2});
  EXPECT_EQ(a.error(), "");
  a.i("count_include_pad", 1).ints("dilations", {1, 1});
  EXPECT_CONTAINS(a.error(), "dilations");
}

TEST(Kernels2Ops, ConvAndPoolTypes) {
  {
    OpCheck c("Conv");
    c.in(DType::F32, {2, 4, 9, 8}).in(DType::F32, {6, 2, 3, 3});
    c.in(DType::F32, {6}).out(DType::F32, {2, 6, 5, 4});
    c.ints("strides", {2, 2}).ints("pads", {1, 1, 1, 0}).i("group", 2);
    c.ints("kernel_shape", {3, 3}).s("auto_pad", "NOTSET");
    EXPECT_EQ(c.error(), "");
    OpInfo info = c.info();
    EXPECT_EQ(info.attrs.group, 2);
    EXPECT_EQ(info.attrs.window.dilations, (std::vector<int64_t>{1, 1}));
    c.types[3].shape = {2, 6, 5, 5};
    EXPECT_CONTAINS(c.error(), "is declared f32[2, 6, 5, 5], but the inputs "
                               "(f32[2, 4, 9, 8], f32[6, 2, 3, 3], f32[6]) "
                               "give f32[2, 6, 5, 4]");
    c.types[3].shape = {2, 6, 5, 4};
    c.s("auto_pad", "SAME_UPPER");
    EXPECT_CONTAINS(c.error(), "auto_pad 'SAME_UPPER' is not supported");
    c.s("auto_pad", "NOTSET");
    c.i("group", 1);
    EXPECT_CONTAINS(c.error(), "X has 4 channels, but W f32[6, 2, 3, 3] with "
                               "group 1 takes 2");
    c.i("group", 2);
    c.ints("kernel_shape", {3, 2});
    EXPECT_CONTAINS(c.error(), "attribute 'kernel_shape' [3, 2] does not "
                               "match W");
    c.op.mutable_attrs()->erase("kernel_shape");
    c.ints("pads", {1, 1});
    EXPECT_CONTAINS(c.error(), "attribute 'pads' [1, 1] has 2 entries, "
                               "expected 4");
    c.ints("pads", {0, 0, 0, 0});
    c.ints("dilations", {0, 1});
    EXPECT_CONTAINS(c.error(), "attribute 'dilations' [0, 1] has an entry "
                               "below 1");
    c.op.mutable_attrs()->erase("dilations");
    c.types[2].shape = {3};
    EXPECT_CONTAINS(c.error(), "input B must be f32[6], got f32[3]");
    // Without B, 1-D.
    OpCheck d("Conv");
    d.in(DType::F32, {1, 3, 10}).in(DType::F32, {4, 3, 3});
    d.out(DType::F32, {1, 4, 4}).ints("dilations", {2}).ints("strides", {1});
    d.ints("pads", {0, 0});
    EXPECT_CONTAINS(d.error(), "give f32[1, 4, 6]");
  }
  {
    OpCheck c("MaxPool");
    c.in(DType::F32, {1, 2, 6, 7}).out(DType::F32, {1, 2, 2, 4});
    c.ints("kernel_shape", {2, 3}).ints("strides", {3, 2});
    c.ints("pads", {0, 1, 1, 1}).i("ceil_mode", 1);
    EXPECT_EQ(c.error(), "");
    // Without ceil mode the shape is the same here: the third row of
    // windows would start in the end padding.
    c.i("ceil_mode", 0);
    EXPECT_EQ(c.error(), "");
    c.types[1].shape = {1, 2, 3, 4};
    c.i("ceil_mode", 1);
    EXPECT_CONTAINS(c.error(), "give f32[1, 2, 2, 4]");
    c.types[1].shape = {1, 2, 2, 4};
    c.i("storage_order", 1);
    EXPECT_CONTAINS(c.error(), "storage_order 1 is not supported");
    c.i("storage_order", 0);
    c.out(DType::I64, {1, 2, 2, 4});
    EXPECT_CONTAINS(c.error(), "the Indices output (#1) is not supported");
    c.op.set_outputs(1, -1);
    EXPECT_EQ(c.error(), "");
    c.op.mutable_attrs()->erase("kernel_shape");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'kernel_shape'");
  }
  {
    OpCheck c("AveragePool");
    c.in(DType::F32, {1, 1, 5}).out(DType::F32, {1, 1, 3});
    c.ints("kernel_shape", {2}).ints("strides", {2}).ints("pads", {1, 1});
    c.i("count_include_pad", 1);
    EXPECT_EQ(c.error(), "");
    EXPECT_TRUE(c.info().attrs.countIncludePad);
    c.ints("dilations", {1});
    EXPECT_CONTAINS(c.error(), "unknown attribute 'dilations'");
    OpCheck g("GlobalAveragePool");
    g.in(DType::F32, {2, 3, 4, 5}).out(DType::F32, {2, 3, 1, 1});
    EXPECT_EQ(g.error(), "");
    g.types[1].shape = {2, 3};
    EXPECT_CONTAINS(g.error(), "give f32[2, 3, 1, 1]");
  }
  {
    OpCheck c("BatchNormalization");
    c.in(DType::F32, {2, 3, 4});
    for (int i = 0; i < 4; ++i)
      c.in(DType::F32, {3});
    c.out(DType::F32, {2, 3, 4}).f("epsilon", 1e-3).f("momentum", 0.9);
    EXPECT_EQ(c.error(), "");
    EXPECT_FLOAT_EQ(c.info().attrs.epsilon, 1e-3f);
    c.i("training_mode", 1);
    EXPECT_CONTAINS(c.error(), "training_mode 1 is not supported");
    c.i("training_mode", 0);
    c.types[3].shape = {4};
    EXPECT_CONTAINS(c.error(), "input input_mean must be f32[3] (one per "
                               "channel), got f32[4]");
    c.types[3].shape = {3};
    c.out(DType::F32, {3});
    EXPECT_CONTAINS(c.error(), "outputs running_mean and running_var");
  }
}

TEST(Kernels2Ops, GatherScatterTopKTypes) {
  {
    OpCheck c("GatherElements");
    c.in(DType::F32, {3, 4}).in(DType::I32, {2, 4}).out(DType::F32, {2, 4});
    EXPECT_EQ(c.error(), "");
    c.i("axis", -1);
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.axis, 1);
    c.types[1].shape = {2, 5};
    c.types[2].shape = {2, 5};
    EXPECT_EQ(c.error(), "");
    c.i("axis", 0);
    EXPECT_CONTAINS(c.error(), "indices i32[2, 5] are larger than data "
                               "f32[3, 4] along dimension 1");
    c.types[1].dtype = DType::F32;
    EXPECT_CONTAINS(c.error(), "indices must be i64 or i32");
  }
  {
    OpCheck c("ScatterElements");
    c.in(DType::I64, {3, 4}).in(DType::I64, {2, 4}).in(DType::I64, {2, 4});
    c.out(DType::I64, {3, 4}).s("reduction", "add");
    EXPECT_EQ(c.error(), "");
    EXPECT_EQ(c.info().attrs.reduction, ScatterReduction::Add);
    c.s("reduction", "sum");
    EXPECT_CONTAINS(c.error(), "reduction 'sum' is not one of none, add, mul");
    c.s("reduction", "none");
    c.types[2].shape = {2, 3};
    EXPECT_CONTAINS(c.error(), "updates must be i64[2, 4]");
  }
  {
    OpCheck c("TopK");
    c.in(DType::F32, {3, 5}).out(DType::F32, {3, 2}).out(DType::I64, {3, 2});
    c.i("k", 2);
    EXPECT_EQ(c.error(), "");
    OpInfo info = c.info();
    EXPECT_EQ(info.attrs.axis, 1);
    EXPECT_TRUE(info.attrs.largest);
    c.i("axis", 0).i("largest", 0);
    EXPECT_CONTAINS(c.error(), "give f32[2, 5]");
    c.i("axis", -1).i("k", 6);
    EXPECT_CONTAINS(c.error(), "k = 6 is out of range for axis 1");
    c.i("k", 2);
    c.types[2].dtype = DType::I32;
    EXPECT_CONTAINS(c.error(), "give i64[3, 2]");
    c.types[2].dtype = DType::I64;
    c.op.set_outputs(1, -1);
    EXPECT_EQ(c.error(), "");
    c.op.mutable_attrs()->erase("k");
    EXPECT_CONTAINS(c.error(), "missing required attribute 'k'");
  }
}

//===----------------------------------------------------------------------===//
// Whole plans through the Executor
//===----------------------------------------------------------------------===//

namespace {
/// Runs a one-rank plan with `inputs` set on their values; returns the
/// executor, to fetch the outputs from.
std::unique_ptr<Executor>
runPlan(const LoadedPlan &p,
        const std::vector<std::pair<int, Tensor>> &inputs) {
  auto ex = std::make_unique<Executor>(p);
  for (const auto &kv : inputs)
    ex->setValue(kv.first, kv.second);
  Comm comm(mpiWorld(), p.mesh);
  ex->run(comm, false);
  return ex;
}
} // namespace

TEST(Kernels2Plan, ConvNetRuns) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  std::mt19937 rng(37);
  PlanBuilder b({{"x", 1}});
  std::vector<std::pair<int, Shape>> ins;
  auto input = [&](const Shape &shape) {
    int v = b.value(shape);
    b.input("in" + std::to_string(v), v, shape);
    ins.push_back({v, shape});
    return v;
  };
  int vx = input({1, 2, 6, 6}), vw = input({4, 2, 3, 3}), vb = input({4});
  int vs = input({4}), vbb = input({4}), vm = input({4}), vv = input({4});
  int vc = b.value({1, 4, 6, 6}), vn = b.value({1, 4, 6, 6}),
      vp = b.value({1, 4, 3, 3}), vg = b.value({1, 4, 1, 1});
  int va = b.value({1, 4, 3, 3}), vcat = b.value({1, 8, 3, 3});
  int vsl = b.value({1, 8, 2, 3});
  plan::Op &conv = b.op("Conv", {vx, vw, vb}, {vc});
  PlanBuilder::attrInts(conv, "pads", {1, 1, 1, 1});
  PlanBuilder::attrInts(conv, "kernel_shape", {3, 3});
  b.op("BatchNormalization", {vc, vs, vbb, vm, vv}, {vn});
  plan::Op &mp = b.op("MaxPool", {vn}, {vp, -1});
  PlanBuilder::attrInts(mp, "kernel_shape", {2, 2});
  PlanBuilder::attrInts(mp, "strides", {2, 2});
  b.op("GlobalAveragePool", {vp}, {vg});
  plan::Op &ap = b.op("AveragePool", {vp}, {va});
  PlanBuilder::attrInts(ap, "kernel_shape", {3, 3});
  PlanBuilder::attrInts(ap, "pads", {1, 1, 1, 1});
  plan::Op &cat = b.op("Concat", {vp, va}, {vcat});
  PlanBuilder::attrInt(cat, "axis", 1);
  plan::Op &sl = b.op("Slice", {vcat}, {vsl});
  PlanBuilder::attrInts(sl, "starts", {-1});
  PlanBuilder::attrInts(sl, "ends", {0});
  PlanBuilder::attrInts(sl, "axes", {2});
  PlanBuilder::attrInts(sl, "steps", {-1});
  b.output("g", vg, {1, 4, 1, 1});
  b.output("s", vsl, {1, 8, 2, 3});
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1);

  std::vector<std::pair<int, Tensor>> feed;
  for (const auto &in : ins)
    feed.push_back({in.first, in.first == vv
                                  ? randomF32(in.second, rng, 0.5f, 1.5f)
                                  : randomF32(in.second, rng)});
  auto ex = runPlan(p, feed);
  const Tensor &x = feed[0].second, &w = feed[1].second, &bias = feed[2].second,
               &scale = feed[3].second, &shift = feed[4].second,
               &mean = feed[5].second, &var = feed[6].second;

  // The same computation kernel by kernel.
  Tensor c(DType::F32, {1, 4, 6, 6}), n(DType::F32, {1, 4, 6, 6}),
      pl(DType::F32, {1, 4, 3, 3}), g(DType::F32, {1, 4, 1, 1}),
      a(DType::F32, {1, 4, 3, 3}), cc(DType::F32, {1, 8, 3, 3}),
      s(DType::F32, {1, 8, 2, 3});
  cpu::conv(x, w, &bias, window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), 1, c);
  batchNorm(c, scale, shift, mean, var, 1e-5f, n);
  pool(PoolOp::Max, n, window({2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}), false, pl);
  globalPool(PoolOp::Average, pl, g);
  pool(PoolOp::Average, pl, window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), false,
       a);
  concat({&pl, &a}, 1, cc);
  slice(cc, {0, 0, 2, 0}, {1, 1, -1, 1}, s);
  EXPECT_EQ(toVector<float>(ex->fetch(vg)), toVector<float>(g));
  EXPECT_EQ(toVector<float>(ex->fetch(vsl)), toVector<float>(s));
}

TEST(Kernels2Plan, IntegerAndBoolOpsRun) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  PlanBuilder b({{"x", 1}});
  int vx = b.value({2, 5}, plan::I64), vz = b.value({}, plan::F32);
  int vtv = b.value({2, 2}, plan::I64), vti = b.value({2, 2}, plan::I64);
  int vge = b.value({2, 2}, plan::I64), vf = b.value({2, 2}, plan::F32);
  int vgt = b.value({2, 2}, plan::BOOL), vnot = b.value({2, 2}, plan::BOOL);
  int vw = b.value({2, 2}, plan::F32), vabs = b.value({2, 2}, plan::F32);
  int vmax = b.value({2, 2}, plan::F32), vs0 = b.value({2, 1}, plan::F32);
  int vs1 = b.value({2, 1}, plan::F32), ve = b.value({3, 2, 1}, plan::F32);
  b.input("x", vx, {2, 5}, {}, plan::I64);
  b.input("z", vz, {}, {}, plan::F32);
  plan::Op &topk = b.op("TopK", {vx}, {vtv, vti});
  PlanBuilder::attrInt(topk, "k", 2);
  PlanBuilder::attrInt(topk, "largest", 0);
  plan::Op &ge = b.op("GatherElements", {vx, vti}, {vge});
  PlanBuilder::attrInt(ge, "axis", 1);
  plan::Op &cast = b.op("Cast", {vtv}, {vf});
  PlanBuilder::attrInt(cast, "to", 1);
  b.op("Greater", {vf, vz}, {vgt});
  b.op("Not", {vgt}, {vnot});
  b.op("Where", {vnot, vf, vz}, {vw});
  b.op("Abs", {vf}, {vabs});
  b.op("Max", {vw, vabs, vz}, {vmax});
  plan::Op &split = b.op("Split", {vmax}, {vs0, vs1});
  PlanBuilder::attrInt(split, "axis", -1);
  plan::Op &ex = b.op("Expand", {vs0}, {ve});
  PlanBuilder::attrInts(ex, "shape", {3, 1, 1});
  b.output("ti", vti, {2, 2}, {}, plan::I64);
  b.output("ge", vge, {2, 2}, {}, plan::I64);
  b.output("w", vw, {2, 2}, {}, plan::F32);
  b.output("s1", vs1, {2, 1}, {}, plan::F32);
  b.output("e", ve, {3, 2, 1}, {}, plan::F32);
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1);

  Tensor x = makeTensor<int64_t>({2, 5}, {5, -3, 2, -3, 9, 0, 4, -1, 4, 8});
  Tensor z = makeTensor<float>({}, {-2.f});
  auto run = runPlan(p, {{vx, x}, {vz, z}});
  // The 2 smallest of every row: -3 (at 1) and -3 (at 3); -1 (at 2) and 0
  // (at 0).
  EXPECT_EQ(toVector<int64_t>(run->fetch(vti)),
            (std::vector<int64_t>{1, 3, 2, 0}));
  EXPECT_EQ(toVector<int64_t>(run->fetch(vge)),
            (std::vector<int64_t>{-3, -3, -1, 0}));
  // f = [[-3, -3], [-1, 0]]; not(f > -2) = [[1, 1], [0, 0]].
  EXPECT_EQ(toVector<float>(run->fetch(vw)),
            (std::vector<float>{-3, -3, -2, -2}));
  // Max(w, |f|, -2) = [[3, 3], [1, 0]], split into columns.
  EXPECT_EQ(toVector<float>(run->fetch(vs1)), (std::vector<float>{3, 0}));
  EXPECT_EQ(toVector<float>(run->fetch(ve)),
            (std::vector<float>{3, 1, 3, 1, 3, 1}));
}

TEST(Kernels2Plan, RuntimeErrorsNameTheOp) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  PlanBuilder b({{"x", 1}});
  int vd = b.value({2, 3}), vi = b.value({2, 2}, plan::I64),
      vo = b.value({2, 2});
  b.input("d", vd, {2, 3});
  b.input("i", vi, {2, 2}, {}, plan::I64);
  plan::Op &ge = b.op("GatherElements", {vd, vi}, {vo}, "/gather");
  PlanBuilder::attrInt(ge, "axis", -1);
  b.output("o", vo, {2, 2});
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1);
  Tensor d = makeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto ok =
      runPlan(p, {{vd, d}, {vi, makeTensor<int64_t>({2, 2}, {2, -3, 0, 1})}});
  EXPECT_EQ(toVector<float>(ok->fetch(vo)), (std::vector<float>{3, 1, 4, 5}));
  try {
    runPlan(p, {{vd, d}, {vi, makeTensor<int64_t>({2, 2}, {0, 3, 0, 0})}});
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "op #0 '/gather' (GatherElements): index 3 (at position 1 of "
              "the indices) is out of range for axis 1 of size 3");
  }
}

//===----------------------------------------------------------------------===//
// HardSigmoid, HardSwish, Mod, ArgMax, ArgMin
//===----------------------------------------------------------------------===//

TEST(Kernels2, HardSigmoidAndHardSwish) {
  Tensor x = makeTensor<float>({6}, {-4.f, -3.f, -1.f, 0.f, 1.f, kNaN});
  Tensor out(DType::F32, {6});
  hardSigmoid(x, 0.2f, 0.5f, false, out);
  std::vector<float> hs = toVector<float>(out);
  std::vector<float> e = {0.f, 0.f, 0.3f, 0.5f, 0.7f};
  for (int i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(hs[i], e[i]) << i;
  EXPECT_TRUE(std::isnan(hs[5]));
  // HardSwish: x * max(0, min(1, x / 6 + 0.5)).
  Tensor y = makeTensor<float>({5}, {-4.f, -1.f, 0.f, 2.f, 5.f});
  Tensor ys(DType::F32, {5});
  hardSigmoid(y, 1.f / 6.f, 0.5f, true, ys);
  std::vector<float> sw = toVector<float>(ys);
  std::vector<float> es = {0.f, -1.f / 3.f, 0.f, 2.f * 5.f / 6.f, 5.f};
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(sw[i], es[i], 1e-6) << i;
  Tensor bad = makeTensor<int64_t>({1}, {1});
  Tensor bo(DType::I64, {1});
  EXPECT_THROW(hardSigmoid(bad, 0.2f, 0.5f, false, bo), Error);
}

TEST(Kernels2, ModFollowsPythonOrC) {
  Tensor a = makeTensor<int64_t>({6}, {-4, 7, 5, 4, -7, 8});
  Tensor b = makeTensor<int64_t>({6}, {2, -3, 8, -2, 3, 5});
  Tensor out(DType::I64, {6});
  mod(a, b, false, out); // the divisor's sign (test_mod_mixed_sign_int64)
  EXPECT_EQ(toVector<int64_t>(out), (std::vector<int64_t>{0, -2, 5, 0, 2, 3}));
  mod(a, b, true, out); // the dividend's sign
  EXPECT_EQ(toVector<int64_t>(out), (std::vector<int64_t>{0, 1, 5, 0, -1, 3}));
  // Broadcasting, int8 and the minimum over -1.
  Tensor c = makeTensor<int8_t>({2, 2}, {-128, 7, -7, 9});
  Tensor d = makeTensor<int8_t>({2}, {-1, 4});
  Tensor co(DType::I8, {2, 2});
  mod(c, d, false, co);
  EXPECT_EQ(toVector<int8_t>(co), (std::vector<int8_t>{0, 3, 0, 1}));
  // Floats.
  Tensor f = makeTensor<float>({4}, {-4.3f, 7.2f, 5.0f, -7.6f});
  Tensor g = makeTensor<float>({4}, {2.1f, -3.4f, 8.0f, 3.0f});
  Tensor fo(DType::F32, {4});
  mod(f, g, true, fo);
  std::vector<float> r = toVector<float>(fo);
  EXPECT_NEAR(r[0], std::fmod(-4.3f, 2.1f), 1e-6);
  EXPECT_NEAR(r[1], std::fmod(7.2f, -3.4f), 1e-6);
  EXPECT_NEAR(r[3], -1.6f, 1e-5);
  mod(f, g, false, fo);
  r = toVector<float>(fo);
  EXPECT_NEAR(r[0], std::fmod(-4.3f, 2.1f) + 2.1f, 1e-5);
  EXPECT_NEAR(r[1], std::fmod(7.2f, -3.4f) - 3.4f, 1e-5);
  EXPECT_NEAR(r[2], 5.f, 1e-6);
  EXPECT_NEAR(r[3], 1.4f, 1e-5);
  // An integer zero divisor is an error naming the op.
  Tensor z = makeTensor<int32_t>({2}, {1, 0});
  Tensor zo(DType::I32, {2});
  try {
    mod(z, z, false, zo);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "Mod: integer division by zero");
  }
}

TEST(Kernels2, ArgMaxArgMin) {
  // [[2, 1], [3, 10], [3, 0]] along both axes.
  Tensor x = makeTensor<float>({3, 2}, {2, 1, 3, 10, 3, 0});
  Tensor o0(DType::I64, {1, 2}), o1(DType::I64, {3});
  argReduce(true, x, 0, false, o0);
  EXPECT_EQ(toVector<int64_t>(o0), (std::vector<int64_t>{1, 1}));
  argReduce(true, x, 0, true, o0); // ties: the last
  EXPECT_EQ(toVector<int64_t>(o0), (std::vector<int64_t>{2, 1}));
  argReduce(false, x, 1, false, o1);
  EXPECT_EQ(toVector<int64_t>(o1), (std::vector<int64_t>{1, 0, 1}));
  argReduce(false, x, 0, false, o0);
  EXPECT_EQ(toVector<int64_t>(o0), (std::vector<int64_t>{0, 2}));
  // NaN wins, the first one (or the last with select_last_index).
  Tensor n = makeTensor<float>({4}, {1, kNaN, 5, kNaN});
  Tensor no(DType::I64, {});
  argReduce(true, n, 0, false, no);
  EXPECT_EQ(no.data<int64_t>()[0], 1);
  argReduce(false, n, 0, true, no);
  EXPECT_EQ(no.data<int64_t>()[0], 3);
  // Integers, and a wrong output.
  Tensor i = makeTensor<int8_t>({2, 3}, {-5, 7, 7, 0, 0, -128});
  Tensor io(DType::I64, {2, 1});
  argReduce(true, i, 1, false, io);
  EXPECT_EQ(toVector<int64_t>(io), (std::vector<int64_t>{1, 0}));
  argReduce(false, i, 1, true, io);
  EXPECT_EQ(toVector<int64_t>(io), (std::vector<int64_t>{0, 2}));
  Tensor wrong(DType::I32, {2, 1});
  EXPECT_THROW(argReduce(true, i, 1, false, wrong), Error);
}

TEST(Kernels2Ops, HardSigmoidModArgMaxTypes) {
  {
    OpCheck c("HardSigmoid");
    c.in(DType::F32, {2, 3}).out(DType::F32, {2, 3});
    EXPECT_EQ(c.error(), "");
    EXPECT_FLOAT_EQ(c.info().attrs.alpha, 0.2f);
    EXPECT_FLOAT_EQ(c.info().attrs.beta, 0.5f);
    c.f("alpha", 0.5).f("beta", 0.6);
    EXPECT_FLOAT_EQ(c.info().attrs.alpha, 0.5f);
    EXPECT_FLOAT_EQ(c.info().attrs.beta, 0.6f);
    c.types[0].dtype = c.types[1].dtype = DType::I64;
    EXPECT_CONTAINS(c.error(), "HardSigmoid is not supported on i64 tensors");
    OpCheck s("HardSwish");
    s.in(DType::BF16, {4}).out(DType::BF16, {4});
    EXPECT_EQ(s.error(), "");
    EXPECT_FLOAT_EQ(s.info().attrs.alpha, 1.f / 6.f);
    s.f("alpha", 0.5);
    EXPECT_CONTAINS(s.error(), "unknown attribute 'alpha'");
  }
  {
    OpCheck c("Mod");
    c.in(DType::I32, {2, 3}).in(DType::I32, {3}).out(DType::I32, {2, 3});
    EXPECT_EQ(c.error(), "");
    EXPECT_FALSE(c.info().attrs.fmod);
    c.i("fmod", 1);
    EXPECT_TRUE(c.info().attrs.fmod);
    c.i("fmod", 2);
    EXPECT_CONTAINS(c.error(), "attribute 'fmod' must be 0 or 1, got 2");
    c.i("fmod", 0);
    c.types[1].dtype = DType::I64;
    EXPECT_CONTAINS(c.error(), "inputs have different dtypes");
    c.types[1].dtype = DType::I32;
    c.types[2].shape = {3};
    EXPECT_CONTAINS(c.error(), "give i32[2, 3]");
  }
  {
    OpCheck c("ArgMax");
    c.in(DType::F16, {2, 3, 4}).out(DType::I64, {2, 3, 1});
    c.i("axis", -1);
    EXPECT_EQ(c.error(), "");
    OpInfo info = c.info();
    EXPECT_EQ(info.attrs.axis, 2);
    EXPECT_TRUE(info.attrs.keepdims);
    EXPECT_FALSE(info.attrs.selectLastIndex);
    c.i("keepdims", 0).i("select_last_index", 1);
    EXPECT_CONTAINS(c.error(), "give i64[2, 3]");
    c.types[1].shape = {2, 3};
    EXPECT_EQ(c.error(), "");
    EXPECT_TRUE(c.info().attrs.selectLastIndex);
    c.i("axis", 3);
    EXPECT_CONTAINS(c.error(), "axis");
    OpCheck m("ArgMin");
    m.in(DType::Bool, {2}).out(DType::I64, {1});
    EXPECT_CONTAINS(m.error(), "ArgMin is not supported on bool tensors");
  }
}

TEST(Kernels2, TileRepeatsEveryDimension) {
  // numpy.tile([[1, 2], [3, 4]], (2, 3))
  Tensor x = makeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  Tensor out(DType::I64, {4, 6});
  tile(x, {2, 3}, out);
  EXPECT_EQ(toVector<int64_t>(out),
            (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, //
                                  1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  Tensor f = makeTensor<float>({3}, {1, 2, 3});
  Tensor once(DType::F32, {3});
  tile(f, {1}, once);
  EXPECT_EQ(toVector<float>(once), (std::vector<float>{1, 2, 3}));
  Tensor none(DType::F32, {0});
  tile(f, {0}, none);
  EXPECT_THROW(tile(f, {2}, once), Error);
  EXPECT_THROW(tile(f, {1, 1}, once), Error);
}

TEST(Kernels2, ScatterNDLikeTheOnnxExamples) {
  // The ONNX ScatterND example 1: data [8], indices [[4], [3], [1], [7]].
  Tensor data = makeTensor<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor idx = makeTensor<int64_t>({4, 1}, {4, 3, 1, 7});
  Tensor upd = makeTensor<float>({4}, {9, 10, 11, 12});
  Tensor out(DType::F32, {8});
  scatterND(data, idx, upd, ScatterReduction::None, out);
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12}));
  // Whole rows, negative indices, add.
  Tensor d2 = makeTensor<int64_t>({3, 2}, {1, 1, 1, 1, 1, 1});
  Tensor i2 = makeTensor<int32_t>({2, 1}, {-1, 0});
  Tensor u2 = makeTensor<int64_t>({2, 2}, {5, 6, 7, 8});
  Tensor o2(DType::I64, {3, 2});
  scatterND(d2, i2, u2, ScatterReduction::Add, o2);
  EXPECT_EQ(toVector<int64_t>(o2), (std::vector<int64_t>{8, 9, 1, 1, 6, 7}));
  scatterND(d2, i2, u2, ScatterReduction::Mul, o2);
  EXPECT_EQ(toVector<int64_t>(o2), (std::vector<int64_t>{7, 8, 1, 1, 5, 6}));
  Tensor far = makeTensor<int64_t>({1, 1}, {3});
  Tensor u1 = makeTensor<int64_t>({1, 2}, {0, 0});
  EXPECT_THROW(scatterND(d2, far, u1, ScatterReduction::None, o2), Error);
  EXPECT_THROW(scatterND(d2, i2, u1, ScatterReduction::None, o2), Error);
}

TEST(Kernels2, OneHotAlongAnyAxis) {
  Tensor idx = makeTensor<int64_t>({3}, {0, 2, -1});
  Tensor values = makeTensor<float>({2}, {-1, 5});
  Tensor out(DType::F32, {3, 3});
  oneHot(idx, values, 3, 1, out);
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{5, -1, -1, -1, -1, 5, -1, -1, 5}));
  Tensor t(DType::F32, {3, 3});
  oneHot(idx, values, 3, 0, t);
  EXPECT_EQ(toVector<float>(t),
            (std::vector<float>{5, -1, -1, -1, -1, -1, -1, 5, 5}));
  // Float indices; out of range gives a row of `off`.
  Tensor fi = makeTensor<float>({2}, {1, 7});
  Tensor vi = makeTensor<int64_t>({2}, {0, 1});
  Tensor oi(DType::I64, {2, 4});
  oneHot(fi, vi, 4, 1, oi);
  EXPECT_EQ(toVector<int64_t>(oi),
            (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 0, 0}));
  Tensor wrong(DType::F32, {2, 4});
  EXPECT_THROW(oneHot(fi, vi, 4, 1, wrong), Error);
}

TEST(Kernels2, ScatterNDWithoutIndicesIsTheIdentity) {
  // PyTorch exports `mask[0:0, :] = c` with updates of the full slice.
  Tensor data = makeTensor<float>({2, 2}, {1, 2, 3, 4});
  Tensor idx(DType::I64, {3, 0, 2});
  Tensor upd = makeTensor<float>({3, 2}, {9, 9, 9, 9, 9, 9});
  Tensor out(DType::F32, {2, 2});
  scatterND(data, idx, upd, ScatterReduction::None, out);
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{1, 2, 3, 4}));
}

// Kept buffers go back after the last task that reads them, not after the
// micro-batch's last task: a chunk's input after the chunk's own backward,
// as an interleaved stage needs. Four tasks over 2 micro-batches, in the
// order an interleaved stage runs its two chunks (c0, c1 forward, then
// c1.bwd, c0.bwd): a = Relu(x) is read by c1 and c0.bwd, b = Exp(a) only by
// c1.bwd, g = Tanh(b) by c0.bwd. Every kept value has 16 bytes, so the
// buffers of one pool serve them all: at most 5 are held at once (a0, a1,
// b1, g0 and g1 after b0 went back), where one pool per value held 6.
// The runtime's measured figure is predictMemory's.
TEST(ExecutorMemory, KeptBuffersGoBackAfterTheirLastReader) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  PlanBuilder b({{"world", 1}});
  b.worldOf(1);
  b.place({{"mb", 2}}, 0, 0, 2);
  int x = b.value({1, 4}), a = b.value({1, 4}), e = b.value({1, 4}),
      g = b.value({1, 4}), y = b.value({1, 4});
  b.input("x", x, {2, 4}, {{"mb"}, {}});
  b.op("Relu", {x}, {a}).set_task_graph("c0");
  b.op("Exp", {a}, {e}).set_task_graph("c1");
  b.op("Tanh", {e}, {g}).set_task_graph("c1.bwd");
  b.op("Add", {a, g}, {y}).set_task_graph("c0.bwd");
  b.output("y", y, {2, 4}, {{"mb"}, {}});
  for (const char *t : {"c0", "c1", "c1.bwd", "c0.bwd"})
    b.prog->add_tasks(t);
  for (int task = 0; task < 4; ++task)
    for (int j = 0; j < 2; ++j) {
      plan::ScheduleStep *st = b.prog->add_schedule();
      st->set_task(task);
      st->set_micro_batch(j);
      st->set_backward(false); // (a .bwd task runs forward: its own graph)
    }
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1);
  MemoryPlan mp = planMemory(p);
  for (int v : {a, e, g})
    ASSERT_EQ(mp.residence[v], Residence::Kept) << "value " << v;
  std::vector<std::vector<int>> rel = keptReleases(p, mp, keptLives(p, mp));
  ASSERT_EQ(rel.size(), 8u);
  auto sorted = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  // b after c1.bwd (entries 4 and 5); a and g after c0.bwd (6 and 7).
  for (std::size_t i : {0u, 1u, 2u, 3u})
    EXPECT_TRUE(rel[i].empty()) << "entry " << i;
  EXPECT_EQ(rel[4], std::vector<int>{e});
  EXPECT_EQ(rel[5], std::vector<int>{e});
  EXPECT_EQ(sorted(rel[6]), sorted({a, g}));
  EXPECT_EQ(sorted(rel[7]), sorted({a, g}));

  MemoryReport predicted = predictMemory(p, mp);
  // x's two blocks, y per micro-batch, 5 pooled buffers, the arena.
  EXPECT_EQ(predicted.activations, 2 * 16 + 2 * 16 + 5 * 16 + mp.arenaBytes);

  auto ex = std::make_unique<Executor>(p);
  Tensor in = makeTensor<float>({1, 4}, {-1, 0, 1, 2});
  Tensor in1 = makeTensor<float>({1, 4}, {3, -2, 0.5f, -0.5f});
  Comm comm(mpiWorld(), p.mesh);
  // After one step and after two (the second reuses the pools): outputs
  // and values kept for the step take no pooled buffer.
  for (int step = 0; step < 2; ++step) {
    ex->setMicroBatchValue(x, 0, in);
    ex->setMicroBatchValue(x, 1, in1);
    ex->run(comm, false);
    EXPECT_EQ(ex->memoryReport().activations, predicted.activations)
        << "after step " << step + 1;
  }
  // Micro-batch 1's result: relu(x) + tanh(exp(relu(x))).
  std::vector<float> got = toVector<float>(ex->fetch(y));
  std::vector<float> x1 = {3, -2, 0.5f, -0.5f};
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    float r = std::max(0.0f, x1[i]);
    EXPECT_NEAR(got[i], r + std::tanh(std::exp(r)), 1e-6f) << i;
  }
  MemoryReport measured = ex->memoryReport();
  EXPECT_EQ(measured.activations, predicted.activations);
}

// A copy of an input in the type the ops read it in (a 16-bit plan's cast
// of a float input, as autocast makes) is the step's data: the memory
// report counts the arena bytes it needs with the inputs, where a 16-bit
// plan's activations were otherwise larger than half its float32 twin's
// by the copy. x (f32 [4, 4], 64 bytes) -> Cast bf16 (a, 32 bytes) ->
// Relu (r) -> Cast f32 (y); a is the only input copy, and the arena needs
// its buffer (32 bytes, aligned) beside r's.
TEST(ExecutorMemory, InputCopiesCountWithTheInputs) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  PlanBuilder b({{"world", 1}});
  b.worldOf(1);
  int x = b.value({4, 4}), a = b.value({4, 4}, plan::BF16),
      r = b.value({4, 4}, plan::BF16), y = b.value({4, 4});
  b.input("x", x, {4, 4});
  PlanBuilder::attrInt(b.op("Cast", {x}, {a}), "to", 16);
  b.op("Relu", {a}, {r});
  PlanBuilder::attrInt(b.op("Cast", {r}, {y}), "to", 1);
  b.output("y", y, {4, 4});
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1);
  std::vector<bool> copies = inputCopies(p);
  EXPECT_TRUE(copies[a]);
  EXPECT_FALSE(copies[r]);
  EXPECT_FALSE(copies[y]);
  MemoryPlan mp = planMemory(p);
  EXPECT_GE(mp.inputArenaBytes, 32u);
  EXPECT_LT(mp.inputArenaBytes, mp.arenaBytes);
  MemoryReport predicted = predictMemory(p, mp);
  EXPECT_EQ(predicted.inputs, 64u + mp.inputArenaBytes);

  auto ex = std::make_unique<Executor>(p);
  Comm comm(mpiWorld(), p.mesh);
  ex->setValue(x, makeTensor<float>({4, 4}, std::vector<float>(16, -1.5f)));
  ex->run(comm, false);
  MemoryReport measured = ex->memoryReport();
  EXPECT_EQ(measured.inputs, predicted.inputs);
  EXPECT_EQ(measured.activations, predicted.activations);
  for (float v : toVector<float>(ex->fetch(y)))
    EXPECT_EQ(v, 0.0f);
}
