//===- KernelBench.cpp - Microbenchmarks of the CPU kernels ---------------===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Google Benchmark cases for the fused float kernels of the CPU runtime and
// the machine's roofline: memory bandwidth (copy and triad over arrays far
// larger than the caches) and the BLAS peak (a 2048^3 sgemm). Each case
// reports bytes/s (what it reads and writes once) and, where it has them,
// FLOP/s; bench/kernel_roofline.py runs this binary and prints every kernel
// as a fraction of the roofline. Threads: SHOAL_NUM_THREADS (or
// OMP_NUM_THREADS) for the kernels and OpenBLAS alike.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"

#include <algorithm>
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <random>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

Tensor randomTensor(const Shape &shape, float lo, float hi, unsigned seed) {
  Tensor t(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float *p = t.data<float>();
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    p[i] = d(rng);
  return t;
}

void setBytes(benchmark::State &state, double bytesPerIteration) {
  state.counters["bytes_per_s"] = benchmark::Counter(
      bytesPerIteration, benchmark::Counter::kIsIterationInvariantRate);
}

void setFlops(benchmark::State &state, double flopsPerIteration) {
  state.counters["flop_per_s"] = benchmark::Counter(
      flopsPerIteration, benchmark::Counter::kIsIterationInvariantRate);
}

// The roofline: 64 Mi floats per array (256 MiB), far above any cache.
const int64_t kBig = int64_t(1) << 26;

void BM_RooflineCopy(benchmark::State &state) {
  Tensor a = randomTensor({kBig}, -1, 1, 1), b(DType::F32, {kBig});
  for (auto _ : state) {
    parallelFor(kBig, 1, [&](int64_t i0, int64_t i1) {
      std::memcpy(b.data<float>() + i0, a.data<float>() + i0,
                  (i1 - i0) * sizeof(float));
    });
    benchmark::ClobberMemory();
  }
  setBytes(state, 2.0 * 4 * kBig);
}
BENCHMARK(BM_RooflineCopy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RooflineTriad(benchmark::State &state) {
  Tensor a(DType::F32, {kBig}), b = randomTensor({kBig}, -1, 1, 2),
                                c = randomTensor({kBig}, -1, 1, 3);
  for (auto _ : state) {
    parallelFor(kBig, 1, [&](int64_t i0, int64_t i1) {
      float *pa = a.data<float>();
      const float *pb = b.data<float>(), *pc = c.data<float>();
      for (int64_t i = i0; i < i1; ++i)
        pa[i] = pb[i] + 3.f * pc[i];
    });
    benchmark::ClobberMemory();
  }
  setBytes(state, 3.0 * 4 * kBig);
  setFlops(state, 2.0 * kBig);
}
BENCHMARK(BM_RooflineTriad)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RooflineSgemm(benchmark::State &state) {
  const int n = 2048;
  Tensor a = randomTensor({n, n}, -1, 1, 4), b = randomTensor({n, n}, -1, 1, 5),
         c(DType::F32, {n, n});
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f,
                a.data<float>(), n, b.data<float>(), n, 0.f, c.data<float>(),
                n);
  setFlops(state, 2.0 * n * n * n);
  setBytes(state, 3.0 * 4 * n * n);
}
BENCHMARK(BM_RooflineSgemm)->Unit(benchmark::kMillisecond)->UseRealTime();

// The fused kernels on GPT-sized activations (16-32 MiB per operand).

void BM_GeluBias(benchmark::State &state) {
  const int64_t rows = 4096, n = 2048;
  Tensor x = randomTensor({rows, n}, -4, 4, 6), b = randomTensor({n}, -1, 1, 7),
         y(DType::F32, {rows, n});
  for (auto _ : state)
    gelu(x, &b, y);
  setBytes(state, 2.0 * 4 * rows * n);
}
BENCHMARK(BM_GeluBias)->Unit(benchmark::kMillisecond)->UseRealTime();

// Without a bias (a Gemm that adds its own): the loop must vectorize too.
void BM_Gelu(benchmark::State &state) {
  const int64_t rows = 4096, n = 2048;
  Tensor x = randomTensor({rows, n}, -4, 4, 6), y(DType::F32, {rows, n});
  for (auto _ : state)
    gelu(x, nullptr, y);
  setBytes(state, 2.0 * 4 * rows * n);
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMillisecond)->UseRealTime();

// GELU's backward (the erf form): dy and x read, dz written.
void BM_GeluBiasGrad(benchmark::State &state) {
  const int64_t rows = 4096, n = 2048;
  Tensor x = randomTensor({rows, n}, -4, 4, 12),
         b = randomTensor({n}, -1, 1, 13),
         dy = randomTensor({rows, n}, -1, 1, 14), dz(DType::F32, {rows, n});
  for (auto _ : state)
    geluGrad(dy, x, &b, dz);
  setBytes(state, 3.0 * 4 * rows * n);
}
BENCHMARK(BM_GeluBiasGrad)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Softmax(benchmark::State &state) {
  const int64_t rows = 8192, n = 1024;
  Tensor x = randomTensor({rows, n}, -8, 8, 8), y(DType::F32, {rows, n});
  for (auto _ : state)
    softmax(x, 1, y);
  setBytes(state, 2.0 * 4 * rows * n);
}
BENCHMARK(BM_Softmax)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerNorm(benchmark::State &state) {
  const int64_t rows = 8192, n = 1024;
  Tensor x = randomTensor({rows, n}, -2, 2, 9), g = randomTensor({n}, 0, 2, 10),
         b = randomTensor({n}, -1, 1, 11), y(DType::F32, {rows, n});
  for (auto _ : state)
    layerNorm(x, g, &b, 1, 1e-5f, y, nullptr, nullptr);
  setBytes(state, 2.0 * 4 * rows * n);
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CrossEntropyForwardBackward(benchmark::State &state) {
  const int64_t rows = 1024, v = 8192;
  Tensor x = randomTensor({rows, v}, -8, 8, 12), labels(DType::I64, {rows});
  Tensor loss(DType::F32, {rows}), dloss(DType::F32, {rows}),
      dx(DType::F32, {rows, v});
  for (int64_t r = 0; r < rows; ++r) {
    labels.data<int64_t>()[r] = (r * 7919) % v;
    dloss.data<float>()[r] = 1.f / rows;
  }
  for (auto _ : state) {
    softmaxCrossEntropy(x, labels, -100, loss);
    softmaxCrossEntropyGrad(x, labels, dloss, -100, dx);
  }
  // The logits read twice, the gradient written once.
  setBytes(state, 3.0 * 4 * rows * v);
}
BENCHMARK(BM_CrossEntropyForwardBackward)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The (query, key) pairs a causal [t, t] attention computes: each block
/// of 64 query rows (the kernel's block at 512 keys) stops after its last
/// row's key; 56% of the square at t = 512.
double causalPairs(int64_t t) {
  double pairs = 0;
  for (int64_t row0 = 0; row0 < t; row0 += 64) {
    int64_t rows = std::min<int64_t>(64, t - row0);
    pairs += static_cast<double>(rows) * static_cast<double>(row0 + rows);
  }
  return pairs;
}

void BM_Attention(benchmark::State &state) {
  // GPT-2 small's heads: batch 4 x 12 heads, T = 512, d = 64, causal mask.
  const int64_t b = 4, h = 12, t = 512, d = 64;
  Tensor q = randomTensor({b, h, t, d}, -1, 1, 13),
         kt = randomTensor({b, h, d, t}, -1, 1, 14),
         v = randomTensor({b, h, t, d}, -1, 1, 15), mask(DType::F32, {t, t}),
         out(DType::F32, {b, h, t, d});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      mask.data<float>()[i * t + j] = j > i ? -1e9f : 0.f;
  for (auto _ : state)
    attention(q, kt, v, &mask, 0.125f, out);
  setFlops(state, 4.0 * b * h * causalPairs(t) * d);
  setBytes(state, 4.0 * 4 * b * h * t * d);
}
BENCHMARK(BM_Attention)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionGrad(benchmark::State &state) {
  // BM_Attention's shapes: dq, dkt and dv, the probabilities recomputed.
  const int64_t b = 4, h = 12, t = 512, d = 64;
  Tensor q = randomTensor({b, h, t, d}, -1, 1, 13),
         kt = randomTensor({b, h, d, t}, -1, 1, 14),
         v = randomTensor({b, h, t, d}, -1, 1, 15),
         dy = randomTensor({b, h, t, d}, -1, 1, 16), mask(DType::F32, {t, t}),
         dq(DType::F32, {b, h, t, d}), dkt(DType::F32, {b, h, d, t}),
         dv(DType::F32, {b, h, t, d});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      mask.data<float>()[i * t + j] = j > i ? -1e9f : 0.f;
  for (auto _ : state)
    attentionGrad(dy, q, kt, v, &mask, 0.125f, dq, dkt, dv);
  // Five products over the computed (query, key) pairs.
  setFlops(state, 10.0 * b * h * causalPairs(t) * d);
  setBytes(state, 4.0 * 7 * b * h * t * d);
}
BENCHMARK(BM_AttentionGrad)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
