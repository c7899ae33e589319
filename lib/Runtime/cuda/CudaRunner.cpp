//===- CudaRunner.cpp - Running a program on one GPU ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA backend: every value lives on the GPU; op results in one arena
// planned ahead by liveness (planMemory), so the step loop never allocates;
// weights, constants and inputs are uploaded once. Matrix products go
// through cuBLAS (fp32, tf32, or bf16/fp16 inputs with fp32 accumulation),
// the other ops through the kernels of cuda/Kernels.cu, collectives through
// NCCL on a stream of their own (bootstrapped over MPI). Ops without a
// kernel run on the CPU kernels, with their inputs and outputs copied.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"
#include "Comm.h"
#include "Executor.h"
#include "MemoryPlan.h"
#include "PlanLoader.h"
#include "cuda/FusedKernels.h"
#include "cuda/Kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

using namespace shoal::rt;

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw Error(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(e)));
}
void check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuBLAS: {}: {}", what, cublasGetStatusString(s)));
}
void check(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    throw Error(fmt::format("NCCL: {}: {}", what, ncclGetErrorString(r)));
}

ncclDataType_t ncclTypeOf(DType t) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::I64:
    return ncclInt64;
  case DType::I32:
    return ncclInt32;
  case DType::Bool:
  case DType::U8:
    return ncclUint8;
  case DType::I8:
    return ncclInt8;
  case DType::F64:
    return ncclFloat64;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  }
  return ncclFloat32;
}

/// numpy matmul as a (possibly strided-batched) row-major GEMM.
struct MatmulShape {
  int64_t m, n, k, batch;
  int64_t strideA, strideB; // 0 when that side is broadcast over the batch
  bool general;             // batch broadcasting needs a loop per batch
};

MatmulShape matmulShapeOf(Shape as, Shape bs) {
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  MatmulShape s;
  s.m = as[as.size() - 2];
  s.k = as.back();
  s.n = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  auto count = [](const Shape &x) {
    int64_t n = 1;
    for (int64_t d : x)
      n *= d;
    return n;
  };
  int64_t na = count(ab), nb = count(bb);
  s.general = false;
  if (nb == 1) {
    // B is shared: fold A's batch into M.
    s.m *= na;
    s.batch = 1;
    s.strideA = s.strideB = 0;
  } else if (na == 1) {
    s.batch = nb;
    s.strideA = 0;
    s.strideB = s.k * s.n;
  } else if (ab == bb) {
    s.batch = na;
    s.strideA = s.m * s.k;
    s.strideB = s.k * s.n;
  } else {
    s.batch = count(cpu::matmulShape(as, bs)) / (s.m * s.n);
    s.strideA = s.strideB = 0;
    s.general = true;
  }
  return s;
}

class CudaRunner : public ProgramRunner {
public:
  CudaRunner(const LoadedPlan &plan, const CudaOptions &options, int localRank)
      : plan(plan), options(options) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      throw Error(fmt::format(
          "no CUDA device is usable ({}); run on a machine with a GPU or use "
          "--backend cpu",
          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
    device = localRank % count;
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
    spec = findDevice(props.name);
    check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
          "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&commStream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
          "cudaEventCreate");
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
          "cudaEventCreate");
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, compute), "cublasSetStream");
    check(cublasSetMathMode(blas, options.matmulPrecision == Precision::TF32
                                      ? CUBLAS_TF32_TENSOR_OP_MATH
                                      : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");

    memory = planMemory(plan);
    std::size_t scratch = 256;
    for (const OpInfo &op : plan.ops)
      scratch = std::max(scratch, scratchBytes(op));
    check(cudaMalloc(&arena, std::max<std::size_t>(memory.arenaBytes, 256)),
          "allocating the activation arena");
    check(cudaMalloc(&workspace, scratch), "allocating the workspace");
    workspaceBytes = scratch;
    check(cudaMalloc(&errorFlag, sizeof(int)), "cudaMalloc");
    check(cudaMemset(errorFlag, 0, sizeof(int)), "cudaMemset");
    pointers.assign(plan.values.size(), nullptr);
    for (std::size_t v = 0; v < plan.values.size(); ++v) {
      int root = static_cast<int>(v);
      while (memory.aliasOf[root] >= 0)
        root = memory.aliasOf[root];
      if (memory.offset[root] >= 0)
        pointers[v] = static_cast<char *>(arena) + memory.offset[root];
    }
  }

  ~CudaRunner() override {
    for (auto &[axes, c] : groups)
      ncclCommDestroy(c);
    if (worldComm)
      ncclCommDestroy(worldComm);
    for (void *p : owned)
      cudaFree(p);
    cudaFree(arena);
    cudaFree(workspace);
    cudaFree(errorFlag);
    cublasDestroy(blas);
    cudaEventDestroy(ready);
    cudaEventDestroy(done);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(commStream);
  }

  void setValue(int id, Tensor tensor) override {
    if (tensor.type() != plan.values[id])
      throw Error(fmt::format("value {} is {} but was given a {} tensor", id,
                              plan.values[id].str(), tensor.type().str()));
    void *p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(tensor.numBytes(), 1)),
          "allocating a weight or input");
    owned.push_back(p);
    check(cudaMemcpy(p, tensor.rawData(), tensor.numBytes(),
                     cudaMemcpyHostToDevice),
          "uploading a weight or input");
    pointers[id] = p;
    persistent.insert(id);
  }

  void connect(Comm &comm) override {
    ncclUniqueId id;
    if (comm.rank() == 0)
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm.world());
    check(ncclCommInitRank(&worldComm, comm.size(), id, comm.rank()),
          "ncclCommInitRank");
    const Mesh &mesh = comm.mesh();
    for (const std::vector<int> &axes : plan.collectiveAxes) {
      // Same groups as Comm: ranks agreeing on every other axis, ordered
      // row-major over `axes`.
      int color = static_cast<int>(mesh.groupColor(axes, comm.coords()));
      ncclComm_t c;
      check(ncclCommSplit(worldComm, color,
                          static_cast<int>(comm.groupIndex(axes)), &c, nullptr),
            "ncclCommSplit");
      groups[axes] = c;
    }
    // Matrix products in 16 bits read their weights rounded once, here.
    if (options.matmulPrecision == Precision::BF16 ||
        options.matmulPrecision == Precision::FP16)
      for (const OpInfo &op : plan.ops)
        if (op.kind == OpKind::MatMul || op.kind == OpKind::Gemm)
          for (int i = 0; i < 2; ++i)
            if (persistent.count(op.inputs[i]) && !halves.count(op.inputs[i]))
              halves[op.inputs[i]] = roundWeight(op.inputs[i]);
    check(cudaDeviceSynchronize(), "preparing the weights");
  }

  void run(Comm &comm, bool verbose) override {
    bool print = verbose && comm.rank() == 0;
    stepProfile.ops.clear();
    for (const OpInfo &op : plan.ops) {
      auto start = std::chrono::steady_clock::now();
      try {
        if (cudaHasKernel(plan, op))
          runOp(op, comm);
        else
          runOnCpu(op, comm);
        check(cudaGetLastError(), "kernel launch");
        if (print || profiling)
          check(cudaStreamSynchronize(compute), "running the op");
      } catch (const Error &e) {
        throw Error(fmt::format("{}: {}", op.describe(), e.what()));
      }
      if (profiling)
        stepProfile.ops.push_back({op.index, 0,
                                   std::chrono::duration<double>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()});
      if (print)
        std::fprintf(stderr, "shoal-run: %-60s %10.3f ms\n",
                     op.describe().c_str(),
                     std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count());
    }
    check(cudaStreamSynchronize(compute), "running the program");
    int flag = 0;
    check(cudaMemcpy(&flag, errorFlag, sizeof(int), cudaMemcpyDeviceToHost),
          "reading the error flag");
    if (flag)
      throw Error("Gather: an index is out of range");
  }

  Tensor fetch(int id) override {
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    Tensor t(plan.values[id]);
    check(
        cudaMemcpy(t.rawData(), ptr(id), t.numBytes(), cudaMemcpyDeviceToHost),
        "downloading an output");
    return t;
  }

  std::string deviceName() const override {
    return fmt::format("cuda:{} {}", device, props.name);
  }
  const DeviceSpec *deviceSpec() const override { return spec; }
  const StepProfile *profile() const override {
    return profiling ? &stepProfile : nullptr;
  }
  bool setProfiling(bool on) override {
    profiling = on;
    return true;
  }

private:
  const LoadedPlan &plan;
  CudaOptions options;
  int device = 0;
  cudaDeviceProp props{};
  const DeviceSpec *spec = nullptr;
  StepProfile stepProfile;
  bool profiling = false;
  cudaStream_t compute = nullptr, commStream = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;
  cublasHandle_t blas = nullptr;
  ncclComm_t worldComm = nullptr;
  std::map<std::vector<int>, ncclComm_t> groups;
  MemoryPlan memory;
  void *arena = nullptr, *workspace = nullptr;
  std::size_t workspaceBytes = 0;
  int *errorFlag = nullptr;
  std::vector<void *> pointers;
  std::vector<void *> owned;
  std::set<int> persistent;
  /// 16-bit copies of weights read by matrix products.
  std::map<int, void *> halves;

  void *ptr(int v) {
    if (!pointers[v])
      throw Error(fmt::format("value {} has no device buffer", v));
    return pointers[v];
  }
  const TensorType &type(int v) const { return plan.values[v]; }

  bool sixteenBit() const {
    return options.matmulPrecision == Precision::BF16 ||
           options.matmulPrecision == Precision::FP16;
  }
  cuda::DType16 halfType() const {
    return options.matmulPrecision == Precision::BF16 ? cuda::DType16::BF16
                                                      : cuda::DType16::F16;
  }

  /// Scratch an op needs beyond its operands: gathered blocks, or the
  /// 16-bit copies of matrix-product activations.
  std::size_t scratchBytes(const OpInfo &op) const {
    if (op.kind == OpKind::AllGather)
      return plan.values[op.outputs[0]].numBytes();
    if ((op.kind == OpKind::MatMul || op.kind == OpKind::Gemm) && sixteenBit())
      return 2 * (plan.values[op.inputs[0]].numElements() +
                  plan.values[op.inputs[1]].numElements()) +
             512;
    if (op.kind == OpKind::Attention) {
      const Shape &q = plan.values[op.inputs[0]].shape;
      const Shape &kt = plan.values[op.inputs[1]].shape;
      int64_t scores =
          plan.values[op.inputs[0]].numElements() / q.back() * kt.back();
      std::size_t bytes = 2 * ((scores * 4 + 255) / 256 * 256) + 1024;
      if (sixteenBit())
        bytes += 2 * (plan.values[op.inputs[0]].numElements() +
                      plan.values[op.inputs[1]].numElements() + scores +
                      plan.values[op.inputs[2]].numElements()) +
                 1024;
      return bytes;
    }
    return 0;
  }

  void *roundWeight(int v) {
    void *p = nullptr;
    check(cudaMalloc(&p, 2 * std::max<int64_t>(type(v).numElements(), 1)),
          "allocating a 16-bit weight copy");
    owned.push_back(p);
    cuda::castF32To(halfType(), static_cast<const float *>(ptr(v)), p,
                    type(v).numElements(), compute);
    return p;
  }

  /// Row-major C[m,n] = alpha op(A) op(B), batched by strides. `aValue` and
  /// `bValue` name the operands (for their cached 16-bit copies; -1 for
  /// none); `scratch` is where 16-bit copies of activations go.
  void gemm(const void *a, int aValue, const void *b, int bValue, void *c,
            bool transA, bool transB, float alpha, const MatmulShape &s,
            const Shape &aShape, const Shape &bShape, const Shape &cShape,
            char *scratch) {
    cudaDataType_t inType = CUDA_R_32F;
    cublasComputeType_t computeType = options.matmulPrecision == Precision::TF32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
    if (sixteenBit()) {
      inType =
          options.matmulPrecision == Precision::BF16 ? CUDA_R_16BF : CUDA_R_16F;
      auto half = [&](int v, const void *p,
                      const Shape &shape) -> const void * {
        if (auto it = halves.find(v); v >= 0 && it != halves.end())
          return it->second;
        void *out = scratch;
        int64_t n = 1;
        for (int64_t d : shape)
          n *= d;
        scratch += (2 * n + 255) / 256 * 256;
        cuda::castF32To(halfType(), static_cast<const float *>(p), out, n,
                        compute);
        return out;
      };
      a = half(aValue, a, aShape);
      b = half(bValue, b, bShape);
    }
    std::size_t elem = sixteenBit() ? 2 : 4;
    // Column-major view: C^T = op(B)^T op(A)^T.
    int m = static_cast<int>(s.m), n = static_cast<int>(s.n),
        k = static_cast<int>(s.k);
    int lda = transA ? m : k, ldb = transB ? k : n;
    float beta = 0;
    auto call = [&](const void *ap, const void *bp, void *cp, long long strideA,
                    long long strideB, int batch) {
      check(cublasGemmStridedBatchedEx(
                blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, bp, inType,
                ldb, strideB, ap, inType, lda, strideA, &beta, cp, CUDA_R_32F,
                n, static_cast<long long>(m) * n, batch, computeType,
                CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
    };
    if (!s.general) {
      call(a, b, c, s.strideA, s.strideB, static_cast<int>(s.batch));
      return;
    }
    // Broadcast batch dimensions: one GEMM per output batch entry.
    const Shape &as = aShape, &bs = bShape, &out = cShape;
    Shape batch(out.begin(), out.end() - 2);
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    for (int64_t i = 0; i < s.batch; ++i) {
      int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
      for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
        int64_t idx = rem % batch[d];
        rem /= batch[d];
        int da = d - static_cast<int>(batch.size() - ab.size());
        int db = d - static_cast<int>(batch.size() - bb.size());
        if (da >= 0) {
          ia += (ab[da] == 1 ? 0 : idx) * sa;
          sa *= ab[da];
        }
        if (db >= 0) {
          ib += (bb[db] == 1 ? 0 : idx) * sb;
          sb *= bb[db];
        }
      }
      call(static_cast<const char *>(a) + ia * s.m * s.k * elem,
           static_cast<const char *>(b) + ib * s.k * s.n * elem,
           static_cast<char *>(c) + i * s.m * s.n * 4, 0, 0, 1);
    }
  }

  /// gemm() for a MatMul or Gemm op.
  void gemmOp(const OpInfo &op, bool transA, bool transB, float alpha,
              const MatmulShape &s) {
    gemm(ptr(op.inputs[0]), op.inputs[0], ptr(op.inputs[1]), op.inputs[1],
         ptr(op.outputs[0]), transA, transB, alpha, s, type(op.inputs[0]).shape,
         type(op.inputs[1]).shape, type(op.outputs[0]).shape,
         static_cast<char *>(workspace));
  }

  /// softmax(q kt * scale + mask) v with cuBLAS for the two products and the
  /// scores in the workspace (not yet a flash-attention kernel).
  void attention(const OpInfo &op) {
    const Shape &qs = type(op.inputs[0]).shape, &ks = type(op.inputs[1]).shape,
                &vs = type(op.inputs[2]).shape;
    std::size_t r = qs.size();
    int64_t batch = 1;
    for (std::size_t i = 0; i + 2 < r; ++i)
      batch *= qs[i];
    int64_t t = qs[r - 2], d = qs[r - 1], sk = ks[r - 1], e = vs[r - 1];
    Shape scoreShape(qs.begin(), qs.end() - 1);
    scoreShape.push_back(sk);
    std::size_t scoreBytes = (batch * t * sk * 4 + 255) / 256 * 256;
    char *base = static_cast<char *>(workspace);
    float *scores = reinterpret_cast<float *>(base);
    float *probs = reinterpret_cast<float *>(base + scoreBytes);
    char *scratch = base + 2 * scoreBytes;
    MatmulShape s1{t, sk, d, batch, t * d, d * sk, false};
    gemm(ptr(op.inputs[0]), op.inputs[0], ptr(op.inputs[1]), op.inputs[1],
         scores, false, false, op.attrs.scale, s1, qs, ks, scoreShape, scratch);
    if (op.inputs.size() > 3 && op.inputs[3] >= 0)
      cuda::binary(cpu::BinaryOp::Add, DType::F32, scores, scoreShape,
                   ptr(op.inputs[3]), type(op.inputs[3]).shape, scores,
                   scoreShape, compute);
    cuda::softmax(scores, probs, scoreShape,
                  static_cast<int64_t>(scoreShape.size()) - 1, compute);
    MatmulShape s2{t, e, sk, batch, t * sk, sk * e, false};
    gemm(probs, -1, ptr(op.inputs[2]), op.inputs[2], ptr(op.outputs[0]), false,
         false, 1.0f, s2, scoreShape, vs, type(op.outputs[0]).shape, scratch);
  }

  void copy(int from, int to) {
    if (ptr(from) != ptr(to))
      check(cudaMemcpyAsync(ptr(to), ptr(from), type(to).numBytes(),
                            cudaMemcpyDeviceToDevice, compute),
            "cudaMemcpyAsync");
  }

  /// Runs a collective on the communication stream, ordered after the
  /// compute work that produced its input and before the work that reads
  /// its output.
  template <typename F> void onCommStream(F &&f) {
    check(cudaEventRecord(ready, compute), "cudaEventRecord");
    check(cudaStreamWaitEvent(commStream, ready, 0), "cudaStreamWaitEvent");
    f();
    check(cudaEventRecord(done, commStream), "cudaEventRecord");
    check(cudaStreamWaitEvent(compute, done, 0), "cudaStreamWaitEvent");
  }

  void runOp(const OpInfo &op, Comm &comm) {
    const OpAttrs &a = op.attrs;
    auto in = [&](int i) { return ptr(op.inputs[i]); };
    auto inF = [&](int i) { return static_cast<const float *>(in(i)); };
    int out = op.outputs[0];
    float *outF = static_cast<float *>(ptr(out));
    auto shape = [&](int v) -> const Shape & { return type(v).shape; };
    switch (op.kind) {
    case OpKind::MatMul:
      gemmOp(op, false, false, 1.0f,
             matmulShapeOf(shape(op.inputs[0]), shape(op.inputs[1])));
      break;
    case OpKind::Gemm: {
      MatmulShape s;
      s.m = shape(out)[0];
      s.n = shape(out)[1];
      s.k = a.transA ? shape(op.inputs[0])[0] : shape(op.inputs[0])[1];
      s.batch = 1;
      s.strideA = s.strideB = 0;
      s.general = false;
      gemmOp(op, a.transA, a.transB, a.alpha, s);
      if (op.inputs.size() > 2 && op.inputs[2] >= 0) {
        if (a.beta != 1.0f)
          throw Error("Gemm with C and beta != 1 has no CUDA kernel");
        cuda::binary(cpu::BinaryOp::Add, DType::F32, outF, shape(out), in(2),
                     shape(op.inputs[2]), outF, shape(out), compute);
      }
      break;
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Pow: {
      static const cpu::BinaryOp ops[] = {
          cpu::BinaryOp::Add, cpu::BinaryOp::Sub, cpu::BinaryOp::Mul,
          cpu::BinaryOp::Div, cpu::BinaryOp::Pow};
      cuda::binary(
          ops[static_cast<int>(op.kind) - static_cast<int>(OpKind::Add)],
          type(out).dtype, in(0), shape(op.inputs[0]), in(1),
          shape(op.inputs[1]), ptr(out), shape(out), compute);
      break;
    }
    case OpKind::Erf:
    case OpKind::Tanh:
    case OpKind::Relu:
    case OpKind::Sqrt:
    case OpKind::Exp:
    case OpKind::Neg:
    case OpKind::Sigmoid: {
      static const cpu::UnaryOp ops[] = {
          cpu::UnaryOp::Erf,    cpu::UnaryOp::Tanh, cpu::UnaryOp::Relu,
          cpu::UnaryOp::Sqrt,   cpu::UnaryOp::Exp,  cpu::UnaryOp::Neg,
          cpu::UnaryOp::Sigmoid};
      cuda::unary(
          ops[static_cast<int>(op.kind) - static_cast<int>(OpKind::Erf)],
          inF(0), outF, type(out).numElements(), compute);
      break;
    }
    case OpKind::Softmax:
      cuda::softmax(inF(0), outF, shape(out), a.axis, compute);
      break;
    case OpKind::LayerNormalization: {
      bool hasBias = op.inputs.size() > 2 && op.inputs[2] >= 0;
      cuda::layerNorm(inF(0), inF(1), shape(op.inputs[1]),
                      hasBias ? inF(2) : nullptr,
                      hasBias ? shape(op.inputs[2]) : Shape{}, outF, shape(out),
                      a.axis, a.epsilon, compute);
      break;
    }
    case OpKind::Gather:
      cuda::gather(in(0), type(op.inputs[0]).dtype, shape(op.inputs[0]), in(1),
                   type(op.inputs[1]).dtype, shape(op.inputs[1]), a.axis,
                   ptr(out), errorFlag, compute);
      break;
    case OpKind::Reshape:
      copy(op.inputs[0], out);
      break;
    case OpKind::Transpose:
      cuda::transpose(in(0), dtypeSize(type(out).dtype), shape(op.inputs[0]),
                      a.perm, ptr(out), compute);
      break;
    case OpKind::ReduceMean:
    case OpKind::ReduceSum:
      if (a.reduceIsIdentity) {
        copy(op.inputs[0], out);
        break;
      }
      cuda::reduce(op.kind == OpKind::ReduceSum ? cpu::ReduceOp::Sum
                                                : cpu::ReduceOp::Mean,
                   inF(0), shape(op.inputs[0]), a.axes, outF, compute);
      break;
    case OpKind::AllReduce:
      onCommStream([&] {
        check(ncclAllReduce(in(0), ptr(out), type(out).numElements(),
                            ncclTypeOf(type(out).dtype), ncclSum,
                            groups.at(a.meshAxes), commStream),
              "ncclAllReduce");
      });
      break;
    case OpKind::AllGather: {
      const TensorType &local = type(op.inputs[0]);
      void *blocks = a.dim == 0 ? ptr(out) : workspace;
      onCommStream([&] {
        check(ncclAllGather(in(0), blocks, local.numElements(),
                            ncclTypeOf(local.dtype), groups.at(a.meshAxes),
                            commStream),
              "ncclAllGather");
      });
      if (a.dim != 0)
        cuda::concatBlocks(blocks, dtypeSize(local.dtype), local.shape,
                           a.groupSize, a.dim, ptr(out), compute);
      break;
    }
    case OpKind::LocalSlice:
      cuda::sliceBlock(in(0), dtypeSize(type(out).dtype), shape(op.inputs[0]),
                       a.dim, a.groupSize, comm.groupIndex(a.meshAxes),
                       ptr(out), compute);
      break;
    case OpKind::Gelu: {
      bool hasBias = op.inputs.size() > 1 && op.inputs[1] >= 0;
      cuda::gelu(inF(0), hasBias ? inF(1) : nullptr,
                 hasBias ? type(op.inputs[1]).numElements() : 0, outF,
                 type(out).numElements(), compute);
      break;
    }
    case OpKind::AddLayerNorm: {
      const Shape &xs = shape(op.inputs[0]);
      int64_t cols = 1;
      for (std::size_t i = a.axis; i < xs.size(); ++i)
        cols *= xs[i];
      int64_t rows = cols ? type(op.inputs[0]).numElements() / cols : 0;
      bool hasBias = op.inputs.size() > 3 && op.inputs[3] >= 0;
      cuda::addLayerNorm(inF(0), inF(1), inF(2), hasBias ? inF(3) : nullptr,
                         outF, static_cast<float *>(ptr(op.outputs[1])), rows,
                         cols, a.epsilon, compute);
      break;
    }
    case OpKind::Attention:
      attention(op);
      break;
    default:
      throw Error(fmt::format("no CUDA kernel for {}", op.kindName));
    }
  }

  /// An op without a CUDA kernel: copy its inputs to the host, run the CPU
  /// kernel, copy its outputs back.
  void runOnCpu(const OpInfo &op, Comm &comm) {
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    std::vector<Tensor> hostIn;
    std::vector<const Tensor *> inputs;
    hostIn.reserve(op.inputs.size());
    for (int v : op.inputs) {
      if (v < 0) {
        inputs.push_back(nullptr);
        continue;
      }
      hostIn.emplace_back(type(v));
      check(cudaMemcpy(hostIn.back().rawData(), ptr(v), type(v).numBytes(),
                       cudaMemcpyDeviceToHost),
            "copying a fallback op's input to the host");
      inputs.push_back(&hostIn.back());
    }
    std::vector<Tensor> outs;
    Executor::runOnCpu(plan, op, inputs, outs, comm);
    for (std::size_t i = 0; i < op.outputs.size(); ++i)
      if (op.outputs[i] >= 0 && pointers[op.outputs[i]])
        check(cudaMemcpy(ptr(op.outputs[i]), outs[i].rawData(),
                         outs[i].numBytes(), cudaMemcpyHostToDevice),
              "copying a fallback op's output to the GPU");
  }
};

} // namespace

bool shoal::rt::cudaBackendBuilt() { return true; }

std::unique_ptr<ProgramRunner>
shoal::rt::makeCudaRunner(const LoadedPlan &plan, const CudaOptions &options,
                          int localRank) {
  if (plan.training.present)
    throw Error(kTrainingNeedsCpu);
  if (plan.isPipelined())
    throw Error("pipelined plans (several programs, micro-batches, tasks or "
                "Send/Recv) run on the CPU backend only for now; use "
                "--backend cpu");
  return std::make_unique<CudaRunner>(plan, options, localRank);
}
