//===- Kernels.cpp - CPU kernels of the runtime -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/DTypes.h"
#include "cpu/LoopNest.h"

#include "Sharding.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

void checkOutput(const Tensor &out, DType dtype, const Shape &shape,
                 const char *what) {
  if (!out.defined() || out.dtype() != dtype || out.shape() != shape)
    throw Error(fmt::format("{}: output is {} but the inputs give {}", what,
                            out.defined() ? out.type().str() : "undefined",
                            TensorType{dtype, shape}.str()));
}

void checkDType(const Tensor &t, DType dtype, const char *what,
                const char *operand) {
  if (t.dtype() != dtype)
    throw Error(fmt::format("{}: {} must be {}, got {}", what, operand,
                            dtypeName(dtype), t.type().str()));
}

int blasInt(int64_t v, const char *what) {
  if (v > INT_MAX)
    throw Error(fmt::format("{}: dimension {} is too large for BLAS", what, v));
  return static_cast<int>(v);
}

/// Calls body(offA, offB, offOut, n, strideA, strideB) for every innermost
/// run of a two-input broadcast.
template <typename Body>
void forEachRun2(const Shape &aShape, const Shape &bShape,
                 const Shape &outShape, Body body) {
  std::size_t rank = outShape.size();
  if (numElements(outShape) == 0)
    return;
  std::vector<int64_t> outStrides(rank);
  int64_t acc = 1;
  for (std::size_t i = rank; i-- > 0;) {
    outStrides[i] = acc;
    acc *= outShape[i];
  }
  LoopNest nest(outShape, {broadcastStrides(aShape, rank),
                           broadcastStrides(bShape, rank), outStrides});
  std::size_t inner = nest.dims.size() - 1;
  int64_t n = nest.dims[inner];
  int64_t sa = nest.strides[0][inner], sb = nest.strides[1][inner];
  std::vector<int64_t> idx(inner, 0);
  int64_t oa = 0, ob = 0, oo = 0;
  while (true) {
    body(oa, ob, oo, n, sa, sb);
    std::size_t d = inner;
    while (d-- > 0) {
      ++idx[d];
      oa += nest.strides[0][d];
      ob += nest.strides[1][d];
      oo += nest.strides[2][d];
      if (idx[d] < nest.dims[d])
        break;
      oa -= nest.strides[0][d] * nest.dims[d];
      ob -= nest.strides[1][d] * nest.dims[d];
      oo -= nest.strides[2][d] * nest.dims[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
  }
}

template <typename T, typename F>
void binaryLoop(const T *a, const Shape &aShape, const T *b,
                const Shape &bShape, T *out, const Shape &outShape, F f) {
  forEachRun2(aShape, bShape, outShape,
              [&](int64_t oa, int64_t ob, int64_t oo, int64_t n, int64_t sa,
                  int64_t sb) {
                const T *pa = a + oa;
                const T *pb = b + ob;
                T *po = out + oo;
                // Specialized so that the common cases vectorize.
                if (sa == 1 && sb == 1) {
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i], pb[i]);
                } else if (sa == 1 && sb == 0) {
                  T vb = *pb;
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i], vb);
                } else if (sa == 0 && sb == 1) {
                  T va = *pa;
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(va, pb[i]);
                } else {
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i * sa], pb[i * sb]);
                }
              });
}

/// Integer division truncating toward zero, as numpy's for same-sign
/// operands and C's; the minimum over -1 wraps. Throws Error on a zero
/// divisor (undefined in ONNX; a crash in C++).
template <typename T> T intDiv(T x, T y) {
  if (y == 0)
    throw Error("Div: integer division by zero");
  if constexpr (std::is_signed<T>::value) {
    using U = std::make_unsigned_t<T>;
    if (y == T(-1))
      return T(U(0) - U(x));
  }
  return T(x / y);
}

template <typename T>
void binaryTyped(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out) {
  const T *pa = static_cast<const T *>(a.rawData());
  const T *pb = static_cast<const T *>(b.rawData());
  T *po = static_cast<T *>(out.rawData());
  const Shape &as = a.shape(), &bs = b.shape(), &os = out.shape();
  // Integers wrap around (two's complement), through the unsigned type so
  // that the arithmetic is defined.
  using U = std::conditional_t<std::is_integral<T>::value,
                               std::make_unsigned<T>, std::common_type<T>>;
  using W = typename U::type;
  switch (op) {
  case BinaryOp::Add:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(W(x) + W(y)); });
    return;
  case BinaryOp::Sub:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(W(x) - W(y)); });
    return;
  case BinaryOp::Mul:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(W(x) * W(y)); });
    return;
  case BinaryOp::Div:
    if constexpr (std::is_integral<T>::value)
      binaryLoop(pa, as, pb, bs, po, os, intDiv<T>);
    else
      binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(x / y); });
    return;
  case BinaryOp::Pow:
    binaryLoop(pa, as, pb, bs, po, os,
               [](T x, T y) { return T(std::pow(x, y)); });
    return;
  }
}

/// `t` broadcast to `shape` as a dense vector.
template <typename T = float>
std::vector<T> expandTo(const Tensor &t, const Shape &shape) {
  std::vector<T> out(static_cast<std::size_t>(numElements(shape)));
  const T *src = t.data<T>();
  forEachRun2(
      t.shape(), t.shape(), shape,
      [&](int64_t oa, int64_t, int64_t oo, int64_t n, int64_t sa, int64_t) {
        for (int64_t i = 0; i < n; ++i)
          out[oo + i] = src[oa + i * sa];
      });
  return out;
}

/// Calls cblas_sgemm for a row-major C[M,N] = alpha * op(A) * op(B) + beta*C,
/// handling empty dimensions that BLAS rejects.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc, const char *what) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasInt(m, what),
              blasInt(n, what), blasInt(k, what), alpha, a,
              blasInt(std::max<int64_t>(lda, 1), what), b,
              blasInt(std::max<int64_t>(ldb, 1), what), beta, c,
              blasInt(std::max<int64_t>(ldc, 1), what));
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           double alpha, const double *a, int64_t lda, const double *b,
           int64_t ldb, double beta, double *c, int64_t ldc, const char *what) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.0 : beta * c[i * ldc + j];
    return;
  }
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasInt(m, what),
              blasInt(n, what), blasInt(k, what), alpha, a,
              blasInt(std::max<int64_t>(lda, 1), what), b,
              blasInt(std::max<int64_t>(ldb, 1), what), beta, c,
              blasInt(std::max<int64_t>(ldc, 1), what));
}

/// Tensors staged in f32 for a kernel on f16/bf16: the f32 copies of the
/// 16-bit inputs (others as they are).
Tensor stage(const Tensor &t) { return isHalfDType(t.dtype()) ? toF32(t) : t; }

} // namespace

//===----------------------------------------------------------------------===//
// MatMul and Gemm
//===----------------------------------------------------------------------===//

namespace {
template <typename T>
void matmulTyped(const Tensor &a, const Tensor &b, Tensor &out) {
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  Shape batch = broadcastShape(aBatch, bBatch);
  int64_t numBatch = numElements(batch);
  const T *pa = a.data<T>();
  const T *pb = b.data<T>();
  T *pc = out.data<T>();
  if (numBatch == 0 || m == 0 || n == 0)
    return;
  // B shared by every batch and A not broadcast: one tall GEMM.
  if (numElements(bBatch) == 1 && numElements(aBatch) == numBatch) {
    sgemm(false, false, numBatch * m, n, k, T(1), pa, k, pb, n, T(0), pc, n,
          "MatMul");
    return;
  }
  std::size_t rank = batch.size();
  std::vector<int64_t> sa = broadcastStrides(aBatch, rank);
  std::vector<int64_t> sb = broadcastStrides(bBatch, rank);
  std::vector<int64_t> idx(rank, 0);
  int64_t offA = 0, offB = 0;
  for (int64_t i = 0; i < numBatch; ++i) {
    sgemm(false, false, m, n, k, T(1), pa + offA * m * k, k, pb + offB * k * n,
          n, T(0), pc + i * m * n, n, "MatMul");
    for (std::size_t d = rank; d-- > 0;) {
      ++idx[d];
      offA += sa[d];
      offB += sb[d];
      if (idx[d] < batch[d])
        break;
      offA -= sa[d] * batch[d];
      offB -= sb[d] * batch[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void gemmTyped(const Tensor &a, const Tensor &b, const Tensor *c, float alpha,
               float beta, bool transA, bool transB, Tensor &out) {
  const Shape &shape = out.shape();
  int64_t m = shape[0], n = shape[1];
  int64_t k = transA ? a.shape()[0] : a.shape()[1];
  T *pc = out.data<T>();
  T gemmBeta = 0;
  if (c && beta != 0.f) {
    std::vector<T> expanded = expandTo<T>(*c, shape);
    for (std::size_t i = 0; i < expanded.size(); ++i)
      pc[i] = T(beta) * expanded[i];
    gemmBeta = 1;
  }
  sgemm(transA, transB, m, n, k, T(alpha), a.data<T>(), a.shape()[1],
        b.data<T>(), b.shape()[1], gemmBeta, pc, n, "Gemm");
}

/// The float dtype shared by a matrix product's operands; throws Error
/// naming the op otherwise.
void checkMatmulDTypes(const char *what, const Tensor &a, const Tensor &b,
                       const Tensor *c = nullptr) {
  if (!isFloatDType(a.dtype()))
    throw Error(fmt::format("{}: A must be f32, f64, f16 or bf16, got {}", what,
                            a.type().str()));
  checkDType(b, a.dtype(), what, "B");
  if (c)
    checkDType(*c, a.dtype(), what, "C");
}
} // namespace

void shoal::rt::cpu::matmul(const Tensor &a, const Tensor &b, Tensor &out) {
  checkMatmulDTypes("MatMul", a, b);
  Shape shape = matmulShape(a.shape(), b.shape());
  checkOutput(out, a.dtype(), shape, "MatMul");
  switch (a.dtype()) {
  case DType::F64:
    return matmulTyped<double>(a, b, out);
  case DType::F16:
  case DType::BF16: {
    // Products and sums in f32, rounded once at the end.
    Tensor r(DType::F32, shape);
    matmulTyped<float>(toF32(a), toF32(b), r);
    return fromF32(r, out);
  }
  default:
    return matmulTyped<float>(a, b, out);
  }
}

void shoal::rt::cpu::gemm(const Tensor &a, const Tensor &b, const Tensor *c,
                          float alpha, float beta, bool transA, bool transB,
                          Tensor &out) {
  bool useC = c && beta != 0.f;
  checkMatmulDTypes("Gemm", a, b, useC ? c : nullptr);
  Shape shape = gemmShape(a.shape(), b.shape(), transA, transB);
  checkOutput(out, a.dtype(), shape, "Gemm");
  if (useC && !broadcastsTo(c->shape(), shape))
    throw Error(fmt::format("Gemm: C of shape {} does not broadcast to {}",
                            formatShape(c->shape()), formatShape(shape)));
  switch (a.dtype()) {
  case DType::F64:
    return gemmTyped<double>(a, b, useC ? c : nullptr, alpha, beta, transA,
                             transB, out);
  case DType::F16:
  case DType::BF16: {
    Tensor r(DType::F32, shape), c32;
    if (useC)
      c32 = toF32(*c);
    gemmTyped<float>(toF32(a), toF32(b), useC ? &c32 : nullptr, alpha, beta,
                     transA, transB, r);
    return fromF32(r, out);
  }
  default:
    return gemmTyped<float>(a, b, useC ? c : nullptr, alpha, beta, transA,
                            transB, out);
  }
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::binary(BinaryOp op, const Tensor &a, const Tensor &b,
                            Tensor &out) {
  const char *name = binaryName(op);
  Shape shape = broadcastShape(a.shape(), b.shape());
  bool numericPow = op == BinaryOp::Pow && a.dtype() != DType::Bool &&
                    b.dtype() != DType::Bool;
  if (a.dtype() != b.dtype() && !numericPow)
    throw Error(fmt::format("{}: operands have different dtypes ({} and {})",
                            name, a.type().str(), b.type().str()));
  if (isHalfDType(a.dtype()) || isHalfDType(b.dtype())) {
    // In f32, rounded once to the result's type.
    checkOutput(out, a.dtype(), shape, name);
    Tensor sa = stage(a), r(sa.dtype(), shape);
    binary(op, sa, stage(b), r);
    return cast(r, out);
  }
  if (op == BinaryOp::Pow && a.dtype() == DType::F32 &&
      (b.dtype() == DType::I64 || b.dtype() == DType::I32)) {
    // ONNX allows an integer exponent; compute it as float.
    Tensor exponent(DType::F32, b.shape());
    float *e = exponent.data<float>();
    for (int64_t i = 0, n = b.numElements(); i < n; ++i)
      e[i] = b.dtype() == DType::I64 ? float(b.data<int64_t>()[i])
                                     : float(b.data<int32_t>()[i]);
    binary(op, a, exponent, out);
    return;
  }
  if (op == BinaryOp::Pow &&
      (a.dtype() != DType::F32 || b.dtype() != DType::F32)) {
    // Integer, f64 or mixed Pow: in double, rounded to the base's type
    // (integers to nearest).
    checkOutput(out, a.dtype(), shape, name);
    auto get = [&](const Tensor &t, int64_t i) -> double {
      return visitDType(t.dtype(), [&](auto tag) -> double {
        using T = typename decltype(tag)::type;
        return static_cast<double>(
            widen(static_cast<const T *>(t.rawData())[i]));
      });
    };
    int64_t rank = static_cast<int64_t>(shape.size());
    auto alignedStrides = [&](const Shape &s) {
      std::vector<int64_t> st(rank, 0);
      int64_t stride = 1;
      for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
        if (s[d] != 1)
          st[rank - static_cast<int64_t>(s.size()) + d] = stride;
        stride *= s[d];
      }
      return st;
    };
    std::vector<int64_t> sa = alignedStrides(a.shape()),
                         sb = alignedStrides(b.shape());
    visitDType(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *po = static_cast<T *>(out.rawData());
      for (int64_t i = 0, n = numElements(shape); i < n; ++i) {
        int64_t rem = i, ia = 0, ib = 0;
        for (int64_t d = rank - 1; d >= 0; --d) {
          int64_t idx = rem % shape[d];
          rem /= shape[d];
          ia += idx * sa[d];
          ib += idx * sb[d];
        }
        double r = std::pow(get(a, ia), get(b, ib));
        if constexpr (std::is_integral<T>::value)
          po[i] = narrow<T>(static_cast<int64_t>(std::llround(r)));
        else
          po[i] = narrow<T>(r);
      }
    });
    return;
  }
  checkOutput(out, a.dtype(), shape, name);
  switch (a.dtype()) {
  case DType::F32:
    return binaryTyped<float>(op, a, b, out);
  case DType::F64:
    return binaryTyped<double>(op, a, b, out);
  case DType::I64:
    return binaryTyped<int64_t>(op, a, b, out);
  case DType::I32:
    return binaryTyped<int32_t>(op, a, b, out);
  case DType::I8:
    return binaryTyped<int8_t>(op, a, b, out);
  case DType::U8:
    return binaryTyped<uint8_t>(op, a, b, out);
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
    break;
  }
  throw Error(fmt::format("{} is not supported on {} tensors", name,
                          dtypeName(a.dtype())));
}

namespace {
template <typename T, typename F>
void unaryLoop(const Tensor &x, Tensor &out, F f) {
  const T *px = x.data<T>();
  T *po = out.data<T>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    po[i] = f(px[i]);
}

template <typename T> void unaryInt(UnaryOp op, const Tensor &x, Tensor &out) {
  using U = std::make_unsigned_t<T>;
  if (op == UnaryOp::Neg)
    unaryLoop<T>(x, out, [](T v) { return T(U(0) - U(v)); });
  else
    unaryLoop<T>(x, out, [](T v) { return v < 0 ? T(0) : v; });
}

template <typename T>
void unaryFloat(UnaryOp op, const Tensor &x, Tensor &out) {
  switch (op) {
  case UnaryOp::Erf:
    return unaryLoop<T>(x, out, [](T v) { return std::erf(v); });
  case UnaryOp::Tanh:
    return unaryLoop<T>(x, out, [](T v) { return std::tanh(v); });
  case UnaryOp::Relu:
    return unaryLoop<T>(x, out, [](T v) { return v < T(0) ? T(0) : v; });
  case UnaryOp::Sqrt:
    return unaryLoop<T>(x, out, [](T v) { return std::sqrt(v); });
  case UnaryOp::Exp:
    return unaryLoop<T>(x, out, [](T v) { return std::exp(v); });
  case UnaryOp::Neg:
    return unaryLoop<T>(x, out, [](T v) { return -v; });
  case UnaryOp::Sigmoid:
    return unaryLoop<T>(x, out, [](T v) {
      if (v >= T(0))
        return T(1) / (T(1) + std::exp(-v));
      T e = std::exp(v);
      return e / (T(1) + e);
    });
  }
}
} // namespace

void shoal::rt::cpu::unary(UnaryOp op, const Tensor &x, Tensor &out) {
  checkOutput(out, x.dtype(), x.shape(), "unary op");
  bool intOk = op == UnaryOp::Neg || op == UnaryOp::Relu;
  switch (x.dtype()) {
  case DType::F32:
    return unaryFloat<float>(op, x, out);
  case DType::F64:
    return unaryFloat<double>(op, x, out);
  case DType::F16:
  case DType::BF16: {
    Tensor r(DType::F32, x.shape());
    unaryFloat<float>(op, toF32(x), r);
    return fromF32(r, out);
  }
  case DType::I64:
    if (intOk)
      return unaryInt<int64_t>(op, x, out);
    break;
  case DType::I32:
    if (intOk)
      return unaryInt<int32_t>(op, x, out);
    break;
  case DType::I8:
    if (intOk)
      return unaryInt<int8_t>(op, x, out);
    break;
  case DType::U8:
  case DType::Bool:
    break;
  }
  throw Error(fmt::format("element-wise op is not supported on {} tensors",
                          dtypeName(x.dtype())));
}

//===----------------------------------------------------------------------===//
// Softmax and LayerNormalization
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::softmax(const Tensor &x, int64_t axis, Tensor &out) {
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    checkOutput(out, x.dtype(), x.shape(), "Softmax");
    Tensor r(DType::F32, x.shape());
    softmax(toF32(x), axis, r);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, "Softmax", "input");
  checkOutput(out, DType::F32, x.shape(), "Softmax");
  const Shape &s = x.shape();
  if (s.empty()) { // softmax of a scalar is 1
    out.data<float>()[0] = 1.f;
    return;
  }
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  const float *px = x.data<float>();
  float *po = out.data<float>();
  if (n == 0)
    return;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float *row = px + o * n * inner + i;
      float *orow = po + o * n * inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j)
        mx = std::max(mx, row[j * inner]);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        float e = std::exp(row[j * inner] - mx);
        orow[j * inner] = e;
        sum += e;
      }
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n; ++j)
        orow[j * inner] *= inv;
    }
  }
}

void shoal::rt::cpu::layerNorm(const Tensor &x, const Tensor &scale,
                               const Tensor *bias, int64_t axis, float epsilon,
                               Tensor &out, Tensor *mean, Tensor *invStdDev) {
  if (isHalfDType(x.dtype())) {
    // In f32 (statistics in double), rounded once; Mean and InvStdDev are
    // rounded to their own types.
    checkOutput(out, x.dtype(), x.shape(), "LayerNormalization");
    Tensor r(DType::F32, x.shape()), m, v;
    if (mean)
      m = Tensor(DType::F32, mean->shape());
    if (invStdDev)
      v = Tensor(DType::F32, invStdDev->shape());
    Tensor b = bias ? stage(*bias) : Tensor();
    layerNorm(toF32(x), stage(scale), bias ? &b : nullptr, axis, epsilon, r,
              mean ? &m : nullptr, invStdDev ? &v : nullptr);
    if (mean)
      cast(m, *mean);
    if (invStdDev)
      cast(v, *invStdDev);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, "LayerNormalization", "X");
  checkDType(scale, DType::F32, "LayerNormalization", "Scale");
  checkOutput(out, DType::F32, x.shape(), "LayerNormalization");
  const Shape &s = x.shape();
  Shape normShape(s.begin() + axis, s.end());
  Shape statShape(s.begin(), s.begin() + axis);
  statShape.resize(s.size(), 1);
  if (!broadcastsTo(scale.shape(), normShape))
    throw Error(fmt::format("LayerNormalization: Scale of shape {} does not "
                            "broadcast to the normalized shape {}",
                            formatShape(scale.shape()),
                            formatShape(normShape)));
  if (bias) {
    checkDType(*bias, DType::F32, "LayerNormalization", "B");
    if (!broadcastsTo(bias->shape(), normShape))
      throw Error(fmt::format("LayerNormalization: B of shape {} does not "
                              "broadcast to the normalized shape {}",
                              formatShape(bias->shape()),
                              formatShape(normShape)));
  }
  if (mean)
    checkOutput(*mean, DType::F32, statShape, "LayerNormalization Mean");
  if (invStdDev)
    checkOutput(*invStdDev, DType::F32, statShape,
                "LayerNormalization InvStdDev");
  int64_t n = numElements(normShape), outer = numElements(statShape);
  std::vector<float> g = expandTo(scale, normShape);
  std::vector<float> b;
  if (bias)
    b = expandTo(*bias, normShape);
  const float *px = x.data<float>();
  float *po = out.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    const float *row = px + o * n;
    float *orow = po + o * n;
    double sum = 0;
    for (int64_t j = 0; j < n; ++j)
      sum += row[j];
    double mu = n ? sum / double(n) : 0.0;
    double sq = 0;
    for (int64_t j = 0; j < n; ++j) {
      double d = row[j] - mu;
      sq += d * d;
    }
    double var = n ? sq / double(n) : 0.0;
    double inv = 1.0 / std::sqrt(var + double(epsilon));
    for (int64_t j = 0; j < n; ++j) {
      double y = (row[j] - mu) * inv * g[j];
      if (bias)
        y += b[j];
      orow[j] = static_cast<float>(y);
    }
    if (mean)
      mean->data<float>()[o] = static_cast<float>(mu);
    if (invStdDev)
      invStdDev->data<float>()[o] = static_cast<float>(inv);
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::gather(const Tensor &data, const Tensor &indices,
                            int64_t axis, Tensor &out) {
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("Gather: indices must be i64 or i32, got {}",
                            indices.type().str()));
  if (axis < 0 || axis >= data.rank())
    throw Error(fmt::format("Gather: axis {} out of range for data {}", axis,
                            data.type().str()));
  checkOutput(out, data.dtype(),
              gatherShape(data.shape(), indices.shape(), axis), "Gather");
  const Shape &s = data.shape();
  int64_t outer = 1, axisLen = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::size_t chunk = static_cast<std::size_t>(inner) * dtypeSize(data.dtype());
  int64_t numIdx = indices.numElements();
  // Normalize and check every index before writing anything.
  std::vector<int64_t> idx(static_cast<std::size_t>(numIdx));
  for (int64_t i = 0; i < numIdx; ++i) {
    int64_t v = indices.dtype() == DType::I64 ? indices.data<int64_t>()[i]
                                              : indices.data<int32_t>()[i];
    int64_t norm = v < 0 ? v + axisLen : v;
    if (norm < 0 || norm >= axisLen)
      throw Error(fmt::format("Gather: index {} (at position {} of the "
                              "indices) is out of range for axis {} of size {}",
                              v, i, axis, axisLen));
    idx[i] = norm;
  }
  const uint8_t *src = data.bytes();
  uint8_t *dst = out.bytes();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < numIdx; ++i) {
      std::memcpy(dst, src + (o * axisLen + idx[i]) * chunk, chunk);
      dst += chunk;
    }
}

namespace {
template <typename T>
void transposeTyped(const T *src, const Shape &inShape,
                    const std::vector<int64_t> &perm, T *dst,
                    const Shape &outShape) {
  std::size_t rank = perm.size();
  std::vector<int64_t> inStrides(rank);
  int64_t acc = 1;
  for (std::size_t d = rank; d-- > 0;) {
    inStrides[d] = acc;
    acc *= inShape[d];
  }
  // Stride in the input of each output dimension.
  std::vector<int64_t> strides(rank);
  for (std::size_t d = 0; d < rank; ++d)
    strides[d] = inStrides[perm[d]];
  int64_t n = rank ? outShape[rank - 1] : 1;
  int64_t innerStride = rank ? strides[rank - 1] : 1;
  std::size_t outerRank = rank ? rank - 1 : 0;
  std::vector<int64_t> idx(outerRank, 0);
  int64_t off = 0;
  while (true) {
    if (innerStride == 1) {
      std::memcpy(dst, src + off, n * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = src[off + i * innerStride];
    }
    dst += n;
    std::size_t d = outerRank;
    while (d-- > 0) {
      ++idx[d];
      off += strides[d];
      if (idx[d] < outShape[d])
        break;
      off -= strides[d] * outShape[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
  }
}
} // namespace

void shoal::rt::cpu::transpose(const Tensor &x,
                               const std::vector<int64_t> &perm, Tensor &out) {
  if (perm.size() != x.shape().size())
    throw Error(fmt::format("Transpose: perm has {} entries for a rank-{} "
                            "input",
                            perm.size(), x.rank()));
  checkOutput(out, x.dtype(), transposeShape(x.shape(), perm), "Transpose");
  if (x.numElements() == 0)
    return;
  switch (dtypeSize(x.dtype())) {
  case 1:
    return transposeTyped(x.bytes(), x.shape(), perm, out.bytes(), out.shape());
  case 2:
    return transposeTyped(static_cast<const uint16_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint16_t *>(out.rawData()),
                          out.shape());
  case 4:
    return transposeTyped(static_cast<const uint32_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint32_t *>(out.rawData()),
                          out.shape());
  default:
    return transposeTyped(static_cast<const uint64_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint64_t *>(out.rawData()),
                          out.shape());
  }
}

void shoal::rt::cpu::reduce(ReduceOp op, const Tensor &x,
                            const std::vector<int64_t> &axes, Tensor &out) {
  const char *name = op == ReduceOp::Sum ? "ReduceSum" : "ReduceMean";
  if (isHalfDType(x.dtype())) { // sums in double, rounded once
    if (!out.defined() || out.dtype() != x.dtype())
      checkOutput(out, x.dtype(), reduceShape(x.shape(), axes, true), name);
    Tensor r(DType::F32, out.shape());
    reduce(op, toF32(x), axes, r);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, name, "input");
  const Shape &s = x.shape();
  Shape kept = reduceShape(s, axes, true);
  Shape dropped = reduceShape(s, axes, false);
  if (out.dtype() != DType::F32 ||
      (out.shape() != kept && out.shape() != dropped))
    checkOutput(out, DType::F32, kept, name);
  std::size_t rank = s.size();
  // Output strides over the input's dimensions (0 on reduced ones).
  std::vector<int64_t> outStrides(rank, 0);
  int64_t acc = 1;
  for (std::size_t d = rank; d-- > 0;) {
    bool reduced =
        std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    outStrides[d] = reduced ? 0 : acc;
    acc *= kept[d];
  }
  int64_t outN = numElements(kept);
  int64_t count = outN ? x.numElements() / std::max<int64_t>(outN, 1) : 0;
  std::vector<double> sums(static_cast<std::size_t>(outN), 0.0);
  const float *px = x.data<float>();
  if (x.numElements() > 0) {
    // Merge dimensions, then walk the input once.
    std::vector<int64_t> inStrides(rank);
    int64_t a = 1;
    for (std::size_t d = rank; d-- > 0;) {
      inStrides[d] = a;
      a *= s[d];
    }
    LoopNest nest(s, {inStrides, outStrides});
    std::size_t inner = nest.dims.size() - 1;
    int64_t n = nest.dims[inner];
    int64_t sIn = nest.strides[0][inner], sOut = nest.strides[1][inner];
    std::vector<int64_t> idx(inner, 0);
    int64_t oi = 0, oo = 0;
    while (true) {
      if (sOut == 0) {
        double t = 0;
        for (int64_t i = 0; i < n; ++i)
          t += px[oi + i * sIn];
        sums[oo] += t;
      } else {
        for (int64_t i = 0; i < n; ++i)
          sums[oo + i * sOut] += px[oi + i * sIn];
      }
      std::size_t d = inner;
      while (d-- > 0) {
        ++idx[d];
        oi += nest.strides[0][d];
        oo += nest.strides[1][d];
        if (idx[d] < nest.dims[d])
          break;
        oi -= nest.strides[0][d] * nest.dims[d];
        oo -= nest.strides[1][d] * nest.dims[d];
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  }
  float *po = out.data<float>();
  for (int64_t i = 0; i < outN; ++i)
    po[i] = static_cast<float>(op == ReduceOp::Mean ? sums[i] / double(count)
                                                    : sums[i]);
}

void shoal::rt::cpu::sliceBlock(const Tensor &x, int64_t dim, int64_t numBlocks,
                                int64_t index, Tensor &out) {
  if (dim < 0 || dim >= x.rank() || numBlocks <= 0 || index < 0 ||
      index >= numBlocks)
    throw Error(fmt::format("LocalSlice: cannot take block {} of {} along "
                            "dimension {} of {}",
                            index, numBlocks, dim, x.type().str()));
  // Uneven: ceil-sized blocks, the last ones zero-padded.
  Shape shape = x.shape();
  shape[dim] = (shape[dim] + numBlocks - 1) / numBlocks;
  checkOutput(out, x.dtype(), shape, "LocalSlice");
  Shape offsets(shape.size(), 0);
  offsets[dim] = index * shape[dim];
  extractBlock(x.rawData(), x.shape(), dtypeSize(x.dtype()), offsets, shape,
               out.rawData());
}

void shoal::rt::cpu::concatBlocks(const uint8_t *blocks, int64_t numBlocks,
                                  int64_t dim, Tensor &out) {
  if (dim < 0 || dim >= out.rank() || numBlocks <= 0 ||
      out.shape()[dim] % numBlocks != 0)
    throw Error(fmt::format("AllGather: cannot split {} into {} blocks along "
                            "dimension {}",
                            out.type().str(), numBlocks, dim));
  Shape block = out.shape();
  block[dim] /= numBlocks;
  std::size_t blockBytes =
      static_cast<std::size_t>(numElements(block)) * dtypeSize(out.dtype());
  Shape offsets(block.size(), 0);
  for (int64_t g = 0; g < numBlocks; ++g) {
    offsets[dim] = g * block[dim];
    insertBlock(blocks + g * blockBytes, block, dtypeSize(out.dtype()), offsets,
                out.rawData(), out.shape());
  }
}

void shoal::rt::cpu::gelu(const Tensor &x, const Tensor *bias, Tensor &out) {
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    checkOutput(out, x.dtype(), x.shape(), "Gelu");
    Tensor r(DType::F32, x.shape()), b = bias ? stage(*bias) : Tensor();
    gelu(toF32(x), bias ? &b : nullptr, r);
    return fromF32(r, out);
  }
  const Tensor *z = &x;
  Tensor sum;
  if (bias) {
    sum = Tensor(x.type());
    binary(BinaryOp::Add, x, *bias, sum);
    z = &sum;
  }
  const float *in = z->data<float>();
  float *o = out.data<float>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    o[i] = 0.5f * in[i] * (1.f + std::erf(in[i] * 0.70710678118654752f));
}

void shoal::rt::cpu::addLayerNorm(const Tensor &a, const Tensor &b,
                                  const Tensor &scale, const Tensor *bias,
                                  int64_t axis, float epsilon, Tensor &sum,
                                  Tensor &out) {
  binary(BinaryOp::Add, a, b, sum);
  layerNorm(sum, scale, bias, axis, epsilon, out, nullptr, nullptr);
}

void shoal::rt::cpu::attention(const Tensor &q, const Tensor &kt,
                               const Tensor &v, const Tensor *mask, float scale,
                               Tensor &out) {
  if (isHalfDType(q.dtype())) { // in f32, rounded once
    Shape shape = matmulShape(matmulShape(q.shape(), kt.shape()), v.shape());
    checkOutput(out, q.dtype(), shape, "Attention");
    Tensor r(DType::F32, shape), m = mask ? stage(*mask) : Tensor();
    attention(toF32(q), stage(kt), stage(v), mask ? &m : nullptr, scale, r);
    return fromF32(r, out);
  }
  Tensor scores(DType::F32, matmulShape(q.shape(), kt.shape()));
  matmul(q, kt, scores);
  float *s = scores.data<float>();
  for (int64_t i = 0, n = scores.numElements(); i < n; ++i)
    s[i] *= scale;
  if (mask) {
    Tensor masked(scores.type());
    binary(BinaryOp::Add, scores, *mask, masked);
    scores = std::move(masked);
  }
  Tensor probs(scores.type());
  softmax(scores, static_cast<int64_t>(scores.shape().size()) - 1, probs);
  matmul(probs, v, out);
}

void shoal::rt::cpu::trilu(const Tensor &x, bool upper, int64_t k,
                           Tensor &out) {
  const Shape &s = x.shape();
  int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  std::size_t elem = dtypeSize(x.dtype());
  const uint8_t *src = static_cast<const uint8_t *>(x.rawData());
  uint8_t *dst = static_cast<uint8_t *>(out.rawData());
  for (int64_t i = 0, n = x.numElements(); i < n; ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (keep)
      std::memcpy(dst + i * elem, src + i * elem, elem);
    else
      std::memset(dst + i * elem, 0, elem);
  }
}

const char *shoal::rt::cpu::binaryName(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
    return "Add";
  case BinaryOp::Sub:
    return "Sub";
  case BinaryOp::Mul:
    return "Mul";
  case BinaryOp::Div:
    return "Div";
  case BinaryOp::Pow:
    return "Pow";
  }
  return "?";
}
