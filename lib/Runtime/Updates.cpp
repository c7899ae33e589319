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
#include <map>
#include <set>
#include <sstream>
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

std::string shoal::rt::optimizerSettings(const std::vector<OpInfo> &ops) {
  std::vector<std::pair<std::string, std::set<std::string>>> keys;
  auto add = [&](const std::string &key, const std::string &value) {
    auto it = std::find_if(keys.begin(), keys.end(),
                           [&](const auto &k) { return k.first == key; });
    if (it == keys.end())
      keys.push_back({key, {value}});
    else
      it->second.insert(value);
  };
  auto num = [](double v) { return fmt::format("{:.9g}", v); };
  double decay = 0;
  bool any = false;
  for (const OpInfo &op : ops) {
    if (op.kind != OpKind::AdamW && op.kind != OpKind::SGD)
      continue;
    any = true;
    const OptimizerParams &p = op.attrs.optimizer;
    bool adamw = op.kind == OpKind::AdamW;
    add("optimizer", adamw ? "adamw" : "sgd");
    add("lr", num(p.lr));
    add("lr_schedule", p.schedule == OptimizerParams::Cosine   ? "cosine"
                       : p.schedule == OptimizerParams::Linear ? "linear"
                                                               : "constant");
    add("warmup_steps", std::to_string(p.warmupSteps));
    add("total_steps", std::to_string(p.totalSteps));
    add("min_lr", num(p.minLr));
    if (adamw) {
      add("beta1", num(p.beta1));
      add("beta2", num(p.beta2));
      add("eps", num(p.eps));
    } else {
      add("momentum", num(p.momentum));
    }
    add("clip_norm", num(p.clipNorm));
    decay = std::max(decay, p.weightDecay);
  }
  if (!any)
    return "";
  add("weight_decay", num(decay));
  std::string out;
  for (const auto &[key, values] : keys) {
    std::string joined;
    for (const std::string &v : values)
      joined += (joined.empty() ? "" : ",") + v;
    out += (out.empty() ? "" : " ") + key + "=" + joined;
  }
  return out;
}

namespace {
std::map<std::string, std::string> settingsMap(const std::string &line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word)
    if (std::size_t eq = word.find('='); eq != std::string::npos)
      out[word.substr(0, eq)] = word.substr(eq + 1);
  return out;
}
} // namespace

std::string shoal::rt::settingsChange(const std::string &saved,
                                      const std::string &mine) {
  if (saved.empty() || mine.empty())
    return "";
  std::map<std::string, std::string> a = settingsMap(saved),
                                     b = settingsMap(mine);
  std::string out;
  for (const auto &[key, before] : a) {
    auto it = b.find(key);
    std::string after = it == b.end() ? "-" : it->second;
    if (before == after)
      continue;
    if (key == "weight_decay" && (before == "0" || after == "0"))
      continue;
    out += fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", key, before,
                       after);
  }
  for (const auto &[key, after] : b)
    if (!a.count(key))
      out += fmt::format("{}{} - -> {}", out.empty() ? "" : ", ", key, after);
  return out;
}
