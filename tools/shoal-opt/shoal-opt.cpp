//===- shoal-opt.cpp - Run shoal passes -------------------------*- C++ -*-===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include "shoal/Tools/AtomicOutput.h"
#include "shoal/Tools/CommandLine.h"
#include "shoal/Transforms/Passes.h"

namespace shoal::test {
// lib/Dialect/Shoal/IR/TestShardingRules.cpp
void registerTestShardingRulesPass();
} // namespace shoal::test

int main(int argc, char **argv) {
  // Only LLVM's own options are registered yet; MlirOptMain registers the
  // MLIR options and the pass list when it runs, and they stay in --help.
  shoal::hideUnrelatedOptions({});
  mlir::DialectRegistry registry;
  registry.insert<shoal::ShoalDialect, mlir::func::FuncDialect>();
  shoal::registerAllShoalPasses();
  shoal::test::registerTestShardingRulesPass();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  // -o is written to a new file renamed into place: never through a symlink.
  return shoal::runWithAtomicOutput(
      argc, argv, "shoal-opt", [&](int argc, char **argv) {
        return mlir::asMainReturnCode(mlir::MlirOptMain(
            argc, argv, "shoal optimizer driver\n", registry));
      });
}
