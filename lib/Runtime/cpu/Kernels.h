//===- Kernels.h - CPU kernels of the runtime -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Kernels with ONNX semantics on dense row-major tensors: f32, and where
// ONNX allows f64 (in double), f16/bf16 (in f32, rounded once; DTypes.h) and
// the integer types. Every kernel writes into a preallocated output whose
// type the caller took from the plan; kernels check that the type is what the
// inputs imply and throw Error otherwise, so a bad plan cannot make them read
// or write out of bounds. Axes passed in are already normalized (>= 0).
//
// Each kernel's body is in the file of its op family, cpu/<Family>.cpp (the
// sections below), next to its registration; helpers that several families
// share are in cpu/Common.h.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_KERNELS_H
#define SHOAL_RUNTIME_CPU_KERNELS_H

#include "OpAttrs.h"
#include "Sharding.h"
#include "Tensor.h"
#include "ops/MathKinds.h"
#include "ops/ShapeRules.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {
namespace cpu {

//===----------------------------------------------------------------------===//
// Shape rules and parameters (the op model's: ops/ShapeRules.h, OpAttrs.h)
//===----------------------------------------------------------------------===//

// The kernels name them as their own.
using rt::broadcastShape;
using rt::broadcastsTo;
using rt::concatShape;
using rt::gatherShape;
using rt::gemmShape;
using rt::matmulShape;
using rt::PadMode;
using rt::reduceShape;
using rt::ScatterReduction;
using rt::sliceShape;
using rt::transposeShape;
using rt::windowOutputShape;
using rt::windowOutputSize;
using rt::WindowParams;

//===----------------------------------------------------------------------===//
// Element-wise (Elementwise.cpp)
//===----------------------------------------------------------------------===//

using arith::binaryName;
using arith::BinaryOp;
/// Element-wise with numpy broadcasting on one dtype: floats (f16/bf16 in
/// f32), and integers wrapping around (Div truncates toward zero and throws
/// Error on a zero divisor). Pow also takes an exponent of another numeric
/// dtype; the result has the base's.
void binary(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out);

using arith::UnaryOp;
/// Element-wise on f32, f64, f16 and bf16 (Neg and Relu also on i64, i32 and
/// i8, wrapping around).
void unary(UnaryOp op, const Tensor &x, Tensor &out);

/// HardSigmoid: max(0, min(1, alpha * x + beta)); with `swish`, HardSwish:
/// x times that. On the float dtypes; NaN propagates.
void hardSigmoid(const Tensor &x, float alpha, float beta, bool swish,
                 Tensor &out);

/// ONNX Mod with numpy broadcasting on one numeric dtype: with `fmod`, C's
/// fmod (the result has the dividend's sign), else Python's % (the
/// divisor's sign). An integer zero divisor throws Error.
void mod(const Tensor &a, const Tensor &b, bool fmod, Tensor &out);

enum class MathOp { Sin, Cos, Abs, Log, Reciprocal, Floor, Ceil };
/// Element-wise on the float dtypes (Abs also on the integers).
void math(MathOp op, const Tensor &x, Tensor &out);

enum class MinMaxOp { Max, Min };
/// Element-wise max or min of one or more numeric tensors of one dtype, with
/// numpy broadcasting; NaN propagates.
void minMax(MinMaxOp op, const std::vector<const Tensor *> &inputs,
            Tensor &out);

enum class CompareOp { Equal, Less, Greater, LessOrEqual, GreaterOrEqual };
/// Broadcasting comparison of two numeric (Equal: also bool) tensors of one
/// dtype into a bool tensor.
void compare(CompareOp op, const Tensor &a, const Tensor &b, Tensor &out);

enum class LogicOp { And, Or, Xor };
/// Broadcasting logical op on bool tensors.
void logical(LogicOp op, const Tensor &a, const Tensor &b, Tensor &out);
/// Element-wise logical not of a bool tensor.
void logicalNot(const Tensor &x, Tensor &out);

/// out = cond ? x : y with numpy broadcasting of all three; cond is bool,
/// x and y have out's dtype (any).
void where(const Tensor &cond, const Tensor &x, const Tensor &y, Tensor &out);

/// Element conversion between any two dtypes (DTypes.h convertElem): to a
/// float type rounds to nearest even once; float to integer truncates toward
/// zero (NaN gives 0, out-of-range values saturate); integer to a narrower
/// integer wraps; to bool is x != 0; bool is 0 or 1.
void cast(const Tensor &x, Tensor &out);

/// GELU of `x + bias` (bias optional, broadcast to x): exact, or with
/// `tanhForm` the tanh approximation.
void gelu(const Tensor &x, const Tensor *bias, Tensor &out,
          bool tanhForm = false);
/// dz = dy * gelu'(x + bias), dy and x of one type, bias as gelu's.
void geluGrad(const Tensor &dy, const Tensor &x, const Tensor *bias,
              Tensor &out, bool tanhForm = false);

//===----------------------------------------------------------------------===//
// Matrix products (Matrix.cpp)
//===----------------------------------------------------------------------===//

/// numpy.matmul with cblas_sgemm per batch on f32, and on f16/bf16 converted
/// to f32 (accumulating in f32, rounded once, or not at all into an f32
/// `out`: a weight gradient); cblas_dgemm on f64.
void matmul(const Tensor &a, const Tensor &b, Tensor &out);

/// Y = alpha * op(A) * op(B) + beta * C, C optional and unidirectionally
/// broadcast to (M, N); dtypes as matmul, C of A's. `addInto` (no C):
/// Y += alpha * op(A) * op(B), Y holding a sum so far.
void gemm(const Tensor &a, const Tensor &b, const Tensor *c, float alpha,
          float beta, bool transA, bool transB, Tensor &out,
          bool addInto = false);

/// softmax(q @ kt * scale + mask) @ v over the last axis; f16/bf16 q, kt
/// and v (the mask of their dtype or f32) in f32, rounded once.
void attention(const Tensor &q, const Tensor &kt, const Tensor &v,
               const Tensor *mask, float scale, Tensor &out);

/// Attention's gradients from dy = d(out), in f32: the probabilities are
/// recomputed a block of query rows at a time (none of [..., T, S] is
/// kept), dv = P^T dy, dS = P (dy v^T - rowsum), dq = scale dS kt^T,
/// dkt = scale q^T dS. The mask gets no gradient. f16/bf16 dy, q, kt and v
/// (one dtype; the mask that or f32) are widened to f32, and each gradient,
/// of q's dtype, is rounded once.
void attentionGrad(const Tensor &dy, const Tensor &q, const Tensor &kt,
                   const Tensor &v, const Tensor *mask, float scale, Tensor &dq,
                   Tensor &dkt, Tensor &dv);

//===----------------------------------------------------------------------===//
// Normalization (Normalization.cpp)
//===----------------------------------------------------------------------===//

/// Numerically stable softmax along `axis`.
void softmax(const Tensor &x, int64_t axis, Tensor &out);

/// LayerNormalization over dimensions axis..end, in float. `scale` and
/// `bias` broadcast to x.shape[axis:]; `mean` and `invStdDev` (optional
/// outputs) have shape x.shape[:axis] + [1] * (rank - axis); they are f32
/// for f16/bf16 x, whose scale and bias may be f32. With `rms`:
/// RMSNorm, x / sqrt(mean(x^2) + epsilon) * scale (+ bias), the mean 0.
void layerNorm(const Tensor &x, const Tensor &scale, const Tensor *bias,
               int64_t axis, float epsilon, Tensor &out, Tensor *mean,
               Tensor *invStdDev, bool rms = false);

/// sum = a + b; out = LayerNormalization(sum) over dims axis..end.
void addLayerNorm(const Tensor &a, const Tensor &b, const Tensor &scale,
                  const Tensor *bias, int64_t axis, float epsilon, Tensor &sum,
                  Tensor &out);

/// Inference BatchNormalization of x [N, C, ...] with per-channel f32
/// scale, bias, mean and var: (x - mean) / sqrt(var + epsilon) * scale + bias.
void batchNorm(const Tensor &x, const Tensor &scale, const Tensor &bias,
               const Tensor &mean, const Tensor &var, float epsilon,
               Tensor &out);

//===----------------------------------------------------------------------===//
// Reduction (Reduction.cpp)
//===----------------------------------------------------------------------===//

using arith::ReduceOp;
/// Reduces f32, f16 or bf16 `x` over sorted, unique `axes` (double
/// accumulation, each result rounded once to `out`'s dtype: x's, or f32
/// for 16-bit x). The output may have kept or dropped the reduced
/// dimensions.
void reduce(ReduceOp op, const Tensor &x, const std::vector<int64_t> &axes,
            Tensor &out);

/// ArgMax (`max`) or ArgMin of any numeric `x` along `axis`: i64 indices;
/// the output may have kept or dropped the axis. Ties give the first index,
/// or the last with `selectLast`; NaN wins over every number (as numpy).
void argReduce(bool max, const Tensor &x, int64_t axis, bool selectLast,
               Tensor &out);

/// ONNX CumSum of any numeric `x` along `axis` into `out` (x's type and
/// shape): integers summed in their own type (wrapping as ONNX Runtime's),
/// floats in double, each result rounded once (f16/bf16 through f32 reads).
void cumSum(const Tensor &x, int64_t axis, bool exclusive, bool reverse,
            Tensor &out);

//===----------------------------------------------------------------------===//
// Shapes and data movement (Shape.cpp)
//===----------------------------------------------------------------------===//

/// Permutes the dimensions; any dtype.
void transpose(const Tensor &x, const std::vector<int64_t> &perm, Tensor &out);

/// Concatenates one or more tensors (any dtype) along normalized `axis`.
void concat(const std::vector<const Tensor *> &inputs, int64_t axis,
            Tensor &out);

/// Splits `x` along normalized `axis` into pieces of `sizes` (summing to the
/// dimension); outs[i] may be null for a piece nobody reads.
void split(const Tensor &x, int64_t axis, const std::vector<int64_t> &sizes,
           const std::vector<Tensor *> &outs);

/// out[i...] = x[first[d] + i[d] * step[d]...]; `first` and `step` as given
/// by sliceShape (one entry per dimension), out's shape the slice's.
void slice(const Tensor &x, const std::vector<int64_t> &first,
           const std::vector<int64_t> &step, Tensor &out);

/// Broadcasts `x` (any dtype) to out's shape (numpy rules).
void expand(const Tensor &x, Tensor &out);

/// ONNX Pad of any dtype; `pads` has the begins of every dimension, then
/// the ends (negative pads crop). `value` (cast to the dtype) fills in
/// constant mode.
void pad(const Tensor &x, const std::vector<int64_t> &pads, PadMode mode,
         double value, Tensor &out);

/// Keeps the upper (or lower) triangle of the last two dimensions, from
/// diagonal `k` on; zeroes the rest (ONNX Trilu).
void trilu(const Tensor &x, bool upper, int64_t k, Tensor &out);

/// Repeats `x` (any dtype) `repeats[d]` times along every dimension d
/// (ONNX Tile).
void tile(const Tensor &x, const std::vector<int64_t> &repeats, Tensor &out);

/// ONNX Resize, nearest or n-linear, to out's shape (floats; f16 and bf16
/// in f32).
void resize(const Tensor &x, const ResizeParams &p, Tensor &out);

/// The gradient of `resize` to an input of out's shape, from the gradient
/// `dy` of its output: every output element's gradient added to the input
/// elements it was interpolated from, times their weights.
void resizeGrad(const Tensor &dy, const ResizeParams &p, Tensor &out);

//===----------------------------------------------------------------------===//
// Indexing (Indexing.cpp)
//===----------------------------------------------------------------------===//

/// This rank's block of a vocabulary split over ranks (vocabulary-parallel
/// ops): `size` rows or classes in all, the block starting at `offset`.
struct VocabBlock {
  int64_t size = 0;
  int64_t offset = 0;
};

/// Gather along `axis` with i64 or i32 indices (negative ones count from the
/// end); throws Error naming the index when one is out of range. With a
/// `block` (axis 0 only), `data` holds the rows [offset, offset + rows) of
/// a table of block->size rows: indices are taken against the whole table
/// and rows outside the block give zeros.
void gather(const Tensor &data, const Tensor &indices, int64_t axis,
            Tensor &out, const VocabBlock *block = nullptr);

/// out[i] = data[i with i[axis] replaced by indices[i]]; i64 or i32 indices
/// of data's rank (negative ones count from the end). Throws Error naming
/// the index when one is out of range.
void gatherElements(const Tensor &data, const Tensor &indices, int64_t axis,
                    Tensor &out);

/// out = data, then out[i with i[axis] replaced by indices[i]] = updates[i]
/// (or combined with it by `reduction`), in index order.
void scatterElements(const Tensor &data, const Tensor &indices,
                     const Tensor &updates, int64_t axis,
                     ScatterReduction reduction, Tensor &out);

/// out = data with the slices data[indices[i...]] replaced by (or reduced
/// with) updates[i...]; i64 or i32 indices whose last dimension indexes the
/// leading dimensions of data (ONNX ScatterND). Throws Error naming the
/// index when one is out of range.
void scatterND(const Tensor &data, const Tensor &indices, const Tensor &updates,
               ScatterReduction reduction, Tensor &out);

/// out has values[1] where the position along normalized `axis` equals the
/// index (negative ones count from `depth`), values[0] elsewhere; indices
/// out of range give a row of values[0] (ONNX OneHot).
void oneHot(const Tensor &indices, const Tensor &values, int64_t depth,
            int64_t axis, Tensor &out);

/// The k largest (or smallest) entries of f32, i64 or i32 `x` along
/// normalized `axis`, sorted (ties: lower index first; NaN counts as larger
/// than every number) into `values` and, optionally, their i64 positions.
void topK(const Tensor &x, int64_t k, int64_t axis, bool largest,
          Tensor &values, Tensor *indices);

//===----------------------------------------------------------------------===//
// Convolution and pooling (ConvPool.cpp)
//===----------------------------------------------------------------------===//

/// ONNX Conv on f32: x [N, C, spatial...], w [M, C/group, kernel...],
/// optional bias [M]; im2col and cblas_sgemm per image and group.
void conv(const Tensor &x, const Tensor &w, const Tensor *bias,
          const WindowParams &window, int64_t group, Tensor &out);

enum class PoolOp { Max, Average };
/// MaxPool (padding never wins) or AveragePool (dilations must be 1; the
/// divisor counts the window's positions inside the input, or with
/// `countIncludePad` inside the padded input) on f32 x [N, C, spatial...].
void pool(PoolOp op, const Tensor &x, const WindowParams &window,
          bool countIncludePad, Tensor &out);
/// GlobalMaxPool / GlobalAveragePool: x [N, C, spatial...] to
/// [N, C, 1, ...].
void globalPool(PoolOp op, const Tensor &x, Tensor &out);

/// Conv's input gradient: dx (of x's shape; x's values are not read) from
/// w and dy, W^T dy per image and group (cblas_sgemm) scattered back by
/// col2im.
void convInputGrad(const Tensor &x, const Tensor &w, const Tensor &dy,
                   const WindowParams &window, int64_t group, Tensor &dx);
/// Conv's weight gradient: dw = sum over the batch of dy im2col(x)^T per
/// group (cblas_sgemm).
void convWeightGrad(const Tensor &x, const Tensor &dy,
                    const WindowParams &window, int64_t group, Tensor &dw);
/// The pools' input gradient: for the max, every window's dy goes to the
/// window's first maximum of x (row-major order, as PyTorch); for the
/// average, dy / divisor to every position of the window inside x.
void poolGrad(PoolOp op, const Tensor &x, const Tensor &dy,
              const WindowParams &window, bool countIncludePad, Tensor &dx);

//===----------------------------------------------------------------------===//
// Collectives (Collective.cpp)
//===----------------------------------------------------------------------===//

// sliceBlock and concatBlocks are the runtime's (Sharding.h): the
// communicators reorder blocks with them too.
using rt::concatBlocks;
using rt::sliceBlock;

//===----------------------------------------------------------------------===//
// Training ops (Training.cpp, docs/Training.md)
//===----------------------------------------------------------------------===//

/// Per position of f32, f16 or bf16 `logits` [..., V] with i64 `labels`
/// [...]: logsumexp(logits) - logits[label] (stable) into f32 `loss` [...],
/// or 0 where the label is `ignoreIndex`. Throws Error naming the label and
/// its position when one is outside [0, V) and not ignoreIndex.
void softmaxCrossEntropy(const Tensor &logits, const Tensor &labels,
                         int64_t ignoreIndex, Tensor &loss);

/// The gradient of softmaxCrossEntropy: (softmax(logits) - onehot(label)) *
/// dloss per position into `dlogits` [..., V]; rows whose label is
/// `ignoreIndex` are 0. `dloss` (f32) has the labels' shape; `dlogits` the
/// logits' dtype (16-bit: computed in f32, rounded once).
void softmaxCrossEntropyGrad(const Tensor &logits, const Tensor &labels,
                             const Tensor &dloss, int64_t ignoreIndex,
                             Tensor &dlogits);

/// The gradient of Softmax from its output: dx = y * (dy - sum(dy * y))
/// along normalized `axis` (the sum in double); 16-bit y and dy (one dtype)
/// in f32, dx of theirs rounded once.
void softmaxGrad(const Tensor &y, const Tensor &dy, int64_t axis, Tensor &dx);

/// The input gradient of LayerNormalization over dims axis..end (without
/// its bias, which does not matter): with xhat = (x - mean) / sqrt(var + eps)
/// (biased variance) and g = dy * scale, dx = (g - mean(g) - xhat *
/// mean(g * xhat)) / sqrt(var + eps), in float. `scale` broadcasts to
/// x.shape[axis:]. With `rms` (RMSNorm's): xhat = x / sqrt(mean(x^2) +
/// eps) and no mean(g) term. 16-bit x and dy (one dtype; scale that or
/// f32) in f32, dx of x's dtype rounded once.
void layerNormGrad(const Tensor &x, const Tensor &scale, const Tensor &dy,
                   int64_t axis, float epsilon, Tensor &dx, bool rms = false);

/// The gradient of LayerNormalization's scale: the sum over dims 0..axis-1
/// of dy * xhat into `dscale` of shape x.shape[axis:] (in double, rounded
/// once to dscale's dtype: f32, or x's f16/bf16); xhat as RMSNorm's with
/// `rms`.
void layerNormScaleGrad(const Tensor &x, const Tensor &dy, int64_t axis,
                        float epsilon, Tensor &dscale, bool rms = false);

/// The gradient of Gather along axis 0: zeroes `out` [rows, H...], then
/// adds dy[i] (dy [indices..., H...]) into row indices[i] for every i (i64
/// or i32 indices, negative ones counting from the end like Gather's; each
/// row's sum in double, in index order, rounded once to `out`'s dtype: f32,
/// or dy's f16/bf16). Throws Error naming the index when one is out of
/// range.
void gatherGrad(const Tensor &indices, const Tensor &dy, Tensor &out,
                const VocabBlock *block = nullptr);

/// Vocabulary-parallel cross-entropy over this rank's block of the classes
/// (Ops.def "VocabMax"...; the block's padding, past block.size, skipped).
/// The logits are f32, f16 or bf16 (read exactly as f32, a row at a
/// time); max, stats, dloss and the loss are f32.
/// vocabMax: the largest logit of each position (-inf if none).
void vocabMax(const Tensor &logits, const VocabBlock &block, Tensor &out);
/// vocabStats: [..., 2], the sum of exp(logit - max) and the label's logit
/// if the block holds the label (else 0).
void vocabStats(const Tensor &logits, const Tensor &labels, const Tensor &max,
                const VocabBlock &block, int64_t ignoreIndex, Tensor &out);
/// vocabCrossEntropy: log(stats0) + max - stats1, 0 for ignored labels.
void vocabCrossEntropy(const Tensor &max, const Tensor &stats,
                       const Tensor &labels, int64_t ignoreIndex, Tensor &loss);
/// vocabCrossEntropyGrad: the block of (softmax - onehot(label)) * dloss,
/// of the logits' dtype (computed in f32, rounded once to f16/bf16).
void vocabCrossEntropyGrad(const Tensor &logits, const Tensor &labels,
                           const Tensor &dloss, const Tensor &max,
                           const Tensor &stats, const VocabBlock &block,
                           int64_t ignoreIndex, Tensor &dlogits);

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_KERNELS_H
