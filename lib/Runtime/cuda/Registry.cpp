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

#include "KernelRegistry.h"

#include "PlanLoader.h"
#include "cuda/Backend.h"
#include "cuda/CudaDevice.h"
#include "cuda/FusedKernels.h"
#include "cuda/Kernels.h"
#include "ops/MathKinds.h"

#include <fmt/format.h>

#include <algorithm>

using namespace shoal::rt;
using namespace shoal::rt::cuda;

namespace {

using Inputs = std::vector<const Tensor *>;
using Outputs = std::vector<Tensor>;

CudaDevice &dev(KernelContext &ctx) {
  return static_cast<CudaDevice &>(ctx.device);
}

/// The kernels here compute f32 only (the matrix products round to 16 bits
/// inside, by --precision). The type rules also take f16/bf16 operands and
/// mixed ones (bf16 activations with an f32 norm scale, bias or mask, an f32
/// weight gradient from bf16 operands): each kernel calls this first, so
/// that those run on the CPU (KernelUnsupported) and never reach a kernel
/// that would read 16-bit data as f32.
void requireF32(const OpInfo &op, const Inputs &in, const Outputs &out) {
  for (const Tensor *t : in)
    if (t && t->dtype() != DType::F32 && t->dtype() != DType::I64 &&
        t->dtype() != DType::I32)
      throw KernelUnsupported(
          fmt::format("{} on {}", op.kindName, dtypeName(t->dtype())));
  for (const Tensor &t : out)
    if (t.defined() && t.dtype() != DType::F32)
      throw KernelUnsupported(
          fmt::format("{} producing {}", op.kindName, dtypeName(t.dtype())));
}

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
  int64_t na = numElements(a) / (s.m * s.k), nb = numElements(b) / (s.k * s.n);
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

void matmulKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  requireF32(op, in, out);
  MatmulShape s = matmulShapeOf(in[0]->shape(), in[1]->shape(), out[0].shape());
  if (s.general)
    throw KernelUnsupported("MatMul with broadcast batch dimensions");
  gemm(dev(ctx), in[0]->rawData(), in[1]->rawData(), out[0].rawData(), false,
       false, 1.0f, s, in[0]->numElements(), in[1]->numElements());
}

void gemmKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  requireF32(op, in, out);
  const OpAttrs &a = op.attrs;
  bool hasC = in.size() > 2 && in[2];
  if (hasC && a.beta != 1.0f)
    throw KernelUnsupported("Gemm with C and beta != 1");
  if (hasC && ctx.addInto)
    throw KernelUnsupported("Gemm with C adding into its output");
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
void binaryKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  DType t = out[0].dtype();
  bool intOk = B == arith::BinaryOp::Add || B == arith::BinaryOp::Sub ||
               B == arith::BinaryOp::Mul;
  if (!(t == DType::F32 || (intOk && (t == DType::I64 || t == DType::I32))) ||
      in[0]->dtype() != t || in[1]->dtype() != t)
    throw KernelUnsupported(fmt::format("{} on {}", op.kindName, dtypeName(t)));
  binary(B, t, in[0]->rawData(), in[0]->shape(), in[1]->rawData(),
         in[1]->shape(), out[0].rawData(), out[0].shape(), dev(ctx).stream());
}

template <arith::UnaryOp U>
void unaryKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                 Outputs &out) {
  requireF32(op, in, out);
  if (in[0]->dtype() != DType::F32)
    throw KernelUnsupported("integer unary op");
  unary(U, f(in[0]), f(out[0]), out[0].numElements(), dev(ctx).stream());
}

void softmaxKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                   Outputs &out) {
  requireF32(op, in, out);
  softmax(f(in[0]), f(out[0]), out[0].shape(), op.attrs.axis,
          dev(ctx).stream());
}

void layerNormKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                     Outputs &out) {
  requireF32(op, in, out);
  // The kernel writes only Y; Mean and InvStdDev run on the CPU.
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].defined())
      throw KernelUnsupported("LayerNormalization's Mean or InvStdDev output");
  if (op.attrs.rms) // no CUDA RMSNorm yet: the CPU kernel on host copies
    throw KernelUnsupported("LayerNormalization with rms = 1 (RMSNorm)");
  bool hasBias = in.size() > 2 && in[2];
  layerNorm(f(in[0]), f(in[1]), in[1]->shape(), hasBias ? f(in[2]) : nullptr,
            hasBias ? in[2]->shape() : Shape{}, f(out[0]), out[0].shape(),
            op.attrs.axis, op.attrs.epsilon, dev(ctx).stream());
}

void gatherKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  // Vocabulary-parallel lookups run the CPU kernel (no CUDA kernel yet).
  if (op.attrs.shardSize > 0)
    throw KernelUnsupported("a vocabulary-parallel Gather");
  gather(in[0]->rawData(), in[0]->dtype(), in[0]->shape(), in[1]->rawData(),
         in[1]->dtype(), in[1]->shape(), op.attrs.axis, out[0].rawData(),
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

template <arith::ReduceOp R>
void reduceKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                  Outputs &out) {
  if (op.attrs.reduceIsIdentity) {
    aliasKernel(ctx, op, in, out);
    return;
  }
  requireF32(op, in, out);
  reduce(R, f(in[0]), in[0]->shape(), op.attrs.axes, f(out[0]),
         dev(ctx).stream());
}

void localSliceKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                      Outputs &out) {
  sliceBlock(in[0]->rawData(), dtypeSize(in[0]->dtype()), in[0]->shape(),
             op.attrs.dim, op.attrs.groupSize, ctx.groupIndex, out[0].rawData(),
             dev(ctx).stream());
}

/// Gelu's (GeluGrad's) bias, input `i`: null when absent; the kernels
/// broadcast one along the last dimension only.
const float *geluBias(const OpInfo &op, const Inputs &in, std::size_t i,
                      const Shape &x) {
  if (in.size() <= i || !in[i])
    return nullptr;
  const Shape &b = in[i]->shape();
  if (b.size() != 1 || x.empty() || b[0] != x.back())
    throw KernelUnsupported(std::string(opKindName(op.kind)) +
                            " bias not along the last dimension");
  return f(in[i]);
}

void geluKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                Outputs &out) {
  requireF32(op, in, out);
  const float *bias = geluBias(op, in, 1, in[0]->shape());
  gelu(f(in[0]), bias, bias ? in[1]->numElements() : 0, f(out[0]),
       out[0].numElements(), op.attrs.tanhGelu, dev(ctx).stream());
}

void geluGradKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                    Outputs &out) {
  requireF32(op, in, out);
  const float *bias = geluBias(op, in, 2, in[1]->shape());
  geluGrad(f(in[0]), f(in[1]), bias, bias ? in[2]->numElements() : 0, f(out[0]),
           out[0].numElements(), op.attrs.tanhGelu, dev(ctx).stream());
}

void addLayerNormKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                        Outputs &out) {
  requireF32(op, in, out);
  const Shape &xs = in[0]->shape();
  int64_t cols = 1;
  for (std::size_t i = op.attrs.axis; i < xs.size(); ++i)
    cols *= xs[i];
  for (std::size_t i = 2; i < in.size(); ++i)
    if (in[i] && in[i]->numElements() != cols)
      throw KernelUnsupported("AddLayerNorm with broadcast scale or bias");
  int64_t rows = cols ? in[0]->numElements() / cols : 0;
  bool hasBias = in.size() > 3 && in[3];
  addLayerNorm(f(in[0]), f(in[1]), f(in[2]), hasBias ? f(in[3]) : nullptr,
               f(out[0]), f(out[1]), rows, cols, op.attrs.epsilon,
               dev(ctx).stream());
}

/// softmax(q kt * scale + mask) v with cuBLAS for the two products and the
/// scores in the workspace (not yet a flash-attention kernel).
void attentionKernel(KernelContext &ctx, const OpInfo &op, const Inputs &in,
                     Outputs &out) {
  requireF32(op, in, out);
  CudaDevice &d = dev(ctx);
  const Shape &qs = in[0]->shape(), &ks = in[1]->shape(), &vs = in[2]->shape();
  std::size_t r = qs.size();
  int64_t batch = 1;
  for (std::size_t i = 0; i + 2 < r; ++i)
    batch *= qs[i];
  int64_t t = qs[r - 2], dd = qs[r - 1], sk = ks[r - 1], e = vs[r - 1];
  Shape scoreShape(qs.begin(), qs.end() - 1);
  scoreShape.push_back(sk);
  std::size_t scoreBytes = (batch * t * sk * 4 + 255) / 256 * 256;
  // Scores, probabilities and the 16-bit copies in the workspace.
  int64_t scoreElems = batch * t * sk;
  std::size_t half =
      std::max(halfScratchBytes(in[0]->numElements(), in[1]->numElements()),
               halfScratchBytes(scoreElems, in[2]->numElements()));
  char *base = static_cast<char *>(d.workspace(2 * scoreBytes + half));
  float *scores = reinterpret_cast<float *>(base);
  float *probs = reinterpret_cast<float *>(base + scoreBytes);
  char *scratch = base + 2 * scoreBytes;
  MatmulShape s1{t, sk, dd, batch, t * dd, dd * sk, false};
  gemm(d, in[0]->rawData(), in[1]->rawData(), scores, false, false,
       op.attrs.scale, s1, in[0]->numElements(), in[1]->numElements(), scratch);
  if (in.size() > 3 && in[3])
    binary(arith::BinaryOp::Add, DType::F32, scores, scoreShape,
           in[3]->rawData(), in[3]->shape(), scores, scoreShape, d.stream());
  softmax(scores, probs, scoreShape,
          static_cast<int64_t>(scoreShape.size()) - 1, d.stream());
  MatmulShape s2{t, e, sk, batch, t * sk, sk * e, false};
  gemm(d, probs, in[2]->rawData(), out[0].rawData(), false, false, 1.0f, s2,
       scoreElems, in[2]->numElements(), scratch);
}

} // namespace

void shoal::rt::registerCudaKernels() {
  static bool done = false;
  if (done)
    return;
  done = true;
  auto reg = [](OpKind k, KernelFn fn) {
    registerKernel(k, BackendKind::CUDA, fn);
  };
  reg(OpKind::MatMul, matmulKernel);
  reg(OpKind::Gemm, gemmKernel);
  reg(OpKind::Add, binaryKernel<arith::BinaryOp::Add>);
  reg(OpKind::Sub, binaryKernel<arith::BinaryOp::Sub>);
  reg(OpKind::Mul, binaryKernel<arith::BinaryOp::Mul>);
  reg(OpKind::Div, binaryKernel<arith::BinaryOp::Div>);
  reg(OpKind::Pow, binaryKernel<arith::BinaryOp::Pow>);
  reg(OpKind::Erf, unaryKernel<arith::UnaryOp::Erf>);
  reg(OpKind::Tanh, unaryKernel<arith::UnaryOp::Tanh>);
  reg(OpKind::Relu, unaryKernel<arith::UnaryOp::Relu>);
  reg(OpKind::Sqrt, unaryKernel<arith::UnaryOp::Sqrt>);
  reg(OpKind::Exp, unaryKernel<arith::UnaryOp::Exp>);
  reg(OpKind::Neg, unaryKernel<arith::UnaryOp::Neg>);
  reg(OpKind::Sigmoid, unaryKernel<arith::UnaryOp::Sigmoid>);
  reg(OpKind::Softmax, softmaxKernel);
  reg(OpKind::LayerNormalization, layerNormKernel);
  reg(OpKind::Gather, gatherKernel);
  reg(OpKind::Reshape, aliasKernel);
  reg(OpKind::Transpose, transposeKernel);
  reg(OpKind::ReduceMean, reduceKernel<arith::ReduceOp::Mean>);
  reg(OpKind::ReduceSum, reduceKernel<arith::ReduceOp::Sum>);
  reg(OpKind::LocalSlice, localSliceKernel);
  reg(OpKind::Gelu, geluKernel);
  reg(OpKind::GeluGrad, geluGradKernel);
  reg(OpKind::AddLayerNorm, addLayerNormKernel);
  reg(OpKind::Attention, attentionKernel);
}
