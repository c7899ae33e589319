//===- Vector.h - Vectorized float loops of the CPU kernels -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The inner loops of the float kernels that are not matrix products: exp,
// erf, tanh, GELU with its bias, softmax, LayerNorm and softmax
// cross-entropy rows. VectorImpl.cpp holds them once and is compiled once
// per instruction set (AVX-512, AVX2 + FMA and the baseline on x86-64, the
// baseline elsewhere), the way ATen's DispatchStub builds its CPU kernels;
// vectorKernels() picks the widest one the CPU supports, once. The
// environment variable SHOAL_CPU_ISA (avx512, avx2 or baseline) picks a
// narrower one, for tests and comparisons.
//
// Each function works on contiguous float rows and a range of them, so the
// callers can split the rows over threads (parallelFor, Common.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_VECTOR_H
#define SHOAL_RUNTIME_CPU_VECTOR_H

#include <cstdint>

#include "UpdateMath.h"

namespace shoal {
namespace rt {
namespace cpu {

/// AdamW's per-step float32 scalars (UpdateMath.h, shared with the CUDA
/// kernel).
using rt::AdamWScalars;

struct VectorKernels {
  /// The instruction set they were compiled for: "avx512", "avx2" or
  /// "baseline".
  const char *isa;
  /// y[i] = f(x[i]) for i < n (FastMath.h's approximations).
  void (*exp)(const float *x, float *y, int64_t n);
  void (*erf)(const float *x, float *y, int64_t n);
  void (*tanh)(const float *x, float *y, int64_t n);
  /// GELU of rows [r0, r1) of x[rows, n], plus bias[n] first when bias is
  /// not null: the erf form, or with `tanhForm` the tanh approximation.
  void (*gelu)(const float *x, const float *bias, float *y, int64_t n,
               int64_t r0, int64_t r1, bool tanhForm);
  /// dz = dy * gelu'(x + bias) on rows [r0, r1) of dy, x and dz [rows, n],
  /// bias[n] as gelu's (may be null), in the form `tanhForm` picks.
  void (*geluGrad)(const float *dy, const float *x, const float *bias,
                   float *dz, int64_t n, int64_t r0, int64_t r1, bool tanhForm);
  /// Softmax of rows [r0, r1) of x[rows, n] (n > 0).
  void (*softmax)(const float *x, float *y, int64_t n, int64_t r0, int64_t r1);
  /// LayerNorm of rows [r0, r1) of x[rows, n] with scale g[n] and bias b[n]
  /// (b may be null); mean and invStd (per row, may be null) get the
  /// statistics. With `rms`: RMSNorm (the mean taken as 0).
  void (*layerNorm)(const float *x, const float *g, const float *b, float *y,
                    int64_t n, float epsilon, bool rms, int64_t r0, int64_t r1,
                    float *mean, float *invStd);
  /// dx = y * (dy - sum(dy * y)) on rows [r0, r1) of [rows, n] (softmax's
  /// gradient from its output y).
  void (*softmaxGrad)(const float *y, const float *dy, float *dx, int64_t n,
                      int64_t r0, int64_t r1);
  /// LayerNorm's input gradient on rows [r0, r1) of x, dy, dx [rows, n] with
  /// scale g[n]: (g dy - mean(g dy) - xhat mean(g dy xhat)) / sqrt(var + eps),
  /// the statistics recomputed as layerNorm computes them. With `rms`:
  /// RMSNorm's, (g dy - xhat mean(g dy xhat)) / sqrt(mean(x^2) + eps).
  void (*layerNormGrad)(const float *x, const float *g, const float *dy,
                        float *dx, int64_t n, float epsilon, bool rms,
                        int64_t r0, int64_t r1);
  /// log(sum_j exp(x[j])) of rows [r0, r1) of x[rows, n] (n > 0), into
  /// lse[r].
  void (*logSumExp)(const float *x, float *lse, int64_t n, int64_t r0,
                    int64_t r1);
  /// dx[r, j] = (softmax(x[r])[j] - (j == label[r])) * d[r] for the rows
  /// [r0, r1) of x[rows, n]; a row whose label is `ignore` gets zeros.
  void (*crossEntropyGrad)(const float *x, const int64_t *label, const float *d,
                           float *dx, int64_t n, int64_t ignore, int64_t r0,
                           int64_t r1);
  /// One AdamW step on elements [i0, i1) of the weight w, gradient g and
  /// moments m and v, bit for bit as the scalar loop (AdamWImpl.cpp).
  void (*adamw)(const AdamWScalars &s, float *w, const float *g, float *m,
                float *v, int64_t i0, int64_t i1);
};

/// The kernels of the widest instruction set this CPU has (or of
/// SHOAL_CPU_ISA's).
const VectorKernels &vectorKernels();

/// The kernels of `isa` ("avx512", "avx2" or "baseline"), or null when this
/// build or this CPU does not have it.
const VectorKernels *vectorKernelsFor(const char *isa);

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_VECTOR_H
