//===- DTypesTest.cpp - f16, bf16, f64, i8 and u8 in the runtime -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The bf16/f16 conversions (Half.h) and the kernels on the dtypes beyond
// f32/i64/i32/bool. Expected values are worked out by hand from the IEEE
// formats and checked against numpy 1.24 / PyTorch 1.13 (the bit patterns in
// the comments), never taken from the code under test.
//
//===----------------------------------------------------------------------===//

#include "Half.h"
#include "Npy.h"
#include "cpu/Kernels.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <unistd.h>

using namespace shoal::rt;
using namespace shoal::rt::cpu;
using namespace shoal::rt::test;

namespace {

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename T>
Tensor typed(DType dtype, const Shape &shape, const std::vector<T> &values) {
  Tensor t(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numElements());
  EXPECT_EQ(sizeof(T), dtypeSize(dtype));
  std::memcpy(t.rawData(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T> std::vector<T> raw(const Tensor &t) {
  EXPECT_EQ(sizeof(T), dtypeSize(t.dtype()));
  std::vector<T> v(static_cast<std::size_t>(t.numElements()));
  std::memcpy(v.data(), t.rawData(), t.numBytes());
  return v;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

TEST(Half, FloatToBF16RoundsToNearestEven) {
  EXPECT_EQ(floatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBF16(-2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between 0x3f80 and 0x3f81: to the even one.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x3f808000)), 0x3f80);
  // Halfway between 0x3f81 and 0x3f82: up to the even one.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x3f818000)), 0x3f82);
  // Just above halfway: up.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x3f808001)), 0x3f81);
  EXPECT_EQ(floatToBF16(0.1f), 0x3dcd);        // torch: 0x3dcd
  EXPECT_EQ(floatToBF16(1.0f / 3.0f), 0x3eab); // torch: 0x3eab
  // The largest float rounds up to infinity (torch does the same).
  EXPECT_EQ(floatToBF16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(floatToBF16(kInf), 0x7f80);
  EXPECT_EQ(floatToBF16(-kInf), 0xff80);
  // The smallest f32 subnormal keeps its sign and rounds to zero.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x00000001)), 0x0000);
  EXPECT_EQ(floatToBF16(bitsToFloat(0x80000001)), 0x8000);
  // bf16 has f32's exponent range: an f32 subnormal with high bits stays.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x00400000)), 0x0040);
}

TEST(Half, BF16NaNStaysNaN) {
  EXPECT_EQ(floatToBF16(kNaN), 0x7fc0);
  EXPECT_EQ(floatToBF16(-kNaN), 0xffc0);
  // A NaN whose payload is only in the low 16 bits must not become inf.
  EXPECT_EQ(floatToBF16(bitsToFloat(0x7f800001)), 0x7fc0);
  EXPECT_TRUE(std::isnan(bf16ToFloat(0x7fc0)));
  EXPECT_TRUE(std::isnan(bf16ToFloat(0x7f81)));
}

TEST(Half, BF16ToFloatIsExact) {
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0x3f81), 1.0078125f);
  EXPECT_EQ(bf16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(bf16ToFloat(0x7f80), kInf);
  EXPECT_EQ(bf16ToFloat(0x0001), bitsToFloat(0x00010000)); // subnormal
  // Every non-NaN bf16 survives f32 and back.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(floatToBF16(f), h);
    }
  }
}

TEST(Half, FloatToHalfRoundsToNearestEven) {
  // Values from numpy: np.float32(x).astype(np.float16).view(np.uint16).
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(floatToHalf(1.0f / 3.0f), 0x3555);
  // 1 + 2^-11 is halfway between 0x3c00 and 0x3c01: to even.
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 0x3c01 and 0x3c02: to even.
  EXPECT_EQ(floatToHalf(1.0f + 0x3p-11f), 0x3c02);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff); // the largest f16
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff); // below the halfway point
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // halfway: to even = inf
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToHalf(kInf), 0x7c00);
  EXPECT_EQ(floatToHalf(-kInf), 0xfc00);
}

TEST(Half, FloatToHalfSubnormals) {
  EXPECT_EQ(floatToHalf(0x1p-14f), 0x0400);        // smallest normal
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);        // smallest subnormal
  EXPECT_EQ(floatToHalf(1023 * 0x1p-24f), 0x03ff); // largest subnormal
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);        // halfway to 0: even
  EXPECT_EQ(floatToHalf(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(floatToHalf(3 * 0x1p-25f), 0x0002); // halfway 1..2: even
  EXPECT_EQ(floatToHalf(5 * 0x1p-25f), 0x0002); // halfway 2..3: even
  EXPECT_EQ(floatToHalf(1e-8f), 0x0000);
  EXPECT_EQ(floatToHalf(-1e-8f), 0x8000); // the sign stays
  // Rounding the largest subnormal's neighbour up gives the smallest
  // normal.
  EXPECT_EQ(floatToHalf(1023.5f * 0x1p-24f), 0x0400);
}

TEST(Half, HalfNaNAndRoundTrip) {
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(kNaN))));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(bitsToFloat(0x7f800001)))));
  EXPECT_EQ(floatToHalf(-kNaN) & 0x8000, 0x8000);
  EXPECT_EQ(halfToFloat(0x7c00), kInf);
  EXPECT_EQ(halfToFloat(0xfc00), -kInf);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(floatToHalf(f), h);
    }
  }
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

TEST(DTypeKernels, CastF32ToHalfAndBack) {
  Tensor x =
      makeTensor<float>({6}, {1.0f, 0.1f, 65520.0f, -kInf, kNaN, 0x1p-24f});
  Tensor h(DType::F16, {6}), b(DType::BF16, {6});
  cast(x, h);
  cast(x, b);
  EXPECT_EQ(raw<uint16_t>(h), (std::vector<uint16_t>{0x3c00, 0x2e66, 0x7c00,
                                                     0xfc00, 0x7e00, 0x0001}));
  EXPECT_EQ(raw<uint16_t>(b), (std::vector<uint16_t>{0x3f80, 0x3dcd, 0x4780,
                                                     0xff80, 0x7fc0, 0x3380}));
  Tensor back(DType::F32, {6});
  cast(h, back);
  std::vector<float> v = toVector<float>(back);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 0.0999755859375f);
  EXPECT_EQ(v[2], kInf);
  EXPECT_EQ(v[3], -kInf);
  EXPECT_TRUE(std::isnan(v[4]));
  EXPECT_EQ(v[5], 0x1p-24f);
}

TEST(DTypeKernels, CastF64ToF16RoundsOnce) {
  // 1 + 2^-11 + 2^-40 is above the halfway point 1 + 2^-11, so the f16 is
  // 0x3c01 (numpy agrees); rounding to f32 first would make it a tie and
  // give 0x3c00.
  Tensor x = typed<double>(
      DType::F64, {3}, {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40, 0.1});
  Tensor h(DType::F16, {3}), b(DType::BF16, {3});
  cast(x, h);
  cast(x, b);
  EXPECT_EQ(raw<uint16_t>(h)[0], 0x3c01);
  EXPECT_EQ(raw<uint16_t>(b)[1], 0x3f81);
  EXPECT_EQ(raw<uint16_t>(h)[2], 0x2e66);
  Tensor f(DType::F32, {3});
  cast(x, f);
  EXPECT_EQ(toVector<float>(f)[2], 0.1f);
}

TEST(DTypeKernels, CastIntegers) {
  // f32 to u8/i8 truncates toward zero and saturates (ONNX leaves values out
  // of range undefined); NaN gives 0.
  Tensor x = makeTensor<float>({5}, {300.f, -5.f, kNaN, 2.7f, -3.7f});
  Tensor u(DType::U8, {5}), i(DType::I8, {5});
  cast(x, u);
  cast(x, i);
  EXPECT_EQ(raw<uint8_t>(u), (std::vector<uint8_t>{255, 0, 0, 2, 0}));
  EXPECT_EQ(raw<int8_t>(i), (std::vector<int8_t>{127, -5, 0, 2, -3}));
  // Integers to narrower integers wrap, as numpy's astype.
  Tensor l = makeTensor<int64_t>({3}, {257, -1, 128});
  Tensor u3 = Tensor(DType::U8, {3});
  cast(l, u3);
  EXPECT_EQ(raw<uint8_t>(u3), (std::vector<uint8_t>{1, 255, 128}));
  Tensor i3(DType::I8, {3});
  cast(l, i3);
  EXPECT_EQ(raw<int8_t>(i3), (std::vector<int8_t>{1, -1, -128}));
  // u8 to bool and bool to bf16.
  Tensor b(DType::Bool, {3});
  cast(u3, b);
  EXPECT_EQ(raw<uint8_t>(b), (std::vector<uint8_t>{1, 1, 1}));
  Tensor bb(DType::BF16, {3});
  cast(makeTensor<uint8_t>({3}, {1, 0, 1}), bb);
  EXPECT_EQ(raw<uint16_t>(bb), (std::vector<uint16_t>{0x3f80, 0, 0x3f80}));
  // u8 200 to f16 is exact; i8 -128 to f64 too.
  Tensor h(DType::F16, {1});
  cast(typed<uint8_t>(DType::U8, {1}, {200}), h);
  EXPECT_EQ(raw<uint16_t>(h)[0], 0x5a40);
  Tensor d(DType::F64, {1});
  cast(typed<int8_t>(DType::I8, {1}, {-128}), d);
  EXPECT_EQ(raw<double>(d)[0], -128.0);
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

TEST(DTypeKernels, Uint8ArithmeticWraps) {
  Tensor a = typed<uint8_t>(DType::U8, {4}, {200, 10, 16, 7});
  Tensor b = typed<uint8_t>(DType::U8, {4}, {100, 20, 16, 2});
  Tensor out(DType::U8, {4});
  binary(BinaryOp::Add, a, b, out);
  EXPECT_EQ(raw<uint8_t>(out), (std::vector<uint8_t>{44, 30, 32, 9}));
  binary(BinaryOp::Sub, a, b, out);
  EXPECT_EQ(raw<uint8_t>(out), (std::vector<uint8_t>{100, 246, 0, 5}));
  binary(BinaryOp::Mul, a, b, out);
  EXPECT_EQ(raw<uint8_t>(out), (std::vector<uint8_t>{32, 200, 0, 14}));
  binary(BinaryOp::Div, a, b, out);
  EXPECT_EQ(raw<uint8_t>(out), (std::vector<uint8_t>{2, 0, 1, 3}));
  Tensor zero = typed<uint8_t>(DType::U8, {1}, {0});
  EXPECT_THROW(binary(BinaryOp::Div, a, zero, out), Error);
}

TEST(DTypeKernels, Int8ArithmeticWrapsAndTruncates) {
  Tensor a = typed<int8_t>(DType::I8, {4}, {100, -7, -128, 7});
  Tensor b = typed<int8_t>(DType::I8, {4}, {100, 2, -1, -2});
  Tensor out(DType::I8, {4});
  binary(BinaryOp::Add, a, b, out);
  EXPECT_EQ(raw<int8_t>(out), (std::vector<int8_t>{-56, -5, 127, 5}));
  binary(BinaryOp::Div, a, b, out);
  // Toward zero (C, ONNX Runtime), and -128 / -1 wraps to -128.
  EXPECT_EQ(raw<int8_t>(out), (std::vector<int8_t>{1, -3, -128, -3}));
  unary(UnaryOp::Neg, a, out);
  EXPECT_EQ(raw<int8_t>(out), (std::vector<int8_t>{-100, 7, -128, -7}));
  math(MathOp::Abs, a, out);
  EXPECT_EQ(raw<int8_t>(out), (std::vector<int8_t>{100, 7, -128, 7}));
  Tensor cmp(DType::Bool, {4});
  compare(CompareOp::Less, a, b, cmp);
  EXPECT_EQ(raw<uint8_t>(cmp), (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(DTypeKernels, Float64ComputesInDouble) {
  // 2^52 - 1 + 2 is exact in double, not in f32.
  Tensor a = typed<double>(DType::F64, {2}, {4503599627370495.0, 0.1});
  Tensor b = typed<double>(DType::F64, {2}, {2.0, 0.2});
  Tensor out(DType::F64, {2});
  binary(BinaryOp::Add, a, b, out);
  EXPECT_EQ(raw<double>(out)[0], 4503599627370497.0);
  EXPECT_EQ(raw<double>(out)[1], 0.30000000000000004);
  unary(UnaryOp::Sqrt, typed<double>(DType::F64, {2}, {2.0, 4.0}), out);
  EXPECT_EQ(raw<double>(out)[0], 1.4142135623730951);
  EXPECT_EQ(raw<double>(out)[1], 2.0);
  // 10^-300 underflows in f32.
  binary(BinaryOp::Pow, typed<double>(DType::F64, {2}, {10.0, 2.0}),
         typed<double>(DType::F64, {2}, {-300.0, 0.5}), out);
  EXPECT_DOUBLE_EQ(raw<double>(out)[0], 1e-300);
  EXPECT_DOUBLE_EQ(raw<double>(out)[1], 1.4142135623730951);
}

TEST(DTypeKernels, HalfElementwiseInF32RoundedOnce) {
  // bf16 1 + 2^-7 plus bf16 2^-8 is 1.01171875 in f32, halfway between
  // bf16 1.0078125 (0x3f81) and 1.015625 (0x3f82): to the even 0x3f82.
  Tensor a = typed<uint16_t>(DType::BF16, {2}, {0x3f81, 0x4000});
  Tensor b = typed<uint16_t>(DType::BF16, {2}, {0x3b80, 0x4040});
  Tensor out(DType::BF16, {2});
  binary(BinaryOp::Add, a, b, out);
  EXPECT_EQ(raw<uint16_t>(out), (std::vector<uint16_t>{0x3f82, 0x40a0}));
  // f16: 1/3 (0x3555) * 3 (0x4200) = 1 - 2^-12 in f32, halfway between
  // 0x3bff (1 - 2^-11) and 0x3c00 (1): to the even 0x3c00.
  Tensor x = typed<uint16_t>(DType::F16, {1}, {0x3555});
  Tensor y = typed<uint16_t>(DType::F16, {1}, {0x4200});
  Tensor h(DType::F16, {1});
  binary(BinaryOp::Mul, x, y, h);
  EXPECT_EQ(raw<uint16_t>(h)[0], 0x3c00);
  // Overflow goes to inf: 60000 + 60000.
  Tensor big = typed<uint16_t>(DType::F16, {1}, {0x7b53});
  binary(BinaryOp::Add, big, big, h);
  EXPECT_EQ(raw<uint16_t>(h)[0], 0x7c00);
  // exp(1) = 2.71875 as f16 (0x4170), e to nearest f16.
  unary(UnaryOp::Exp, typed<uint16_t>(DType::F16, {1}, {0x3c00}), h);
  EXPECT_EQ(raw<uint16_t>(h)[0], 0x4170);
  Tensor cmp(DType::Bool, {2});
  compare(CompareOp::Greater, a, b, cmp);
  EXPECT_EQ(raw<uint8_t>(cmp), (std::vector<uint8_t>{1, 0}));
}

TEST(DTypeKernels, MinMaxWhereTransposeOnNewTypes) {
  Tensor a = typed<uint8_t>(DType::U8, {3}, {1, 200, 30});
  Tensor b = typed<uint8_t>(DType::U8, {3}, {255, 100, 30});
  Tensor out(DType::U8, {3});
  minMax(MinMaxOp::Max, {&a, &b}, out);
  EXPECT_EQ(raw<uint8_t>(out), (std::vector<uint8_t>{255, 200, 30}));
  Tensor h1 = typed<uint16_t>(DType::F16, {2}, {0x3c00, 0xc000}); // 1, -2
  Tensor h2 = typed<uint16_t>(DType::F16, {2}, {0x7e00, 0x4000}); // NaN, 2
  Tensor hm(DType::F16, {2});
  minMax(MinMaxOp::Min, {&h1, &h2}, hm);
  EXPECT_TRUE(std::isnan(halfToFloat(raw<uint16_t>(hm)[0])));
  EXPECT_EQ(raw<uint16_t>(hm)[1], 0xc000);
  Tensor cond = makeTensor<uint8_t>({2}, {1, 0});
  where(cond, h1, h2, hm);
  EXPECT_EQ(raw<uint16_t>(hm), (std::vector<uint16_t>{0x3c00, 0x4000}));
  Tensor m = typed<uint16_t>(DType::BF16, {2, 3},
                             {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0});
  Tensor t(DType::BF16, {3, 2});
  transpose(m, {1, 0}, t);
  EXPECT_EQ(raw<uint16_t>(t), (std::vector<uint16_t>{0x3f80, 0x4080, 0x4000,
                                                     0x40a0, 0x4040, 0x40c0}));
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

TEST(DTypeKernels, BF16MatMulAccumulatesInF32) {
  // [1, 2^-8, 2^-8] . [1, 1, 1] = 1 + 2^-7 = bf16 0x3f81. Summing in bf16
  // would lose both 2^-8 terms (1 + 2^-8 ties to 1) and give 1.0.
  Tensor a = typed<uint16_t>(DType::BF16, {1, 3}, {0x3f80, 0x3b80, 0x3b80});
  Tensor b = typed<uint16_t>(DType::BF16, {3, 1}, {0x3f80, 0x3f80, 0x3f80});
  Tensor out(DType::BF16, {1, 1});
  matmul(a, b, out);
  EXPECT_EQ(raw<uint16_t>(out)[0], 0x3f81);
  // The same in f16 (1 + 2^-11 + 2^-11 = 1 + 2^-10 = 0x3c01).
  Tensor ha = typed<uint16_t>(DType::F16, {1, 3}, {0x3c00, 0x1000, 0x1000});
  Tensor hb = typed<uint16_t>(DType::F16, {3, 1}, {0x3c00, 0x3c00, 0x3c00});
  Tensor hout(DType::F16, {1, 1});
  matmul(ha, hb, hout);
  EXPECT_EQ(raw<uint16_t>(hout)[0], 0x3c01);
}

TEST(DTypeKernels, HalfGemmWithBias) {
  // [[1, 2], [3, 4]] @ [[1, 0], [0, 1]]^T * 2 + [0.5, -1] * 1, in f16:
  // [[2.5, 3], [6.5, 7]].
  Tensor a =
      typed<uint16_t>(DType::F16, {2, 2}, {0x3c00, 0x4000, 0x4200, 0x4400});
  Tensor b = typed<uint16_t>(DType::F16, {2, 2}, {0x3c00, 0, 0, 0x3c00});
  Tensor c = typed<uint16_t>(DType::F16, {2}, {0x3800, 0xbc00});
  Tensor out(DType::F16, {2, 2});
  gemm(a, b, &c, 2.f, 1.f, false, true, out);
  EXPECT_EQ(raw<uint16_t>(out),
            (std::vector<uint16_t>{0x4100, 0x4200, 0x4680, 0x4700}));
}

TEST(DTypeKernels, F64MatMulAndGemmUseDouble) {
  // (3e7 + 1)(3e7 - 1) = 9e14 - 1, exact in double, not in f32.
  Tensor a = typed<double>(DType::F64, {1, 1}, {3e7 + 1});
  Tensor b = typed<double>(DType::F64, {1, 1}, {3e7 - 1});
  Tensor out(DType::F64, {1, 1});
  matmul(a, b, out);
  EXPECT_EQ(raw<double>(out)[0], 899999999999999.0);
  Tensor c = typed<double>(DType::F64, {1}, {1.0});
  gemm(a, b, &c, 1.f, 1.f, false, false, out);
  EXPECT_EQ(raw<double>(out)[0], 9e14);
  Tensor wrong(DType::F32, {1, 1});
  EXPECT_THROW(matmul(a, wrong, out), Error);
}

//===----------------------------------------------------------------------===//
// Other kernels staged through f32
//===----------------------------------------------------------------------===//

TEST(DTypeKernels, HalfSoftmaxAndMaxPoolUint8) {
  // softmax([1, 1, 1, 1]) = 0.25 each (bf16 0x3e80); softmax([0, 0]) along
  // the last axis = 0.5 (0x3f00).
  Tensor x =
      typed<uint16_t>(DType::BF16, {2, 2}, {0x3f80, 0x3f80, 0x0000, 0x0000});
  Tensor y(DType::BF16, {2, 2});
  softmax(x, 1, y);
  EXPECT_EQ(raw<uint16_t>(y),
            (std::vector<uint16_t>{0x3f00, 0x3f00, 0x3f00, 0x3f00}));
  Tensor flat =
      typed<uint16_t>(DType::BF16, {4}, {0x3f80, 0x3f80, 0x3f80, 0x3f80});
  Tensor quarter(DType::BF16, {4});
  softmax(flat, 0, quarter);
  EXPECT_EQ(raw<uint16_t>(quarter),
            (std::vector<uint16_t>{0x3e80, 0x3e80, 0x3e80, 0x3e80}));
  // MaxPool 2x2 stride 1 on a 1x1x3x3 u8 image.
  Tensor img =
      typed<uint8_t>(DType::U8, {1, 1, 3, 3}, {1, 250, 3, 4, 5, 6, 255, 8, 9});
  WindowParams w;
  w.kernel = {2, 2};
  w.strides = {1, 1};
  w.pads = {0, 0, 0, 0};
  w.dilations = {1, 1};
  Tensor pooled(DType::U8, {1, 1, 2, 2});
  pool(PoolOp::Max, img, w, false, pooled);
  EXPECT_EQ(raw<uint8_t>(pooled), (std::vector<uint8_t>{250, 250, 255, 9}));
}

//===----------------------------------------------------------------------===//
// .npy files
//===----------------------------------------------------------------------===//

TEST(DTypeNpy, NewTypesRoundTripAndBF16IsWrittenAsFloat32) {
  std::string dir =
      ::testing::TempDir() + "/shoal-dtypes-npy-" + std::to_string(::getpid());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::vector<Tensor> ts = {
      typed<double>(DType::F64, {2}, {0.1, -1e300}),
      typed<uint16_t>(DType::F16, {2}, {0x3c00, 0x7e00}),
      typed<int8_t>(DType::I8, {3}, {-128, 0, 127}),
      typed<uint8_t>(DType::U8, {1, 2}, {0, 255}),
  };
  for (std::size_t i = 0; i < ts.size(); ++i) {
    std::string path = dir + "/t" + std::to_string(i) + ".npy";
    writeNpy(path, ts[i]);
    Tensor back = readNpy(path);
    EXPECT_EQ(back.type(), ts[i].type());
    ASSERT_EQ(back.numBytes(), ts[i].numBytes());
    EXPECT_EQ(std::memcmp(back.rawData(), ts[i].rawData(), back.numBytes()), 0);
  }
  // bf16 goes out as exact float32 values ('<f4').
  std::string path = dir + "/bf.npy";
  writeNpy(path, typed<uint16_t>(DType::BF16, {2}, {0x3f81, 0xff80}));
  Tensor f = readNpy(path);
  ASSERT_EQ(f.type(), (TensorType{DType::F32, {2}}));
  EXPECT_EQ(toVector<float>(f), (std::vector<float>{1.0078125f, -kInf}));
  // float32 feeds a bf16 value, rounded to nearest even.
  EXPECT_TRUE(npyFeeds({DType::F32, {2}}, {DType::BF16, {2}}));
  EXPECT_FALSE(npyFeeds({DType::F32, {3}}, {DType::BF16, {2}}));
  EXPECT_FALSE(npyFeeds({DType::F32, {2}}, {DType::F16, {2}}));
  float in[2] = {bitsToFloat(0x3f808000), 0.1f};
  Tensor bf = convertNpyData(reinterpret_cast<const uint8_t *>(in),
                             {DType::F32, {2}}, DType::BF16);
  EXPECT_EQ(raw<uint16_t>(bf), (std::vector<uint16_t>{0x3f80, 0x3dcd}));
}

} // namespace
