//===- CompileOptions.h - One options object for a compile ------*- C++ -*-===//
//
// The options of the shoal-parallelize pipeline, as CIRCT's FirtoolOptions
// are firtool's: one object that shoal-compile fills from its command line
// (registerCompileCLOptions) and the textual pipeline from its options
// (`shoal-opt --shoal-parallelize="spec=... train=..."`), both made from
// the rows of CompileOptions.def, so that the two compile the same module
// the same way.
//
//   shoal::registerCompileCLOptions(category);      // before parsing
//   llvm::cl::ParseCommandLineOptions(argc, argv);
//   shoal::CompileOptions options = shoal::compileOptionsFromCL();
//   if (std::string err = shoal::resolveCompileOptions(
//           options, shoal::OptionSpelling::Flag); !err.empty()) ...
//   shoal::addParallelizePipeline(pm, options);
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_TRANSFORMS_COMPILEOPTIONS_H
#define SHOAL_TRANSFORMS_COMPILEOPTIONS_H

#include "shoal/Transforms/Passes.h"

#include "llvm/Support/CommandLine.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shoal {

/// The options of a compile (CompileOptions.def): the values as written on
/// the command line or in the textual pipeline, and what
/// resolveCompileOptions read from the files they name.
struct CompileOptions {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  Type Field = Default;
#include "shoal/Transforms/CompileOptions.def"

  /// The training config: `train` as read by resolveCompileOptions, or set
  /// directly (absent: a forward plan).
  std::optional<TrainConfig> trainConfig;
  /// The annotation spec: `spec` as read by resolveCompileOptions, or set
  /// directly (null: no spec, or shoal-annotate reads `spec` itself). Read
  /// once for a compile: the importer takes its micro-batch count and the
  /// pipeline's shoal-annotate applies it.
  std::shared_ptr<const AnnotationSpec> annotationSpec;

  /// The micro-batch count of `annotationSpec` (`pipeline:
  /// num_micro_batch`; 1 without one). Importers need it before the spec is
  /// applied: training-mode BatchNormalization takes its statistics per
  /// micro-batch.
  int64_t microBatches() const;
  /// The chains of `fuseBeforeAutodiff` (empty for "none").
  std::vector<std::string> earlyChains() const;
  /// With a cluster: batch shares may be compiled as batch blocks.
  bool batchBlocks() const { return batchShares == "blocks"; }
};

/// How an error names an option: as shoal-compile's flag (`--annotate`) or
/// as the shoal-parallelize pipeline's option (`spec`).
enum class OptionSpelling { Flag, Key };

/// Checks every value of `options`, reads the training config `train` names
/// into `trainConfig` and the annotation spec `spec` names into
/// `annotationSpec`. Returns the first error, naming the option as
/// `spelling` writes it (the files' own errors name the file and line), or
/// "" on success.
std::string resolveCompileOptions(CompileOptions &options,
                                  OptionSpelling spelling);

/// Registers each option of CompileOptions.def as a command-line flag of
/// `category` (shoal-compile); call it once, before parsing the command
/// line.
void registerCompileCLOptions(llvm::cl::OptionCategory &category);

/// The options the parsed command line set (registerCompileCLOptions must
/// have run).
CompileOptions compileOptionsFromCL();

} // namespace shoal

#endif // SHOAL_TRANSFORMS_COMPILEOPTIONS_H
