//===- PlannerTest.cpp - Cluster spec, cost and memory models ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every expected figure is computed by hand from the datasheet numbers and
// the formulas in CostModel.h.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/CostModel.h"
#include "shoal/Planner/Search.h"
#include "shoal/Schedule/Schedule.h"

#include "SearchInternal.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

using namespace shoal::planner;

namespace {

const char kMixed[] = R"(version: 1
nodes:
  - {count: 2, devices: {type: V100-32GB, count: 8}}
  - {count: 2, devices: {type: T4, count: 8}}
links:
  inter_node: {bandwidth_Gbps: 100, latency_us: 25, transport: tcp}
)";

void expectSpecError(const std::string &text, const std::string &needle) {
  try {
    parseClusterSpecText(text, "c.yaml");
    ADD_FAILURE() << "no error, expected one containing: " << needle;
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << e.what();
  }
}

TEST(Cluster, ReadsNodesDevicesAndLinks) {
  Cluster c = parseClusterSpecText(kMixed, "c.yaml");
  EXPECT_EQ(c.numNodes(), 4);
  EXPECT_EQ(c.numDevices(), 32);
  EXPECT_EQ(c.nodeOf(0), 0);
  EXPECT_EQ(c.nodeOf(9), 1);
  EXPECT_EQ(c.nodeOf(17), 2);
  EXPECT_EQ(c.groupOf(3).device.name, "V100-32GB");
  EXPECT_EQ(c.groupOf(17).device.name, "T4");
  EXPECT_THROW(c.nodeOf(32), SpecError);
  EXPECT_THROW(c.groupOf(-1), SpecError);
  // Catalog figures (datasheets): V100 fp16 125 TFLOP/s, 32 GiB, 900 GB/s;
  // T4 fp16 65, 16 GiB, 320 GB/s.
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.peakFlops(Precision::FP16), 125e12);
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.memoryGiB, 32);
  EXPECT_DOUBLE_EQ(c.groupOf(20).device.peakFlops(Precision::FP16), 65e12);
  // A V100 has no bf16: the planner takes its fp16 tensor-core rate.
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.peakFlops(Precision::BF16), 125e12);
  // Default intra-node links: NVLink2 on V100 nodes, PCIe 3 on T4 nodes;
  // 100 Gbit/s = 12.5 GB/s between nodes.
  EXPECT_EQ(c.slowestLink({0, 1}).name, "nvlink2");
  EXPECT_EQ(c.slowestLink({16, 17}).name, "pcie3");
  EXPECT_DOUBLE_EQ(c.slowestLink({0, 8}).bandwidthGBps, 12.5);
  EXPECT_DOUBLE_EQ(c.slowestLink({0, 8}).latencyUs, 25);
}

TEST(Cluster, OverridesAndCustomDevices) {
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: A100-40GB, count: 4, memory_GiB: 38, peak_tflops: {bf16: 250}}}
links:
  intra_node: {bandwidth_GBps: 100, latency_us: 2}
)",
                                   "c.yaml");
  EXPECT_EQ(c.numDevices(), 4);
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.memoryGiB, 38);
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.peakFlops(Precision::BF16), 250e12);
  EXPECT_DOUBLE_EQ(c.groupOf(0).device.peakFlops(Precision::FP32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.slowestLink({0, 3}).bandwidthGBps, 100);
}

TEST(Cluster, ErrorsNameTheFileAndLine) {
  expectSpecError("version: 1\nnodes:\n  - {devices: {type: V200}}\n",
                  "c.yaml:3: unknown device type 'V200'");
  expectSpecError("version: 1\nnodes:\n  - {count: 2, devices: {type: T4}}\n",
                  "2 nodes need links.inter_node");
  expectSpecError("version: 1\nnodes:\n  - {devices: {type: T4, count: 0}}\n",
                  "c.yaml:3: device count must be positive, got 0");
  expectSpecError("version: 1\nnodes:\n  - {gpus: 8}\n",
                  "c.yaml:3: unknown key 'gpus' in a node group");
  expectSpecError("version: 2\nnodes: []\n", "c.yaml:1: expected 'version: 1'");
  expectSpecError("version: 1\nnodes:\n  - {devices: {type: T4}}\nlinks:\n"
                  "  intra_node: {type: nvlink9}\n",
                  "c.yaml:5: unknown link type 'nvlink9'");
  expectSpecError("version: 1\nnodes: [\n", "c.yaml:");
}

TEST(CostModel, ComputeIsARoofline) {
  Cluster c = parseClusterSpecText(kMixed, "c.yaml");
  CostModel m(c, Precision::FP16);
  // 4096^3 GEMM: 2 * 4096^3 = 1.374e11 FLOP at 125 TFLOP/s = 1.0995 ms.
  double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_NEAR(m.opSeconds(0, flops, 0, OpClass::MatMul), flops / 125e12, 1e-12);
  // On a T4 (65 TFLOP/s) it is 125/65 times slower.
  EXPECT_NEAR(m.opSeconds(16, flops, 0, OpClass::MatMul), flops / 65e12, 1e-12);
  // An elementwise op moving 1 GB is bound by memory: 1e9 / 900e9 s.
  EXPECT_NEAR(m.opSeconds(0, 1e8, 1e9, OpClass::Elementwise), 1e9 / 900e9,
              1e-12);
  // A calibrated size curve: 64 rows with a half-efficiency of 64 rows run
  // at half the peak.
  Cluster slow = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: CPU, peak_tflops: {fp32: 0.1}, matmul_half_rows: 64}}
)",
                                      "c.yaml");
  CostModel curve(slow, Precision::FP32);
  EXPECT_NEAR(curve.opSeconds(0, 1e9, 0, OpClass::MatMul, 64), 2 * 1e9 / 1e11,
              1e-12);
  EXPECT_NEAR(curve.opSeconds(0, 1e9, 0, OpClass::MatMul), 1e9 / 1e11, 1e-12);
  // Efficiencies scale each side.
  CostModel half(c, Precision::FP16, Efficiency{0.5, 0.5, 1.0});
  EXPECT_NEAR(half.opSeconds(0, flops, 0, OpClass::MatMul), 2 * flops / 125e12,
              1e-12);
}

TEST(CostModel, CollectivesFollowRingFormulas) {
  Cluster c = parseClusterSpecText(kMixed, "c.yaml");
  CostModel m(c, Precision::FP16);
  std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
  // 1 GB all-reduce in one V100 node over NVLink2 (150 GB/s, 3 us):
  // 2 * 7/8 * 1e9 / 150e9 + 2 * 7 * 3e-6 = 0.0116667 + 0.000042.
  EXPECT_NEAR(m.allReduceSeconds(node0, 1e9),
              2 * 7.0 / 8 * 1e9 / 150e9 + 2 * 7 * 3e-6, 1e-12);
  // All-gather is half of that.
  EXPECT_NEAR(m.allGatherSeconds(node0, 1e9), 7.0 / 8 * 1e9 / 150e9 + 7 * 3e-6,
              1e-12);
  // One rank per node across 2 nodes (12.5 GB/s, 25 us): plain ring.
  EXPECT_NEAR(m.allReduceSeconds({0, 8}, 1e9),
              2 * 0.5 * 1e9 / 12.5e9 + 2 * 25e-6, 1e-12);
  // 16 ranks over 2 V100 nodes: reduce-scatter and all-gather in each node
  // (NVLink2) and an all-reduce of 1/8 of the data between the nodes.
  std::vector<int> two;
  for (int r = 0; r < 16; ++r)
    two.push_back(r);
  double intra = 7.0 / 8 * 1e9 / 150e9 + 7 * 3e-6;
  double inter = 2 * (0.5 * (1e9 / 8) / 12.5e9 + 25e-6);
  EXPECT_NEAR(m.allReduceSeconds(two, 1e9), 2 * intra + inter, 1e-12);
  // Point to point: latency + bytes / bandwidth; nothing to oneself.
  EXPECT_NEAR(m.sendRecvSeconds(0, 8, 1e6), 25e-6 + 1e6 / 12.5e9, 1e-15);
  EXPECT_EQ(m.sendRecvSeconds(3, 3, 1e6), 0);
  EXPECT_EQ(m.allReduceSeconds({5}, 1e9), 0);
}

TEST(MemoryModel, TrainingStateFollowsZeROsAccounting) {
  // 1e9 parameters in bf16 with Adam: 2 GB weights, 2 GB gradients, and
  // 12 GB of fp32 state (two moments and a master copy): 16 bytes/param.
  MemoryInputs in;
  in.parameters = 1e9;
  in.bytesPerParam = 2;
  in.training = true;
  in.optimizer = MemoryInputs::Optimizer::Adam;
  in.activationBytes = 1e9;
  in.inFlight = 4;
  in.workspaceBytes = 5e8;
  MemoryEstimate m = estimateMemory(in);
  EXPECT_DOUBLE_EQ(m.weights, 2e9);
  EXPECT_DOUBLE_EQ(m.gradients, 2e9);
  EXPECT_DOUBLE_EQ(m.optimizer, 12e9);
  EXPECT_DOUBLE_EQ(m.activations, 4e9);
  EXPECT_DOUBLE_EQ(m.total(), 20.5e9);
  // Inference in fp32: weights and one micro-batch of activations.
  MemoryInputs inf;
  inf.parameters = 1e9;
  inf.activationBytes = 1e8;
  inf.inFlight = 3; // the caller's count of micro-batches held at once
  EXPECT_DOUBLE_EQ(estimateMemory(inf).weights, 4e9);
  EXPECT_DOUBLE_EQ(estimateMemory(inf).gradients, 0);
  EXPECT_DOUBLE_EQ(estimateMemory(inf).activations, 3e8);
}

TEST(MemoryModel, ZeROSplitsStateThenGradientsThenWeights) {
  // The ZeRO paper's example per rank, 1e9 parameters in bf16 with Adam on
  // 8 data-parallel ranks: 2 + 2 + 12 bytes/param, then 2 + 2/8 + 12/8
  // (shoal's stage 1 reduce-scatters the gradient too: without
  // micro-batches it holds only the block, as stage 2 does), 2 + 2/8 +
  // 12/8 and (2 + 2 + 12)/8.
  MemoryInputs in;
  in.parameters = 1e9;
  in.bytesPerParam = 2;
  in.training = true;
  in.optimizer = MemoryInputs::Optimizer::Adam;
  in.zeroRanks = 8;
  double expected[4][3] = {{2e9, 2e9, 12e9},
                           {2e9, 0.25e9, 1.5e9},
                           {2e9, 0.25e9, 1.5e9},
                           {0.25e9, 0.25e9, 1.5e9}};
  for (int stage = 0; stage <= 3; ++stage) {
    in.zeroStage = stage;
    MemoryEstimate m = estimateMemory(in);
    EXPECT_DOUBLE_EQ(m.weights, expected[stage][0]) << "stage " << stage;
    EXPECT_DOUBLE_EQ(m.gradients, expected[stage][1]) << "stage " << stage;
    EXPECT_DOUBLE_EQ(m.optimizer, expected[stage][2]) << "stage " << stage;
  }
  // With micro-batches stages 1 and 2 (one plan: they scatter once per
  // step, docs/Training.md) also hold the whole gradient summed over them
  // (the paper's 2 bytes plus the block); stage 3 scatters every
  // micro-batch's and holds the block.
  in.microBatches = 4;
  in.zeroStage = 1;
  EXPECT_DOUBLE_EQ(estimateMemory(in).gradients, 2.25e9);
  in.zeroStage = 2;
  EXPECT_DOUBLE_EQ(estimateMemory(in).gradients, 2.25e9);
  in.zeroStage = 3;
  EXPECT_DOUBLE_EQ(estimateMemory(in).gradients, 0.25e9);
  // Inference keeps whole weights whatever the stage.
  in.training = false;
  EXPECT_DOUBLE_EQ(estimateMemory(in).weights, 2e9);
}

} // namespace

namespace {

// Two one-device nodes, 3 and 1 GFLOP/s, memory and links too fast to
// matter: every time below is FLOPs / rate.
const char kFastSlow[] = R"(version: 1
nodes:
  - {devices: {type: CPU, count: 1, peak_tflops: {fp32: 0.003}, bandwidth_GBps: 1000000}}
  - {devices: {type: CPU, count: 1, peak_tflops: {fp32: 0.001}, bandwidth_GBps: 1000000}}
links:
  inter_node: {bandwidth_GBps: 1000000, latency_us: 0, transport: shm}
)";

/// Eight ops of 1 MFLOP on a batch of 8; a stage may end after any of them.
ModelProfile eightOps() {
  ModelProfile p;
  p.batch = 8;
  p.ops.resize(8);
  for (OpCost &op : p.ops) {
    op.flops = 1e6;
    op.cutAfter = true;
  }
  p.ops.back().cutAfter = false;
  return p;
}

Layout twoStages() {
  Layout l;
  l.stages.resize(2);
  for (StagePlan &s : l.stages)
    s.split.assign(1, 0);
  return l;
}

} // namespace

TEST(Balance, StagesTakeOpsInProportionToSpeed) {
  Cluster c = parseClusterSpecText(kFastSlow, "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  PlanOptions o;
  // Even: 4 ops each; the slow stage takes 4 ms, the fast one 4/3 ms; one
  // micro-batch goes through both: 5.33 ms.
  Layout even = twoStages();
  ASSERT_TRUE(cutEvenly(even, p));
  placeRanks(even);
  evaluate(even, p, c, cost, o);
  EXPECT_EQ(even.stages[0].end, 4);
  EXPECT_NEAR(even.stepSeconds, 4e-3 + 4e-3 / 3, 1e-9);
  // Balanced: 6 ops on the fast device (2 ms), 2 on the slow one (2 ms).
  Layout l = twoStages();
  ASSERT_TRUE(cutEvenly(l, p));
  balance(l, p, c, cost, o);
  EXPECT_EQ(l.stages[0].end, 6);
  EXPECT_EQ(l.stages[1].begin, 6);
  EXPECT_NEAR(l.stages[0].seconds, 2e-3, 1e-9);
  EXPECT_NEAR(l.stages[1].seconds, 2e-3, 1e-9);
  EXPECT_NEAR(l.stepSeconds, 4e-3, 1e-9);
}

namespace {
/// Data parallelism over two replicas of one unsplit stage of `p`.
Layout twoReplicas(const ModelProfile &p) {
  Layout l;
  l.dp = 2;
  l.stages.resize(1);
  l.stages[0].split.assign(1, 0);
  EXPECT_TRUE(cutEvenly(l, p));
  return l;
}
} // namespace

TEST(Balance, ReplicasGetBatchSharesInProportionToSpeed) {
  Cluster c = parseClusterSpecText(kFastSlow, "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  Layout l = twoReplicas(p);
  PlanOptions o;
  Layout even = l;
  placeRanks(even);
  evaluate(even, p, c, cost, o);
  // Even: 4 samples on the slow device, 4/8 of 8 MFLOP at 1 GFLOP/s.
  EXPECT_NEAR(even.stepSeconds, 4e-3, 1e-9);
  balance(l, p, c, cost, o);
  ASSERT_EQ(l.batchShares.size(), 2u);
  EXPECT_EQ(l.batchShares[0], 6); // 3:1
  EXPECT_EQ(l.batchShares[1], 2);
  EXPECT_NEAR(l.stepSeconds, 2e-3, 1e-9); // 6/8 * 8e6 / 3e9
}

// Batch blocks (PlanOptions::batchBlocks, one replicated scope): each
// replica one block of its share, 6 and 2 samples, in one micro-batch.
// Here the cost is linear in the samples, so blocks take the same 2 ms as
// micro-batches of 2 dealt out 3/1, and the planner prefers blocks within
// 0.5%.
TEST(Balance, BatchBlocksAreEachReplicasOwnShare) {
  Cluster c = parseClusterSpecText(kFastSlow, "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  Layout l = twoReplicas(p);
  PlanOptions o;
  o.batchBlocks = true;
  Layout blocks = l;
  balance(blocks, p, c, cost, o);
  EXPECT_TRUE(blocks.batchBlocks);
  EXPECT_TRUE(blocks.replicaMicroBatches.empty());
  EXPECT_EQ(blocks.microBatches, 1);
  EXPECT_EQ(blocks.batchShares, (std::vector<double>{6, 2}));
  EXPECT_NEAR(blocks.stepSeconds, 2e-3, 1e-9);
  EXPECT_EQ(blocks.describe(), "dp=2 tp=1 pp=1 m=1 (batch blocks 6/2)");
  // Without it, the same shares as micro-batches dealt out.
  Layout dealt = l;
  balance(dealt, p, c, cost, PlanOptions{});
  EXPECT_FALSE(dealt.batchBlocks);
  EXPECT_EQ(dealt.replicaMicroBatches, (std::vector<int>{3, 1}));
  // Micro-batches of the annotation (gradient accumulation) keep the
  // dealt-out form.
  Layout accumulate = l;
  accumulate.microBatches = 2;
  balance(accumulate, p, c, cost, o);
  EXPECT_FALSE(accumulate.batchBlocks);
}

TEST(Search, RanksLayoutsAndExplains) {
  Cluster c = parseClusterSpecText(kFastSlow, "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  std::vector<Layout> ranked = search(p, c, cost, PlanOptions{});
  ASSERT_FALSE(ranked.empty());
  // DP with 6:2 shares (2 ms) beats the balanced pipeline (8 micro-batches
  // of one sample, 0.25 ms on each stage: 7 * 0.25 + 0.5 = 2.25 ms).
  EXPECT_EQ(ranked.front().dp, 2);
  EXPECT_EQ(ranked.front().pp(), 1);
  EXPECT_NEAR(ranked.front().stepSeconds, 2e-3, 1e-9);
  for (const Layout &l : ranked)
    EXPECT_GE(l.stepSeconds, ranked.front().stepSeconds);
  std::string text = explain(ranked, c, 3);
  // The shares compiled: the batch of 8 as 4 micro-batches of 2, dealt out
  // 3/1 (one layout for it, whatever micro-batch count it came from).
  EXPECT_NE(text.find("chosen: dp=2 tp=1 pp=1 m=4 (per replica 3/1)"),
            std::string::npos)
      << text;
  EXPECT_EQ(ranked.front().replicaMicroBatches, (std::vector<int>{3, 1}));
  EXPECT_NE(ranked[1].describe(), ranked.front().describe());
  EXPECT_NE(text.find("2 x CPU"), std::string::npos) << text;
}

TEST(Search, EveryLayoutUsesTheWholeWorld) {
  // 7 devices on nodes of 2, 2 and 3: tp=2 fits the smallest node but does
  // not divide 7, so no layout may take it (the search used to offer
  // dp=1 tp=2 pp=3, 6 of the 7 devices, which the compiler refuses).
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: V100-32GB, count: 2}}
  - {devices: {type: T4, count: 2}}
  - {devices: {type: A100-80GB, count: 3}}
links:
  inter_node: {bandwidth_Gbps: 100, latency_us: 25}
)",
                                   "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  p.batch = 7;
  std::vector<Layout> ranked = search(p, c, cost, PlanOptions{});
  ASSERT_FALSE(ranked.empty());
  for (const Layout &l : ranked)
    EXPECT_EQ(l.dp * l.tp() * l.pp(), 7) << l.describe();
}

TEST(Search, TrainingMemoryFollowsTheShards) {
  // Two devices in one node: tensor parallelism is possible.
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: CPU, count: 2}}
)",
                                   "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p;
  p.batch = 2;
  p.ops.resize(1);
  p.ops[0].params = 1e6;
  p.ops[0].tpSharded = true;
  PlanOptions o;
  o.step = StepKind::Train;
  Layout dp;
  dp.dp = 2;
  dp.stages.resize(1);
  dp.stages[0].split.assign(1, 0);
  ASSERT_TRUE(cutEvenly(dp, p));
  placeRanks(dp);
  evaluate(dp, p, c, cost, o);
  // fp32 weights 4 MB, gradients 4 MB, Adam's two moments 8 MB; the
  // all-reduce over dp sums the backward's weight gradient in place, in the
  // gradient buffer (rt::allReducesInPlace): no temporary.
  EXPECT_DOUBLE_EQ(dp.stages[0].memoryBytes, 16e6);
  EXPECT_DOUBLE_EQ(dp.stages[0].memory.activations, 0);
  // Under ZeRO-1 the reduce-scatter reads it from a temporary, 4 MB.
  PlanOptions zero = o;
  zero.zeroStage = 1;
  Layout dpZero = dp;
  evaluate(dpZero, p, c, cost, zero);
  EXPECT_DOUBLE_EQ(dpZero.stages[0].memory.activations, 4e6);
  Layout tp;
  tp.stages.resize(1);
  tp.stages[0].devices = 2;
  tp.stages[0].split.assign(1, 1);
  ASSERT_TRUE(cutEvenly(tp, p));
  placeRanks(tp);
  evaluate(tp, p, c, cost, o);
  EXPECT_EQ(tp.tp(), 2);
  // Half of each, and no copy of the gradient: nothing sums it.
  EXPECT_DOUBLE_EQ(tp.stages[0].memoryBytes, 8e6);
}

TEST(Search, StepBreakdownIsTheSlowestStagesOwn) {
  // Four pipeline stages of two tensor-parallel devices each, eight ops
  // that all-reduce after themselves: the breakdown's tensor-parallel
  // all-reduces are those of the slowest stage's steady steps, part of its
  // compute (they were once summed over every stage, which made the
  // compute without them negative).
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: CPU, count: 8, peak_tflops: {fp32: 0.001}, bandwidth_GBps: 1000000}}
links:
  intra_node: {bandwidth_GBps: 1, latency_us: 0}
)",
                                   "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  for (OpCost &op : p.ops) {
    op.tpSharded = true;
    op.tpAllReduceBytes = 1e6;
  }
  Layout l;
  l.stages.resize(4);
  for (StagePlan &s : l.stages) {
    s.devices = 2;
    s.split.assign(1, 1);
  }
  l.microBatches = 4;
  ASSERT_TRUE(cutEvenly(l, p));
  placeRanks(l);
  evaluate(l, p, c, cost, PlanOptions{});
  ASSERT_EQ(l.pp(), 4);
  ASSERT_EQ(l.tp(), 2);
  // Per micro-batch of 2 samples, each stage: 2 ops of 0.125 MFLOP on each
  // device (0.125 ms each) and 2 all-reduces of 0.25 MB over 2 ranks (0.25
  // ms each).
  double op = 0.125e-3,
         ar = cost.allReduceSeconds(
             {l.stages[0].offset, l.stages[0].offset + 1}, 0.25e6);
  EXPECT_NEAR(ar, 0.25e-3, 1e-9);
  EXPECT_NEAR(l.computeSeconds, 4 * 2 * (op + ar), 1e-9);
  EXPECT_NEAR(l.tpSeconds, 4 * 2 * ar, 1e-9);
  EXPECT_GE(l.computeSeconds - l.tpSeconds, 0);
  EXPECT_GE(l.bubbleSeconds, 0);
  EXPECT_NEAR(l.stepSeconds, l.computeSeconds + l.bubbleSeconds + l.p2pSeconds,
              1e-9);
}

namespace {
// Two CPU devices on one node joined by a 1 GB/s link of `latencyUs`.
Cluster twoCpus(int latencyUs) {
  return parseClusterSpecText(fmt::format(R"(version: 1
nodes:
  - {{devices: {{type: CPU, count: 2, peak_tflops: {{fp32: 0.001}}, bandwidth_GBps: 1000000}}}}
links:
  intra_node: {{bandwidth_GBps: 1, latency_us: {}}}
)",
                                          latencyUs),
                              "c.yaml");
}
} // namespace

// A training step's tensor-parallel all-reduces as shoal-autodiff builds
// them: the forward's after each row-parallel product, the backward's own
// for each column-parallel product's input gradient (once per input), and
// the vocabulary-parallel loss's statistics in both; full recomputation
// redoes the forward's in the backward. (The backward used to be counted
// as a copy of the forward: the head's input gradient and the loss's
// statistics were missing, 18% under shoal-sim on a GPT's PP2 x TP4.)
TEST(Search, TrainingAllReducesAreTheBackwardsOwn) {
  Cluster c = twoCpus(10);
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  p.hasBackward = true;
  for (OpCost &op : p.ops) {
    op.tpSharded = true;
    op.cutAfter = false;
  }
  // Column-parallel (its input's gradient all-reduced), row-parallel
  // (its result all-reduced), then the head, column-parallel, whose split
  // logits the vocabulary-parallel loss reads.
  p.ops[0].tpBackwardAllReduceBytes = 4e6;
  p.ops[1].tpAllReduceBytes = 4e6;
  p.ops[7].tpBackwardAllReduceBytes = 4e6;
  p.ops[7].tpLossAllReduceBytes = {4e3, 8e3};
  std::vector<char> split(8, 1);
  std::vector<int> group = {0, 1};
  for (StepKind step : {StepKind::Train, StepKind::TrainRecompute}) {
    PlanOptions o;
    o.step = step;
    // The profile's batch of 8, whole (frac 1).
    detail::RangeTime t =
        detail::rangeTime(p, 0, 8, split, 0, 2, 1.0, 0, group, cost, o);
    double big = cost.allReduceSeconds(group, 4e6),
           loss = cost.allReduceSeconds(group, 4e3) +
                  cost.allReduceSeconds(group, 8e3);
    double backward = 2 * big + loss + (step == StepKind::Train ? 0 : big);
    EXPECT_NEAR(t.tpBackward, backward, 1e-12) << static_cast<int>(step);
    EXPECT_NEAR(t.tp, big + loss + backward, 1e-12) << static_cast<int>(step);
  }
}

// ZeRO-3 gathers a weight before each of its reads (shoal-zero): every
// one in the forward, those its backward reads again (a product's input
// gradient reads the weight, a bias's gradient does not), and the
// forward's again under full recomputation; each gradient is
// reduce-scattered on its own. ZeRO-1 scatters the same gradients once per
// step, after copying them into the step's sum, which stage 3 does not
// make with one micro-batch, and gathers each weight once after its update
// (the runtime's gatherZeroWeight). The collectives are priced one by one:
// each pays the link's latency.
TEST(Search, ZeRO3GathersTheWeightsAtEveryPass) {
  Cluster c = twoCpus(5);
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  p.hasBackward = true;
  for (std::size_t j = 0; j < p.ops.size(); ++j) {
    OpCost &op = p.ops[j];
    op.params = op.weightReadParams = 1e5;
    op.weights = op.weightReads = 1;
    if (j % 2 == 0) {
      op.backwardWeightReads = 1;
      op.backwardWeightReadParams = 1e5;
    }
  }
  double step[2][2] = {};
  for (int zero : {1, 3})
    for (StepKind kind : {StepKind::Train, StepKind::TrainRecompute}) {
      Layout l;
      l.stages.resize(1);
      l.stages[0].devices = 1;
      l.stages[0].split.assign(1, 0);
      l.dp = 2;
      ASSERT_TRUE(cutEvenly(l, p));
      placeRanks(l);
      PlanOptions o;
      o.step = kind;
      o.zeroStage = zero;
      evaluate(l, p, c, cost, o);
      step[zero == 3][kind == StepKind::TrainRecompute] = l.stepSeconds;
    }
  // One weight of 1e5 float32 parameters over the 2 replicas.
  double gather = cost.allGatherSeconds({0, 1}, 1e5 * 4);
  ASSERT_GT(gather, 5e-6);
  double copy = cost.opSeconds(0, 0, 2 * 8e5 * 4, OpClass::Copy);
  // Stage 3's 8 + 4 gathers (and 8 more under recomputation) against
  // stage 1's 8 after the update; the scatters alike.
  EXPECT_NEAR(step[1][0] - step[0][0], (8 + 4 - 8) * gather - copy, 1e-9);
  EXPECT_NEAR(step[1][1] - step[0][1], (8 + 8 + 4 - 8) * gather - copy, 1e-9);
}

// ZeRO-1 on a split stage: a weight every tp rank holds whole (a norm's)
// has its gradient computed whole on each of them, so shoal-zero
// reduce-scatters it over the replicas and slices it over tp; with
// sequence parallelism each tp rank has a part of the sum, scattered over
// the replicas and tp. Either way the update's gather runs over both.
TEST(Search, ZeROScattersAWholeWeightOverWhatSumsIt) {
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {devices: {type: CPU, count: 4, peak_tflops: {fp32: 0.001}, bandwidth_GBps: 1000000}}
links:
  intra_node: {bandwidth_GBps: 1, latency_us: 5}
)",
                                   "c.yaml");
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  p.hasBackward = true;
  for (OpCost &op : p.ops) {
    op.params = op.weightReadParams = 1e5;
    op.weights = op.weightReads = 1;
  }
  double reduce[2] = {};
  for (bool sp : {false, true}) {
    Layout l;
    l.stages.resize(1);
    l.stages[0].devices = 2;
    l.stages[0].split.assign(1, 1);
    l.dp = 2;
    ASSERT_TRUE(cutEvenly(l, p));
    l.stages[0].split.assign(p.ops.size(), 1);
    l.stages[0].sequenceParallel = sp;
    placeRanks(l);
    PlanOptions o;
    o.step = StepKind::Train;
    o.zeroStage = 1;
    evaluate(l, p, c, cost, o);
    reduce[sp] = l.dpSeconds;
  }
  double all = cost.allGatherSeconds({0, 1, 2, 3}, 1e5 * 4);
  double two = cost.allGatherSeconds({0, 2}, 1e5 * 4);
  ASSERT_GT(all, two);
  EXPECT_NEAR(reduce[0], 8 * (two + all), 1e-12);
  EXPECT_NEAR(reduce[1], 8 * (all + all), 1e-12);
}

// A stage's program holds each constant its ops read once, for the whole
// run (shoal-compact-constants keeps one per value and type), counted with
// the activations as shoal-run reports them; a constant both stages read is
// in both programs; the whole model in 16 bits halves the float ones.
TEST(Search, StagesHoldTheirConstantsOnce) {
  Cluster c = twoCpus(0);
  CostModel cost(c, Precision::FP32);
  ModelProfile p = eightOps();
  double activations[2][2][2] = {}; // [constants][low model][stage]
  for (bool constants : {false, true})
    for (bool low : {false, true}) {
      ModelProfile q = p;
      if (constants) {
        q.constantBytes = {1000, 300};
        q.constantIsFloat = {true, false};
        q.ops[0].constants = {0};
        q.ops[1].constants = {0};
        q.ops[5].constants = {0, 1};
      }
      Layout l = twoStages();
      ASSERT_TRUE(cutEvenly(l, q));
      placeRanks(l);
      PlanOptions o;
      o.step = StepKind::Train;
      o.precision = low ? Precision::BF16 : Precision::FP32;
      o.fp32Weights = true;
      o.lowActivations = low;
      evaluate(l, q, c, cost, o);
      for (int k = 0; k < 2; ++k)
        activations[constants][low][k] = l.stages[k].memory.activations;
    }
  EXPECT_DOUBLE_EQ(activations[1][0][0] - activations[0][0][0], 1000);
  EXPECT_DOUBLE_EQ(activations[1][0][1] - activations[0][0][1], 1300);
  EXPECT_DOUBLE_EQ(activations[1][1][0] - activations[0][1][0], 500);
  EXPECT_DOUBLE_EQ(activations[1][1][1] - activations[0][1][1], 800);
}

// Full recomputation: the backward of a recomputed layer holds each
// recomputed result until the backward of its last gradient reader has run
// (the first such reader in forward order), not to the layer's start; and a
// product of two activations whose second operand dies in its backward
// gives that operand's place to its gradient. One layer of 4 ops on one
// device, each result 100 bytes; 1000 bytes cross one point of the forward
// (the gradients around the next op mirror them).
TEST(Search, RecomputedLayerFreesWhatItsBackwardHasRead) {
  Cluster c = twoCpus(0);
  CostModel cost(c, Precision::FP32);
  auto activations = [&](const ModelProfile &p, StepKind step) {
    Layout l;
    l.stages.resize(1);
    l.stages[0].split.assign(1, 0);
    EXPECT_TRUE(cutEvenly(l, p));
    placeRanks(l);
    PlanOptions o;
    o.step = step;
    evaluate(l, p, c, cost, o);
    return l.stages[0].memory.activations;
  };
  auto layer = [] {
    ModelProfile p;
    p.batch = 1;
    p.layers = 1;
    p.hasBackward = true;
    p.ops.resize(4);
    for (OpCost &op : p.ops) {
      op.flops = 1e3;
      op.layer = 0;
      op.outBytes = 100;
      op.liveBytes = 100;
    }
    return p;
  };
  // Op 0's result is read for a gradient by op 3 only, op 1's by op 2;
  // 1000 bytes cross the point after op 1. At op 2's backward the layer
  // holds op 1's result (100) and the gradients (1000 + 100), not op 0's:
  // op 3's backward, its only reader, has run. Read by op 1 instead, it is
  // held there too.
  ModelProfile far = layer();
  far.ops[0].savedBytes = 100;
  far.ops[0].savedUntil = {{3, 100}};
  far.ops[1].savedBytes = 100;
  far.ops[1].savedUntil = {{2, 100}};
  far.ops[1].liveBytes = 1000;
  ModelProfile near = far;
  near.ops[0].savedUntil = {{1, 100}};
  EXPECT_DOUBLE_EQ(activations(near, StepKind::TrainRecompute) -
                       activations(far, StepKind::TrainRecompute),
                   100);
  // Op 3 multiplies op 2's result (1000 bytes alive before it) by op 1's,
  // the last gradient read of op 1's result: its gradient takes its place.
  ModelProfile product = layer();
  product.ops[0].savedBytes = 100;
  product.ops[0].savedUntil = {{1, 100}};
  product.ops[1].savedBytes = 100;
  product.ops[1].savedUntil = {{3, 100}};
  product.ops[2].liveBytes = 1000;
  ModelProfile reused = product;
  reused.ops[3].reusedFrom = 1;
  reused.ops[3].reusedBytes = 100;
  EXPECT_DOUBLE_EQ(activations(product, StepKind::TrainRecompute) -
                       activations(reused, StepKind::TrainRecompute),
                   100);
  // Kept for the backward rather than recomputed, nothing changes.
  EXPECT_DOUBLE_EQ(activations(product, StepKind::Train),
                   activations(reused, StepKind::Train));
  // By hand: at op 3's backward, ops 0 and 1's results (200), the gradients
  // of the 1000 bytes and of op 3's result, less op 1's reused 100.
  EXPECT_DOUBLE_EQ(activations(reused, StepKind::TrainRecompute), 1200);
}

// The planner's micro-batches in flight per stage are the schedule's own:
// the pipeline schedules the compiler builds (sched::build) hold at most
// peakInFlight chunk passes on each stage, v of them per micro-batch of
// the stage's work. Interleaved stages past the first hold far more than
// min(m, p - k): stage p - 1 runs (v - 1) p chunk passes before its first
// backward.
TEST(Search, InFlightIsTheSchedulesPeak) {
  for (const char *kind : {"1f1b", "interleaved", "gpipe"})
    for (int p : {2, 4, 8, 35})
      for (int v : {1, 2, 3})
        for (int m : {p, 2 * p, 8 * p}) {
          if ((std::string(kind) == "interleaved") != (v > 1))
            continue;
          shoal::sched::Kind k;
          ASSERT_TRUE(shoal::sched::parseKind(kind, k));
          shoal::sched::Schedule s;
          ASSERT_EQ(shoal::sched::build(k, p, m, v, /*forwardOnly=*/false, s),
                    "");
          Layout l;
          l.stages.resize(p);
          l.microBatches = m;
          l.virtualStages = v;
          l.schedule = kind;
          for (int stage = 0; stage < p; ++stage)
            EXPECT_EQ(detail::inFlightOf(l, stage),
                      (s.peakInFlight(stage) + v - 1) / v)
                << kind << " p " << p << " v " << v << " m " << m << " stage "
                << stage;
        }
}
