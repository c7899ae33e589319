//===- Updates.h - Optimizer updates and the clipping norm -------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The scheduler's optimizer arithmetic on a device's tensors, through the
// update kernels its backend registered (KernelRegistry.h, UpdateKernels);
// where the backend has none, the reference backend's run on host copies,
// as ops without a kernel do. Also the math of the optimizer ops that is no
// kernel's: their parameters, the learning-rate schedule and the clipping
// factor (docs/Training.md).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_UPDATES_H
#define SHOAL_RUNTIME_UPDATES_H

#include "OpAttrs.h"
#include "Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

class Device;
struct OpInfo;

/// The parameters of an AdamW or SGD op; throws Error naming the op if `op`
/// is another kind.
OptimizerParams optimizerParams(const OpInfo &op);

/// The learning rate of 1-based step `step` (docs/Training.md): with
/// s = step - 1, `lr * (s + 1) / warmup` while s < warmup; then, if
/// total > warmup and the schedule is not constant, cosine (or linear)
/// decay from lr to min_lr over [warmup, total) and
/// min_lr from total on; else lr.
double learningRate(const OptimizerParams &p, int64_t step);

/// The factor clip_grad_norm_ multiplies every gradient by, given the
/// global norm: min(1, clip_norm / (norm + 1e-6)), in float32 like PyTorch;
/// 1 when clipping is off.
float clipScale(const OptimizerParams &p, double globalNorm);

/// The optimizer settings of the optimizer ops among `ops`, as one line
/// of `key=value` words (`optimizer=adamw lr=0.001 lr_schedule=cosine
/// warmup_steps=10 ...`; a setting the ops disagree on lists its values
/// with commas; weight_decay is the largest, the decayed weights'), or ""
/// without optimizer ops. A checkpoint records it (`schedule`).
std::string optimizerSettings(const std::vector<OpInfo> &ops);

/// The settings that differ between `saved` (a checkpoint's) and `mine`
/// (this plan's), as "lr 0.001 -> 0.002, ..."; "" when they agree or
/// either is empty (a checkpoint written before they were recorded).
/// weight_decay counts only where both are non-zero (a pipeline stage
/// without decayed weights has 0).
std::string settingsChange(const std::string &saved, const std::string &mine);

/// The sum of the squares of f32 gradient `g` on `device`, in double.
double deviceSumOfSquares(Device &device, const Tensor &g);
/// One AdamW step (w, g, m, v) in place on `device`; `gradScale` multiplies
/// the gradient.
void deviceAdamW(Device &device, const OptimizerParams &p, int64_t step,
                 float gradScale, Tensor &w, const Tensor &g, Tensor &m,
                 Tensor &v);
/// One SGD step (w, g, buf; buf may be undefined) in place on `device`.
void deviceSgd(Device &device, const OptimizerParams &p, int64_t step,
               float gradScale, Tensor &w, const Tensor &g, Tensor &buf);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_UPDATES_H
