//===- LtMatmul.cpp - Matrix products through cuBLASLt ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cuda/LtMatmul.h"

#include "cuda/CudaDevice.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

using namespace shoal::rt;
using namespace shoal::rt::cuda;

namespace {

void checkLt(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(
        fmt::format("{}: cuBLASLt status {}", what, static_cast<int>(s)));
}

cudaDataType_t cudaTypeOf(DType t) {
  switch (t) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    throw Error(fmt::format("cuBLASLt matmul on {}", dtypeName(t)));
  }
}

/// The descriptors of one call and the heuristic's algorithm for them.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

/// A device's handle, workspace and plans (kept for the process).
struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<std::string, Plan> plans;
};

/// 32 MiB, as PyTorch gives cuBLASLt on Hopper.
constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

DeviceState &stateOf(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceState>> states;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<DeviceState> &s = states[ordinal];
  if (!s) {
    auto fresh = std::make_unique<DeviceState>();
    checkLt(cublasLtCreate(&fresh->handle), "cublasLtCreate");
    check(cudaMalloc(&fresh->workspace, kWorkspaceBytes),
          "cudaMalloc (cuBLASLt workspace)");
    s = std::move(fresh);
  }
  return *s;
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols,
                              int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  checkLt(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                     static_cast<uint64_t>(cols), ld),
          "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    checkLt(cublasLtMatrixLayoutSetAttribute(
                l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
            "cublasLtMatrixLayoutSetAttribute (batch count)");
    checkLt(cublasLtMatrixLayoutSetAttribute(
                l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                sizeof stride),
            "cublasLtMatrixLayoutSetAttribute (batch stride)");
  }
  return l;
}

/// The largest power of two (up to 256) dividing the address and, for a
/// batch, every entry's offset (`strideBytes`; 0: one entry): the
/// heuristic is told it, as it otherwise assumes 256.
uint32_t alignmentOf(const void *p, uint64_t strideBytes = 0) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0 &&
         (strideBytes == 0 || strideBytes % (2 * a) == 0))
    a *= 2;
  return a;
}

} // namespace

bool shoal::rt::cuda::ltHandles(DType ab, DType cType) {
  static const bool cublasOnly = [] {
    const char *v = std::getenv("SHOAL_CUDA_MATMUL");
    return v && std::strcmp(v, "cublas") == 0;
  }();
  return !cublasOnly && (ab == DType::BF16 || ab == DType::F16) &&
         (cType == ab || cType == DType::F32);
}

void shoal::rt::cuda::ltMatmul(CudaDevice &d, const lt::RowMajorProduct &p,
                               const void *a, const void *b, DType ab, void *c,
                               DType cType, float alpha, float beta) {
  if (p.epilogue != lt::Epilogue::None)
    throw Error("cuBLASLt matmul: epilogues are not wired in yet");
  if (cType != ab && cType != DType::F32)
    throw Error(fmt::format("cuBLASLt matmul of {} into {}", dtypeName(ab),
                            dtypeName(cType)));
  if (p.m == 0 || p.n == 0 || p.batch == 0)
    return;
  std::size_t cBytes = dtypeSize(cType) * static_cast<std::size_t>(p.m) *
                       static_cast<std::size_t>(p.n) *
                       static_cast<std::size_t>(p.batch);
  if (p.k == 0) {
    // An empty contraction: C = beta C (zeros for beta 0).
    if (beta == 0)
      check(cudaMemsetAsync(c, 0, cBytes, d.stream()), "cudaMemsetAsync");
    return;
  }
  lt::LtMatmul call = lt::toLt(p);
  cudaDataType_t abType = cudaTypeOf(ab), outType = cudaTypeOf(cType);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  DeviceState &s = stateOf(d.ordinal());
  // (first, second) are (B, A): the key by what the call reads.
  const void *first = call.first == 'B' ? b : a;
  const void *second = call.first == 'B' ? a : b;
  uint64_t abBytes = dtypeSize(ab), outBytes = dtypeSize(cType);
  uint32_t alignFirst =
      alignmentOf(first, call.batch > 1 ? call.strideFirst * abBytes : 0);
  uint32_t alignSecond =
      alignmentOf(second, call.batch > 1 ? call.strideSecond * abBytes : 0);
  uint32_t alignC = alignmentOf(
      c, call.batch > 1
             ? (call.strideC ? call.strideC : call.m * call.n) * outBytes
             : 0);
  std::string key = fmt::format(
      "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", call.m,
      call.n, call.k, call.batch, call.transFirst, call.transSecond,
      call.ldFirst, call.ldSecond, call.ldC, call.strideFirst,
      call.strideSecond, call.strideC, static_cast<int>(abType),
      static_cast<int>(outType), static_cast<int>(compute), beta != 0,
      alignFirst, alignSecond, alignC, d.ordinal());
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    Plan plan;
    checkLt(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F),
            "cublasLtMatmulDescCreate");
    cublasOperation_t ta = call.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = call.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
    checkLt(cublasLtMatmulDescSetAttribute(
                plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            "cublasLtMatmulDescSetAttribute (transa)");
    checkLt(cublasLtMatmulDescSetAttribute(
                plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            "cublasLtMatmulDescSetAttribute (transb)");
    // Column-major D[m, n] = op(first)[m, k] op(second)[k, n]; the stored
    // matrices are op's inputs.
    plan.first = layout(abType, call.transFirst ? call.k : call.m,
                        call.transFirst ? call.m : call.k, call.ldFirst,
                        call.batch, call.strideFirst);
    plan.second = layout(abType, call.transSecond ? call.n : call.k,
                         call.transSecond ? call.k : call.n, call.ldSecond,
                         call.batch, call.strideSecond);
    plan.c = layout(outType, call.m, call.n, call.ldC, call.batch,
                    call.strideC ? call.strideC : call.m * call.n);
    cublasLtMatmulPreference_t pref = nullptr;
    checkLt(cublasLtMatmulPreferenceCreate(&pref),
            "cublasLtMatmulPreferenceCreate");
    std::size_t ws = kWorkspaceBytes;
    checkLt(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
            "cublasLtMatmulPreferenceSetAttribute (workspace)");
    // (cuBLASLt's A is our first, its B our second; C and D are one.)
    for (auto [attr, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignFirst},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignSecond},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}})
      checkLt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value,
                                                   sizeof value),
              "cublasLtMatmulPreferenceSetAttribute (alignment)");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        s.handle, plan.desc, plan.first, plan.second, plan.c, plan.c, pref, 1,
        &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
      throw Error(fmt::format(
          "cuBLASLt has no algorithm for a {} product [{} x {}] x [{} x {}] "
          "(batch {}) into {} (status {})",
          dtypeName(ab), p.m, p.k, p.k, p.n, p.batch, dtypeName(cType),
          static_cast<int>(st)));
    plan.algo = result.algo;
    it = s.plans.emplace(key, plan).first;
  }
  const Plan &plan = it->second;
  checkLt(cublasLtMatmul(s.handle, plan.desc, &alpha, first, plan.first, second,
                         plan.second, &beta, c, plan.c, c, plan.c, &plan.algo,
                         s.workspace, kWorkspaceBytes, d.stream()),
          "cublasLtMatmul");
}
