//===- LtMatmul.h - Matrix products through cuBLASLt ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Row-major products on the device through cublasLtMatmul: the layout
// translation is LtLayout.h's (unit-tested on the CPU), the descriptors and
// the heuristic's algorithm are made once per shape, type and alignment and
// cached per device, and one workspace per device serves every call.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_LTMATMUL_H
#define SHOAL_RUNTIME_CUDA_LTMATMUL_H

#include "LtLayout.h"
#include "Tensor.h"

#include <cuda_runtime_api.h>

namespace shoal {
namespace rt {
namespace cuda {

class CudaDevice;

/// C = alpha op(A) op(B) + beta C for row-major `p` (epilogue None),
/// batched by p's strides: A and B of element type `ab` (F32, BF16 or F16),
/// C of `cType` (F32, or `ab`), accumulated in f32. Enqueued on the
/// device's stream. Throws Error for other types or when cuBLASLt has no
/// algorithm.
void ltMatmul(CudaDevice &d, const lt::RowMajorProduct &p, const void *a,
              const void *b, DType ab, void *c, DType cType, float alpha,
              float beta);

/// Whether products of `ab` operands into a `cType` result go through
/// ltMatmul (16-bit operands, a result in their type or F32), unless
/// SHOAL_CUDA_MATMUL=cublas asks for the widened cuBLAS path.
bool ltHandles(DType ab, DType cType);

} // namespace cuda
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_LTMATMUL_H
