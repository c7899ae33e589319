//===- AnnotationSpec.h - The replicate/split spec, parsed ------*- C++ -*-===//
//
// The annotation spec (spec.yaml, docs/Annotations.md) as shoal-annotate
// reads it. Parsing needs yaml-cpp and LLVM's Support library only, not
// MLIR, so that the spec fuzzer (test/fuzz) runs the same code.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TRANSFORMS_ANNOTATIONSPEC_H
#define SHOAL_LIB_TRANSFORMS_ANNOTATIONSPEC_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/GlobPattern.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shoal {

/// One pattern of a scope, with where it was written.
struct SpecPattern {
  /// The pattern text; on the heap because GlobPattern keeps pointers into
  /// it and patterns are moved around.
  std::unique_ptr<std::string> storage;
  llvm::StringRef text;
  llvm::GlobPattern glob;
  /// 0-based line in the spec.
  int line = 0;
};

struct SpecScope {
  std::string name;
  /// `split: n` (else `replicate: n`).
  bool split = false;
  int64_t devices = 1;
  int line = 0;
  std::vector<SpecPattern> patterns;
  /// `exclude:` patterns: nodes the scope's patterns match that it does not
  /// take (a shared layer's second call, named as the first's with `_1`).
  std::vector<SpecPattern> excludes;
  /// `recompute:` (none|full|selective; empty: the training config's).
  std::string recompute;
  /// `sequence_parallel: true` (split scopes only): Megatron-LM's sequence
  /// parallelism in the scope's TaskGraphs.
  bool sequenceParallel = false;
  int sequenceParallelLine = -1;
};

/// Settings of one graph input (`inputs:` in the spec).
struct SpecInput {
  std::string name;
  int line = 0;
  int64_t batchDim = 0;
  int batchDimLine = -1;
};

/// A spec as read: shoal-compile reads it once and hands it, unchanged, to
/// the pipeline's shoal-annotate (CompileOptions::annotationSpec).
struct AnnotationSpec {
  std::vector<SpecInput> inputs;
  /// `default: split` (else replicate).
  bool defaultSplit = false;
  int64_t numMicroBatch = 1;
  int numMicroBatchLine = -1;
  std::string schedule = "gpipe";
  int64_t virtualStages = 1;
  std::vector<SpecScope> scopes;
};

/// Parses and checks the spec text `text` read from `path` into `out`.
/// Returns an error naming `path` and the line ("spec.yaml:7: ..."), or ""
/// on success.
std::string parseAnnotationSpec(const std::string &path,
                                const std::string &text, AnnotationSpec &out);

/// Reads the spec at `path` (a regular file of at most kMaxSpecBytes) and
/// parses it (parseAnnotationSpec).
std::string readAnnotationSpec(const std::string &path, AnnotationSpec &out);

} // namespace shoal

#endif // SHOAL_LIB_TRANSFORMS_ANNOTATIONSPEC_H
