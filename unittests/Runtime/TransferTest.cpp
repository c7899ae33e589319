//===- TransferTest.cpp - Tests of placements and transfer plans -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Transfer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

using namespace shoal::rt;

namespace {

Layout layout(const std::vector<std::string> &names,
              const std::vector<int64_t> &sizes,
              const std::vector<std::vector<int>> &sharding, int64_t offset = 0,
              int64_t stride = 0) {
  Layout l;
  l.mesh = Mesh(names, sizes, /*hasMicroBatchAxis=*/true);
  l.sharding.dims = sharding;
  l.placement = {offset, stride};
  return l;
}

/// Checks the invariants of any transfer plan: every element of every
/// destination block arrives exactly once, from a source rank that holds it;
/// at most one message per (source, destination) pair.
void checkCoverage(const Shape &global, const Layout &src, const Layout &dst,
                   const std::vector<TransferMessage> &msgs) {
  std::vector<int64_t> srcRanks = placeRanks(src.mesh, src.placement);
  std::vector<int64_t> dstRanks = placeRanks(dst.mesh, dst.placement);
  Shape srcBlock = localShape(global, src.sharding, src.mesh);
  Shape dstBlock = localShape(global, dst.sharding, dst.mesh);
  auto blockOf = [&](const Layout &l, const std::vector<int64_t> &ranks,
                     int64_t world) {
    auto it = std::find(ranks.begin(), ranks.end(), world);
    EXPECT_NE(it, ranks.end()) << "rank " << world << " is not in the layout";
    return blockOffsets(global, l.sharding, l.mesh,
                        l.mesh.coordsOf(it - ranks.begin()));
  };
  std::set<std::pair<int64_t, int64_t>> pairs;
  std::map<int64_t, std::vector<int>> counts;
  for (int64_t d : dstRanks)
    counts[d].assign(numElements(dstBlock), 0);
  for (const TransferMessage &m : msgs) {
    EXPECT_TRUE(pairs.insert({m.src, m.dst}).second)
        << "two messages from " << m.src << " to " << m.dst;
    Shape so = blockOf(src, srcRanks, m.src);
    Shape dO = blockOf(dst, dstRanks, m.dst);
    ASSERT_EQ(m.offsets.size(), global.size());
    for (std::size_t d = 0; d < global.size(); ++d) {
      EXPECT_GT(m.shape[d], 0);
      EXPECT_GE(m.offsets[d], so[d]);
      EXPECT_LE(m.offsets[d] + m.shape[d], so[d] + srcBlock[d]);
      EXPECT_GE(m.offsets[d], dO[d]);
      EXPECT_LE(m.offsets[d] + m.shape[d], dO[d] + dstBlock[d]);
    }
    // Mark the box in the destination block.
    std::vector<int> &c = counts[m.dst];
    for (int64_t i = 0; i < m.numElements(); ++i) {
      int64_t rem = i, flat = 0;
      Shape idx(global.size());
      for (std::size_t d = global.size(); d-- > 0;) {
        idx[d] = rem % m.shape[d];
        rem /= m.shape[d];
      }
      for (std::size_t d = 0; d < global.size(); ++d)
        flat = flat * dstBlock[d] + (m.offsets[d] - dO[d] + idx[d]);
      ++c[flat];
    }
  }
  for (const auto &[rank, c] : counts)
    for (std::size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(c[i], 1) << "element " << i << " of rank " << rank;
}

} // namespace

TEST(Transfer, PlacesRanksPackedAndStrided) {
  Mesh m({"a", "b"}, {2, 3});
  EXPECT_EQ(placeRanks(m, {0, 0}), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(placeRanks(m, {4, 0}), (std::vector<int64_t>{4, 5, 6, 7, 8, 9}));
  // Two pipeline replicas of 8 ranks each; this stage is ranks 3..5 of each.
  EXPECT_EQ(placeRanks(m, {3, 8}), (std::vector<int64_t>{3, 4, 5, 11, 12, 13}));
  // The micro-batch axis takes no devices.
  Mesh mb({"mb", "dp", "tp"}, {4, 2, 2}, true);
  EXPECT_EQ(mb.worldSize(), 4);
  EXPECT_EQ(mb.numMicroBatches(), 4);
  EXPECT_EQ(placeRanks(mb, {2, 6}), (std::vector<int64_t>{2, 3, 8, 9}));
  EXPECT_EQ(placeRanks(Mesh(), {5, 0}), (std::vector<int64_t>{5}));
}

TEST(Transfer, MicroBatchAxisIsTime) {
  Mesh m({"mb", "x"}, {3, 2}, true);
  EXPECT_EQ(m.microBatchAxis(), 0);
  EXPECT_EQ(m.coordsOf(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.rankOf({2, 1}), 1);
  EXPECT_EQ(m.withMicroBatch(m.coordsOf(1), 2), (std::vector<int64_t>{2, 1}));
  // Rows over (mb, x): micro-batch j, rank x holds block j * 2 + x.
  ShardSpec spec{{{0, 1}, {}}};
  EXPECT_EQ(localShape({12, 5}, spec, m), (Shape{2, 5}));
  EXPECT_EQ(blockOffsets({12, 5}, spec, m, m.withMicroBatch({0, 1}, 2)),
            (Shape{10, 0}));
  // Without the flag "mb" is an ordinary axis (format version 1).
  Mesh plain({"mb", "x"}, {3, 2});
  EXPECT_EQ(plain.worldSize(), 6);
}

TEST(Transfer, RowsToColumnsOnDisjointRanks) {
  // Source: rows over 2 ranks (0, 1); destination: columns over 4 ranks
  // (2..5). Every destination gets one message from each source.
  Shape global{4, 8};
  Layout src = layout({"a"}, {2}, {{0}, {}});
  Layout dst = layout({"b"}, {4}, {{}, {0}}, 2);
  std::vector<TransferMessage> msgs = planTransfer(global, src, dst);
  checkCoverage(global, src, dst, msgs);
  ASSERT_EQ(msgs.size(), 8u);
  EXPECT_EQ(msgs[0].src, 0);
  EXPECT_EQ(msgs[0].dst, 2);
  EXPECT_EQ(msgs[0].offsets, (Shape{0, 0}));
  EXPECT_EQ(msgs[0].shape, (Shape{2, 2}));
  EXPECT_EQ(msgs[7].src, 1);
  EXPECT_EQ(msgs[7].dst, 5);
  EXPECT_EQ(msgs[7].offsets, (Shape{2, 6}));
  EXPECT_EQ(msgs[7].shape, (Shape{2, 2}));
}

TEST(Transfer, ReplicasShareTheSending) {
  // Source mesh x=2, y=2 on ranks 0..3, rows over x: ranks {0, 1} hold rows
  // 0-1, ranks {2, 3} rows 2-3. Destination: 4 replicated ranks 4..7.
  Shape global{4, 3};
  Layout src = layout({"x", "y"}, {2, 2}, {{0}, {}});
  Layout dst = layout({"z"}, {4}, {}, 4);
  std::vector<TransferMessage> msgs = planTransfer(global, src, dst);
  checkCoverage(global, src, dst, msgs);
  std::map<int64_t, std::vector<int64_t>> from;
  for (const TransferMessage &m : msgs)
    from[m.dst].push_back(m.src);
  EXPECT_EQ(from[4], (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(from[5], (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(from[6], (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(from[7], (std::vector<int64_t>{1, 3}));
}

TEST(Transfer, ColocatedRanksSendToThemselves) {
  // Replicated on ranks 0..3, wanted in rows over the same ranks: each rank
  // keeps its own rows.
  Shape global{8, 2};
  Layout src = layout({"x"}, {4}, {});
  Layout dst = layout({"x"}, {4}, {{0}, {}});
  std::vector<TransferMessage> msgs = planTransfer(global, src, dst);
  checkCoverage(global, src, dst, msgs);
  ASSERT_EQ(msgs.size(), 4u);
  for (const TransferMessage &m : msgs)
    EXPECT_EQ(m.src, m.dst);

  // Partly colocated: replicated on ranks 0, 1; wanted whole on ranks 1, 2.
  // Rank 1 copies its own; rank 2 (index 1) takes replica 1 % 2, rank 1.
  Layout two = layout({"x"}, {2}, {});
  Layout shifted = layout({"x"}, {2}, {}, 1);
  msgs = planTransfer(global, two, shifted);
  checkCoverage(global, two, shifted, msgs);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].src, 1);
  EXPECT_EQ(msgs[0].dst, 1);
  EXPECT_EQ(msgs[1].src, 1);
  EXPECT_EQ(msgs[1].dst, 2);
}

TEST(Transfer, UnevenSplitsAndStridedPlacements) {
  // Source: dim 0 over 2, dim 1 over 3 (ranks 0..5); destination: dim 0
  // over 3 on strided ranks (mesh a=3, b=2: ranks 6, 7, 10, 11, 14, 15) with
  // dim 1 over b.
  Shape global{6, 12, 2};
  Layout src = layout({"p", "q"}, {2, 3}, {{0}, {1}, {}});
  Layout dst = layout({"a", "b"}, {3, 2}, {{0}, {1}, {}}, 6, 4);
  std::vector<TransferMessage> msgs = planTransfer(global, src, dst);
  checkCoverage(global, src, dst, msgs);
  std::set<int64_t> dsts;
  for (const TransferMessage &m : msgs)
    dsts.insert(m.dst);
  EXPECT_EQ(dsts, (std::set<int64_t>{6, 7, 10, 11, 14, 15}));
  // The micro-batch axis of a layout mesh is ignored.
  Layout withMb = layout({"mb", "p", "q"}, {4, 2, 3}, {{1}, {2}, {}});
  checkCoverage(global, withMb, dst, planTransfer(global, withMb, dst));
}

TEST(Transfer, ScalarsAndEmptyTensors) {
  Layout src = layout({"x"}, {2}, {});
  Layout dst = layout({"y"}, {3}, {}, 2);
  std::vector<TransferMessage> msgs = planTransfer({}, src, dst);
  checkCoverage({}, src, dst, msgs);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[2].src, 0); // index 2 % 2 replicas
  EXPECT_TRUE(planTransfer({0, 4}, src, dst).empty());
}
