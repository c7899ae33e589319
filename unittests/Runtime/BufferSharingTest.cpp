//===- BufferSharingTest.cpp - In-place all-reduces, weight copies -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The rules of shoal/Schema/InPlace.h that the buffer plan and shoal-sim
// share: which AllReduce sums its operand where it lies, and which casts of
// a weight share the step's copy.
//
//===----------------------------------------------------------------------===//

#include "shoal/Schema/InPlace.h"

#include <gtest/gtest.h>

#include <vector>

using namespace shoal::rt;

namespace {

/// A program under construction: ops over numbered values.
struct Program {
  std::vector<std::vector<int>> ins, outs;
  std::vector<InPlaceOp> ops;
  int add(OpKind kind, std::vector<int> in, std::vector<int> out,
          int task = 0) {
    ins.push_back(std::move(in));
    outs.push_back(std::move(out));
    InPlaceOp op;
    op.kind = kind;
    op.task = task;
    op.aliases = kind == OpKind::Reshape;
    ops.push_back(op);
    return static_cast<int>(ops.size()) - 1;
  }
  /// The ops with their operand lists bound (after every add).
  std::vector<InPlaceOp> bound() {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].inputs = &ins[i];
      ops[i].outputs = &outs[i];
    }
    return ops;
  }
};

TEST(AllReducesInPlace, AProductsOnlyReaderSumsInItsBuffer) {
  // v0, v1 -> MatMul -> v2 -> AllReduce -> v3 -> Relu -> v4
  Program p;
  p.add(OpKind::MatMul, {0, 1}, {2});
  int ar = p.add(OpKind::AllReduce, {2}, {3});
  p.add(OpKind::Relu, {3}, {4});
  std::vector<bool> inPlace =
      allReducesInPlace(p.bound(), std::vector<bool>(5, false), {});
  EXPECT_TRUE(inPlace[ar]);
  EXPECT_FALSE(inPlace[0]);
}

TEST(AllReducesInPlace, NotWhenTheOperandIsSeenElsewhere) {
  std::vector<bool> none(6, false);
  {
    // Another op reads the operand.
    Program p;
    p.add(OpKind::MatMul, {0, 1}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    p.add(OpKind::Add, {2, 3}, {4});
    EXPECT_FALSE(allReducesInPlace(p.bound(), none, {})[ar]);
  }
  {
    // The operand is a view of another value (a Reshape).
    Program p;
    p.add(OpKind::MatMul, {0, 1}, {2});
    p.add(OpKind::Reshape, {2}, {3});
    int ar = p.add(OpKind::AllReduce, {3}, {4});
    EXPECT_FALSE(allReducesInPlace(p.bound(), none, {})[ar]);
  }
  {
    // Another task computes the operand.
    Program p;
    p.add(OpKind::MatMul, {0, 1}, {2}, /*task=*/0);
    int ar = p.add(OpKind::AllReduce, {2}, {3}, /*task=*/1);
    EXPECT_FALSE(allReducesInPlace(p.bound(), none, {})[ar]);
  }
  {
    // A collective or a transfer computes it (the scheduler's buffers).
    Program p;
    p.add(OpKind::Recv, {}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    EXPECT_FALSE(allReducesInPlace(p.bound(), none, {})[ar]);
  }
  {
    // The operand or the result is a program output.
    Program p;
    p.add(OpKind::MatMul, {0, 1}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    std::vector<bool> outputs = none;
    outputs[3] = true;
    EXPECT_FALSE(allReducesInPlace(p.bound(), outputs, {})[ar]);
    outputs = none;
    outputs[2] = true;
    EXPECT_FALSE(allReducesInPlace(p.ops, outputs, {})[ar]);
  }
  {
    // A sum over micro-batches keeps its own accumulator.
    Program p;
    p.add(OpKind::MatMul, {0, 1}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    p.ops[ar].overMicroBatches = true;
    EXPECT_FALSE(allReducesInPlace(p.bound(), none, {})[ar]);
  }
  {
    // A weight's shared copy.
    Program p;
    p.add(OpKind::Cast, {0}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    EXPECT_TRUE(allReducesInPlace(p.bound(), none, {-1, -1})[ar]);
    EXPECT_FALSE(allReducesInPlace(p.ops, none, {0, -1})[ar]);
  }
}

TEST(WeightCopies, CastsOfOneWeightToOneTypeShareTheFirst) {
  // Values: 0 a weight (f32, buffer 0), 1 an activation; 2..6 results; 7
  // the same weight as the backward task's own value (buffer 0 too), 8
  // another weight (buffer 1); 9, 10 results.
  const int f32 = 1, bf16 = 2, f16 = 3;
  std::vector<int> weight = {0, -1, -1, -1, -1, -1, -1, 0, 1, -1, -1};
  std::vector<int> dtype = {f32,  bf16, bf16, bf16, f16, bf16,
                            bf16, f32,  f32,  bf16, bf16};
  std::vector<bool> outputs(11, false);
  Program p;
  int fwd = p.add(OpKind::Cast, {0}, {2}, /*task=*/0);
  p.add(OpKind::MatMul, {1, 2}, {5}, 0);
  int bwd = p.add(OpKind::Cast, {0}, {3}, /*task=*/1);
  p.add(OpKind::MatMul, {1, 3}, {6}, 1);
  int other = p.add(OpKind::Cast, {0}, {4}, /*task=*/1);
  int act = p.add(OpKind::Cast, {5}, {1}, 0);
  int bwdOwn = p.add(OpKind::Cast, {7}, {9}, /*task=*/1);
  int another = p.add(OpKind::Cast, {8}, {10}, /*task=*/1);
  std::vector<int> copyOf = weightCopies(p.bound(), weight, dtype, outputs);
  EXPECT_EQ(copyOf[fwd], fwd);
  EXPECT_EQ(copyOf[bwd], fwd);     // the backward task's cast shares it
  EXPECT_EQ(copyOf[other], other); // another type: a copy of its own
  EXPECT_EQ(copyOf[act], -1);      // not a weight
  EXPECT_EQ(copyOf[1], -1);        // not a cast
  // The backward task's own value of the weight (one buffer): one copy.
  EXPECT_EQ(copyOf[bwdOwn], fwd);
  EXPECT_EQ(copyOf[another], another); // another weight
}

TEST(WeightCopies, NotWhenTheCopyLeavesItsTask) {
  const int f32 = 1, bf16 = 2;
  std::vector<int> weight = {0, -1, -1, -1};
  std::vector<int> dtype = {f32, bf16, bf16, bf16};
  {
    // Another task reads the cast's result.
    Program p;
    int cast = p.add(OpKind::Cast, {0}, {2}, 0);
    p.add(OpKind::MatMul, {1, 2}, {3}, 1);
    EXPECT_EQ(weightCopies(p.bound(), weight, dtype,
                           std::vector<bool>(4, false))[cast],
              -1);
  }
  {
    // The cast's result is a program output; a cast to the same type is
    // no copy.
    Program p;
    int cast = p.add(OpKind::Cast, {0}, {2}, 0);
    std::vector<bool> outputs(4, false);
    outputs[2] = true;
    EXPECT_EQ(weightCopies(p.bound(), weight, dtype, outputs)[cast], -1);
    std::vector<int> same = {f32, bf16, f32, bf16};
    EXPECT_EQ(
        weightCopies(p.ops, weight, same, std::vector<bool>(4, false))[cast],
        -1);
  }
}

TEST(ProductsAccumulatingInPlace, AWeightGradientSumsItselfOverMicroBatches) {
  std::vector<bool> none(6, false);
  {
    // x^T dy -> Gemm -> v2 -> AllReduce over mb (and dp) -> v3.
    Program p;
    int gemm = p.add(OpKind::Gemm, {0, 1}, {2});
    int ar = p.add(OpKind::AllReduce, {2}, {3});
    p.ops[ar].overMicroBatches = true;
    std::vector<int> into = productsAccumulatingInPlace(p.bound(), none);
    EXPECT_EQ(into[gemm], ar);
    EXPECT_EQ(into[ar], -1);
    // Not over micro-batches: an in-place all-reduce instead.
    p.ops[ar].overMicroBatches = false;
    EXPECT_EQ(productsAccumulatingInPlace(p.ops, none)[gemm], -1);
  }
  {
    // A Gemm with C, a MatMul, another reader, another task, an output.
    for (int variant = 0; variant < 5; ++variant) {
      Program p;
      int prod = variant == 0   ? p.add(OpKind::Gemm, {0, 1, 4}, {2})
                 : variant == 1 ? p.add(OpKind::MatMul, {0, 1}, {2})
                                : p.add(OpKind::Gemm, {0, 1}, {2});
      int ar = p.add(OpKind::AllReduce, {2}, {3}, variant == 3 ? 1 : 0);
      p.ops[ar].overMicroBatches = true;
      if (variant == 2)
        p.add(OpKind::Relu, {2}, {5});
      std::vector<bool> outputs = none;
      if (variant == 4)
        outputs[3] = true;
      EXPECT_EQ(productsAccumulatingInPlace(p.bound(), outputs)[prod], -1)
          << "variant " << variant;
    }
  }
}

} // namespace
