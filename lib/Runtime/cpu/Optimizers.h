//===- Optimizers.h - AdamW and SGD updates of training plans ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The math of the AdamW and SGD plan ops (docs/Training.md): their
// parameters, the learning-rate schedule, gradient clipping and the in-place
// updates, following PyTorch's torch.optim.AdamW (amsgrad and maximize off)
// and torch.optim.SGD (dampening 0, no Nesterov) step by step in float32, so
// that a plan's weights track PyTorch's to float rounding.
//
// The ops have no outputs. The executor runs them once per optimizer step,
// after every gradient of the step is known: it counts the steps, computes
// the clipping scale from the global gradient norm (sumOfSquares, then
// clipScale) and calls the backend's update kernels (Updates.h), which are
// adamwUpdate and sgdUpdate on the CPU (registered in cpu/Registry.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_OPTIMIZERS_H
#define SHOAL_RUNTIME_CPU_OPTIMIZERS_H

#include "OpAttrs.h"
#include "Tensor.h"
#include "Updates.h"

#include <cstdint>

namespace shoal {
namespace rt {

struct OpInfo;

namespace cpu {

/// The attributes of an AdamW or SGD op, validated when the plan is loaded
/// (checkOp): part of the op model (OpAttrs.h).
using rt::OptimizerParams;

// The parameters, the learning-rate schedule and the clipping factor are
// the runtime's (Updates.h), which the scheduler uses too.
using rt::clipScale;
using rt::learningRate;
using rt::optimizerParams;

/// The sum of the squares of f32 `g`'s elements, accumulated in double (one
/// term of the squared global gradient norm).
double sumOfSquares(const Tensor &g);

/// One AdamW step, 1-based `step`, in place on f32 `w`, `m` and `v` (all of
/// g's type) with the gradient `g * gradScale`:
///   w *= 1 - lr_t * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
///   w -= lr_t / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
/// in the operation order of PyTorch's single-tensor AdamW.
void adamwUpdate(const OptimizerParams &p, int64_t step, float gradScale,
                 Tensor &w, const Tensor &g, Tensor &m, Tensor &v);

/// One SGD step, 1-based `step`, in place on f32 `w` (and `buf`) with the
/// gradient `g * gradScale`: d = g + wd w; with momentum, buf = d at step 1
/// and momentum * buf + d after, and d = buf; w -= lr_t d. `buf` is not
/// touched when momentum is 0 and may then be undefined.
void sgdUpdate(const OptimizerParams &p, int64_t step, float gradScale,
               Tensor &w, const Tensor &g, Tensor &buf);

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_OPTIMIZERS_H
