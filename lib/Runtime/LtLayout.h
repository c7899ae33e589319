//===- LtLayout.h - Row-major products as cuBLASLt calls --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// shoal's tensors are row-major; cuBLASLt's matrices are column-major. A
// row-major C[m, n] read as column-major is C^T[n, m], so the product
// C = op(A) op(B) is asked of cuBLASLt as C^T = op(B)^T op(A)^T: its
// first operand is B's buffer, its second A's, its M is n and its N is m
// (the usual swap; TransformerEngine and PyTorch's at::cuda::blas do the
// same). This file makes that translation, the epilogue's (a bias along
// the row-major result's columns is cuBLASLt's bias along its rows; the
// GELU auxiliary output has the result's layout; the bias gradient of a
// row-major operand is the reduction cuBLASLt's epilogue does on the
// swapped one) and the leading dimensions, as pure functions with no CUDA
// header, so that the CPU tests check it (unittests/Runtime, against a
// column-major emulation of what cuBLASLt computes). The CUDA backend
// builds its cublasLtMatmul descriptors from an LtMatmul (issue 46: not
// wired in yet; the products still go through cublasGemmStridedBatchedEx).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_LTLAYOUT_H
#define SHOAL_RUNTIME_LTLAYOUT_H

#include <cstdint>
#include <string>

namespace shoal {
namespace rt {
namespace lt {

/// What the product's result gets on its way out (cuBLASLt's epilogues).
enum class Epilogue {
  None,
  /// + bias[j] on every row of the row-major result (a Gemm's C vector).
  Bias,
  /// gelu(result (+ bias)), the pre-activation kept in `aux` for the
  /// backward (GELU_AUX / GELU_AUX_BIAS).
  Gelu,
  GeluBias,
  /// result * gelu'(aux), aux the forward's pre-activation (DGELU).
  DGelu,
  /// A bias gradient written beside the product: g[i] = sum over kk of
  /// op(A)[i, kk] (length m; cuBLASLt's BGRADB after the swap), or g[j] =
  /// sum over kk of op(B)[kk, j] (length n; BGRADA), e.g. a Linear's bias
  /// gradient, the column sums of dY, beside its weight gradient X^T dY.
  BiasGradOfA,
  BiasGradOfB,
};

/// A row-major product C[b] = alpha op(A[b]) op(B[b]) + beta C[b], b <
/// batch: op(A) is [m, k] (A stored [k, m] when transA), op(B) is [k, n]
/// (B stored [n, k] when transB); each batch entry `stride*` elements after
/// the previous one (0: the same matrix for every entry, a broadcast).
struct RowMajorProduct {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool transA = false, transB = false;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  Epilogue epilogue = Epilogue::None;
};

/// cuBLASLt's column-major call for it: D = alpha op(first) op(second) +
/// beta C, first/second being the buffers of the row-major B and A.
struct LtMatmul {
  /// Which row-major operand each cuBLASLt operand reads: 'B' then 'A'.
  char first = 'B', second = 'A';
  bool transFirst = false, transSecond = false; ///< CUBLAS_OP_T when true
  int64_t m = 0, n = 0, k = 0, batch = 1;
  /// Leading dimensions of the stored (column-major) matrices.
  int64_t ldFirst = 0, ldSecond = 0, ldC = 0;
  int64_t strideFirst = 0, strideSecond = 0, strideC = 0;
  /// The epilogue as cuBLASLt names it: "DEFAULT", "BIAS", "GELU_AUX",
  /// "GELU_AUX_BIAS", "DGELU", "BGRADA", "BGRADB".
  std::string epilogue = "DEFAULT";
  /// Length of the bias (or bias gradient) vector: cuBLASLt's M for BIAS
  /// and BGRADA, N for BGRADB; 0 without one.
  int64_t biasLength = 0;
  /// Leading dimension of the auxiliary (GELU pre-activation) matrix: the
  /// result's; 0 without one.
  int64_t ldAux = 0;
};

/// The translation; throws std::invalid_argument for sizes below zero.
LtMatmul toLt(const RowMajorProduct &p);

} // namespace lt
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_LTLAYOUT_H
