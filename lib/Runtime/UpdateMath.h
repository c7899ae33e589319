//===- UpdateMath.h - Optimizer arithmetic of CPU and GPU ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The per-element arithmetic of the optimizer updates, as functions that
// the CPU kernels (cpu/AdamWImpl.cpp) and the CUDA kernels (cuda/Kernels.cu)
// both call, so that the CPU tests check the GPU's arithmetic too; and the
// per-step scalars, computed once on the host for either. Light: no CUDA
// header, no Tensor.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_UPDATEMATH_H
#define SHOAL_RUNTIME_UPDATEMATH_H

#include "HostDevice.h"

#include <cmath>
#include <cstdint>

namespace shoal {
namespace rt {

struct OptimizerParams;

/// AdamW's per-step float32 scalars, as torch's `_single_tensor_adamw` hands
/// them to its float kernels (adamwScalars computes them).
struct AdamWScalars {
  float gradScale; // applied to the gradient when `scaled`
  bool scaled;
  float decay; // 1 - lr * weight_decay
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  float bc2Sqrt; // sqrt(1 - beta2^t)
  float eps;
  float negStepSize; // -lr / (1 - beta1^t)
};

/// The scalars of step `step` (1-based; Updates.cpp): the learning rate of
/// the schedule and the bias corrections in double, as Python computes
/// them, then rounded to float.
AdamWScalars adamwScalars(const OptimizerParams &p, int64_t step,
                          float gradScale);

/// (Static: the per-ISA CPU objects each keep their own copy, so that the
/// linker never hands one ISA's copy to another's caller.)
/// One element's AdamW update in place, in the order of torch's
/// `_single_tensor_adamw` (torch 1.13). The two products torch computes
/// with an FMA are computed in double, where a float times a float is
/// exact, then rounded once. Compile the CPU caller without contractions
/// (-ffp-contract=off) so that `w * decay + q` stays two roundings, as in
/// torch's float32 kernels.
SHOAL_HOST_DEVICE static inline void
adamwElement(const AdamWScalars &s, float &w, float g, float &m, float &v) {
  float grad = s.scaled ? g * s.gradScale : g;
  // param.mul_(1 - lr * weight_decay)
  float param = w * s.decay;
  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
  float expAvg = static_cast<float>(double(grad) * double(s.oneMinusBeta1) +
                                    double(m * s.beta1));
  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  float expAvgSq = static_cast<float>(
      double(s.oneMinusBeta2 * grad) * double(grad) + double(v * s.beta2));
  // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
  float denom = sqrtf(expAvgSq) / s.bc2Sqrt + s.eps;
  // param.addcdiv_(exp_avg, denom, value=-step_size)
  w = param + s.negStepSize * expAvg / denom;
  m = expAvg;
  v = expAvgSq;
}

/// SGD's per-step float32 scalars (torch's `_single_tensor_sgd`, no
/// dampening, no Nesterov).
struct SgdScalars {
  float gradScale; // applied to the gradient when `scaled`
  bool scaled;
  float weightDecay; // applied when `decay`
  bool decay;
  float momentum; // a momentum buffer when `useMomentum`
  bool useMomentum;
  bool first; // step 1: the buffer starts as the gradient
  float negLr;
};

/// The scalars of step `step` (1-based; Updates.cpp).
SgdScalars sgdScalars(const OptimizerParams &p, int64_t step, float gradScale);

/// a * b + c rounded once, like an FMA instruction: the product of two
/// floats is exact in double, so only the sum rounds (twice, to double and
/// to float, which differs from one rounding only when the double lands on a
/// float tie: rarely enough, and without needing FMA hardware).
SHOAL_HOST_DEVICE static inline float fusedMulAdd(float a, float b, float c) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) +
                            static_cast<double>(c));
}

/// One element's SGD update in place, in the order of torch's
/// `_single_tensor_sgd` (torch 1.13); `buf` is read and written only with
/// momentum.
SHOAL_HOST_DEVICE static inline void sgdElement(const SgdScalars &s, float &w,
                                                float g, float *buf) {
  float d = s.scaled ? g * s.gradScale : g;
  // d_p = d_p.add(param, alpha=weight_decay)
  if (s.decay)
    d = fusedMulAdd(w, s.weightDecay, d);
  if (s.useMomentum) {
    // buf = clone(d_p) at the first step, else
    // buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
    float b = s.first ? d : *buf * s.momentum + d;
    *buf = b;
    d = b;
  }
  // param.add_(d_p, alpha=-lr)
  w = fusedMulAdd(d, s.negLr, w);
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_UPDATEMATH_H
