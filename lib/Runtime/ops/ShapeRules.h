//===- ShapeRules.h - Result shapes of ops ----------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The shape computations of the type rules (ops/TypeRules.h), which kernels
// of every backend also use to check their outputs. Part of the op model,
// which no backend owns.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPS_SHAPERULES_H
#define SHOAL_RUNTIME_OPS_SHAPERULES_H

#include "OpAttrs.h"
#include "Tensor.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

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
/// Concat's result shape along normalized `axis`: every input has the same
/// rank and the same dimensions except `axis`; throws Error otherwise.
Shape concatShape(const std::vector<Shape> &inputs, int64_t axis);

/// ONNX Slice on one shape: `starts`, `ends`, `axes` and `steps` as the op
/// takes them (axes may be negative, empty axes means 0..n-1, empty steps
/// means 1s). Resolves them with ONNX's clamping rules into the first index
/// and step of every dimension (`first`, `step`, both of x's rank) and the
/// result shape; throws Error on bad lengths, repeated axes or a zero step.
Shape sliceShape(const Shape &x, const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &ends,
                 const std::vector<int64_t> &axes,
                 const std::vector<int64_t> &steps, std::vector<int64_t> &first,
                 std::vector<int64_t> &step);

/// The spatial output size of a window along one dimension; with ceil
/// mode, a last window that would start in the end padding is dropped (ONNX,
/// onnx/onnx#5741). Throws Error if the dilated kernel is larger than the
/// padded input.
int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t padBegin, int64_t padEnd, int64_t dilation,
                         bool ceilMode);
/// [N, channels, out spatial...] for x [N, C, spatial...].
Shape windowOutputShape(const Shape &x, int64_t channels,
                        const WindowParams &w);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPS_SHAPERULES_H
