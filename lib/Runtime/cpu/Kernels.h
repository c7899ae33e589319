//===- Kernels.h - CPU kernels of the runtime -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// fp32 (and, where ONNX allows, integer) kernels with ONNX semantics on dense
// row-major tensors. Every kernel writes into a preallocated output whose
// type the caller took from the plan; kernels check that the type is what the
// inputs imply and throw Error otherwise, so a bad plan cannot make them read
// or write out of bounds. Axes passed in are already normalized (>= 0).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_KERNELS_H
#define SHOAL_RUNTIME_CPU_KERNELS_H

#include "Tensor.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {
namespace cpu {

//===----------------------------------------------------------------------===//
// Shape rules (shared with plan validation)
//===----------------------------------------------------------------------===//

/// numpy broadcasting of two shapes; throws Error if they do not broadcast.
Shape broadcastShape(const Shape &a, const Shape &b);
/// Whether `from` broadcasts to `to` without changing `to`.
bool broadcastsTo(const Shape &from, const Shape &to);
/// numpy.matmul's result shape (1-D operands and batch broadcasting).
Shape matmulShape(const Shape &a, const Shape &b);
/// Gemm's (M, N) result shape.
Shape gemmShape(const Shape &a, const Shape &b, bool transA, bool transB);
/// Gather's result shape: data[:axis] + indices + data[axis+1:].
Shape gatherShape(const Shape &data, const Shape &indices, int64_t axis);
/// Transpose's result shape.
Shape transposeShape(const Shape &x, const std::vector<int64_t> &perm);
/// Reduce's result shape for sorted, unique, normalized `axes`.
Shape reduceShape(const Shape &x, const std::vector<int64_t> &axes,
                  bool keepdims);

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// numpy.matmul on f32 with cblas_sgemm per batch.
void matmul(const Tensor &a, const Tensor &b, Tensor &out);

/// Y = alpha * op(A) * op(B) + beta * C, C optional and unidirectionally
/// broadcast to (M, N).
void gemm(const Tensor &a, const Tensor &b, const Tensor *c, float alpha,
          float beta, bool transA, bool transB, Tensor &out);

enum class BinaryOp { Add, Sub, Mul, Div, Pow };
/// Element-wise with numpy broadcasting. f32 for all; i64 and i32 for Add,
/// Sub and Mul. Pow also takes an integer exponent tensor.
void binary(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out);

enum class UnaryOp { Erf, Tanh, Relu, Sqrt, Exp, Neg, Sigmoid };
/// Element-wise on f32 (Neg and Relu also on i64 and i32).
void unary(UnaryOp op, const Tensor &x, Tensor &out);

/// Numerically stable softmax along `axis`.
void softmax(const Tensor &x, int64_t axis, Tensor &out);

/// LayerNormalization over dimensions axis..end, accumulating in double.
/// `scale` and `bias` broadcast to x.shape[axis:]; `mean` and `invStdDev`
/// (optional outputs) have shape x.shape[:axis] + [1] * (rank - axis).
void layerNorm(const Tensor &x, const Tensor &scale, const Tensor *bias,
               int64_t axis, float epsilon, Tensor &out, Tensor *mean,
               Tensor *invStdDev);

/// Gather along `axis` with i64 or i32 indices (negative ones count from the
/// end); throws Error naming the index when one is out of range.
void gather(const Tensor &data, const Tensor &indices, int64_t axis,
            Tensor &out);

/// Permutes the dimensions; any dtype.
void transpose(const Tensor &x, const std::vector<int64_t> &perm, Tensor &out);

enum class ReduceOp { Sum, Mean };
/// Reduces f32 `x` over sorted, unique `axes` (double accumulation). The
/// output may have kept or dropped the reduced dimensions.
void reduce(ReduceOp op, const Tensor &x, const std::vector<int64_t> &axes,
            Tensor &out);

/// Copies block `index` of `numBlocks` equal blocks of `x` along `dim`.
void sliceBlock(const Tensor &x, int64_t dim, int64_t numBlocks, int64_t index,
                Tensor &out);

/// Places `numBlocks` dense blocks of shape `out` with dimension `dim`
/// divided by numBlocks, stored one after the other in `blocks`, side by side
/// along `dim` of `out` (the reordering after an MPI all-gather).
void concatBlocks(const uint8_t *blocks, int64_t numBlocks, int64_t dim,
                  Tensor &out);

/// Exact GELU of `x + bias` (bias optional, broadcast to x).
void gelu(const Tensor &x, const Tensor *bias, Tensor &out);

/// sum = a + b; out = LayerNormalization(sum) over dims axis..end.
void addLayerNorm(const Tensor &a, const Tensor &b, const Tensor &scale,
                  const Tensor *bias, int64_t axis, float epsilon, Tensor &sum,
                  Tensor &out);

/// softmax(q @ kt * scale + mask) @ v over the last axis.
void attention(const Tensor &q, const Tensor &kt, const Tensor &v,
               const Tensor *mask, float scale, Tensor &out);

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_KERNELS_H
