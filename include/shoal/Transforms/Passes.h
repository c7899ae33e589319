//===- Passes.h - shoal passes ----------------------------------*- C++ -*-===//

#ifndef SHOAL_TRANSFORMS_PASSES_H
#define SHOAL_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include <string>

namespace shoal {

#define GEN_PASS_DECL
#include "shoal/Transforms/Passes.h.inc"

/// Options of the `shoal-parallelize` pipeline.
struct ParallelizeOptions {
  std::string spec;
  int64_t worldSize = 0;
  /// Run shoal-fuse on the local programs.
  bool fuse = true;
  /// Cluster spec for shoal-plan (empty: no planning).
  std::string cluster;
  /// shoal-plan prints its candidates and choice.
  bool explain = false;
};

/// Adds the full parallelization pipeline to `pm`.
void addParallelizePipeline(mlir::OpPassManager &pm,
                            const ParallelizeOptions &options);

/// Registers every shoal pass and the `shoal-parallelize` pipeline.
void registerAllShoalPasses();

} // namespace shoal

#endif // SHOAL_TRANSFORMS_PASSES_H
