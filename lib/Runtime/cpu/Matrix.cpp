//===- Matrix.cpp - CPU kernels: matrix products ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the matrix products family of Ops.def (Kernels.h):
// MatMul and Gemm on BLAS, and Attention, then their registration per
// op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/LoopNest.h"
#include "cpu/Registry.h"
#include "cpu/Vector.h"
#include "ops/ShapeRules.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

int blasInt(int64_t v, const char *what) {
  if (v > INT_MAX)
    throw Error(fmt::format("{}: dimension {} is too large for BLAS", what, v));
  return static_cast<int>(v);
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
  // Small products (attention's heads) split over the threads a batch each,
  // each on one BLAS thread (OpenBLAS runs single-threaded inside an
  // OpenMP region); large ones run one after the other on all of them.
  const int64_t flops = 2 * m * n * k;
  auto products = [&](int64_t i0, int64_t i1) {
    // The batch index of i0, and the operands' offsets there.
    std::vector<int64_t> idx(rank, 0);
    int64_t offA = 0, offB = 0;
    for (int64_t rest = i0, d = int64_t(rank) - 1; d >= 0; --d) {
      idx[d] = rest % batch[d];
      rest /= batch[d];
      offA += idx[d] * sa[d];
      offB += idx[d] * sb[d];
    }
    for (int64_t i = i0; i < i1; ++i) {
      sgemm(false, false, m, n, k, T(1), pa + offA * m * k, k,
            pb + offB * k * n, n, T(0), pc + i * m * n, n, "MatMul");
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
  };
  if (flops >= (int64_t(1) << 24) || numBatch < cpuThreads())
    products(0, numBatch);
  else
    parallelFor(numBatch, flops, products);
}

template <typename T>
void gemmTyped(const Tensor &a, const Tensor &b, const Tensor *c, float alpha,
               float beta, bool transA, bool transB, Tensor &out,
               bool addInto = false) {
  const Shape &shape = out.shape();
  int64_t m = shape[0], n = shape[1];
  int64_t k = transA ? a.shape()[0] : a.shape()[1];
  T *pc = out.data<T>();
  // (addInto: out += alpha A B, out holding a sum so far; no C.)
  T gemmBeta = addInto ? 1 : 0;
  if (c && beta != 0.f) {
    std::vector<T> expanded = expandTo<T>(*c, shape);
    for (std::size_t i = 0; i < expanded.size(); ++i)
      pc[i] = T(beta) * expanded[i];
    gemmBeta = 1;
  }
  sgemm(transA, transB, m, n, k, T(alpha), a.data<T>(), a.shape()[1],
        b.data<T>(), b.shape()[1], gemmBeta, pc, n, "Gemm");
}

/// Checks the float dtype shared by a matrix product's operands and
/// returns the result's: the operands' or, for f16/bf16 operands and an
/// f32 `out`, f32. Throws Error naming the op otherwise.
DType checkMatmulDTypes(const char *what, const Tensor &a, const Tensor &b,
                        const Tensor *c, const Tensor &out) {
  if (!isFloatDType(a.dtype()))
    throw Error(fmt::format("{}: A must be f32, f64, f16 or bf16, got {}", what,
                            a.type().str()));
  checkDType(b, a.dtype(), what, "B");
  if (c)
    checkDType(*c, a.dtype(), what, "C");
  if (isHalfDType(a.dtype()) && out.defined() && out.dtype() == DType::F32)
    return DType::F32;
  return a.dtype();
}
} // namespace

void shoal::rt::cpu::matmul(const Tensor &a, const Tensor &b, Tensor &out) {
  DType outType = checkMatmulDTypes("MatMul", a, b, nullptr, out);
  Shape shape = matmulShape(a.shape(), b.shape());
  checkOutput(out, outType, shape, "MatMul");
  switch (a.dtype()) {
  case DType::F64:
    return matmulTyped<double>(a, b, out);
  case DType::F16:
  case DType::BF16: {
    // Products and sums in f32, rounded once at the end (or kept in f32).
    if (outType == DType::F32)
      return matmulTyped<float>(toF32(a), toF32(b), out);
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
                          Tensor &out, bool addInto) {
  bool useC = c && beta != 0.f;
  if (addInto && useC)
    throw Error("Gemm: a product with C cannot add into its output");
  DType outType = checkMatmulDTypes("Gemm", a, b, useC ? c : nullptr, out);
  Shape shape = gemmShape(a.shape(), b.shape(), transA, transB);
  checkOutput(out, outType, shape, "Gemm");
  if (useC && !broadcastsTo(c->shape(), shape))
    throw Error(fmt::format("Gemm: C of shape {} does not broadcast to {}",
                            formatShape(c->shape()), formatShape(shape)));
  switch (a.dtype()) {
  case DType::F64:
    return gemmTyped<double>(a, b, useC ? c : nullptr, alpha, beta, transA,
                             transB, out, addInto);
  case DType::F16:
  case DType::BF16: {
    Tensor c32;
    if (useC)
      c32 = toF32(*c);
    if (outType == DType::F32)
      return gemmTyped<float>(toF32(a), toF32(b), useC ? &c32 : nullptr, alpha,
                              beta, transA, transB, out, addInto);
    Tensor r = addInto ? toF32(out) : Tensor(DType::F32, shape);
    gemmTyped<float>(toF32(a), toF32(b), useC ? &c32 : nullptr, alpha, beta,
                     transA, transB, r, addInto);
    return fromF32(r, out);
  }
  default:
    return gemmTyped<float>(a, b, useC ? c : nullptr, alpha, beta, transA,
                            transB, out, addInto);
  }
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

namespace {

/// The sizes of f32 attention: q [..., T, D], kt [..., D, S], v [..., S, E]
/// with the same batch dimensions, and the mask (optional) broadcast to
/// the scores [..., T, S] by strides (0 along a broadcast dimension), so
/// that a [T, S] causal mask and a [B, 1, 1, S] padding mask are read in
/// place.
struct AttentionDims {
  int64_t batch = 0, tq = 0, d = 0, tk = 0, dv = 0;
  Shape batchShape;
  const float *mask = nullptr;
  /// Strides of the mask along the batch dimensions, the rows and the keys.
  std::vector<int64_t> maskBatch;
  int64_t maskRow = 0, maskCol = 0;

  /// The mask's row `row` of batch element `b`.
  const float *maskRowOf(int64_t b, int64_t row) const {
    int64_t off = row * maskRow;
    for (int64_t i = static_cast<int64_t>(batchShape.size()) - 1; i >= 0; --i) {
      off += (b % batchShape[i]) * maskBatch[i];
      b /= batchShape[i];
    }
    return mask + off;
  }
  /// s[rows, n] (row stride n) += the first n columns of the mask's rows
  /// row0.. of batch element b.
  void addMask(float *s, int64_t b, int64_t row0, int64_t rows,
               int64_t n) const {
    if (!mask)
      return;
    for (int64_t i = 0; i < rows; ++i) {
      const float *m = maskRowOf(b, row0 + i);
      float *si = s + i * n;
      if (maskCol == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j)
          si[j] += m[j];
      } else {
        for (int64_t j = 0; j < n; ++j)
          si[j] += m[j * maskCol];
      }
    }
  }

  /// The keys that rows row0.. of batch element b attend to: all but a
  /// tail that the mask removes from every row (a causal mask's future).
  /// A key is removed when its mask value is at most kMasked and its row
  /// has a value of at least kKept: its probability, exp(s + mask - max)
  /// with max at least kKept - kMasked = 9000 above it (for scores under
  /// that), is exactly 0 in float, as in the whole row, and so is its
  /// gradient. Rows without such a value keep every key.
  int64_t keysOf(int64_t b, int64_t row0, int64_t rows) const {
    constexpr float kMasked = -1e4f, kKept = -1e3f;
    if (!mask || maskCol != 1)
      return tk;
    int64_t keys = 0;
    for (int64_t i = 0; i < rows && keys < tk; ++i) {
      const float *m = maskRowOf(b, row0 + i);
      int64_t last = tk;
      while (last > 0 && m[last - 1] <= kMasked)
        --last;
      bool kept = false;
      for (int64_t j = 0; j < last && !kept; ++j)
        kept = m[j] >= kKept;
      if (!kept)
        return tk;
      keys = std::max(keys, last);
    }
    return keys;
  }
};

/// The dims of f32 q, kt, v and mask; nullopt for other dtypes or shapes
/// that do not fit (the caller's checks name them).
std::optional<AttentionDims> attentionDims(const Tensor &q, const Tensor &kt,
                                           const Tensor &v,
                                           const Tensor *mask) {
  if (q.dtype() != DType::F32 || kt.dtype() != DType::F32 ||
      v.dtype() != DType::F32 || q.rank() < 2 || kt.rank() != q.rank() ||
      v.rank() != q.rank())
    return std::nullopt;
  const Shape &qs = q.shape(), &ks = kt.shape(), &vs = v.shape();
  std::size_t r = qs.size();
  if (!std::equal(qs.begin(), qs.end() - 2, ks.begin()) ||
      !std::equal(qs.begin(), qs.end() - 2, vs.begin()))
    return std::nullopt;
  AttentionDims a;
  a.tq = qs[r - 2];
  a.d = qs[r - 1];
  a.tk = ks[r - 1];
  a.dv = vs[r - 1];
  if (ks[r - 2] != a.d || vs[r - 2] != a.tk)
    return std::nullopt;
  a.batchShape.assign(qs.begin(), qs.end() - 2);
  a.batch = numElements(a.batchShape);
  if (mask) {
    Shape scores(qs.begin(), qs.end() - 1);
    scores.push_back(a.tk);
    const Shape &ms = mask->shape();
    if (mask->dtype() != DType::F32 || ms.size() > r ||
        !broadcastsTo(ms, scores))
      return std::nullopt;
    std::vector<int64_t> strides = broadcastStrides(ms, r);
    a.mask = mask->data<float>();
    a.maskBatch.assign(strides.begin(), strides.end() - 2);
    a.maskRow = strides[r - 2];
    a.maskCol = strides[r - 1];
  }
  return a;
}

/// Query rows per block: the scores of a block ([rows, S] floats, two
/// buffers in the backward) stay within about 256 KiB.
int64_t attentionBlock(int64_t tk) {
  return std::clamp<int64_t>(32768 / std::max<int64_t>(tk, 1), 8, 64);
}

/// P[rows, n] = softmax(scale * q_blk kt + mask rows) of batch element b
/// over its first n keys (keysOf), row stride n.
void attentionProbs(const AttentionDims &a, const float *q, const float *kt,
                    int64_t b, int64_t row0, int64_t rows, int64_t n,
                    float scale, float *p, const VectorKernels &vk) {
  sgemm(false, false, rows, n, a.d, scale, q, a.d, kt, a.tk, 0.f, p, n,
        "Attention");
  a.addMask(p, b, row0, rows, n);
  if (n > 0)
    vk.softmax(p, p, n, 0, rows);
}

/// Attention in blocks of query rows, the scores of one block at a time in
/// a buffer that stays in cache: P = softmax(scale * Q_blk K^T + mask) in
/// place, O_blk = P V, for every (batch, block) on the kernel threads (each
/// product on one BLAS thread). False for what attentionDims rejects, which
/// the unblocked path computes.
bool attentionBlocked(const Tensor &q, const Tensor &kt, const Tensor &v,
                      const Tensor *mask, float scale, Tensor &out) {
  std::optional<AttentionDims> dims = attentionDims(q, kt, v, mask);
  if (!dims)
    return false;
  const AttentionDims &a = *dims;
  Shape shape(q.shape().begin(), q.shape().end() - 1);
  shape.push_back(a.dv);
  checkOutput(out, DType::F32, shape, "Attention");
  if (a.batch == 0 || a.tq == 0 || a.dv == 0)
    return true;
  const int64_t block = attentionBlock(a.tk);
  int64_t blocks = (a.tq + block - 1) / block;
  const float *pq = q.data<float>(), *pk = kt.data<float>(),
              *pv = v.data<float>();
  float *po = out.data<float>();
  const VectorKernels &vk = vectorKernels();
  parallelFor(a.batch * blocks, block * a.tk * (2 * a.d + 2 * a.dv + 30),
              [&](int64_t i0, int64_t i1) {
                std::vector<float> p(static_cast<std::size_t>(block * a.tk));
                for (int64_t i = i0; i < i1; ++i) {
                  int64_t b = i / blocks, row0 = (i % blocks) * block;
                  int64_t rows = std::min(block, a.tq - row0);
                  int64_t n = a.keysOf(b, row0, rows);
                  attentionProbs(a, pq + (b * a.tq + row0) * a.d,
                                 pk + b * a.d * a.tk, b, row0, rows, n, scale,
                                 p.data(), vk);
                  sgemm(false, false, rows, a.dv, n, 1.f, p.data(), n,
                        pv + b * a.tk * a.dv, a.dv, 0.f,
                        po + (b * a.tq + row0) * a.dv, a.dv, "Attention");
                }
              });
  return true;
}

} // namespace

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
  if (attentionBlocked(q, kt, v, mask, scale, out))
    return;
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

void shoal::rt::cpu::attentionGrad(const Tensor &dy, const Tensor &q,
                                   const Tensor &kt, const Tensor &v,
                                   const Tensor *mask, float scale, Tensor &dq,
                                   Tensor &dkt, Tensor &dv) {
  const char *what = "AttentionGrad";
  if (isHalfDType(q.dtype())) { // in f32, each gradient rounded once
    DType t = q.dtype();
    for (auto [x, name] : {std::pair<const Tensor *, const char *>{&kt, "kt"},
                           {&v, "v"},
                           {&dy, "dy"}})
      if (x->dtype() != t)
        throw Error(fmt::format("{}: {} must be {} like q, got {}", what, name,
                                dtypeName(t), x->type().str()));
    if (mask && mask->dtype() != t && mask->dtype() != DType::F32)
      throw Error(fmt::format("{}: mask must be f32 or {} like q, got {}", what,
                              dtypeName(t), mask->type().str()));
    if (q.rank() >= 2 && v.rank() >= 1) {
      Shape out(q.shape().begin(), q.shape().end() - 1);
      out.push_back(v.shape().back());
      if (dy.shape() != out)
        throw Error(fmt::format("{}: dy must be {}{}, got {}", what,
                                dtypeName(t), formatShape(out),
                                dy.type().str()));
    }
    checkOutput(dq, t, q.shape(), what);
    checkOutput(dkt, t, kt.shape(), what);
    checkOutput(dv, t, v.shape(), what);
    Tensor gq(DType::F32, q.shape()), gk(DType::F32, kt.shape()),
        gv(DType::F32, v.shape()), m = mask ? stage(*mask) : Tensor();
    attentionGrad(toF32(dy), toF32(q), toF32(kt), toF32(v), mask ? &m : nullptr,
                  scale, gq, gk, gv);
    fromF32(gq, dq);
    fromF32(gk, dkt);
    return fromF32(gv, dv);
  }
  std::optional<AttentionDims> dims = attentionDims(q, kt, v, mask);
  if (!dims)
    throw Error(fmt::format("{}: q, kt, v and mask must be f32 and fit, or "
                            "q, kt, v and dy all f16 or all bf16 (got {}, "
                            "{}, {})",
                            what, q.type().str(), kt.type().str(),
                            v.type().str()));
  const AttentionDims &a = *dims;
  Shape out(q.shape().begin(), q.shape().end() - 1);
  out.push_back(a.dv);
  if (dy.type() != TensorType{DType::F32, out})
    throw Error(fmt::format("{}: dy must be f32{}, got {}", what,
                            formatShape(out), dy.type().str()));
  checkOutput(dq, DType::F32, q.shape(), what);
  checkOutput(dkt, DType::F32, kt.shape(), what);
  checkOutput(dv, DType::F32, v.shape(), what);
  if (a.batch == 0)
    return;
  const int64_t block = attentionBlock(a.tk);
  const float *pq = q.data<float>(), *pk = kt.data<float>(),
              *pv = v.data<float>(), *pdy = dy.data<float>();
  float *gq = dq.data<float>(), *gk = dkt.data<float>(), *gv = dv.data<float>();
  const VectorKernels &vk = vectorKernels();
  // A batch element per item: its dkt and dv sum over all its query blocks.
  parallelFor(
      a.batch, a.tq * a.tk * (6 * a.d + 4 * a.dv + 40),
      [&](int64_t b0, int64_t b1) {
        std::vector<float> p(static_cast<std::size_t>(block * a.tk)),
            ds(p.size());
        for (int64_t b = b0; b < b1; ++b) {
          const float *qb = pq + b * a.tq * a.d, *kb = pk + b * a.d * a.tk,
                      *vb = pv + b * a.tk * a.dv, *dyb = pdy + b * a.tq * a.dv;
          float *dqb = gq + b * a.tq * a.d, *dkb = gk + b * a.d * a.tk,
                *dvb = gv + b * a.tk * a.dv;
          // Every block adds into dkt and dv (a block that skips masked
          // keys adds nothing to theirs).
          std::fill(dkb, dkb + a.d * a.tk, 0.f);
          std::fill(dvb, dvb + a.tk * a.dv, 0.f);
          for (int64_t row0 = 0; row0 < a.tq; row0 += block) {
            int64_t rows = std::min(block, a.tq - row0);
            int64_t n = a.keysOf(b, row0, rows);
            const float *qr = qb + row0 * a.d, *dyr = dyb + row0 * a.dv;
            attentionProbs(a, qr, kb, b, row0, rows, n, scale, p.data(), vk);
            // dv += P^T dy; dP = dy v^T; dS = P (dP - rowsum(dP P)).
            sgemm(true, false, n, a.dv, rows, 1.f, p.data(), n, dyr, a.dv, 1.f,
                  dvb, a.dv, what);
            sgemm(false, true, rows, n, a.dv, 1.f, dyr, a.dv, vb, a.dv, 0.f,
                  ds.data(), n, what);
            if (n > 0)
              vk.softmaxGrad(p.data(), ds.data(), ds.data(), n, 0, rows);
            // dq = scale dS kt^T; dkt += scale q^T dS.
            sgemm(false, true, rows, a.d, n, scale, ds.data(), n, kb, a.tk, 0.f,
                  dqb + row0 * a.d, a.d, what);
            sgemm(true, false, a.d, n, rows, scale, qr, a.d, ds.data(), n, 1.f,
                  dkb, a.tk, what);
          }
        }
      });
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(matmulKernel) { matmul(input(in, 0), input(in, 1), out[0]); }

SHOAL_CPU_KERNEL(gemmKernel) {
  const OpAttrs &a = op.attrs;
  gemm(input(in, 0), input(in, 1), optionalInput(in, 2), a.alpha, a.beta,
       a.transA, a.transB, out[0], ctx.addInto);
}

SHOAL_CPU_KERNEL(attentionKernel) {
  attention(input(in, 0), input(in, 1), input(in, 2), optionalInput(in, 3),
            op.attrs.scale, out[0]);
}

SHOAL_CPU_KERNEL(attentionGradKernel) {
  attentionGrad(input(in, 0), input(in, 1), input(in, 2), input(in, 3),
                optionalInput(in, 4), op.attrs.scale, out[0], out[1], out[2]);
}

} // namespace

void shoal::rt::cpu::registerMatrixKernels() {
  registerCpuKernel(OpKind::MatMul, matmulKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Gemm, gemmKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Attention, attentionKernel, KernelWrites::All);
  registerCpuKernel(OpKind::AttentionGrad, attentionGradKernel,
                    KernelWrites::All);
}
