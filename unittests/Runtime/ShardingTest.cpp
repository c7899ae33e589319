//===- ShardingTest.cpp - Tests of mesh and block arithmetic ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Sharding.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace shoal::rt;
using namespace shoal::rt::test;

TEST(Sharding, RankCoordinatesAreRowMajor) {
  Mesh mesh({"x", "y"}, {2, 3});
  EXPECT_EQ(mesh.worldSize(), 6);
  EXPECT_EQ(mesh.coordsOf(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(mesh.coordsOf(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(mesh.coordsOf(3), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mesh.coordsOf(5), (std::vector<int64_t>{1, 2}));
  for (int64_t r = 0; r < 6; ++r)
    EXPECT_EQ(mesh.rankOf(mesh.coordsOf(r)), r);
  EXPECT_EQ(mesh.findAxis("y"), 1);
  EXPECT_EQ(mesh.findAxis("z"), -1);
  EXPECT_EQ(Mesh().worldSize(), 1);
}

TEST(Sharding, BlockIndexFollowsTheListedAxisOrder) {
  Mesh mesh({"x", "y"}, {2, 3});
  std::vector<int64_t> c = {1, 2}; // rank 5
  EXPECT_EQ(mesh.blockIndex({0}, c), 1);
  EXPECT_EQ(mesh.blockIndex({1}, c), 2);
  EXPECT_EQ(mesh.blockIndex({0, 1}, c), 1 * 3 + 2);
  EXPECT_EQ(mesh.blockIndex({1, 0}, c), 2 * 2 + 1);
  EXPECT_EQ(mesh.blockIndex({}, c), 0);
  EXPECT_EQ(mesh.numBlocks({0, 1}), 6);
  // Groups over x: ranks with the same y.
  EXPECT_EQ(mesh.groupColor({0}, c), 2);
  EXPECT_EQ(mesh.groupColor({1}, c), 1);
  EXPECT_EQ(mesh.groupColor({0, 1}, c), 0);
}

TEST(Sharding, LocalShapesAndOffsets) {
  Mesh mesh({"x", "y"}, {2, 3});
  ShardSpec spec{{{0}, {1}}}; // [{x}, {y}]
  Shape global = {4, 6};
  EXPECT_EQ(localShape(global, spec, mesh), (Shape{2, 2}));
  EXPECT_EQ(blockOffsets(global, spec, mesh, mesh.coordsOf(5)), (Shape{2, 4}));
  ShardSpec flat{{{1, 0}, {}}}; // [{y, x}, {}]
  EXPECT_EQ(localShape({12, 5}, flat, mesh), (Shape{2, 5}));
  // rank 3 = (x=1, y=0): block index y*2+x = 1.
  EXPECT_EQ(blockOffsets({12, 5}, flat, mesh, mesh.coordsOf(3)), (Shape{2, 0}));
  ShardSpec replicated;
  EXPECT_TRUE(replicated.isReplicated());
  EXPECT_EQ(localShape(global, replicated, mesh), global);
  EXPECT_EQ(blockOffsets(global, replicated, mesh, mesh.coordsOf(4)),
            (Shape{0, 0}));
}

TEST(Sharding, UnevenBlocksAreCeilSizedAndZeroPadded) {
  Mesh mesh({"tp"}, {3});
  ShardSpec spec{{{0}}};
  // 7 over 3: blocks [0, 3), [3, 6), [6, 7) + 2 padding.
  EXPECT_EQ(localShape({7}, spec, mesh), (Shape{3}));
  EXPECT_EQ(blockOffsets({7}, spec, mesh, mesh.coordsOf(2)), (Shape{6}));
  std::vector<float> global = {1, 2, 3, 4, 5, 6, 7};
  std::vector<float> last(3, -1.f);
  extractBlock(global.data(), {7}, sizeof(float), {6}, {3}, last.data());
  EXPECT_EQ(last, (std::vector<float>{7, 0, 0}));
  // Reassembling leaves the padding out.
  std::vector<float> back(7, 0.f);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> block(3);
    Shape off = blockOffsets({7}, spec, mesh, mesh.coordsOf(r));
    extractBlock(global.data(), {7}, sizeof(float), off, {3}, block.data());
    insertBlock(block.data(), {3}, sizeof(float), off, back.data(), {7});
  }
  EXPECT_EQ(back, global);
}

TEST(Sharding, BlocksReassembleTheGlobalTensor) {
  Mesh mesh({"a", "b"}, {2, 2});
  Shape global = {4, 3, 6};
  ShardSpec spec{{{0}, {}, {1}}};
  std::mt19937 rng(7);
  Tensor g = randomF32(global, rng);
  Tensor back(DType::F32, global);
  Shape local = localShape(global, spec, mesh);
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    Shape off = blockOffsets(global, spec, mesh, mesh.coordsOf(r));
    Tensor block(DType::F32, local);
    extractBlock(g.rawData(), global, 4, off, local, block.rawData());
    // Spot-check against direct indexing.
    const float *b = block.data<float>();
    for (int64_t i = 0; i < block.numElements(); ++i) {
      auto c = unravel(i, local);
      int64_t gi = ((c[0] + off[0]) * 3 + c[1]) * 6 + c[2] + off[2];
      ASSERT_EQ(b[i], g.data<float>()[gi]);
    }
    insertBlock(block.rawData(), local, 4, off, back.rawData(), global);
  }
  EXPECT_EQ(toVector<float>(back), toVector<float>(g));
}

TEST(Sharding, CopyBoxHandlesWholeAndScalarShapes) {
  Tensor s = makeTensor<int64_t>({}, {42});
  Tensor d(DType::I64, {});
  extractBlock(s.rawData(), {}, 8, {}, {}, d.rawData());
  EXPECT_EQ(d.data<int64_t>()[0], 42);
  Tensor a = makeTensor<int32_t>({2, 2}, {1, 2, 3, 4});
  Tensor b(DType::I32, {2, 2});
  extractBlock(a.rawData(), {2, 2}, 4, {0, 0}, {2, 2}, b.rawData());
  EXPECT_EQ(toVector<int32_t>(b), (std::vector<int32_t>{1, 2, 3, 4}));
  Tensor col(DType::I32, {2, 1});
  extractBlock(a.rawData(), {2, 2}, 4, {0, 1}, {2, 1}, col.rawData());
  EXPECT_EQ(toVector<int32_t>(col), (std::vector<int32_t>{2, 4}));
}

TEST(Sharding, MicroBatchSharesDealBlocksInRankOrder) {
  // Program.micro_batch_shares: ranks 0..3 run 3, 1, 1, 1 micro-batches of
  // the same shape; a dimension over {mb, dp} has 6 blocks, rank q's
  // micro-batch j holding block (counts before q) + j.
  Mesh mesh({"mb", "dp"}, {3, 4}, /*hasMicroBatchAxis=*/true);
  mesh.setMicroBatchShares({3, 1, 1, 1});
  EXPECT_TRUE(mesh.hasMicroBatchShares());
  EXPECT_EQ(mesh.microBatchesOf(0), 3);
  EXPECT_EQ(mesh.microBatchesOf(2), 1);
  ShardSpec batch{{{0, 1}, {}}}; // [{mb, dp}, {}]
  EXPECT_EQ(mesh.numBlocks(batch.dims[0]), 6);
  EXPECT_EQ(localShape({12, 5}, batch, mesh), (Shape{2, 5}));
  EXPECT_EQ(blockOffsets({12, 5}, batch, mesh,
                         mesh.withMicroBatch(mesh.coordsOf(0), 2)),
            (Shape{4, 0}));
  EXPECT_EQ(blockOffsets({12, 5}, batch, mesh,
                         mesh.withMicroBatch(mesh.coordsOf(1), 0)),
            (Shape{6, 0}));
  EXPECT_EQ(blockOffsets({12, 5}, batch, mesh,
                         mesh.withMicroBatch(mesh.coordsOf(3), 0)),
            (Shape{10, 0}));
  // The device axes alone keep the even blocks (e.g. ZeRO's shards).
  EXPECT_EQ(mesh.numBlocks({1}), 4);
  EXPECT_TRUE(mesh.coversShares({0, 1}));
  EXPECT_TRUE(mesh.coversShares({1}));
  EXPECT_FALSE(mesh.coversShares({0}));
}
