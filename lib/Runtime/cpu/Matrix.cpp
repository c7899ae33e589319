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
#include "cpu/Registry.h"
#include "cpu/Vector.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>

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
// Attention
//===----------------------------------------------------------------------===//

namespace {
/// One block of attention: rows of q [rows, d] against kt [d, tk] and
/// v [tk, dv], with mask rows [rows, tk] (or null), into o [rows, dv]; s is
/// a [rows, tk] buffer for the scores.
void attentionRows(const float *q, const float *kt, const float *v,
                   const float *mask, int64_t rows, int64_t tk, int64_t d,
                   int64_t dv, float scale, float *s, float *o,
                   const VectorKernels &vk) {
  sgemm(false, false, rows, tk, d, scale, q, d, kt, tk, 0.f, s, tk,
        "Attention");
  if (mask)
    for (int64_t i = 0; i < rows * tk; ++i)
      s[i] += mask[i];
  if (tk > 0)
    vk.softmax(s, s, tk, 0, rows);
  sgemm(false, false, rows, dv, tk, 1.f, s, tk, v, dv, 0.f, o, dv, "Attention");
}

/// Attention in blocks of query rows, the scores of one block at a time in
/// a buffer that stays in cache: S = scale * Q_blk K^T + mask, softmax in
/// place, O_blk = S V, for every (batch, block) on the kernel threads (each
/// product on one BLAS thread). It takes f32 q [..., Tq, D], kt [..., D, Tk]
/// and v [..., Tk, Dv] with the same batch dimensions, and a mask [Tq, Tk]
/// (leading dimensions of 1 allowed) or none; false for anything else, which
/// the unblocked path computes.
bool attentionBlocked(const Tensor &q, const Tensor &kt, const Tensor &v,
                      const Tensor *mask, float scale, Tensor &out) {
  if (q.dtype() != DType::F32 || kt.dtype() != DType::F32 ||
      v.dtype() != DType::F32 || q.rank() < 2 || kt.rank() != q.rank() ||
      v.rank() != q.rank())
    return false;
  const Shape &qs = q.shape(), &ks = kt.shape(), &vs = v.shape();
  std::size_t r = qs.size();
  if (!std::equal(qs.begin(), qs.end() - 2, ks.begin()) ||
      !std::equal(qs.begin(), qs.end() - 2, vs.begin()))
    return false;
  int64_t tq = qs[r - 2], d = qs[r - 1], tk = ks[r - 1], dv = vs[r - 1];
  if (ks[r - 2] != d || vs[r - 2] != tk)
    return false;
  const float *pm = nullptr;
  if (mask) {
    const Shape &ms = mask->shape();
    if (mask->dtype() != DType::F32 || ms.size() < 2 || ms.size() > r ||
        ms[ms.size() - 2] != tq || ms.back() != tk ||
        mask->numElements() != tq * tk)
      return false;
    pm = mask->data<float>();
  }
  Shape shape(qs.begin(), qs.end() - 1);
  shape.push_back(dv);
  checkOutput(out, DType::F32, shape, "Attention");
  int64_t batch = numElements(Shape(qs.begin(), qs.end() - 2));
  if (batch == 0 || tq == 0 || dv == 0)
    return true;
  const int64_t block = 64;
  int64_t blocks = (tq + block - 1) / block;
  const float *pq = q.data<float>(), *pk = kt.data<float>(),
              *pv = v.data<float>();
  float *po = out.data<float>();
  const VectorKernels &vk = vectorKernels();
  parallelFor(batch * blocks, block * tk * (2 * d + 2 * dv + 30),
              [&](int64_t i0, int64_t i1) {
                std::vector<float> s(static_cast<std::size_t>(block * tk));
                for (int64_t i = i0; i < i1; ++i) {
                  int64_t b = i / blocks, row0 = (i % blocks) * block;
                  attentionRows(pq + (b * tq + row0) * d, pk + b * d * tk,
                                pv + b * tk * dv, pm ? pm + row0 * tk : nullptr,
                                std::min(block, tq - row0), tk, d, dv, scale,
                                s.data(), po + (b * tq + row0) * dv, vk);
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

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(matmulKernel) { matmul(input(in, 0), input(in, 1), out[0]); }

SHOAL_CPU_KERNEL(gemmKernel) {
  const OpAttrs &a = op.attrs;
  gemm(input(in, 0), input(in, 1), optionalInput(in, 2), a.alpha, a.beta,
       a.transA, a.transB, out[0]);
}

SHOAL_CPU_KERNEL(attentionKernel) {
  attention(input(in, 0), input(in, 1), input(in, 2), optionalInput(in, 3),
            op.attrs.scale, out[0]);
}

} // namespace

void shoal::rt::cpu::registerMatrixKernels() {
  registerCpuKernel(OpKind::MatMul, matmulKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Gemm, gemmKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Attention, attentionKernel, KernelWrites::All);
}
