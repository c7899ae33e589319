//===- MixedPrecision.h - bf16/fp16 training, internal ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TRANSFORMS_MIXEDPRECISION_H
#define SHOAL_LIB_TRANSFORMS_MIXEDPRECISION_H

#include "mlir/IR/BuiltinOps.h"

namespace shoal {

/// shoal-mixed-precision's default mode: the forward and backward
/// activations of `module`'s local programs in `low` (bf16 or f16), float32
/// master weights, weight gradients and optimizer (LowPrecision.cpp).
void lowerToLowPrecision(mlir::ModuleOp module, mlir::Type low);

} // namespace shoal

#endif // SHOAL_LIB_TRANSFORMS_MIXEDPRECISION_H
