//===- Registry.cpp - The CUDA backend's kernels ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Kernels of plan ops on the CUDA device: matrix products through cuBLAS
// (fp32, tf32, or bf16/fp16 inputs with fp32 accumulation and output), the
// rest through cuda/Kernels.cu and cuda/FusedKernels.cu, all enqueued on the
// device's compute stream. A kernel that does not handle its operands
// throws KernelUnsupported before it enqueues anything, and the scheduler
// runs the CPU kernel instead.
//
//===----------------------------------------------------------------------===//

#include "IndexMath.h"
#include "KernelRegistry.h"

#include "MemoryPlan.h"
#include "PlanLoader.h"
#include "cuda/Backend.h"
#include "cuda/CudaDevice.h"
#include "cuda/FusedKernels.h"
#include "cuda/Kernels.h"
#include "cuda/LtMatmul.h"
#include "ops/MathKinds.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

using namespace shoal::rt;
using namespace shoal::rt::cuda;

namespace {

using Inputs = std::vector<const Tensor *>;
using Outputs = std::vector<Tensor>;

CudaDevice &dev(KernelContext &ctx) {
  return static_cast<CudaDevice &>(ctx.device);
}

using Descs = std::vector<OperandDesc>;

/// The kernels here compute f32 only (the matrix products round to 16 bits
/// inside, by --precision). The type rules also take f16/bf16 operands and
/// mixed ones (bf16 activations with an f32 norm scale, bias or mask, an f32
/// weight gradient from bf16 operands): each kernel's check starts with
/// this, so that those run on the CPU (KernelUnsupported) and never reach a
/// kernel that would read 16-bit data as f32.
std::string f32Why(const OpInfo &op, const Descs &in, const Descs &out) {
  for (const OperandDesc &t : in)
    if (t.present && t.dtype != DType::F32 && t.dtype != DType::I64 &&
        t.dtype != DType::I32)
      return fmt::format("{} on {}", op.kindName, dtypeName(t.dtype));
  for (const OperandDesc &t : out)
    if (t.present && t.dtype != DType::F32)
      return fmt::format("{} producing {}", op.kindName, dtypeName(t.dtype));
  return "";
}

std::string f32Check(const OpInfo &op, const Descs &in, const Descs &out,
                     bool) {
  return f32Why(op, in, out);
}

/// Runs `check` on the kernel's own tensors: the same answer the plan audit
/// got from the plan's types (registerKernel's KernelCheckFn).
void require(KernelCheckFn check, KernelContext &ctx, const OpInfo &op,
             const Inputs &in, const Outputs &out) {
  if (std::string why = check(op, describe(in), describe(out), ctx.addInto);
      !why.empty())
    throw KernelUnsupported(why);
}

bool has(const Descs &d, std::size_t i) { return d.size() > i && d[i].present; }

const float *f(const Tensor *t) {
  return t ? static_cast<const float *>(t->rawData()) : nullptr;
}
float *f(Tensor &t) { return static_cast<float *>(t.rawData()); }

struct MatmulShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t strideA = 0, strideB = 0;
  /// Batch dimensions broadcast in a way strides cannot express.
  bool general = false;
};

MatmulShape matmulShapeOf(const Shape &as, const Shape &bs, const Shape &os) {
  MatmulShape s;
  Shape a = as, b = bs;
  if (a.size() == 1)
    a.insert(a.begin(), 1);
  if (b.size() == 1)
    b.push_back(1);
  s.m = a[a.size() - 2];
  s.k = a.back();
  s.n = b.back();
  // The batch sizes from the leading dimensions (an empty matrix divides
  // nothing).
  auto lead = [](const Shape &x) {
    int64_t p = 1;
    for (std::size_t i = 0; i + 2 < x.size(); ++i)
      p *= x[i];
    return p;
  };
  int64_t na = lead(a), nb = lead(b);
  int64_t no = s.m * s.n != 0 ? numElements(os) / (s.m * s.n) : 0;
  s.batch = no;
  if (nb == 1) {
    // Fold A's batch into rows.
    s.m *= na;
    s.batch = 1;
  } else if (na == 1) {
    s.strideA = 0;
    s.strideB = s.k * s.n;
  } else if (na == nb && na == no) {
    s.strideA = s.m * s.k;
    s.strideB = s.k * s.n;
  } else {
    s.general = true;
  }
  return s;
}

/// Row-major C[m,n] = alpha op(A) op(B), batched by strides.
/// Bytes of scratch gemm() needs for 16-bit copies of its operands.
std::size_t halfScratchBytes(int64_t aElems, int64_t bElems) {
  return (2 * aElems + 255) / 256 * 256 + 2 * static_cast<std::size_t>(bElems) +
         256;
}

/// Row-major C[m,n] = alpha op(A) op(B), batched by strides. `scratch`
/// (halfScratchBytes; null: the device's workspace) holds 16-bit copies.
void gemm(CudaDevice &d, const void *a, const void *b, void *c, bool transA,
          bool transB, float alpha, const MatmulShape &s, int64_t aElems,
          int64_t bElems, char *scratch = nullptr, float beta = 0) {
  Precision p = d.matmulPrecision();
  bool half = p == Precision::BF16 || p == Precision::FP16;
  cudaDataType_t inType = CUDA_R_32F;
  cublasComputeType_t computeType =
      p == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (half) {
    // 16-bit copies of both operands in the workspace.
    DType16 t = p == Precision::BF16 ? DType16::BF16 : DType16::F16;
    std::size_t aBytes = (2 * aElems + 255) / 256 * 256;
    if (!scratch)
      scratch =
          static_cast<char *>(d.workspace(halfScratchBytes(aElems, bElems)));
    castF32To(t, static_cast<const float *>(a), scratch, aElems, d.stream());
    castF32To(t, static_cast<const float *>(b), scratch + aBytes, bElems,
              d.stream());
    a = scratch;
    b = scratch + aBytes;
    inType = p == Precision::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  }
  int m = static_cast<int>(s.m), n = static_cast<int>(s.n),
      k = static_cast<int>(s.k);
  // An empty contraction: C = beta * C (zeros for beta = 0, which the
  // caller does not zero first).
  if (k == 0) {
    if (beta == 0 && m > 0 && n > 0)
      check(cudaMemsetAsync(c, 0,
                            sizeof(float) * static_cast<std::size_t>(m) * n *
                                static_cast<std::size_t>(s.batch),
                            d.stream()),
            "cudaMemsetAsync");
    return;
  }
  int lda = transA ? m : k, ldb = transB ? k : n;
  // Column-major view: C^T = op(B)^T op(A)^T.
  check(cublasGemmStridedBatchedEx(
            d.blas(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
            transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, inType, ldb,
            s.strideB, a, inType, lda, s.strideA, &beta, c, CUDA_R_32F, n,
            static_cast<long long>(m) * n, static_cast<int>(s.batch),
            computeType, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

std::string matmulCheck(const OpInfo &op, const Descs &in, const Descs &out,
                        bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (matmulShapeOf(in[0].shape, in[1].shape, out[0].shape).general)
    return "MatMul with broadcast batch dimensions";
  return "";
}

void matmulKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  require(matmulCheck, ctx, op, in, out);
  MatmulShape s = matmulShapeOf(in[0]->shape(), in[1]->shape(), out[0].shape());
  gemm(dev(ctx), in[0]->rawData(), in[1]->rawData(), out[0].rawData(), false,
       false, 1.0f, s, in[0]->numElements(), in[1]->numElements());
}

std::string gemmCheck(const OpInfo &op, const Descs &in, const Descs &out,
                      bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (has(in, 2) && op.attrs.beta != 1.0f)
    return "Gemm with C and beta != 1";
  if (has(in, 2) && addInto)
    return "Gemm with C adding into its output";
  return "";
}

void gemmKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  require(gemmCheck, ctx, op, in, out);
  const OpAttrs &a = op.attrs;
  bool hasC = in.size() > 2 && in[2];
  MatmulShape s;
  s.m = out[0].shape()[0];
  s.n = out[0].shape()[1];
  s.k = a.transA ? in[0]->shape()[0] : in[0]->shape()[1];
  // (addInto: out += alpha A B, a weight gradient summing itself over
  // micro-batches.)
  gemm(dev(ctx), in[0]->rawData(), in[1]->rawData(), out[0].rawData(), a.transA,
       a.transB, a.alpha, s, in[0]->numElements(), in[1]->numElements(),
       nullptr, ctx.addInto ? 1.0f : 0.0f);
  if (hasC)
    binary(arith::BinaryOp::Add, DType::F32, out[0].rawData(), out[0].shape(),
           in[2]->rawData(), in[2]->shape(), out[0].rawData(), out[0].shape(),
           dev(ctx).stream());
}

template <arith::BinaryOp B>
std::string binaryCheck(const OpInfo &op, const Descs &in, const Descs &out,
                        bool) {
  DType t = out[0].dtype;
  bool intOk = B == arith::BinaryOp::Add || B == arith::BinaryOp::Sub ||
               B == arith::BinaryOp::Mul;
  if (!(t == DType::F32 || (intOk && (t == DType::I64 || t == DType::I32))) ||
      in[0].dtype != t || in[1].dtype != t)
    return fmt::format("{} on {}", op.kindName, dtypeName(t));
  return "";
}

template <arith::BinaryOp B>
void binaryKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  require(binaryCheck<B>, ctx, op, in, out);
  DType t = out[0].dtype();
  binary(B, t, in[0]->rawData(), in[0]->shape(), in[1]->rawData(),
         in[1]->shape(), out[0].rawData(), out[0].shape(), dev(ctx).stream());
}

std::string unaryCheck(const OpInfo &op, const Descs &in, const Descs &out,
                       bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  return in[0].dtype != DType::F32 ? "integer unary op" : "";
}

template <arith::UnaryOp U>
void unaryKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  require(unaryCheck, ctx, op, in, out);
  unary(U, f(in[0]), f(out[0]), out[0].numElements(), dev(ctx).stream());
}

void softmaxKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                   Outputs &out) {
  require(f32Check, ctx, op, in, out);
  softmax(f(in[0]), f(out[0]), out[0].shape(), op.attrs.axis,
          dev(ctx).stream());
}

std::string layerNormCheck(const OpInfo &op, const Descs &in, const Descs &out,
                           bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  // The kernel writes only Y; Mean and InvStdDev run on the CPU.
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].present)
      return "LayerNormalization's Mean or InvStdDev output";
  return "";
}

void layerNormKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                     Outputs &out) {
  require(layerNormCheck, ctx, op, in, out);
  bool hasBias = in.size() > 2 && in[2];
  layerNorm(f(in[0]), f(in[1]), in[1]->shape(), hasBias ? f(in[2]) : nullptr,
            hasBias ? in[2]->shape() : Shape{}, f(out[0]), out[0].shape(),
            op.attrs.axis, op.attrs.epsilon, dev(ctx).stream(), op.attrs.rms);
}

/// Rows and their length of a [..., V] operand (0 rows when it has none).
std::pair<int64_t, int64_t> rowsOf(const Shape &s) {
  if (s.empty())
    return {0, 0};
  int64_t v = s.back();
  return {v ? numElements(s) / v : numElements(Shape(s.begin(), s.end() - 1)),
          v};
}

/// SoftmaxCrossEntropy(Grad): f32 logits [..., V], i64 labels of their
/// rows (and an f32 dloss of the labels' shape).
std::string crossEntropyCheck(const OpInfo &op, const Descs &in,
                              const Descs &out, bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (addInto)
    return op.kindName + " adding into its output";
  if (!has(in, 0) || !has(in, 1) || in[0].shape.empty())
    return op.kindName + " without [..., V] logits and labels";
  if (in[1].dtype != DType::I64)
    return fmt::format("{} with {} labels", op.kindName,
                       dtypeName(in[1].dtype));
  Shape rows(in[0].shape.begin(), in[0].shape.end() - 1);
  if (in[1].shape != rows || (has(in, 2) && in[2].shape != rows))
    return op.kindName + " whose labels do not fit its logits";
  return "";
}

void crossEntropyKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                        Outputs &out) {
  require(crossEntropyCheck, ctx, op, in, out);
  auto [rows, v] = rowsOf(in[0]->shape());
  softmaxCrossEntropy(f(in[0]), static_cast<const int64_t *>(in[1]->rawData()),
                      rows, v, op.attrs.ignoreIndex, f(out[0]),
                      dev(ctx).errorFlag(), dev(ctx).stream());
}

void crossEntropyGradKernel(KernelContext &ctx, const OpInfo &op,
                            const Inputs &in, Outputs &out) {
  require(crossEntropyCheck, ctx, op, in, out);
  auto [rows, v] = rowsOf(in[0]->shape());
  softmaxCrossEntropyGrad(f(in[0]),
                          static_cast<const int64_t *>(in[1]->rawData()),
                          f(in[2]), rows, v, op.attrs.ignoreIndex, f(out[0]),
                          dev(ctx).errorFlag(), dev(ctx).stream());
}

/// LayerNormalizationGrad (x, scale, dy) and LayerNormalizationScaleGrad
/// (x, dy): f32, dy of x's shape, the normalized dimensions from `axis`,
/// a scale of exactly those dimensions (a broadcast one stays on the CPU).
std::string layerNormGradCheck(const OpInfo &op, const Descs &in,
                               const Descs &out, bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (addInto)
    return op.kindName + " adding into its output";
  bool scaled = op.kind == OpKind::LayerNormalizationGrad;
  std::size_t dyAt = scaled ? 2 : 1;
  if (!has(in, 0) || !has(in, dyAt) || (scaled && !has(in, 1)))
    return op.kindName + " without its operands";
  const Shape &x = in[0].shape;
  int64_t axis = op.attrs.axis;
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()) || in[dyAt].shape != x)
    return op.kindName + " with dy or axis not fitting x";
  Shape norm(x.begin() + axis, x.end());
  if (scaled && numElements(in[1].shape) != numElements(norm))
    return op.kindName + " with a broadcast scale";
  return "";
}

/// Rows and row length of x normalized from `axis`.
std::pair<int64_t, int64_t> normRows(const Shape &x, int64_t axis) {
  int64_t n = numElements(Shape(x.begin() + axis, x.end()));
  return {n ? numElements(x) / n : 0, n};
}

void layerNormGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                         Outputs &out) {
  require(layerNormGradCheck, ctx, op, in, out);
  auto [rows, n] = normRows(in[0]->shape(), op.attrs.axis);
  layerNormGrad(f(in[0]), f(in[1]), f(in[2]), rows, n, op.attrs.epsilon,
                op.attrs.rms, f(out[0]), dev(ctx).stream());
}

void layerNormScaleGradKernel(KernelContext &ctx, const OpInfo &op,
                              const Inputs &in, Outputs &out) {
  require(layerNormGradCheck, ctx, op, in, out);
  auto [rows, n] = normRows(in[0]->shape(), op.attrs.axis);
  CudaDevice &d = dev(ctx);
  layerNormScaleGrad(
      f(in[0]), f(in[1]), rows, n, op.attrs.epsilon, op.attrs.rms, f(out[0]),
      d.workspace(layerNormScaleGradWorkspace(rows)), d.stream());
}

/// GatherGrad: i64/i32 indices, f32 dy of [indices..., row...] and an f32
/// output [rows, row...] (a vocabulary-parallel block's rows too).
std::string gatherGradCheck(const OpInfo &op, const Descs &in, const Descs &out,
                            bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (addInto)
    return op.kindName + " adding into its output";
  if (!has(in, 0) || !has(in, 1) || out.empty() || !out[0].present ||
      out[0].shape.empty())
    return op.kindName + " without its operands";
  const Shape &os = out[0].shape;
  Shape want = in[0].shape;
  want.insert(want.end(), os.begin() + 1, os.end());
  if (in[1].shape != want)
    return op.kindName + " whose dy does not fit its indices and output";
  if (numElements(in[0].shape) > INT32_MAX || os[0] >= INT32_MAX)
    return op.kindName + " past 2^31 indices or rows";
  return "";
}

void gatherGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                      Outputs &out) {
  require(gatherGradCheck, ctx, op, in, out);
  const Shape &os = out[0].shape();
  int64_t rows = os[0], h = rows ? out[0].numElements() / rows : 0;
  int64_t n = in[0]->numElements();
  CudaDevice &d = dev(ctx);
  // A vocabulary-parallel block (the CPU kernel's VocabBlock).
  bool vocab = op.attrs.shardSize > 0;
  gatherGrad(in[0]->rawData(), in[0]->dtype(), n, f(in[1]), rows, h, f(out[0]),
             d.workspace(gatherGradWorkspace(n, rows)), d.errorFlag(),
             d.stream(), vocab ? op.attrs.shardSize : -1,
             vocab ? ctx.groupIndex * rows : 0);
}

std::string gatherCheck(const OpInfo &op, const Descs &, const Descs &, bool) {
  // A vocabulary-parallel lookup takes rows of its block along axis 0.
  return op.attrs.shardSize > 0 && op.attrs.axis != 0
             ? "a vocabulary-parallel Gather along an axis but 0"
             : "";
}

void gatherKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  require(gatherCheck, ctx, op, in, out);
  // This rank's block of a vocabulary-parallel table (the CPU kernel's
  // VocabBlock): rows [groupIndex * local, ...) of shardSize.
  bool vocab = op.attrs.shardSize > 0;
  int64_t local = in[0]->shape().empty() ? 0 : in[0]->shape()[0];
  gather(in[0]->rawData(), in[0]->dtype(), in[0]->shape(), in[1]->rawData(),
         in[1]->dtype(), in[1]->shape(), op.attrs.axis, out[0].rawData(),
         dev(ctx).errorFlag(), dev(ctx).stream(),
         vocab ? op.attrs.shardSize : -1, vocab ? ctx.groupIndex * local : 0);
}

/// TopK (f32; 16-bit widened): values in x's type, i64 indices; k up to
/// kTopKRowSelect (one thread per row makes k passes over it: a router's
/// few experts; a larger k would want a block-wide selection).
std::string topKCheck(const OpInfo &op, const Descs &in, const Descs &out,
                      bool) {
  if (in[0].dtype != DType::F32 || !has(out, 0) || out[0].dtype != DType::F32 ||
      (has(out, 1) && out[1].dtype != DType::I64))
    return fmt::format("{} on {}", op.kindName, dtypeName(in[0].dtype));
  if (op.attrs.k > kTopKRowSelect)
    return fmt::format("{} with k = {} (above {})", op.kindName, op.attrs.k,
                       kTopKRowSelect);
  return "";
}

void topKKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  require(topKCheck, ctx, op, in, out);
  bool indices = out.size() > 1 && out[1].defined();
  topK(f(in[0]), in[0]->shape(), op.attrs.axis, op.attrs.k, op.attrs.largest,
       static_cast<float *>(out[0].rawData()),
       indices ? static_cast<int64_t *>(out[1].rawData()) : nullptr,
       dev(ctx).stream());
}

/// GatherElements and ScatterElements: elements of 1, 2, 4 or 8 bytes
/// (a reduction other than none: add on f32 only), i64 or i32 indices;
/// ScatterElements' updates of the data's type and the indices' shape.
std::string elementsCheck(const OpInfo &op, const Descs &in, const Descs &,
                          bool) {
  if (op.kind == OpKind::ScatterElements &&
      (!has(in, 2) || in[2].dtype != in[0].dtype || in[2].shape != in[1].shape))
    return op.kindName + " whose updates are not of the data's type and the "
                         "indices' shape";
  std::size_t e = dtypeSize(in[0].dtype);
  if (e != 1 && e != 2 && e != 4 && e != 8)
    return fmt::format("{} on {}", op.kindName, dtypeName(in[0].dtype));
  if (in[1].dtype != DType::I64 && in[1].dtype != DType::I32)
    return fmt::format("{} with {} indices", op.kindName,
                       dtypeName(in[1].dtype));
  if (op.kind == OpKind::ScatterElements &&
      op.attrs.reduction != ScatterReduction::None &&
      (op.attrs.reduction != ScatterReduction::Add ||
       in[0].dtype != DType::F32))
    return op.kindName + " with a reduction other than add on f32";
  return "";
}

void gatherElementsKernel(KernelContext &ctx, const OpInfo &op,
                          const Inputs &in, Outputs &out) {
  require(elementsCheck, ctx, op, in, out);
  gatherElements(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
                 in[1]->rawData(), in[1]->dtype(), in[1]->shape(),
                 op.attrs.axis, out[0].rawData(), dev(ctx).errorFlag(),
                 dev(ctx).stream());
}

void scatterElementsKernel(KernelContext &ctx, const OpInfo &op,
                           const Inputs &in, Outputs &out) {
  require(elementsCheck, ctx, op, in, out);
  scatterElements(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
                  in[1]->rawData(), in[1]->dtype(), in[1]->shape(),
                  in[2]->rawData(), op.attrs.axis,
                  op.attrs.reduction == ScatterReduction::Add, out[0].rawData(),
                  dev(ctx).errorFlag(), dev(ctx).stream());
}

void aliasKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  out[0] = Tensor::alias(*in[0], ctx.plan.values[op.outputs[0]].shape);
}

void transposeKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                     Outputs &out) {
  transpose(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
            op.attrs.perm, out[0].rawData(), dev(ctx).stream());
}

std::string reduceCheck(const OpInfo &op, const Descs &in, const Descs &out,
                        bool) {
  return op.attrs.reduceIsIdentity ? "" : f32Why(op, in, out);
}

template <arith::ReduceOp R>
void reduceKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  if (op.attrs.reduceIsIdentity) {
    aliasKernel(ctx, op, in, out);
    return;
  }
  require(reduceCheck, ctx, op, in, out);
  reduce(R, f(in[0]), in[0]->shape(), op.attrs.axes, f(out[0]),
         dev(ctx).stream());
}

void expandKernel(KernelContext &ctx, const OpInfo &, const Inputs &in,
                  Outputs &out) {
  expand(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
         out[0].shape(), out[0].rawData(), dev(ctx).stream());
}

/// Slice: resolved starts and positive steps per dimension (a negative step
/// stays on the CPU), every element read inside the input.
std::string sliceCheck(const OpInfo &op, const Descs &in, const Descs &out,
                       bool) {
  const Shape &x = in[0].shape, &o = out[0].shape;
  const std::vector<int64_t> &first = op.attrs.starts, &step = op.attrs.steps;
  if (first.size() != x.size() || step.size() != x.size() ||
      o.size() != x.size())
    return op.kindName + " whose starts and steps do not fit its input";
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (o[d] == 0)
      continue;
    if (step[d] <= 0)
      return op.kindName + " with a negative step";
    int64_t last = first[d] + (o[d] - 1) * step[d];
    if (first[d] < 0 || last >= x[d])
      return op.kindName + " reading outside its input";
  }
  return "";
}

void sliceKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  require(sliceCheck, ctx, op, in, out);
  slice(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
        op.attrs.starts, op.attrs.steps, out[0].rawData(), out[0].shape(),
        dev(ctx).stream());
}

/// Split along `axis` into the sizes of the attribute (outputs may be
/// absent).
std::string splitCheck(const OpInfo &op, const Descs &in, const Descs &, bool) {
  const Shape &x = in[0].shape;
  int64_t axis = op.attrs.axis, total = 0;
  for (int64_t v : op.attrs.split)
    total += v;
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()) || total != x[axis])
    return op.kindName + " whose sizes do not fit its input";
  return "";
}

void splitKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  require(splitCheck, ctx, op, in, out);
  const Shape &x = in[0]->shape();
  std::vector<int64_t> starts(x.size(), 0), steps(x.size(), 1);
  for (std::size_t i = 0; i < op.attrs.split.size(); ++i) {
    if (i < out.size() && out[i].defined())
      slice(in[0]->rawData(), dtypeSize(in[0]->dtype()), x, starts, steps,
            out[i].rawData(), out[i].shape(), dev(ctx).stream());
    starts[op.attrs.axis] += op.attrs.split[i];
  }
}

/// Concat along `axis`: inputs of one dtype.
std::string concatCheck(const OpInfo &op, const Descs &in, const Descs &out,
                        bool) {
  int64_t axis = op.attrs.axis, total = 0;
  const Shape &o = out[0].shape;
  if (axis < 0 || axis >= static_cast<int64_t>(o.size()))
    return op.kindName + " whose axis does not fit its output";
  for (const OperandDesc &t : in) {
    if (!t.present || t.dtype != out[0].dtype || t.shape.size() != o.size())
      return op.kindName + " with inputs unlike its output";
    total += t.shape[axis];
  }
  return total == o[axis] ? "" : op.kindName + " whose inputs do not fit";
}

void concatKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  require(concatCheck, ctx, op, in, out);
  std::vector<const void *> parts;
  std::vector<Shape> shapes;
  for (const Tensor *t : in) {
    parts.push_back(t->rawData());
    shapes.push_back(t->shape());
  }
  concat(parts, shapes, op.attrs.axis, dtypeSize(out[0].dtype()),
         out[0].rawData(), out[0].shape(), dev(ctx).stream());
}

/// Pad: constant mode, pads >= 0 (no crop), an f32 value or 0.
std::string padCheck(const OpInfo &op, const Descs &in, const Descs &out,
                     bool) {
  const OpAttrs &a = op.attrs;
  if (a.padMode != PadMode::Constant)
    return op.kindName + " in reflect or edge mode";
  if (a.pads.size() != 2 * in[0].shape.size() ||
      std::any_of(a.pads.begin(), a.pads.end(),
                  [](int64_t p) { return p < 0; }))
    return op.kindName + " with negative pads";
  if (a.padValue != 0 && out[0].dtype != DType::F32)
    return fmt::format("{} of {} with a value other than 0", op.kindName,
                       dtypeName(out[0].dtype));
  return "";
}

void padKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
               Outputs &out) {
  require(padCheck, ctx, op, in, out);
  padConstant(in[0]->rawData(), in[0]->shape(), dtypeSize(out[0].dtype()),
              op.attrs.pads, static_cast<float>(op.attrs.padValue),
              out[0].rawData(), out[0].shape(), dev(ctx).stream());
}

std::string castCheck(const OpInfo &op, const Descs &in, const Descs &out,
                      bool) {
  return castSupported(in[0].dtype, out[0].dtype)
             ? ""
             : fmt::format("{} from {} to {}", op.kindName,
                           dtypeName(in[0].dtype), dtypeName(out[0].dtype));
}

void castKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  require(castCheck, ctx, op, in, out);
  cast(in[0]->rawData(), in[0]->dtype(), out[0].rawData(), out[0].dtype(),
       out[0].numElements(), dev(ctx).stream());
}

/// The vocabulary-parallel loss ops: f32 logits [..., C] (first input but
/// for VocabCrossEntropy), i64 labels, f32 statistics.
std::string vocabCheck(const OpInfo &op, const Descs &in, const Descs &out,
                       bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (addInto)
    return op.kindName + " adding into its output";
  if (op.kind != OpKind::VocabCrossEntropy &&
      (!has(in, 0) || in[0].shape.empty() || op.attrs.shardSize <= 0))
    return op.kindName + " without [..., C] logits of a vocabulary block";
  for (const OperandDesc &t : in)
    if (t.present && t.dtype == DType::I32)
      return op.kindName + " with i32 labels";
  return "";
}

/// This rank's rows and its block's columns and offset.
struct VocabArgs {
  int64_t rows, c, offset;
};
VocabArgs vocabArgs(const KernelContext &ctx, const Shape &logits) {
  auto [rows, c] = rowsOf(logits);
  return {rows, c, ctx.groupIndex * c};
}

const int64_t *i64(const Tensor *t) {
  return static_cast<const int64_t *>(t->rawData());
}

void vocabMaxKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                    Outputs &out) {
  require(vocabCheck, ctx, op, in, out);
  VocabArgs a = vocabArgs(ctx, in[0]->shape());
  vocabMax(f(in[0]), a.rows, a.c, op.attrs.shardSize, a.offset, f(out[0]),
           dev(ctx).stream());
}

void vocabStatsKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                      Outputs &out) {
  require(vocabCheck, ctx, op, in, out);
  VocabArgs a = vocabArgs(ctx, in[0]->shape());
  vocabStats(f(in[0]), i64(in[1]), f(in[2]), a.rows, a.c, op.attrs.shardSize,
             a.offset, op.attrs.ignoreIndex, f(out[0]), dev(ctx).errorFlag(),
             dev(ctx).stream());
}

void vocabCrossEntropyKernel(KernelContext &ctx, const OpInfo &op,
                             const Inputs &in, Outputs &out) {
  require(vocabCheck, ctx, op, in, out);
  vocabCrossEntropy(f(in[0]), f(in[1]), i64(in[2]), in[0]->numElements(),
                    op.attrs.ignoreIndex, f(out[0]), dev(ctx).stream());
}

void vocabCrossEntropyGradKernel(KernelContext &ctx, const OpInfo &op,
                                 const Inputs &in, Outputs &out) {
  require(vocabCheck, ctx, op, in, out);
  VocabArgs a = vocabArgs(ctx, in[0]->shape());
  vocabCrossEntropyGrad(f(in[0]), i64(in[1]), f(in[2]), f(in[3]), f(in[4]),
                        a.rows, a.c, op.attrs.shardSize, a.offset,
                        op.attrs.ignoreIndex, f(out[0]), dev(ctx).errorFlag(),
                        dev(ctx).stream());
}

/// Where: a bool condition, X and Y of one dtype of 1, 2, 4 or 8 bytes.
std::string whereCheck(const OpInfo &op, const Descs &in, const Descs &out,
                       bool) {
  if (in[0].dtype != DType::Bool || in[1].dtype != in[2].dtype ||
      out[0].dtype != in[1].dtype)
    return op.kindName + " with a condition that is not bool or X, Y and its "
                         "result of different dtypes";
  std::size_t e = dtypeSize(out[0].dtype);
  if (e != 1 && e != 2 && e != 4 && e != 8)
    return fmt::format("{} on {}", op.kindName, dtypeName(out[0].dtype));
  return "";
}

void whereKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  require(whereCheck, ctx, op, in, out);
  where(static_cast<const uint8_t *>(in[0]->rawData()), in[0]->shape(),
        in[1]->rawData(), in[1]->shape(), in[2]->rawData(), in[2]->shape(),
        dtypeSize(out[0].dtype()), out[0].rawData(), out[0].shape(),
        dev(ctx).stream());
}

void localSliceKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                      Outputs &out) {
  sliceBlock(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
             op.attrs.dim, op.attrs.groupSize, ctx.groupIndex, out[0].rawData(),
             dev(ctx).stream());
}

/// Gelu's (GeluGrad's) bias, input `i`, against input `x`: the kernels
/// broadcast one along the last dimension only.
std::string geluBiasWhy(const OpInfo &op, const Descs &in, std::size_t i,
                        std::size_t x) {
  if (!has(in, i))
    return "";
  const Shape &b = in[i].shape, &xs = in[x].shape;
  if (b.size() != 1 || xs.empty() || b[0] != xs.back())
    return std::string(opKindName(op.kind)) +
           " bias not along the last dimension";
  return "";
}

template <std::size_t Bias, std::size_t X>
std::string geluCheck(const OpInfo &op, const Descs &in, const Descs &out,
                      bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  return geluBiasWhy(op, in, Bias, X);
}

/// Gelu's (GeluGrad's) bias, input `i`: null when absent.
const float *geluBias(const Inputs &in, std::size_t i) {
  return in.size() > i && in[i] ? f(in[i]) : nullptr;
}

void geluKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  require(geluCheck<1, 0>, ctx, op, in, out);
  const float *bias = geluBias(in, 1);
  gelu(f(in[0]), bias, bias ? in[1]->numElements() : 0, f(out[0]),
       out[0].numElements(), op.attrs.tanhGelu, dev(ctx).stream());
}

void geluGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                    Outputs &out) {
  require(geluCheck<2, 1>, ctx, op, in, out);
  const float *bias = geluBias(in, 2);
  geluGrad(f(in[0]), f(in[1]), bias, bias ? in[2]->numElements() : 0, f(out[0]),
           out[0].numElements(), op.attrs.tanhGelu, dev(ctx).stream());
}

/// Elements of dimensions `axis`.. of `s`.
int64_t colsFrom(const Shape &s, int64_t axis) {
  int64_t cols = 1;
  for (std::size_t i = axis; i < s.size(); ++i)
    cols *= s[i];
  return cols;
}

std::string addLayerNormCheck(const OpInfo &op, const Descs &in,
                              const Descs &out, bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  int64_t cols = colsFrom(in[0].shape, op.attrs.axis);
  for (std::size_t i = 2; i < in.size(); ++i)
    if (in[i].present && numElements(in[i].shape) != cols)
      return "AddLayerNorm with broadcast scale or bias";
  return "";
}

void addLayerNormKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                        Outputs &out) {
  require(addLayerNormCheck, ctx, op, in, out);
  int64_t cols = colsFrom(in[0]->shape(), op.attrs.axis);
  int64_t rows = cols ? in[0]->numElements() / cols : 0;
  bool hasBias = in.size() > 3 && in[3];
  addLayerNorm(f(in[0]), f(in[1]), f(in[2]), hasBias ? f(in[3]) : nullptr,
               f(out[0]), f(out[1]), rows, cols, op.attrs.epsilon,
               dev(ctx).stream());
}

/// Attention's dimensions from q [batch..., t, dd], kt [batch..., dd, sk]
/// and v [batch..., sk, e]: the batch is the dimensions before the last two.
struct AttentionDims {
  int64_t batch = 1, t = 0, dd = 0, sk = 0, e = 0;
  Shape scoreShape; // [batch..., t, sk]
  int64_t scoreElems() const { return batch * t * sk; }
  std::size_t scoreBytes() const {
    return (static_cast<std::size_t>(scoreElems()) * 4 + 255) / 256 * 256;
  }
};
AttentionDims attentionDims(const Shape &qs, const Shape &ks, const Shape &vs) {
  AttentionDims a;
  std::size_t r = qs.size();
  for (std::size_t i = 0; i + 2 < r; ++i)
    a.batch *= qs[i];
  a.t = qs[r - 2];
  a.dd = qs[r - 1];
  a.sk = ks[r - 1];
  a.e = vs[r - 1];
  a.scoreShape.assign(qs.begin(), qs.end() - 1);
  a.scoreShape.push_back(a.sk);
  return a;
}

/// The probabilities softmax(q kt * scale + mask) into `probs`, the scores
/// in `scores` (both score-sized), cuBLAS's 16-bit copies in `scratch`:
/// the forward kernel's, and what its gradient recomputes.
void attentionProbs(CudaDevice &d, const AttentionDims &a, const Tensor &q,
                    const Tensor &kt, const Tensor *mask, float scale,
                    float *scores, float *probs, char *scratch) {
  MatmulShape s{a.t, a.sk, a.dd, a.batch, a.t * a.dd, a.dd * a.sk, false};
  gemm(d, q.rawData(), kt.rawData(), scores, false, false, scale, s,
       q.numElements(), kt.numElements(), scratch);
  if (mask)
    binary(arith::BinaryOp::Add, DType::F32, scores, a.scoreShape,
           mask->rawData(), mask->shape(), scores, a.scoreShape, d.stream());
  softmax(scores, probs, a.scoreShape,
          static_cast<int64_t>(a.scoreShape.size()) - 1, d.stream());
}

/// softmax(q kt * scale + mask) v with cuBLAS for the two products and the
/// scores in the workspace (not yet a flash-attention kernel).
void attentionKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                     Outputs &out) {
  require(f32Check, ctx, op, in, out);
  CudaDevice &d = dev(ctx);
  AttentionDims a =
      attentionDims(in[0]->shape(), in[1]->shape(), in[2]->shape());
  const std::size_t scoreBytes = a.scoreBytes();
  // Scores, probabilities and the 16-bit copies in the workspace.
  std::size_t half =
      std::max(halfScratchBytes(in[0]->numElements(), in[1]->numElements()),
               halfScratchBytes(a.scoreElems(), in[2]->numElements()));
  char *base = static_cast<char *>(d.workspace(2 * scoreBytes + half));
  float *scores = reinterpret_cast<float *>(base);
  float *probs = reinterpret_cast<float *>(base + scoreBytes);
  char *scratch = base + 2 * scoreBytes;
  attentionProbs(d, a, *in[0], *in[1], in.size() > 3 ? in[3] : nullptr,
                 op.attrs.scale, scores, probs, scratch);
  MatmulShape s2{a.t, a.e, a.sk, a.batch, a.t * a.sk, a.sk * a.e, false};
  gemm(d, probs, in[2]->rawData(), out[0].rawData(), false, false, 1.0f, s2,
       a.scoreElems(), in[2]->numElements(), scratch);
}

/// Attention's batch (the dimensions before the last two), alike for q,
/// kt and v, with rank >= 3 (the forward kernel's layout).
std::string attentionGradCheck(const OpInfo &op, const Descs &in,
                               const Descs &out, bool addInto) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (addInto)
    return op.kindName + " adding into its output";
  if (!has(in, 0) || !has(in, 1) || !has(in, 2) || !has(in, 3))
    return op.kindName + " without its operands";
  const Shape &q = in[1].shape, &kt = in[2].shape, &v = in[3].shape;
  if (q.size() < 2 || kt.size() != q.size() || v.size() != q.size() ||
      !std::equal(q.begin(), q.end() - 2, kt.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()) ||
      kt[kt.size() - 2] != q.back() || v[v.size() - 2] != kt.back())
    return op.kindName + " with broadcast or mismatched batch dimensions";
  return "";
}

/// SoftmaxGrad along the last axis (the attention chain differentiated op
/// by op); another axis stays on the CPU.
std::string softmaxGradCheck(const OpInfo &op, const Descs &in,
                             const Descs &out, bool) {
  if (std::string why = f32Why(op, in, out); !why.empty())
    return why;
  if (!has(in, 0) || in[0].shape.empty() ||
      op.attrs.axis != static_cast<int64_t>(in[0].shape.size()) - 1)
    return op.kindName + " not along the last axis";
  return "";
}

void softmaxGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                       Outputs &out) {
  require(softmaxGradCheck, ctx, op, in, out);
  auto [rows, n] = rowsOf(in[0]->shape());
  softmaxGradRows(f(in[0]), f(in[1]), f(out[0]), rows, n, dev(ctx).stream());
}

/// AttentionGrad (dy, q, kt, v, mask): the probabilities recomputed as the
/// forward kernel makes them (cuBLAS, the mask added, softmax), then
/// dv = P^T dy, dP = dy v^T, dS = softmax's gradient, dq = scale dS kt^T,
/// dkt = scale q^T dS; the score-sized buffers in the workspace.
void attentionGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                         Outputs &out) {
  require(attentionGradCheck, ctx, op, in, out);
  CudaDevice &d = dev(ctx);
  AttentionDims a =
      attentionDims(in[1]->shape(), in[2]->shape(), in[3]->shape());
  const int64_t t = a.t, dd = a.dd, sk = a.sk, e = a.e, batch = a.batch;
  const int64_t scoreElems = a.scoreElems();
  if (scoreElems == 0)
    return; // (outputs already zero: KernelWrites::Partial)
  const std::size_t scoreBytes = a.scoreBytes();
  int64_t nq = in[1]->numElements(), nk = in[2]->numElements(),
          nv = in[3]->numElements(), ny = in[0]->numElements();
  std::size_t half =
      std::max({halfScratchBytes(nq, nk), halfScratchBytes(scoreElems, ny),
                halfScratchBytes(ny, nv), halfScratchBytes(scoreElems, nk),
                halfScratchBytes(nq, scoreElems)});
  char *base = static_cast<char *>(d.workspace(3 * scoreBytes + half));
  float *scores = reinterpret_cast<float *>(base);
  float *probs = reinterpret_cast<float *>(base + scoreBytes);
  float *dscores = reinterpret_cast<float *>(base + 2 * scoreBytes);
  char *scratch = base + 3 * scoreBytes;
  const float scale = op.attrs.scale;
  const void *dy = in[0]->rawData(), *q = in[1]->rawData(),
             *kt = in[2]->rawData(), *v = in[3]->rawData();
  attentionProbs(d, a, *in[1], *in[2], in.size() > 4 ? in[4] : nullptr, scale,
                 scores, probs, scratch);
  // dv [sk, e] = P^T [sk, t] dy [t, e].
  MatmulShape sv{sk, e, t, batch, t * sk, t * e, false};
  gemm(d, probs, dy, out[2].rawData(), true, false, 1.0f, sv, scoreElems, ny,
       scratch);
  // dP [t, sk] = dy [t, e] v^T [e, sk].
  MatmulShape sp{t, sk, e, batch, t * e, sk * e, false};
  gemm(d, dy, v, dscores, false, true, 1.0f, sp, ny, nv, scratch);
  softmaxGradRows(probs, dscores, dscores, batch * t, sk, d.stream());
  // dq [t, dd] = scale dS [t, sk] kt^T [sk, dd].
  MatmulShape sq{t, dd, sk, batch, t * sk, dd * sk, false};
  gemm(d, dscores, kt, out[0].rawData(), false, true, scale, sq, scoreElems, nk,
       scratch);
  // dkt [dd, sk] = scale q^T [dd, t] dS [t, sk].
  MatmulShape sk2{dd, sk, t, batch, t * dd, t * sk, false};
  gemm(d, q, dscores, out[1].rawData(), true, false, scale, sk2, nq, scoreElems,
       scratch);
}

//===----------------------------------------------------------------------===//
// 16-bit operands: widened on the device
//===----------------------------------------------------------------------===//

/// The f32 kernel and check of each kind registered through `widened`.
struct F32Kernel {
  KernelFn fn = nullptr;
  KernelCheckFn check = nullptr;
};
std::unordered_map<int, F32Kernel> &f32Kernels() {
  static std::unordered_map<int, F32Kernel> kernels;
  return kernels;
}

bool isSixteenBits(DType t) { return t == DType::BF16 || t == DType::F16; }
DType16 sixteen(DType t) {
  return t == DType::BF16 ? DType16::BF16 : DType16::F16;
}

Descs widen(Descs d) {
  for (OperandDesc &t : d)
    if (t.present && isSixteenBits(t.dtype))
      t.dtype = DType::F32;
  return d;
}

bool anySixteenBits(const Descs &d) {
  return std::any_of(d.begin(), d.end(), [](const OperandDesc &t) {
    return t.present && isSixteenBits(t.dtype);
  });
}

/// The f32 kernel's check on the operands widened to f32; a 16-bit result
/// that a product would add into stays on the CPU.
std::string widenedCheck(const OpInfo &op, const Descs &in, const Descs &out,
                         bool addInto) {
  const F32Kernel &k = f32Kernels().at(static_cast<int>(op.kind));
  if (addInto && anySixteenBits(out))
    return op.kindName + " adding into a 16-bit result";
  return k.check ? k.check(op, widen(in), widen(out), addInto) : "";
}

/// Runs the f32 kernel of `op.kind` with f16/bf16 operands as the CPU
/// kernels compute them: each 16-bit input widened to f32 (exactly), the
/// f32 kernel, each 16-bit result rounded once from its f32 value; all on
/// the device, in temporaries that live for the call.
void widenedKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                   Outputs &out) {
  const F32Kernel &k = f32Kernels().at(static_cast<int>(op.kind));
  // A view of its input (an identity reduction): whatever the type.
  if (aliasesInput(op))
    return k.fn(ctx, op, in, out);
  bool half = false;
  for (const Tensor *t : in)
    half |= t && isSixteenBits(t->dtype());
  for (const Tensor &t : out)
    half |= t.defined() && isSixteenBits(t.dtype());
  if (!half)
    return k.fn(ctx, op, in, out);
  require(widenedCheck, ctx, op, in, out);
  CudaDevice &d = dev(ctx);
  std::vector<Tensor> wide;
  wide.reserve(in.size());
  Inputs in32(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    in32[i] = in[i];
    if (!in[i] || !isSixteenBits(in[i]->dtype()))
      continue;
    wide.push_back(d.temporary({DType::F32, in[i]->shape()}));
    castToF32(sixteen(in[i]->dtype()), in[i]->rawData(), f(wide.back()),
              in[i]->numElements(), d.stream());
    in32[i] = &wide.back();
  }
  Outputs out32 = out;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].defined() && isSixteenBits(out[i].dtype()))
      out32[i] = d.temporary({DType::F32, out[i].shape()}); // zeroed
  if (op.kind == OpKind::AddLayerNorm && isSixteenBits(out[0].dtype())) {
    // As the CPU: the sum rounded to 16 bits first, then normalized.
    Tensor &sum = out32[0];
    binary(arith::BinaryOp::Add, DType::F32, in32[0]->rawData(),
           in32[0]->shape(), in32[1]->rawData(), in32[1]->shape(),
           sum.rawData(), sum.shape(), d.stream());
    castF32To(sixteen(out[0].dtype()), f(sum), out[0].rawData(),
              out[0].numElements(), d.stream());
    castToF32(sixteen(out[0].dtype()), out[0].rawData(), f(sum),
              out[0].numElements(), d.stream());
    bool hasBias = in32.size() > 3 && in32[3];
    layerNorm(f(sum), f(in32[2]), in32[2]->shape(),
              hasBias ? f(in32[3]) : nullptr,
              hasBias ? in32[3]->shape() : Shape{}, f(out32[1]), sum.shape(),
              op.attrs.axis, op.attrs.epsilon, d.stream());
  } else {
    k.fn(ctx, op, in32, out32);
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].defined() && isSixteenBits(out[i].dtype()))
      castF32To(sixteen(out[i].dtype()), f(out32[i]), out[i].rawData(),
                out[i].numElements(), d.stream());
}

/// A product cuBLASLt takes with its 16-bit operands as they are
/// (ltHandles): A and B of one 16-bit type, the result in it or f32 (a
/// weight gradient), batch dimensions strides express, no Gemm C. The
/// others widen to f32 (widenedKernel) or are f32.
bool native16(const OpInfo &op, const Descs &in, const Descs &out) {
  if (!has(in, 0) || !has(in, 1) || !has(out, 0) ||
      in[0].dtype != in[1].dtype || !ltHandles(in[0].dtype, out[0].dtype))
    return false;
  if (op.kind == OpKind::Gemm)
    return !has(in, 2) && in[0].shape.size() == 2 && in[1].shape.size() == 2;
  return !matmulShapeOf(in[0].shape, in[1].shape, out[0].shape).general;
}

std::string productCheck(const OpInfo &op, const Descs &in, const Descs &out,
                         bool addInto) {
  return native16(op, in, out) ? "" : widenedCheck(op, in, out, addInto);
}

/// MatMul and Gemm: 16-bit operands through cuBLASLt as they are, f32
/// accumulation, the result in the op's type (added into it for a weight
/// gradient summing itself over micro-batches); f32 ones through cuBLAS.
void productKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                   Outputs &out) {
  if (!native16(op, describe(in), describe(out)))
    return widenedKernel(ctx, op, in, out);
  lt::RowMajorProduct p;
  float alpha = 1.0f;
  if (op.kind == OpKind::Gemm) {
    const OpAttrs &a = op.attrs;
    p.m = out[0].shape()[0];
    p.n = out[0].shape()[1];
    p.k = a.transA ? in[0]->shape()[0] : in[0]->shape()[1];
    p.transA = a.transA;
    p.transB = a.transB;
    alpha = a.alpha;
  } else {
    MatmulShape s =
        matmulShapeOf(in[0]->shape(), in[1]->shape(), out[0].shape());
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.batch = s.batch;
    p.strideA = s.strideA;
    p.strideB = s.strideB;
    p.strideC = s.batch > 1 ? s.m * s.n : 0;
  }
  ltMatmul(dev(ctx), p, in[0]->rawData(), in[1]->rawData(), in[0]->dtype(),
           out[0].rawData(), out[0].dtype(), alpha, ctx.addInto ? 1.0f : 0.0f);
}

/// The library a product runs on.
std::string productLabel(const OpInfo &op, const Descs &in, const Descs &out) {
  if (native16(op, in, out))
    return "cuBLASLt";
  return anySixteenBits(in) || anySixteenBits(out)
             ? "cuBLAS (operands widened to f32)"
             : "cuBLAS";
}

std::string attentionLabel(const OpInfo &, const Descs &, const Descs &) {
  return "cuBLAS products around an own softmax";
}

} // namespace

void shoal::rt::registerCudaKernels() {
  static bool done = false;
  if (done)
    return;
  done = true;
  // (Each kernel with the check of the operands it refuses, which it runs
  // first itself: the plan audit's answer.)
  auto reg = [](OpKind k, KernelFn fn, KernelCheckFn check = nullptr) {
    registerKernel(k, BackendKind::CUDA, fn, KernelWrites::Partial, check);
  };
  // An f32 kernel that also takes f16/bf16 operands, widened on the device
  // (widenedKernel): `writes` as the f32 kernel's.
  auto widened = [](OpKind k, KernelFn fn, KernelCheckFn check,
                    KernelWrites writes) {
    f32Kernels()[static_cast<int>(k)] = {fn, check};
    registerKernel(k, BackendKind::CUDA, widenedKernel, writes, widenedCheck);
  };
  const KernelWrites partial = KernelWrites::Partial, every = KernelWrites::All;
  // These write every element of their outputs (grid-stride loops over
  // the output; cuBLAS with beta = 0 does not read C, and gemm() zeroes an
  // empty contraction's output itself; a gather writes zeros for another
  // rank's rows): nothing to zero first. The GPU tests
  // run with SHOAL_FILL_UNINITIALIZED=1, which fills their outputs with
  // NaN instead, so an element left out shows.
  // (16-bit products through cuBLASLt as they are, productKernel.)
  f32Kernels()[static_cast<int>(OpKind::MatMul)] = {matmulKernel, matmulCheck};
  f32Kernels()[static_cast<int>(OpKind::Gemm)] = {gemmKernel, gemmCheck};
  registerKernel(OpKind::MatMul, BackendKind::CUDA, productKernel, every,
                 productCheck);
  registerKernel(OpKind::Gemm, BackendKind::CUDA, productKernel, every,
                 productCheck);
  registerKernelLabel(OpKind::MatMul, BackendKind::CUDA, productLabel);
  registerKernelLabel(OpKind::Gemm, BackendKind::CUDA, productLabel);
  registerKernelLabel(OpKind::Attention, BackendKind::CUDA, attentionLabel);
  registerKernelLabel(OpKind::AttentionGrad, BackendKind::CUDA, attentionLabel);
  widened(OpKind::Add, binaryKernel<arith::BinaryOp::Add>,
          binaryCheck<arith::BinaryOp::Add>, every);
  widened(OpKind::Sub, binaryKernel<arith::BinaryOp::Sub>,
          binaryCheck<arith::BinaryOp::Sub>, every);
  widened(OpKind::Mul, binaryKernel<arith::BinaryOp::Mul>,
          binaryCheck<arith::BinaryOp::Mul>, every);
  widened(OpKind::Div, binaryKernel<arith::BinaryOp::Div>,
          binaryCheck<arith::BinaryOp::Div>, every);
  widened(OpKind::Pow, binaryKernel<arith::BinaryOp::Pow>,
          binaryCheck<arith::BinaryOp::Pow>, every);
  widened(OpKind::Erf, unaryKernel<arith::UnaryOp::Erf>, unaryCheck, every);
  widened(OpKind::Tanh, unaryKernel<arith::UnaryOp::Tanh>, unaryCheck, every);
  widened(OpKind::Relu, unaryKernel<arith::UnaryOp::Relu>, unaryCheck, every);
  widened(OpKind::Sqrt, unaryKernel<arith::UnaryOp::Sqrt>, unaryCheck, every);
  widened(OpKind::Exp, unaryKernel<arith::UnaryOp::Exp>, unaryCheck, every);
  widened(OpKind::Neg, unaryKernel<arith::UnaryOp::Neg>, unaryCheck, every);
  widened(OpKind::Sigmoid, unaryKernel<arith::UnaryOp::Sigmoid>, unaryCheck,
          every);
  widened(OpKind::Softmax, softmaxKernel, f32Check, every);
  widened(OpKind::LayerNormalization, layerNormKernel, layerNormCheck, every);
  registerKernel(OpKind::Gather, BackendKind::CUDA, gatherKernel,
                 KernelWrites::All, gatherCheck);
  // (TopK writes k per row, GatherElements every element, ScatterElements
  // copies its data first: nothing to zero.)
  widened(OpKind::TopK, topKKernel, topKCheck, every);
  registerKernel(OpKind::GatherElements, BackendKind::CUDA,
                 gatherElementsKernel, KernelWrites::All, elementsCheck);
  registerKernel(OpKind::ScatterElements, BackendKind::CUDA,
                 scatterElementsKernel, KernelWrites::All, elementsCheck);
  reg(OpKind::Reshape, aliasKernel);
  registerKernel(OpKind::Transpose, BackendKind::CUDA, transposeKernel,
                 KernelWrites::All);
  widened(OpKind::ReduceMean, reduceKernel<arith::ReduceOp::Mean>, reduceCheck,
          partial);
  widened(OpKind::ReduceSum, reduceKernel<arith::ReduceOp::Sum>, reduceCheck,
          partial);
  reg(OpKind::LocalSlice, localSliceKernel);
  // (Writes every element of its output: nothing to zero first.)
  registerKernel(OpKind::Expand, BackendKind::CUDA, expandKernel,
                 KernelWrites::All);
  // The loss and the norms' gradients write every element of their
  // outputs: nothing to zero first.
  auto all = [](OpKind k, KernelFn fn, KernelCheckFn check) {
    registerKernel(k, BackendKind::CUDA, fn, KernelWrites::All, check);
  };
  widened(OpKind::SoftmaxCrossEntropy, crossEntropyKernel, crossEntropyCheck,
          every);
  widened(OpKind::SoftmaxCrossEntropyGrad, crossEntropyGradKernel,
          crossEntropyCheck, every);
  widened(OpKind::LayerNormalizationGrad, layerNormGradKernel,
          layerNormGradCheck, every);
  widened(OpKind::GatherGrad, gatherGradKernel, gatherGradCheck, every);
  widened(OpKind::SoftmaxGrad, softmaxGradKernel, softmaxGradCheck, every);
  all(OpKind::Slice, sliceKernel, sliceCheck);
  all(OpKind::Concat, concatKernel, concatCheck);
  all(OpKind::Pad, padKernel, padCheck);
  all(OpKind::Where, whereKernel, whereCheck);
  all(OpKind::Cast, castKernel, castCheck);
  widened(OpKind::VocabMax, vocabMaxKernel, vocabCheck, every);
  widened(OpKind::VocabStats, vocabStatsKernel, vocabCheck, every);
  widened(OpKind::VocabCrossEntropy, vocabCrossEntropyKernel, vocabCheck,
          every);
  widened(OpKind::VocabCrossEntropyGrad, vocabCrossEntropyGradKernel,
          vocabCheck, every);
  // (An absent output of Split is skipped: the others written whole.)
  all(OpKind::Split, splitKernel, splitCheck);
  // (Writes dq, dkt and dv whole; an empty one stays as the executor left
  // it: zero.)
  widened(OpKind::AttentionGrad, attentionGradKernel, attentionGradCheck,
          partial);
  widened(OpKind::LayerNormalizationScaleGrad, layerNormScaleGradKernel,
          layerNormGradCheck, every);
  widened(OpKind::Gelu, geluKernel, geluCheck<1, 0>, partial);
  widened(OpKind::GeluGrad, geluGradKernel, geluCheck<2, 1>, partial);
  widened(OpKind::AddLayerNorm, addLayerNormKernel, addLayerNormCheck, partial);
  widened(OpKind::Attention, attentionKernel, f32Check, partial);
  // The optimizer updates and the clipping norm, on the device.
  UpdateKernels updates;
  updates.adamw = [](Device &device, const OptimizerParams &p, int64_t step,
                     float gradScale, Tensor &w, const Tensor &g, Tensor &m,
                     Tensor &v) {
    if (step < 1)
      throw Error(fmt::format("AdamW: step {} is not 1-based", step));
    for (const Tensor *t :
         std::initializer_list<const Tensor *>{&w, &g, &m, &v})
      if (!t->defined() || t->dtype() != DType::F32 || t->shape() != g.shape())
        throw Error(fmt::format("AdamW: the weight, gradient and moments must "
                                "be f32 of one shape, got {} and {}",
                                t->defined() ? t->type().str() : "undefined",
                                g.type().str()));
    adamw(adamwScalars(p, step, gradScale), f(w), f(&g), f(m), f(v),
          g.numElements(), static_cast<CudaDevice &>(device).stream());
  };
  updates.sgd = [](Device &device, const OptimizerParams &p, int64_t step,
                   float gradScale, Tensor &w, const Tensor &g, Tensor &buf) {
    if (step < 1)
      throw Error(fmt::format("SGD: step {} is not 1-based", step));
    bool momentum = p.momentum != 0;
    for (const Tensor *t : std::initializer_list<const Tensor *>{&w, &g, &buf})
      if ((t != &buf || momentum) &&
          (!t->defined() || t->dtype() != DType::F32 ||
           t->shape() != g.shape()))
        throw Error(fmt::format("SGD: the weight, gradient and momentum buffer "
                                "must be f32 of one shape, got {} and {}",
                                t->defined() ? t->type().str() : "undefined",
                                g.type().str()));
    sgd(sgdScalars(p, step, gradScale), f(w), f(&g),
        momentum ? f(buf) : nullptr, g.numElements(),
        static_cast<CudaDevice &>(device).stream());
  };
  updates.sumOfSquares = [](Device &device, const Tensor &g) {
    if (g.dtype() != DType::F32)
      throw Error(fmt::format("sumOfSquares: the gradient must be f32, got {}",
                              g.type().str()));
    CudaDevice &d = static_cast<CudaDevice &>(device);
    int64_t n = g.numElements();
    return cuda::sumOfSquares(f(&g), n, d.workspace(sumOfSquaresWorkspace(n)),
                              d.stream());
  };
  registerUpdateKernels(BackendKind::CUDA, updates);
}
