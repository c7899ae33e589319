//===- AdamWImpl.cpp - The AdamW update loop, one ISA -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Compiled with VectorImpl.cpp, once per instruction set, but with
// -ffp-contract=off (lib/Runtime/CMakeLists.txt): the update must round as
// torch's float32 kernels do, so `w * decay + q` may not become one FMA. The
// two products that torch computes with an FMA are computed in double, where
// a float times a float is exact, then rounded once; an FMA there could not
// change them. Every ISA gives the same bits.
//
//===----------------------------------------------------------------------===//

#include "cpu/Vector.h"

#include <cmath>

#ifndef SHOAL_VECTOR_ISA
#error "compile AdamWImpl.cpp with SHOAL_VECTOR_ISA set"
#endif

namespace shoal {
namespace rt {
namespace cpu {
namespace SHOAL_VECTOR_ISA {

void adamw(const AdamWScalars &s, float *w, const float *g, float *m, float *v,
           int64_t i0, int64_t i1) {
  const float gradScale = s.scaled ? s.gradScale : 1.f;
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) {
    float grad = g[i] * gradScale;
    // param.mul_(1 - lr * weight_decay)
    float param = w[i] * s.decay;
    // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    float expAvg = static_cast<float>(double(grad) * double(s.oneMinusBeta1) +
                                      double(m[i] * s.beta1));
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    float expAvgSq = static_cast<float>(
        double(s.oneMinusBeta2 * grad) * double(grad) + double(v[i] * s.beta2));
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    float denom = std::sqrt(expAvgSq) / s.bc2Sqrt + s.eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    w[i] = param + s.negStepSize * expAvg / denom;
    m[i] = expAvg;
    v[i] = expAvgSq;
  }
}

} // namespace SHOAL_VECTOR_ISA
} // namespace cpu
} // namespace rt
} // namespace shoal
