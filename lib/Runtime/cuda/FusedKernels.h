//===- FusedKernels.h - CUDA kernels of the fused ops -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Kernels for the ops shoal-fuse makes (shoal.gelu, shoal.add_layer_norm).
// Device pointers, host shapes, enqueued on `stream`; errors throw Error.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_FUSEDKERNELS_H
#define SHOAL_RUNTIME_CUDA_FUSEDKERNELS_H

#include "Tensor.h"

#include <cuda_runtime_api.h>

namespace shoal {
namespace rt {
namespace cuda {

/// out = gelu(x + bias) with `bias` (may be null) of `biasSize` elements
/// broadcast along the last `biasSize` elements of each row (the usual
/// `[..., C] + [C]`); `n` elements in all; the erf form, or with
/// `tanhForm` the tanh approximation.
void gelu(const float *x, const float *bias, int64_t biasSize, float *out,
          int64_t n, bool tanhForm, cudaStream_t stream);

/// dz = dy * gelu'(x + bias), `bias` and the form as gelu's.
void geluGrad(const float *dy, const float *x, const float *bias,
              int64_t biasSize, float *dz, int64_t n, bool tanhForm,
              cudaStream_t stream);

/// sum = a + b; y = layer_norm(sum) over rows of `cols` elements, with
/// `scale` and `bias` (may be null) of `cols` elements each.
void addLayerNorm(const float *a, const float *b, const float *scale,
                  const float *bias, float *sum, float *y, int64_t rows,
                  int64_t cols, float epsilon, cudaStream_t stream);

} // namespace cuda
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_FUSEDKERNELS_H
