//===- Kernels.cpp - CPU kernels of the runtime -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
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

template <typename T>
void binaryTyped(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out) {
  const T *pa = a.data<T>();
  const T *pb = b.data<T>();
  T *po = out.data<T>();
  const Shape &as = a.shape(), &bs = b.shape(), &os = out.shape();
  switch (op) {
  case BinaryOp::Add:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(x + y); });
    return;
  case BinaryOp::Sub:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(x - y); });
    return;
  case BinaryOp::Mul:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(x * y); });
    return;
  case BinaryOp::Div:
    binaryLoop(pa, as, pb, bs, po, os, [](T x, T y) { return T(x / y); });
    return;
  case BinaryOp::Pow:
    binaryLoop(pa, as, pb, bs, po, os,
               [](T x, T y) { return T(std::pow(x, y)); });
    return;
  }
}

/// `t` broadcast to `shape` as a dense float vector.
std::vector<float> expandTo(const Tensor &t, const Shape &shape) {
  std::vector<float> out(static_cast<std::size_t>(numElements(shape)));
  const float *src = t.data<float>();
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

} // namespace

//===----------------------------------------------------------------------===//
// MatMul and Gemm
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::matmul(const Tensor &a, const Tensor &b, Tensor &out) {
  checkDType(a, DType::F32, "MatMul", "A");
  checkDType(b, DType::F32, "MatMul", "B");
  checkOutput(out, DType::F32, matmulShape(a.shape(), b.shape()), "MatMul");
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  Shape batch = broadcastShape(aBatch, bBatch);
  int64_t numBatch = numElements(batch);
  const float *pa = a.data<float>();
  const float *pb = b.data<float>();
  float *pc = out.data<float>();
  if (numBatch == 0 || m == 0 || n == 0)
    return;
  // B shared by every batch and A not broadcast: one tall GEMM.
  if (numElements(bBatch) == 1 && numElements(aBatch) == numBatch) {
    sgemm(false, false, numBatch * m, n, k, 1.f, pa, k, pb, n, 0.f, pc, n,
          "MatMul");
    return;
  }
  std::size_t rank = batch.size();
  std::vector<int64_t> sa = broadcastStrides(aBatch, rank);
  std::vector<int64_t> sb = broadcastStrides(bBatch, rank);
  std::vector<int64_t> idx(rank, 0);
  int64_t offA = 0, offB = 0;
  for (int64_t i = 0; i < numBatch; ++i) {
    sgemm(false, false, m, n, k, 1.f, pa + offA * m * k, k, pb + offB * k * n,
          n, 0.f, pc + i * m * n, n, "MatMul");
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

void shoal::rt::cpu::gemm(const Tensor &a, const Tensor &b, const Tensor *c,
                          float alpha, float beta, bool transA, bool transB,
                          Tensor &out) {
  checkDType(a, DType::F32, "Gemm", "A");
  checkDType(b, DType::F32, "Gemm", "B");
  Shape shape = gemmShape(a.shape(), b.shape(), transA, transB);
  checkOutput(out, DType::F32, shape, "Gemm");
  int64_t m = shape[0], n = shape[1];
  int64_t k = transA ? a.shape()[0] : a.shape()[1];
  float *pc = out.data<float>();
  float gemmBeta = 0.f;
  if (c && beta != 0.f) {
    checkDType(*c, DType::F32, "Gemm", "C");
    if (!broadcastsTo(c->shape(), shape))
      throw Error(fmt::format("Gemm: C of shape {} does not broadcast to {}",
                              formatShape(c->shape()), formatShape(shape)));
    std::vector<float> expanded = expandTo(*c, shape);
    for (std::size_t i = 0; i < expanded.size(); ++i)
      pc[i] = beta * expanded[i];
    gemmBeta = 1.f;
  }
  sgemm(transA, transB, m, n, k, alpha, a.data<float>(), a.shape()[1],
        b.data<float>(), b.shape()[1], gemmBeta, pc, n, "Gemm");
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::binary(BinaryOp op, const Tensor &a, const Tensor &b,
                            Tensor &out) {
  const char *name = binaryName(op);
  Shape shape = broadcastShape(a.shape(), b.shape());
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
    // Integer or mixed Pow: in double, rounded to the base's type.
    checkOutput(out, a.dtype(), shape, name);
    auto get = [&](const Tensor &t, int64_t i) -> double {
      switch (t.dtype()) {
      case DType::F32:
        return t.data<float>()[i];
      case DType::I64:
        return static_cast<double>(t.data<int64_t>()[i]);
      case DType::I32:
        return t.data<int32_t>()[i];
      case DType::Bool:
        break;
      }
      throw Error(fmt::format("Pow is not supported on {} tensors",
                              dtypeName(t.dtype())));
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
    for (int64_t i = 0, n = numElements(shape); i < n; ++i) {
      int64_t rem = i, ia = 0, ib = 0;
      for (int64_t d = rank - 1; d >= 0; --d) {
        int64_t idx = rem % shape[d];
        rem /= shape[d];
        ia += idx * sa[d];
        ib += idx * sb[d];
      }
      double r = std::pow(get(a, ia), get(b, ib));
      switch (out.dtype()) {
      case DType::F32:
        out.data<float>()[i] = static_cast<float>(r);
        break;
      case DType::I64:
        out.data<int64_t>()[i] = static_cast<int64_t>(std::llround(r));
        break;
      case DType::I32:
        out.data<int32_t>()[i] = static_cast<int32_t>(std::llround(r));
        break;
      case DType::Bool:
        break;
      }
    }
    return;
  }
  if (a.dtype() != b.dtype())
    throw Error(fmt::format("{}: operands have different dtypes ({} and {})",
                            name, a.type().str(), b.type().str()));
  checkOutput(out, a.dtype(), shape, name);
  switch (a.dtype()) {
  case DType::F32:
    return binaryTyped<float>(op, a, b, out);
  case DType::I64:
    if (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul)
      return binaryTyped<int64_t>(op, a, b, out);
    break;
  case DType::I32:
    if (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul)
      return binaryTyped<int32_t>(op, a, b, out);
    break;
  case DType::Bool:
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
  if (op == UnaryOp::Neg)
    unaryLoop<T>(x, out, [](T v) { return T(-v); });
  else
    unaryLoop<T>(x, out, [](T v) { return v < 0 ? T(0) : v; });
}
} // namespace

void shoal::rt::cpu::unary(UnaryOp op, const Tensor &x, Tensor &out) {
  checkOutput(out, x.dtype(), x.shape(), "unary op");
  if (x.dtype() != DType::F32) {
    bool intOk = (op == UnaryOp::Neg || op == UnaryOp::Relu) &&
                 (x.dtype() == DType::I64 || x.dtype() == DType::I32);
    if (!intOk)
      throw Error(fmt::format("element-wise op is not supported on {} tensors",
                              dtypeName(x.dtype())));
    if (x.dtype() == DType::I64)
      unaryInt<int64_t>(op, x, out);
    else
      unaryInt<int32_t>(op, x, out);
    return;
  }
  switch (op) {
  case UnaryOp::Erf:
    return unaryLoop<float>(x, out, [](float v) { return std::erf(v); });
  case UnaryOp::Tanh:
    return unaryLoop<float>(x, out, [](float v) { return std::tanh(v); });
  case UnaryOp::Relu:
    return unaryLoop<float>(x, out, [](float v) { return v < 0.f ? 0.f : v; });
  case UnaryOp::Sqrt:
    return unaryLoop<float>(x, out, [](float v) { return std::sqrt(v); });
  case UnaryOp::Exp:
    return unaryLoop<float>(x, out, [](float v) { return std::exp(v); });
  case UnaryOp::Neg:
    return unaryLoop<float>(x, out, [](float v) { return -v; });
  case UnaryOp::Sigmoid:
    return unaryLoop<float>(x, out, [](float v) {
      if (v >= 0.f)
        return 1.f / (1.f + std::exp(-v));
      float e = std::exp(v);
      return e / (1.f + e);
    });
  }
}

//===----------------------------------------------------------------------===//
// Softmax and LayerNormalization
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::softmax(const Tensor &x, int64_t axis, Tensor &out) {
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
