//===- Optimizers.cpp - AdamW and SGD updates of training plans -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Scalars (learning rate, bias corrections) are computed in double, as
// Python does for PyTorch, and enter the float32 element arithmetic rounded
// to float, as PyTorch's kernels take them; each element is updated in the
// order of torch/optim/adamw.py `_single_tensor_adamw` and
// torch/optim/sgd.py `_single_tensor_sgd` (torch 1.13). PyTorch's vectorized
// CPU kernels (AVX2 and up) and its CUDA kernels fuse `a + alpha * b`
// (add_ with alpha) and `a + value * b * c` (addcmul_) into one fused
// multiply-add, so these do too (checked against torch 1.13 on AVX2: the
// same bits).
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizers.h"

#include "cpu/Common.h"
#include "cpu/Vector.h"

#include "Ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

const char *kindName(const OptimizerParams &p) {
  return p.kind == OptimizerParams::AdamW ? "AdamW" : "SGD";
}

/// Checks that `t` is an f32 tensor of `g`'s shape.
void checkLike(const OptimizerParams &p, const Tensor &t, const Tensor &g,
               const char *what) {
  if (!t.defined() || t.dtype() != DType::F32 || t.shape() != g.shape())
    throw Error(fmt::format("{}: {} is {}, but the gradient is {}", kindName(p),
                            what, t.defined() ? t.type().str() : "undefined",
                            g.type().str()));
}

void checkStep(const OptimizerParams &p, int64_t step) {
  if (step < 1)
    throw Error(fmt::format("{}: step {} is not 1-based", kindName(p), step));
}

} // namespace

double shoal::rt::cpu::sumOfSquares(const Tensor &g) {
  if (g.dtype() != DType::F32)
    throw Error(fmt::format("sumOfSquares: the gradient must be f32, got {}",
                            g.type().str()));
  const float *pg = g.data<float>();
  // One partial sum per chunk of 64k, added in chunk order: the same result
  // on any number of threads.
  int64_t n = g.numElements();
  const int64_t chunk = 1 << 16;
  int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  parallelFor(chunks, 2 * chunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for (int64_t i = c * chunk, e = std::min(n, i + chunk); i < e; ++i)
        sum += static_cast<double>(pg[i]) * pg[i];
      partial[c] = sum;
    }
  });
  double sum = 0;
  for (double p : partial)
    sum += p;
  return sum;
}

void shoal::rt::cpu::adamwUpdate(const OptimizerParams &p, int64_t step,
                                 float gradScale, Tensor &w, const Tensor &g,
                                 Tensor &m, Tensor &v) {
  checkStep(p, step);
  if (g.dtype() != DType::F32)
    throw Error(
        fmt::format("AdamW: the gradient must be f32, got {}", g.type().str()));
  checkLike(p, w, g, "the weight");
  checkLike(p, m, g, "the first moment");
  checkLike(p, v, g, "the second moment");
  AdamWScalars s = adamwScalars(p, step, gradScale);
  float *pw = w.data<float>();
  const float *pg = g.data<float>();
  float *pm = m.data<float>();
  float *pv = v.data<float>();
  const VectorKernels &vk = vectorKernels();
  parallelFor(g.numElements(), 16, [&](int64_t i0, int64_t i1) {
    vk.adamw(s, pw, pg, pm, pv, i0, i1);
  });
}

void shoal::rt::cpu::sgdUpdate(const OptimizerParams &p, int64_t step,
                               float gradScale, Tensor &w, const Tensor &g,
                               Tensor &buf) {
  checkStep(p, step);
  if (g.dtype() != DType::F32)
    throw Error(
        fmt::format("SGD: the gradient must be f32, got {}", g.type().str()));
  checkLike(p, w, g, "the weight");
  bool useMomentum = p.momentum != 0;
  if (useMomentum)
    checkLike(p, buf, g, "the momentum buffer");
  // (sgdElement, UpdateMath.h: the CUDA kernel's arithmetic too.)
  SgdScalars s = sgdScalars(p, step, gradScale);
  float *pw = w.data<float>();
  const float *pg = g.data<float>();
  float *pb = useMomentum ? buf.data<float>() : nullptr;
  for (int64_t i = 0, n = g.numElements(); i < n; ++i)
    sgdElement(s, pw[i], pg[i], pb ? pb + i : nullptr);
}
