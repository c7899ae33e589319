//===- Normalization.cpp - CPU kernels: normalization -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the normalization family of Ops.def (Kernels.h):
// Softmax, LayerNormalization (also after an Add) and inference
// BatchNormalization, then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include <fmt/format.h>

#include "cpu/Vector.h"
#include <algorithm>

#include <cmath>
#include <limits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

//===----------------------------------------------------------------------===//
// Softmax and LayerNormalization
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::softmax(const Tensor &x, int64_t axis, Tensor &out) {
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    checkOutput(out, x.dtype(), x.shape(), "Softmax");
    Tensor r(DType::F32, x.shape());
    softmax(toF32(x), axis, r);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, "Softmax", "input");
  checkOutput(out, DType::F32, x.shape(), "Softmax");
  const Shape &s = x.shape();
  if (s.empty()) { // softmax of a scalar is 1
    out.data<float>()[0] = 1.f;
    return;
  }
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  const float *px = x.data<float>();
  float *po = out.data<float>();
  if (n == 0)
    return;
  if (inner == 1) { // rows along the last axis: the vectorized loop
    const VectorKernels &vk = vectorKernels();
    parallelFor(outer, 25 * n,
                [&](int64_t r0, int64_t r1) { vk.softmax(px, po, n, r0, r1); });
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float *row = px + o * n * inner + i;
      float *orow = po + o * n * inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j)
        mx = std::max(mx, row[j * inner]);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        float e = std::exp(row[j * inner] - mx);
        orow[j * inner] = e;
        sum += e;
      }
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n; ++j)
        orow[j * inner] *= inv;
    }
  }
}

void shoal::rt::cpu::layerNorm(const Tensor &x, const Tensor &scale,
                               const Tensor *bias, int64_t axis, float epsilon,
                               Tensor &out, Tensor *mean, Tensor *invStdDev,
                               bool rms) {
  if (isHalfDType(x.dtype())) {
    // In f32, rounded once; Mean and InvStdDev are
    // rounded to their own types.
    checkOutput(out, x.dtype(), x.shape(), "LayerNormalization");
    Tensor r(DType::F32, x.shape()), m, v;
    if (mean)
      m = Tensor(DType::F32, mean->shape());
    if (invStdDev)
      v = Tensor(DType::F32, invStdDev->shape());
    Tensor b = bias ? stage(*bias) : Tensor();
    layerNorm(toF32(x), stage(scale), bias ? &b : nullptr, axis, epsilon, r,
              mean ? &m : nullptr, invStdDev ? &v : nullptr, rms);
    if (mean)
      cast(m, *mean);
    if (invStdDev)
      cast(v, *invStdDev);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, "LayerNormalization", "X");
  checkDType(scale, DType::F32, "LayerNormalization", "Scale");
  checkOutput(out, DType::F32, x.shape(), "LayerNormalization");
  const Shape &s = x.shape();
  Shape normShape(s.begin() + axis, s.end());
  Shape statShape(s.begin(), s.begin() + axis);
  statShape.resize(s.size(), 1);
  if (!broadcastsTo(scale.shape(), normShape))
    throw Error(fmt::format("LayerNormalization: Scale of shape {} does not "
                            "broadcast to the normalized shape {}",
                            formatShape(scale.shape()),
                            formatShape(normShape)));
  if (bias) {
    checkDType(*bias, DType::F32, "LayerNormalization", "B");
    if (!broadcastsTo(bias->shape(), normShape))
      throw Error(fmt::format("LayerNormalization: B of shape {} does not "
                              "broadcast to the normalized shape {}",
                              formatShape(bias->shape()),
                              formatShape(normShape)));
  }
  if (mean)
    checkOutput(*mean, DType::F32, statShape, "LayerNormalization Mean");
  if (invStdDev)
    checkOutput(*invStdDev, DType::F32, statShape,
                "LayerNormalization InvStdDev");
  int64_t n = numElements(normShape), outer = numElements(statShape);
  std::vector<float> g = expandTo(scale, normShape);
  std::vector<float> b;
  if (bias)
    b = expandTo(*bias, normShape);
  const float *px = x.data<float>();
  float *po = out.data<float>();
  float *pm = mean ? mean->data<float>() : nullptr;
  float *pv = invStdDev ? invStdDev->data<float>() : nullptr;
  const VectorKernels &vk = vectorKernels();
  parallelFor(outer, 8 * n, [&](int64_t r0, int64_t r1) {
    vk.layerNorm(px, g.data(), bias ? b.data() : nullptr, po, n, epsilon, rms,
                 r0, r1, pm, pv);
  });
}

void shoal::rt::cpu::addLayerNorm(const Tensor &a, const Tensor &b,
                                  const Tensor &scale, const Tensor *bias,
                                  int64_t axis, float epsilon, Tensor &sum,
                                  Tensor &out) {
  binary(BinaryOp::Add, a, b, sum);
  layerNorm(sum, scale, bias, axis, epsilon, out, nullptr, nullptr);
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::batchNorm(const Tensor &x, const Tensor &scale,
                               const Tensor &bias, const Tensor &mean,
                               const Tensor &var, float epsilon, Tensor &out) {
  checkDType(x, DType::F32, "BatchNormalization", "X");
  if (x.rank() < 2)
    throw Error(fmt::format("BatchNormalization: X must have rank >= 2, got "
                            "{}",
                            x.type().str()));
  int64_t c = x.shape()[1];
  const char *names[] = {"scale", "B", "input_mean", "input_var"};
  const Tensor *params[] = {&scale, &bias, &mean, &var};
  for (int i = 0; i < 4; ++i)
    if (params[i]->dtype() != DType::F32 || params[i]->shape() != Shape{c})
      throw Error(fmt::format("BatchNormalization: {} must be f32[{}], got {}",
                              names[i], c, params[i]->type().str()));
  checkOutput(out, DType::F32, x.shape(), "BatchNormalization");
  int64_t n = x.shape()[0];
  int64_t inner = numElements(Shape(x.shape().begin() + 2, x.shape().end()));
  const float *px = x.data<float>();
  float *py = out.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double a = double(scale.data<float>()[ch]) /
               std::sqrt(double(var.data<float>()[ch]) + double(epsilon));
    float fa = static_cast<float>(a);
    float fb = static_cast<float>(double(bias.data<float>()[ch]) -
                                  double(mean.data<float>()[ch]) * a);
    for (int64_t i = 0; i < n; ++i) {
      const float *src = px + (i * c + ch) * inner;
      float *dst = py + (i * c + ch) * inner;
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = src[j] * fa + fb;
    }
  }
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(softmaxKernel) {
  softmax(input(in, 0), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(layerNormKernel) {
  layerNorm(input(in, 0), input(in, 1), optionalInput(in, 2), op.attrs.axis,
            op.attrs.epsilon, out[0], optionalOutput(out, 1),
            optionalOutput(out, 2), op.attrs.rms);
}

SHOAL_CPU_KERNEL(addLayerNormKernel) {
  addLayerNorm(input(in, 0), input(in, 1), input(in, 2), optionalInput(in, 3),
               op.attrs.axis, op.attrs.epsilon, out[0], out[1]);
}

SHOAL_CPU_KERNEL(batchNormKernel) {
  batchNorm(input(in, 0), input(in, 1), input(in, 2), input(in, 3),
            input(in, 4), op.attrs.epsilon, out[0]);
}

} // namespace

void shoal::rt::cpu::registerNormalizationKernels() {
  registerCpuKernel(OpKind::Softmax, softmaxKernel, KernelWrites::All);
  registerCpuKernel(OpKind::LayerNormalization, layerNormKernel,
                    KernelWrites::All);
  registerCpuKernel(OpKind::AddLayerNorm, addLayerNormKernel,
                    KernelWrites::All);
  registerCpuKernel(OpKind::BatchNormalization, batchNormKernel);
}
