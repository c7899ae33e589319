//===- VectorImpl.cpp - Vectorized float loops, one ISA ----------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Compiled once per instruction set (lib/Runtime/CMakeLists.txt) with
// SHOAL_VECTOR_ISA naming it and -fopenmp-simd; the loops are plain C++
// that the compiler vectorizes (`omp simd` lets it reorder the float sums
// and maxima). Vector.h documents the functions.
//
//===----------------------------------------------------------------------===//

#include "LossMath.h"
#include "cpu/FastMath.h"
#include "cpu/Vector.h"

#include <cmath>
#include <limits>

#ifndef SHOAL_VECTOR_ISA
#error "compile VectorImpl.cpp with SHOAL_VECTOR_ISA set"
#endif

#define SHOAL_CAT_(a, b) a##b
#define SHOAL_CAT(a, b) SHOAL_CAT_(a, b)
#define SHOAL_STR_(a) #a
#define SHOAL_STR(a) SHOAL_STR_(a)

namespace shoal {
namespace rt {
namespace cpu {
namespace SHOAL_VECTOR_ISA {
namespace {

void expLoop(const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastExp(x[i]);
}

void erfLoop(const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastErf(x[i]);
}

void tanhLoop(const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastTanh(x[i]);
}

// GELU's constants: 1/sqrt(2) (erf form); sqrt(2/pi) and the cube's
// coefficient (tanh form).
constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kTanhScale = 0.7978845608028654f;
constexpr float kTanhCube = 0.044715f;

// GELU's loops take the bias and the form as template arguments: a loop that
// reads bias[j] under `bias ? ... : ...` is not vectorized (the load may not
// be made unconditional), and ran 4.5x slower without a bias than with one.
template <bool kBias, bool kTanh>
void geluRows(const float *x, const float *bias, float *y, int64_t n,
              int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      float z = kBias ? xr[j] + bias[j] : xr[j];
      if constexpr (kTanh) {
        // 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
        float u = kTanhScale * (z + kTanhCube * z * z * z);
        yr[j] = 0.5f * z * (1.f + fastTanh(u));
      } else {
        // 0.5 z (1 + erf(z / sqrt(2)))
        yr[j] = 0.5f * z * (1.f + fastErf(z * kSqrtHalf));
      }
    }
  }
}

template <bool kBias, bool kTanh>
void geluGradRows(const float *dy, const float *x, const float *bias, float *dz,
                  int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *dyr = dy + r * n, *xr = x + r * n;
    float *dr = dz + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      float z = kBias ? xr[j] + bias[j] : xr[j];
      if constexpr (kTanh) {
        // d/dz 0.5 z (1 + t), t = tanh(u), u = k (z + c z^3):
        // 0.5 (1 + t) + 0.5 z (1 - t^2) k (1 + 3 c z^2).
        float z2 = z * z;
        float t = fastTanh(kTanhScale * (z + kTanhCube * z2 * z));
        float d = 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * kTanhScale *
                                         (1.f + 3.f * kTanhCube * z2);
        dr[j] = dyr[j] * d;
      } else {
        // d/dz z Phi(z) = Phi(z) + z phi(z), phi(z) = exp(-z^2/2)/sqrt(2 pi).
        float cdf = 0.5f * (1.f + fastErf(z * kSqrtHalf));
        float pdf = 0.3989422804014327f * fastExp(-0.5f * z * z);
        dr[j] = dyr[j] * (cdf + z * pdf);
      }
    }
  }
}

void gelu(const float *x, const float *bias, float *y, int64_t n, int64_t r0,
          int64_t r1, bool tanhForm) {
  if (bias)
    return tanhForm ? geluRows<true, true>(x, bias, y, n, r0, r1)
                    : geluRows<true, false>(x, bias, y, n, r0, r1);
  tanhForm ? geluRows<false, true>(x, bias, y, n, r0, r1)
           : geluRows<false, false>(x, bias, y, n, r0, r1);
}

void geluGrad(const float *dy, const float *x, const float *bias, float *dz,
              int64_t n, int64_t r0, int64_t r1, bool tanhForm) {
  if (bias)
    return tanhForm ? geluGradRows<true, true>(dy, x, bias, dz, n, r0, r1)
                    : geluGradRows<true, false>(dy, x, bias, dz, n, r0, r1);
  tanhForm ? geluGradRows<false, true>(dy, x, bias, dz, n, r0, r1)
           : geluGradRows<false, false>(dy, x, bias, dz, n, r0, r1);
}

float rowMax(const float *x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j)
    mx = x[j] > mx ? x[j] : mx;
  return mx;
}

/// The max of a row that softmax subtracts: 0 for a row of -inf (its
/// exponentials are then 0 and its sum 0, which gives NaN like PyTorch).
float shiftOf(const float *x, int64_t n) {
  float mx = rowMax(x, n);
  return mx == -std::numeric_limits<float>::infinity() ? 0.f : mx;
}

/// y[j] = exp(x[j] - max(x)) for j < n; returns their sum.
float storeShiftedExp(const float *x, float *y, int64_t n) {
  float mx = shiftOf(x, n);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    float e = fastExp(x[j] - mx);
    y[j] = e;
    sum += e;
  }
  return sum;
}

void softmax(const float *x, float *y, int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float *yr = y + r * n;
    float inv = 1.f / storeShiftedExp(x + r * n, yr, n);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      yr[j] *= inv;
  }
}

/// Mean and 1 / sqrt(var + epsilon) of x[0..n) (biased variance, two
/// passes): layerNorm's statistics, which its gradient recomputes. With
/// `rms` the mean is taken as 0 (RMSNorm: var = mean(x^2)).
void meanInvStd(const float *x, int64_t n, float epsilon, bool rms, float &mu,
                float &inv) {
  mu = 0.f;
  if (!rms) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j)
      sum += x[j];
    mu = n ? sum / static_cast<float>(n) : 0.f;
  }
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < n; ++j) {
    float d = x[j] - mu;
    sq += d * d;
  }
  float var = n ? sq / static_cast<float>(n) : 0.f;
  inv = 1.f / std::sqrt(var + epsilon);
}

void layerNorm(const float *x, const float *g, const float *b, float *y,
               int64_t n, float epsilon, bool rms, int64_t r0, int64_t r1,
               float *mean, float *invStd) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float mu, inv;
    meanInvStd(xr, n, epsilon, rms, mu, inv);
    if (b) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        yr[j] = (xr[j] - mu) * inv * g[j] + b[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        yr[j] = (xr[j] - mu) * inv * g[j];
    }
    if (mean)
      mean[r] = mu;
    if (invStd)
      invStd[r] = inv;
  }
}

void softmaxGrad(const float *y, const float *dy, float *dx, int64_t n,
                 int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *yr = y + r * n, *dr = dy + r * n;
    float *xr = dx + r * n;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j)
      dot += yr[j] * dr[j];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      xr[j] = softmaxGradElement(yr[j], dr[j], dot);
  }
}

void layerNormGrad(const float *x, const float *g, const float *dy, float *dx,
                   int64_t n, float epsilon, bool rms, int64_t r0, int64_t r1) {
  const float invN = n ? 1.f / static_cast<float>(n) : 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = x + r * n, *dr = dy + r * n;
    float *or_ = dx + r * n;
    float mu, inv;
    meanInvStd(xr, n, epsilon, rms, mu, inv);
    // mean(g) and mean(g * xhat), g = dy * scale.
    float sumG = 0.f, sumGX = 0.f;
#pragma omp simd reduction(+ : sumG, sumGX)
    for (int64_t j = 0; j < n; ++j) {
      float gj = dr[j] * g[j];
      sumG += gj;
      sumGX += gj * normalized(xr[j], mu, inv);
    }
    // RMSNorm has no mean to subtract, nor its gradient's mean(g) term.
    float meanG = rms ? 0.f : sumG * invN, meanGX = sumGX * invN;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      or_[j] = layerNormGradElement(dr[j], g[j], normalized(xr[j], mu, inv),
                                    meanG, meanGX, inv);
    }
  }
}

void logSumExp(const float *x, float *lse, int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = x + r * n;
    float mx = shiftOf(xr, n);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j)
      sum += fastExp(xr[j] - mx);
    lse[r] = mx + std::log(sum);
  }
}

void crossEntropyGrad(const float *x, const int64_t *label, const float *d,
                      float *dx, int64_t n, int64_t ignore, int64_t r0,
                      int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float *dr = dx + r * n;
    if (label[r] == ignore) {
      for (int64_t j = 0; j < n; ++j)
        dr[j] = 0.f;
      continue;
    }
    float sum = storeShiftedExp(x + r * n, dr, n);
    float scale = d[r] / sum;
    float p = dr[label[r]] / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      dr[j] = crossEntropyGradAway(dr[j], scale);
    dr[label[r]] = crossEntropyGradAtLabel(p, d[r]);
  }
}

} // namespace

// AdamWImpl.cpp, compiled with this one and without contractions.
void adamw(const AdamWScalars &s, float *w, const float *g, float *m, float *v,
           int64_t i0, int64_t i1);

/// This instruction set's table (Vector.cpp picks one).
const VectorKernels *table() {
  static const VectorKernels kernels = {SHOAL_STR(SHOAL_VECTOR_ISA),
                                        expLoop,
                                        erfLoop,
                                        tanhLoop,
                                        gelu,
                                        geluGrad,
                                        softmax,
                                        layerNorm,
                                        softmaxGrad,
                                        layerNormGrad,
                                        logSumExp,
                                        crossEntropyGrad,
                                        adamw};
  return &kernels;
}

} // namespace SHOAL_VECTOR_ISA
} // namespace cpu
} // namespace rt
} // namespace shoal
