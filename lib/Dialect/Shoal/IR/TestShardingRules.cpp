//===- TestShardingRules.cpp - Print every op's sharding rule ---*- C++ -*-===//
//
// --shoal-test-print-sharding-rules (as Shardy's
// -sdy-populate-op-sharding-rules): writes the sharding rule of every op that
// has one into the op's `shoal.sharding_rule` attribute, in the notation of
// ShardingRule::print, for the lit tests of the rules
// (test/Dialect/Shoal/sharding-rules-*.mlir). A test pass: only shoal-opt
// registers it.
//
// ```mlir
// %0 = shoal.matmul %a, %b : ... {shoal.sharding_rule =
//     "([i, k], [k, j]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}"}
// ```
//
//===----------------------------------------------------------------------===//

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace {

/// The attribute the pass writes (only this test pass does).
constexpr llvm::StringLiteral kShardingRuleAttr = "shoal.sharding_rule";

struct TestPrintShardingRulesPass
    : public PassWrapper<TestPrintShardingRulesPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestPrintShardingRulesPass)

  StringRef getArgument() const final {
    return "shoal-test-print-sharding-rules";
  }
  StringRef getDescription() const final {
    return "Attach each op's sharding rule as a `shoal.sharding_rule` string "
           "(test only)";
  }

  void runOnOperation() final {
    getOperation()->walk([](shoal::ShardingRuleOpInterface op) {
      op->setAttr(
          kShardingRuleAttr,
          StringAttr::get(op->getContext(), op.getShardingRule().str()));
    });
  }
};

} // namespace

namespace shoal::test {
void registerTestShardingRulesPass() {
  PassRegistration<TestPrintShardingRulesPass>();
}
} // namespace shoal::test
