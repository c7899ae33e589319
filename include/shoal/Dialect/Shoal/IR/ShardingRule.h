//===- ShardingRule.h - Factor-based sharding rules -------------*- C++ -*-===//
//
// A sharding rule maps every dimension of an op's operands and results to
// factors, in the style of OpenXLA Shardy. Propagation decides which mesh
// axes split each factor; partitioning derives local shapes and collectives
// from that decision.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHARDINGRULE_H
#define SHOAL_DIALECT_SHOAL_IR_SHARDINGRULE_H

#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace shoal {

/// How a factor may be split.
enum class FactorKind {
  /// Appears in results; splitting it splits the result.
  Parallel,
  /// Appears only in operands (a contraction); splitting it leaves partial
  /// sums on each rank, completed by an all-reduce.
  Reduction,
  /// Must stay whole (a softmax axis, a normalized axis, a gathered axis).
  Blocked,
  /// A vocabulary: the rows of an embedding table, the classes of a
  /// cross-entropy. It may be split, and shoal-partition then rewrites the
  /// op into Megatron-LM's vocabulary-parallel form (a lookup of the local
  /// rows and an all_reduce; a cross-entropy over the local classes with
  /// all_reduces of the max and of the softmax sums). Uneven splits are
  /// fine: the rewritten ops skip the padding.
  Vocab,
};

/// Factors of one tensor dimension, major first. Empty for a broadcast
/// dimension of size 1. Only the major factor of a dimension may be split.
using DimFactors = llvm::SmallVector<int, 2>;
using TensorFactors = llvm::SmallVector<DimFactors, 4>;

struct ShardingRule {
  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<FactorKind> factorKinds;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;

  /// Adds a factor and returns its index.
  int addFactor(int64_t size, FactorKind kind = FactorKind::Parallel) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int>(factorSizes.size()) - 1;
  }
  unsigned getNumFactors() const { return factorSizes.size(); }
  /// True if `factor` is a non-major factor of some dimension, so it cannot
  /// be split on its own.
  bool isMinorSomewhere(int factor) const;

  /// Prints the rule in Shardy's notation: per operand and result the
  /// factors of each dimension (named i, j, k, ..., z, z_1, ...; several
  /// in one dimension major first, `1` for none), the factors' sizes, and
  /// the factors that are not parallel, e.g.
  /// `([i, k], [k, j]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}`.
  void print(llvm::raw_ostream &os) const;
  std::string str() const;
};

} // namespace shoal

#endif // SHOAL_DIALECT_SHOAL_IR_SHARDINGRULE_H
