//===- CompileOptions.cpp - The options of a compile ------------*- C++ -*-===//
//
// CompileOptions.def made into shoal-compile's flags, and the checks both
// shoal-compile and the shoal-parallelize pipeline apply to the values.
//
//===----------------------------------------------------------------------===//

#include "shoal/Transforms/CompileOptions.h"

#include "AnnotationSpec.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ManagedStatic.h"

using namespace shoal;

namespace {

/// Each option's name as shoal-compile and as the pipeline spell it.
struct OptionNames {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  const char *Field;
#include "shoal/Transforms/CompileOptions.def"
};

constexpr OptionNames kFlagNames = {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  "--" Flag,
#include "shoal/Transforms/CompileOptions.def"
};

constexpr OptionNames kKeyNames = {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  "'" Key "'",
#include "shoal/Transforms/CompileOptions.def"
};

constexpr const char *kChains[] = {"gelu-erf", "rms-norm", "attention"};

/// The category registerCompileCLOptions puts the flags in.
llvm::cl::OptionCategory *clCategory = nullptr;

/// The flags, registered when first used (CIRCT's FirtoolCmdOptions).
struct CompileCLOptions {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  llvm::cl::opt<Type> Field{                                                   \
      Flag, llvm::cl::desc(Desc), llvm::cl::value_desc(ValueDesc),             \
      llvm::cl::init(Default), llvm::cl::cat(*clCategory)};
#include "shoal/Transforms/CompileOptions.def"
};

llvm::ManagedStatic<CompileCLOptions> clOptions;

} // namespace

int64_t CompileOptions::microBatches() const {
  return annotationSpec ? annotationSpec->numMicroBatch : 1;
}

std::vector<std::string> CompileOptions::earlyChains() const {
  std::vector<std::string> chains;
  if (fuseBeforeAutodiff == "none")
    return chains;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(fuseBeforeAutodiff).split(parts, ',');
  for (llvm::StringRef c : parts)
    chains.push_back(c.str());
  return chains;
}

std::string shoal::resolveCompileOptions(CompileOptions &o,
                                         OptionSpelling spelling) {
  const OptionNames &n =
      spelling == OptionSpelling::Flag ? kFlagNames : kKeyNames;
  auto fail = [](const llvm::Twine &msg) { return msg.str(); };
  if (o.worldSize < 0)
    return fail(llvm::Twine(n.worldSize) + " must be positive");
  if (o.explain && o.cluster.empty())
    return fail(llvm::Twine(n.explain) + " needs " + n.cluster);
  if (o.batchShares != "blocks" && o.batchShares != "micro-batches")
    return fail(llvm::Twine(n.batchShares) +
                " must be 'blocks' or 'micro-batches', got '" + o.batchShares +
                "'");
  for (const std::string &c : o.earlyChains())
    if (!llvm::is_contained(kChains, llvm::StringRef(c)))
      return fail(llvm::Twine(n.fuseBeforeAutodiff) + ": unknown chain '" + c +
                  "' (expected gelu-erf, rms-norm, attention or none)");
  if (o.shardMultiple < 1)
    return fail(llvm::Twine(n.shardMultiple) + " must be at least 1, got " +
                llvm::Twine(o.shardMultiple));
  if (o.device != "cpu" && o.device != "cuda")
    return fail(llvm::Twine(n.device) + " must be cpu or cuda, got '" +
                o.device + "'");
  if (!o.train.empty()) {
    TrainConfig config;
    if (std::string err = parseTrainConfig(o.train, config); !err.empty())
      return err;
    o.trainConfig = std::move(config);
  }
  if (!o.spec.empty() && !o.annotationSpec) {
    AnnotationSpec spec;
    if (std::string err = readAnnotationSpec(o.spec, spec); !err.empty())
      return err;
    o.annotationSpec = std::make_shared<const AnnotationSpec>(std::move(spec));
  }
  return "";
}

void shoal::registerCompileCLOptions(llvm::cl::OptionCategory &category) {
  clCategory = &category;
  *clOptions;
}

CompileOptions shoal::compileOptionsFromCL() {
  assert(clOptions.isConstructed() && "registerCompileCLOptions first");
  CompileOptions o;
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  o.Field = clOptions->Field;
#include "shoal/Transforms/CompileOptions.def"
  return o;
}
