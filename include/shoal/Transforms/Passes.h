//===- Passes.h - shoal passes ----------------------------------*- C++ -*-===//

#ifndef SHOAL_TRANSFORMS_PASSES_H
#define SHOAL_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shoal {

#define GEN_PASS_DECL
#include "shoal/Transforms/Passes.h.inc"

/// A training configuration (train.yaml; docs/Training.md).
struct TrainConfig {
  std::string loss = "cross_entropy";
  std::string output;
  std::string labels = "labels";
  int64_t ignoreIndex = -100;
  std::vector<std::string> frozen;
  /// Where each of `frozen` was written ("train.yaml:7").
  std::vector<std::string> frozenWhere;
  OptimizerPassOptions optimizer;
  /// ZeRO stage (`zero: 0|1|2|3`; shoal-zero after shoal-partition).
  int64_t zero = 0;
  /// Activation recomputation (`recompute: none|full|selective`;
  /// shoal-recompute after shoal-optimizer).
  std::string recompute = "none";
  /// Mixed precision (`precision: fp32|bf16|fp16`, `loss_scale:`;
  /// shoal-mixed-precision before shoal-autodiff).
  MixedPrecisionPassOptions mixedPrecision;
};

/// The first out-of-range setting of fp16's loss scaler, as the training
/// config's `loss_scale` key and what it must be ({nullptr, nullptr} when
/// every one is valid). Shared by the config reader and the pass.
std::pair<const char *, const char *>
checkLossScale(const MixedPrecisionPassOptions &options);

/// Reads a train.yaml into `out`; returns an error naming the file and line
/// (empty on success).
std::string parseTrainConfig(llvm::StringRef path, TrainConfig &out);
/// parseTrainConfig of the text `text` read from `path`.
std::string parseTrainConfigText(const std::string &path,
                                 const std::string &text, TrainConfig &out);

/// Adds shoal-autodiff and shoal-optimizer for `config` (shoal-zero runs
/// later, after shoal-partition: see addParallelizePipeline).
void addTrainingPasses(mlir::OpPassManager &pm, const TrainConfig &config);

struct CompileOptions;

/// Adds the full parallelization pipeline for `options`
/// (include/shoal/Transforms/CompileOptions.h), whose training config, if
/// it names one, resolveCompileOptions has read.
void addParallelizePipeline(mlir::OpPassManager &pm,
                            const CompileOptions &options);

/// Registers every shoal pass and the `shoal-parallelize` pipeline.
void registerAllShoalPasses();

/// An annotation spec as read from its file (lib/Transforms/AnnotationSpec.h).
struct AnnotationSpec;

/// shoal-annotate applying `spec`, already read from `options.specPath`
/// (which its messages name), so that the file is not read again; a null
/// `spec` reads it as createAnnotatePass(options) does.
std::unique_ptr<mlir::Pass>
createAnnotatePass(const AnnotatePassOptions &options,
                   std::shared_ptr<const AnnotationSpec> spec);

} // namespace shoal

#endif // SHOAL_TRANSFORMS_PASSES_H
