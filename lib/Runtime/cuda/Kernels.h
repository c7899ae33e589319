//===- Kernels.h - CUDA kernels of the runtime ------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Device counterparts of the CPU kernels in cpu/Kernels.h, with the same ONNX
// semantics on dense row-major tensors. Every function takes device pointers
// and host-side shapes, enqueues its work on `stream` and returns: it never
// synchronizes, allocates or copies between host and device (shapes and
// strides travel as kernel arguments). Shape and dtype errors are thrown as
// Error before anything is enqueued; a failed launch is thrown as Error with
// CUDA's message. Axes are already normalized (>= 0). Tensors may have rank 8
// at most where the kernel needs their shape on the device.
//
// This header is plain C++: the kernels themselves live in Kernels.cu.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_KERNELS_H
#define SHOAL_RUNTIME_CUDA_KERNELS_H

#include "Tensor.h"
#include "UpdateMath.h"
#include "ops/MathKinds.h"
#include "ops/ShapeRules.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {
namespace cuda {

/// The largest rank the kernels accept.
constexpr int kMaxRank = 8;

/// Element-wise `op` with numpy broadcasting; `outShape` must be the
/// broadcast of the two input shapes. f32 for every op; i64 and i32 for Add,
/// Sub and Mul. (An integer Pow exponent must be cast to f32 first.) `out`
/// may be `a` or `b` where that operand has the output's shape.
void binary(arith::BinaryOp op, DType dtype, const void *a, const Shape &aShape,
            const void *b, const Shape &bShape, void *out,
            const Shape &outShape, cudaStream_t stream);

/// Element-wise `op` on `n` f32 values; `in` may equal `out`.
void unary(arith::UnaryOp op, const float *in, float *out, int64_t n,
           cudaStream_t stream);

/// Numerically stable softmax of f32 `in` along `axis`; `in` may equal `out`.
void softmax(const float *in, float *out, const Shape &shape, int64_t axis,
             cudaStream_t stream);

/// LayerNormalization of f32 `x` over dimensions axis..end. `scale` and the
/// optional `bias` broadcast (numpy rules) to xShape[axis:]; `x` may equal
/// `y`.
void layerNorm(const float *x, const float *scale, const Shape &scaleShape,
               const float *bias, const Shape &biasShape, float *y,
               const Shape &xShape, int64_t axis, float epsilon,
               cudaStream_t stream, bool rms = false);

/// Gather along `axis` with i64 or i32 indices; negative indices count from
/// the end. An index out of range sets `*errorFlag` (a device int; may be
/// null) to 1 and writes zero bytes to its output elements; the flag is
/// never cleared here.
/// A vocabulary-parallel block: indices count in a table of `whole` rows
/// (-1: the data's own) of which the data holds rows [offset, offset +
/// rows); another rank's rows give zeros.
void gather(const void *data, DType dtype, const Shape &dataShape,
            const void *indices, DType indexType, const Shape &indicesShape,
            int64_t axis, void *out, int *errorFlag, cudaStream_t stream,
            int64_t whole = -1, int64_t offset = 0);

/// Permutes the dimensions of `in`, whose elements are `elemSize` bytes.
void transpose(const void *in, std::size_t elemSize, const Shape &inShape,
               const std::vector<int64_t> &perm, void *out,
               cudaStream_t stream);

/// SoftmaxCrossEntropy of f32 logits [rows, v] with i64 labels [rows]: the
/// f32 loss per row (0 where the label is `ignoreIndex`). A label out of
/// range sets `*errorFlag` (may be null) and gets a 0 loss.
void softmaxCrossEntropy(const float *logits, const int64_t *labels,
                         int64_t rows, int64_t v, int64_t ignoreIndex,
                         float *loss, int *errorFlag, cudaStream_t stream);

/// Its gradient: dlogits = (softmax(logits) - onehot(label)) * dloss per
/// row, 0 on ignored rows (and rows whose label is out of range, which set
/// `*errorFlag`). Every element written.
void softmaxCrossEntropyGrad(const float *logits, const int64_t *labels,
                             const float *dloss, int64_t rows, int64_t v,
                             int64_t ignoreIndex, float *dlogits,
                             int *errorFlag, cudaStream_t stream);

/// The vocabulary-parallel cross-entropy (the CPU kernels' Vocab* ops) on
/// f32 logits [rows, c], this rank's block of classes [offset, offset + c)
/// of `size` (the columns past `size` padding): each row's max over the
/// block; its sum of exp(x - max) in double and the label's logit (0 when
/// another rank holds it) as stats [rows, 2]; the loss from the max and
/// stats summed over the ranks; and the block's gradient. A label out of
/// range sets `*errorFlag` (may be null).
void vocabMax(const float *logits, int64_t rows, int64_t c, int64_t size,
              int64_t offset, float *out, cudaStream_t stream);
void vocabStats(const float *logits, const int64_t *labels, const float *max,
                int64_t rows, int64_t c, int64_t size, int64_t offset,
                int64_t ignoreIndex, float *stats, int *errorFlag,
                cudaStream_t stream);
void vocabCrossEntropy(const float *max, const float *stats,
                       const int64_t *labels, int64_t rows, int64_t ignoreIndex,
                       float *loss, cudaStream_t stream);
void vocabCrossEntropyGrad(const float *logits, const int64_t *labels,
                           const float *dloss, const float *max,
                           const float *stats, int64_t rows, int64_t c,
                           int64_t size, int64_t offset, int64_t ignoreIndex,
                           float *dlogits, int *errorFlag, cudaStream_t stream);

/// Softmax's gradient along rows of n f32 elements: dx = y * (dy - sum(y *
/// dy)); dx may be dy.
void softmaxGradRows(const float *y, const float *dy, float *dx, int64_t rows,
                     int64_t n, cudaStream_t stream);

/// LayerNorm's (RMSNorm's with `rms`) input gradient over rows of n f32
/// elements, the scale `scale` [n] (whole, not broadcast).
void layerNormGrad(const float *x, const float *scale, const float *dy,
                   int64_t rows, int64_t n, float epsilon, bool rms, float *dx,
                   cudaStream_t stream);

/// The bytes of device workspace layerNormScaleGrad needs for `rows`.
std::size_t layerNormScaleGradWorkspace(int64_t rows);

/// The scale's gradient dscale[j] = sum_r dy[r, j] * xhat[r, j], summed in
/// double over the rows in order (deterministic).
void layerNormScaleGrad(const float *x, const float *dy, int64_t rows,
                        int64_t n, float epsilon, bool rms, float *dscale,
                        void *workspace, cudaStream_t stream);

/// The bytes of device workspace gatherGrad needs.
std::size_t gatherGradWorkspace(int64_t numIndices, int64_t rows);

/// GatherGrad (the embedding gradient): out [rows, h] = for each row, the
/// sum of dy [numIndices, h] over the positions whose index (i64 or i32;
/// negative ones count from the end) is that row, in position order, in
/// double: deterministic, as the CPU kernel. Rows no index hits are 0; an
/// index out of range sets `*errorFlag` (may be null) and is left out. A
/// vocabulary-parallel block: indices count in `whole` rows (-1: `rows`),
/// this output holds rows [offset, offset + rows) and the others' indices
/// are left out.
void gatherGrad(const void *indices, DType indexType, int64_t numIndices,
                const float *dy, int64_t rows, int64_t h, float *out,
                void *workspace, int *errorFlag, cudaStream_t stream,
                int64_t whole = -1, int64_t offset = 0);

/// Copies `shape` elements of `elemSize` bytes between a dense buffer and
/// a strided view (`strides` in elements, all >= 0): gathers the view of
/// `in` into dense `out`, or with `store` stores dense `in` through the
/// view of `out`. `span`: elements of the strided buffer from its pointer
/// (sizes the index type). Serves Slice, Split, Concat and Pad.
void stridedCopy(const void *in, void *out, std::size_t elemSize,
                 const Shape &shape, const std::vector<int64_t> &strides,
                 int64_t span, bool store, cudaStream_t stream,
                 const char *what);

/// Row-major strides (in elements) of `shape`.
std::vector<int64_t> rowMajorStrides(const Shape &shape);

/// Whether cast() converts `from` to `to`: among f32, i64, i32 and bool,
/// any of those to bf16/f16, bf16/f16 to f32, or a copy.
bool castSupported(DType from, DType to);

/// ONNX Cast of n elements, with the CPU's semantics (cpu/DTypes.h
/// convertElem).
void cast(const void *in, DType from, void *out, DType to, int64_t n,
          cudaStream_t stream);

/// Slice with resolved starts and positive steps per dimension (the CPU
/// kernel's attributes); every element read must lie inside the input.
void slice(const void *in, std::size_t elemSize, const Shape &inShape,
           const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, void *out, const Shape &outShape,
           cudaStream_t stream);

/// Concat of dense inputs along `axis` into `out`.
void concat(const std::vector<const void *> &ins,
            const std::vector<Shape> &shapes, int64_t axis,
            std::size_t elemSize, void *out, const Shape &outShape,
            cudaStream_t stream);

/// Pad in constant mode: pads (begins, then ends) >= 0; a value other than
/// 0 only for 4-byte (f32) elements.
void padConstant(const void *in, const Shape &inShape, std::size_t elemSize,
                 const std::vector<int64_t> &pads, float value, void *out,
                 const Shape &outShape, cudaStream_t stream);

/// Where: out = cond ? x : y, each broadcast (numpy rules) to `outShape`;
/// elements of 1, 2, 4 or 8 bytes; cond bool (one byte each).
void where(const uint8_t *cond, const Shape &condShape, const void *x,
           const Shape &xShape, const void *y, const Shape &yShape,
           std::size_t elemSize, void *out, const Shape &outShape,
           cudaStream_t stream);

/// Broadcasts `in` (numpy rules) to `outShape`, elements of `elemSize`
/// bytes: every output element written.
void expand(const void *in, std::size_t elemSize, const Shape &inShape,
            const Shape &outShape, void *out, cudaStream_t stream);

/// Sum or mean of f32 `in` over sorted, unique `axes` (accumulating in
/// double, as the CPU kernel does). `out` holds the kept dimensions in order.
void reduce(arith::ReduceOp op, const float *in, const Shape &inShape,
            const std::vector<int64_t> &axes, float *out, cudaStream_t stream);

/// Copies block `index` of `numBlocks` equal blocks of `in` along `dim`.
void sliceBlock(const void *in, std::size_t elemSize, const Shape &inShape,
                int64_t dim, int64_t numBlocks, int64_t index, void *out,
                cudaStream_t stream);

/// `blocks` holds `numBlocks` dense tensors of `blockShape` one after the
/// other (as an all-gather leaves them); `out` gets them side by side along
/// `dim`, so its shape is blockShape with dimension `dim` times numBlocks.
void concatBlocks(const void *blocks, std::size_t elemSize,
                  const Shape &blockShape, int64_t numBlocks, int64_t dim,
                  void *out, cudaStream_t stream);

/// The 16-bit float formats of the casts.
enum class DType16 { BF16, F16 };

/// Rounds `n` f32 values to nearest even in the 16-bit format `to`.
void castF32To(DType16 to, const float *in, void *out, int64_t n,
               cudaStream_t stream);
/// Widens `n` values of the 16-bit format `from` to f32 (exact).
void castToF32(DType16 from, const void *in, float *out, int64_t n,
               cudaStream_t stream);

/// Sets `n` floats to `value`.
void fill(float *out, float value, int64_t n, cudaStream_t stream);
/// One AdamW step on n float32 elements in place (adamwElement per element,
/// UpdateMath.h).
void adamw(const AdamWScalars &s, float *w, const float *g, float *m, float *v,
           int64_t n, cudaStream_t stream);
/// One SGD step on n float32 elements in place (sgdElement per element);
/// `buf` null without momentum.
void sgd(const SgdScalars &s, float *w, const float *g, float *buf, int64_t n,
         cudaStream_t stream);
/// TopK of f32 `x` along `axis`: the k largest (`largest`) or smallest of
/// each row, in order, NaN above every number and ties to the lower index
/// (IndexMath.h's topKRow, which the CPU kernel calls too), into f32
/// `values` and, unless null, i64 `indices` (shape: x's with k along axis).
/// One thread per row (k passes over it: a router's few experts).
void topK(const float *x, const Shape &shape, int64_t axis, int64_t k,
          bool largest, float *values, int64_t *indices, cudaStream_t stream);

/// GatherElements along `axis`: out[p] = data[p with its axis coordinate
/// replaced by indices[p]] (IndexMath.h's elementOffset), elements of
/// `elemSize` bytes (1, 2, 4 or 8), i64 or i32 indices of data's rank. An
/// index out of range sets `*errorFlag` (may be null) and writes zero bytes.
void gatherElements(const void *data, std::size_t elemSize,
                    const Shape &dataShape, const void *indices,
                    DType indexType, const Shape &indicesShape, int64_t axis,
                    void *out, int *errorFlag, cudaStream_t stream);

/// ScatterElements along `axis`: `out` (data's shape; may be `data`) is
/// data with updates[p] written at (or, `add`, added to: f32 only, by
/// atomics) the element indices[p] addresses (elementOffset). With
/// repeated indices and no reduction, which update lands is unspecified
/// (ONNX leaves it so). An index out of range sets `*errorFlag` (may be
/// null) and writes nothing for it.
void scatterElements(const void *data, std::size_t elemSize,
                     const Shape &dataShape, const void *indices,
                     DType indexType, const Shape &indicesShape,
                     const void *updates, int64_t axis, bool add, void *out,
                     int *errorFlag, cudaStream_t stream);

/// Bytes of device workspace sumOfSquares needs for n elements.
std::size_t sumOfSquaresWorkspace(int64_t n);
/// The sum of g[i]^2 in double (CUB's device reduction), copied to the host
/// (the stream is synchronized).
double sumOfSquares(const float *g, int64_t n, void *workspace,
                    cudaStream_t stream);

} // namespace cuda
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_KERNELS_H
