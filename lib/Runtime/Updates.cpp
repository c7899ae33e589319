//===- Updates.cpp - Optimizer updates and the clipping norm -----*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Updates.h"

#include "Device.h"
#include "KernelRegistry.h"
#include "Ops.h"
#include "UpdateMath.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

using namespace shoal::rt;

OptimizerParams shoal::rt::optimizerParams(const OpInfo &op) {
  if (op.kind != OpKind::AdamW && op.kind != OpKind::SGD)
    throw Error(fmt::format("{}: is not an optimizer op (AdamW or SGD)",
                            op.describe()));
  return op.attrs.optimizer;
}

double shoal::rt::learningRate(const OptimizerParams &p, int64_t step) {
  int64_t s = step - 1;
  if (s < p.warmupSteps)
    return p.lr * static_cast<double>(s + 1) /
           static_cast<double>(p.warmupSteps);
  if (p.schedule != OptimizerParams::Constant && p.totalSteps > p.warmupSteps) {
    if (s >= p.totalSteps)
      return p.minLr;
    const double pi = 3.14159265358979323846;
    double progress = static_cast<double>(s - p.warmupSteps) /
                      static_cast<double>(p.totalSteps - p.warmupSteps);
    if (p.schedule == OptimizerParams::Linear)
      return p.lr + (p.minLr - p.lr) * progress;
    return p.minLr + 0.5 * (p.lr - p.minLr) * (1.0 + std::cos(pi * progress));
  }
  return p.lr;
}

AdamWScalars shoal::rt::adamwScalars(const OptimizerParams &p, int64_t step,
                                     float gradScale) {
  double lr = learningRate(p, step);
  // Python scalars, in double.
  double t = static_cast<double>(step);
  double biasCorrection1 = 1.0 - std::pow(p.beta1, t);
  double biasCorrection2 = 1.0 - std::pow(p.beta2, t);
  double stepSize = lr / biasCorrection1;
  double biasCorrection2Sqrt = std::sqrt(biasCorrection2);
  // The same scalars as the float32 kernels see them.
  AdamWScalars s;
  s.gradScale = gradScale;
  s.scaled = gradScale != 1.f;
  s.decay = static_cast<float>(1.0 - lr * p.weightDecay);
  s.beta1 = static_cast<float>(p.beta1);
  s.oneMinusBeta1 = static_cast<float>(1.0 - p.beta1);
  s.beta2 = static_cast<float>(p.beta2);
  s.oneMinusBeta2 = static_cast<float>(1.0 - p.beta2);
  s.bc2Sqrt = static_cast<float>(biasCorrection2Sqrt);
  s.eps = static_cast<float>(p.eps);
  s.negStepSize = static_cast<float>(-stepSize);
  return s;
}

SgdScalars shoal::rt::sgdScalars(const OptimizerParams &p, int64_t step,
                                 float gradScale) {
  SgdScalars s;
  s.gradScale = gradScale;
  s.scaled = gradScale != 1.f;
  s.weightDecay = static_cast<float>(p.weightDecay);
  s.decay = p.weightDecay != 0;
  s.momentum = static_cast<float>(p.momentum);
  s.useMomentum = p.momentum != 0;
  s.first = step == 1;
  s.negLr = static_cast<float>(-learningRate(p, step));
  return s;
}

float shoal::rt::clipScale(const OptimizerParams &p, double globalNorm) {
  if (!(p.clipNorm > 0))
    return 1.f;
  // clip_grad_norm_: the norm is a float32 tensor, so are the sum and the
  // quotient; clamp(max=1).
  float coef = static_cast<float>(p.clipNorm) /
               (static_cast<float>(globalNorm) + static_cast<float>(1e-6));
  return std::min(coef, 1.f);
}

namespace {

/// The update kernels of `device`'s backend, else the reference backend's
/// (run on host copies); throws Error when neither has `member`.
template <typename Member>
std::pair<Member, bool>
updateKernel(Device &device, Member UpdateKernels::*member, const char *what) {
  if (Member fn = findUpdateKernels(device.kind()).*member)
    return {fn, false};
  if (Member fn = findUpdateKernels(kReferenceBackend).*member)
    return {fn, true};
  throw Error(fmt::format("no {} kernel on the {} backend or the reference "
                          "backend (is it registered?)",
                          what, device.name()));
}

} // namespace

double shoal::rt::deviceSumOfSquares(Device &device, const Tensor &g) {
  auto kernel =
      updateKernel(device, &UpdateKernels::sumOfSquares, "sum-of-squares");
  auto fn = kernel.first;
  bool staged = kernel.second;
  return staged ? fn(device, device.toHost(g)) : fn(device, g);
}

void shoal::rt::deviceAdamW(Device &device, const OptimizerParams &p,
                            int64_t step, float gradScale, Tensor &w,
                            const Tensor &g, Tensor &m, Tensor &v) {
  auto kernel = updateKernel(device, &UpdateKernels::adamw, "AdamW");
  auto fn = kernel.first;
  bool staged = kernel.second;
  if (!staged)
    return fn(device, p, step, gradScale, w, g, m, v);
  runOnHostCopies(device, {&w, &m, &v}, {&g},
                  [&] { fn(device, p, step, gradScale, w, g, m, v); });
}

void shoal::rt::deviceSgd(Device &device, const OptimizerParams &p,
                          int64_t step, float gradScale, Tensor &w,
                          const Tensor &g, Tensor &buf) {
  auto kernel = updateKernel(device, &UpdateKernels::sgd, "SGD");
  auto fn = kernel.first;
  bool staged = kernel.second;
  if (!staged)
    return fn(device, p, step, gradScale, w, g, buf);
  runOnHostCopies(device, {&w, &buf}, {&g},
                  [&] { fn(device, p, step, gradScale, w, g, buf); });
}
