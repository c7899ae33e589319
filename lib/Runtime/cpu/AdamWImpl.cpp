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
  // (adamwElement, UpdateMath.h: the CUDA kernel's arithmetic too.)
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i)
    adamwElement(s, w[i], g[i], m[i], v[i]);
}

} // namespace SHOAL_VECTOR_ISA
} // namespace cpu
} // namespace rt
} // namespace shoal
