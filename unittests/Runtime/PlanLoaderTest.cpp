//===- PlanLoaderTest.cpp - Tests of plan validation ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "PlanLoader.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

/// x[4,8] sharded over rows on mesh {x: 2}, MatMul with a replicated
/// constant w[8,3], output y[4,3] sharded the same way.
PlanBuilder validPlan() {
  PlanBuilder b({{"x", 2}});
  int x = b.value({2, 8});
  int w = b.value({8, 3});
  int y = b.value({2, 3});
  b.input("x", x, {4, 8}, {{"x"}, {}});
  b.constantF32(w, std::vector<float>(24, 0.5f));
  b.op("MatMul", {x, w}, {y}, "mm");
  b.output("y", y, {4, 3}, {{"x"}, {}});
  return b;
}

std::string errorOf(const PlanBuilder &b, int64_t world = 2, int64_t rank = 0) {
  try {
    checkPlan(b.plan, "test.plan", world, rank);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(builder, text)                                            \
  do {                                                                         \
    std::string msg_ = errorOf(builder);                                       \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message was: " << msg_;  \
    EXPECT_EQ(msg_.rfind("plan test.plan", 0), 0u) << msg_;                    \
  } while (0)

} // namespace

TEST(PlanLoader, AcceptsAValidPlan) {
  PlanBuilder b = validPlan();
  LoadedPlan p = checkPlan(b.plan, "test.plan", 2);
  EXPECT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].kind, OpKind::MatMul);
  EXPECT_EQ(p.lastUse[0], 0);
  EXPECT_EQ(p.lastUse[2], LoadedPlan::kKeepAlive);
  EXPECT_EQ(p.inputs[0].sharding.dims[0], std::vector<int>{0});
}

TEST(PlanLoader, RejectsWrongMagicAndVersion) {
  PlanBuilder b = validPlan();
  b.plan.set_magic("nope");
  EXPECT_ERROR(b, "magic is 'nope', expected 'shoal.plan'");
  b = validPlan();
  b.plan.set_format_version(3);
  EXPECT_ERROR(b, "format_version is 3, this runtime reads versions 1 and 2");
}

TEST(PlanLoader, RejectsWrongWorldSize) {
  PlanBuilder b = validPlan();
  EXPECT_EQ(errorOf(b, 3), "plan test.plan is for a world of 2 ranks, but "
                           "this run has 3 (start it with mpirun -np 2)");
}

TEST(PlanLoader, RejectsOutOfRangeValueIds) {
  PlanBuilder b = validPlan();
  b.prog->mutable_ops(0)->set_inputs(1, 17);
  EXPECT_ERROR(b, "op #0 'mm' (MatMul): input #1 is value id 17, out of "
                  "range (the program has 3 values)");
  b = validPlan();
  b.prog->mutable_outputs(0)->set_value(-3);
  EXPECT_ERROR(b, "output 'y' refers to value -3, out of range");
}

TEST(PlanLoader, RejectsUnknownOpKindsAndArity) {
  PlanBuilder b = validPlan();
  b.prog->mutable_ops(0)->set_kind("NoSuchOp");
  EXPECT_ERROR(b, "op #0 'mm' (NoSuchOp): unknown op kind 'NoSuchOp'");
  b = validPlan();
  b.prog->mutable_ops(0)->add_inputs(0);
  EXPECT_ERROR(b, "expects 2 inputs, got 3");
}

TEST(PlanLoader, RejectsTypeMismatches) {
  PlanBuilder b = validPlan();
  b.prog->mutable_values(2)->set_shape(1, 4);
  // The output port's local type is checked too, but the op comes first.
  EXPECT_ERROR(b, "output #0 (value 2) is declared f32[2, 4], but the inputs "
                  "(f32[2, 8], f32[8, 3]) give f32[2, 3]");
  b = validPlan();
  b.prog->mutable_values(1)->set_dtype(plan::I32);
  EXPECT_ERROR(b, "input B must be f32, got i32[8, 3]");
}

TEST(PlanLoader, RejectsInconsistentShardings) {
  PlanBuilder b = validPlan();
  b.prog->mutable_inputs(0)->mutable_sharding()->mutable_dims(0)->set_axes(0,
                                                                           "z");
  EXPECT_ERROR(b, "mesh axis 'z', which is not in the mesh");
  b = validPlan();
  b.prog->mutable_inputs(0)->mutable_global_type()->set_shape(0, 5);
  EXPECT_ERROR(b, "dimension 0 of size 5 does not split evenly into 2");
  b = validPlan();
  b.prog->mutable_inputs(0)->mutable_global_type()->set_shape(0, 6);
  EXPECT_ERROR(b, "value 0 is declared f32[2, 8], but global type f32[6, 8] "
                  "sharded [{x}, {}]");
}

TEST(PlanLoader, RejectsBadAttributes) {
  PlanBuilder b({{"x", 1}});
  int x = b.value({2, 3});
  int y = b.value({3, 2});
  b.input("x", x, {2, 3});
  plan::Op &op = b.op("Reshape", {x}, {y}, "r");
  b.output("y", y, {3, 2});
  EXPECT_NE(errorOf(b, 1).find("missing required attribute 'shape'"),
            std::string::npos);
  PlanBuilder::attrInt(op, "shape", 3);
  EXPECT_NE(errorOf(b, 1).find("attribute 'shape' must be a list of integers"),
            std::string::npos);
  op.mutable_attrs()->erase("shape");
  PlanBuilder::attrInts(op, "shape", {3, 2});
  EXPECT_EQ(errorOf(b, 1), "");
  PlanBuilder::attrInt(op, "colour", 1);
  EXPECT_NE(errorOf(b, 1).find("unknown attribute 'colour'"),
            std::string::npos);
}

TEST(PlanLoader, RejectsUseBeforeDefinition) {
  PlanBuilder b({{"x", 1}});
  int x = b.value({2});
  int t = b.value({2});
  int y = b.value({2});
  b.input("x", x, {2});
  b.op("Relu", {t}, {y});
  b.op("Neg", {x}, {t});
  b.output("y", y, {2});
  EXPECT_NE(errorOf(b, 1).find("input #0 (value 1) is read before anything "
                               "defines it"),
            std::string::npos);
}

TEST(PlanLoader, RejectsBadConstantsAndSources) {
  PlanBuilder b = validPlan();
  b.prog->mutable_constants(0)->mutable_data()->resize(10);
  EXPECT_ERROR(b, "constant #0 (value 1 of type f32[8, 3]) has 10 bytes of "
                  "data, expected 96");
  b = validPlan();
  b.source("no-such-model.onnx");
  EXPECT_ERROR(b, "weight source #0 'no-such-model.onnx' not found");
}

TEST(PlanLoader, ChecksWeightSourceShapes) {
  // A weight viewed in another shape (a fused q/k/v weight [8, 24] seen as
  // [8, 3, 8]) must keep the initializer's number of elements.
  std::string dir = makeTempDir();
  writeFile(dir + "/m.onnx", "");
  PlanBuilder b = validPlan();
  int w = b.value({8, 3, 8});
  b.weight("qkv", w, b.source(dir + "/m.onnx"), {8, 3, 8});
  for (int64_t d : {8, 24})
    b.prog->mutable_weights(0)->add_source_shape(d);
  EXPECT_EQ(errorOf(b), "");
  b.prog->mutable_weights(0)->add_source_shape(2);
  EXPECT_ERROR(b, "weight 'qkv': source_shape [8, 24, 2] has 384 elements, "
                  "but the weight is f32[8, 3, 8]");
}

TEST(PlanLoader, ChecksWeightRanges) {
  // A block of an initializer (one piece of a fused projection): columns
  // [8, 12) of qkv [8, 16].
  std::string dir = makeTempDir();
  writeFile(dir + "/m.onnx", "");
  auto make = [&](Shape shape, int axis, int64_t start, bool view) {
    PlanBuilder b = validPlan();
    int w = b.value({8, 4});
    b.weight("qkv[:, 8:12]", w, b.source(dir + "/m.onnx"), {8, 4});
    plan::WeightRange *r = b.prog->mutable_weights(0)->mutable_range();
    r->set_name("qkv");
    for (int64_t d : shape)
      r->add_shape(d);
    r->set_axis(axis);
    r->set_start(start);
    if (view)
      for (int64_t d : {32})
        b.prog->mutable_weights(0)->add_source_shape(d);
    return b;
  };
  EXPECT_EQ(errorOf(make({8, 16}, 1, 8, false)), "");
  EXPECT_ERROR(make({8, 16}, 1, 14, false),
               "weight 'qkv[:, 8:12]' (f32[8, 4]) is no block of initializer "
               "'qkv' of shape [8, 16] starting at 14 along axis 1");
  EXPECT_ERROR(make({4, 16}, 1, 8, false),
               "weight 'qkv[:, 8:12]' (f32[8, 4]) is no block of initializer "
               "'qkv' of shape [4, 16] starting at 8 along axis 1");
  EXPECT_ERROR(make({8, 16}, 2, 8, false),
               "is no block of initializer 'qkv' of shape [8, 16] starting at "
               "8 along axis 2");
  EXPECT_ERROR(make({8, 16}, 1, 8, true),
               "weight 'qkv[:, 8:12]' has both a range and a source_shape");

  // In a training plan, the blocks of one initializer tile it (the exports
  // put it together again).
  auto blocks = [&](std::vector<std::pair<int64_t, int64_t>> ranges) {
    PlanBuilder b = validPlan();
    int source = b.source(dir + "/m.onnx");
    for (auto [start, end] : ranges) {
      int w = b.value({8, end - start});
      std::string name =
          "qkv[:, " + std::to_string(start) + ":" + std::to_string(end) + "]";
      b.weight(name, w, source, {8, end - start});
      plan::WeightRange *r =
          b.prog->mutable_weights(b.prog->weights_size() - 1)->mutable_range();
      r->set_name("qkv");
      r->add_shape(8);
      r->add_shape(16);
      r->set_axis(1);
      r->set_start(start);
    }
    b.plan.mutable_training()->set_optimizer("sgd");
    return b;
  };
  // (This skeleton's training section is incomplete: the checker gets past
  // the weights to it.)
  EXPECT_ERROR(blocks({{0, 8}, {8, 12}, {12, 16}}),
               "the training plan names no loss output");
  EXPECT_ERROR(blocks({{0, 8}, {12, 16}}),
               "the blocks of initializer 'qkv' do not tile it along axis 1: "
               "a gap at 8 (expected 8: qkv[:, 12:16])");
  EXPECT_ERROR(blocks({{0, 8}, {6, 16}}),
               "the blocks of initializer 'qkv' do not tile it along axis 1: "
               "an overlap at 6 (expected 8: qkv[:, 6:16])");
  EXPECT_ERROR(blocks({{0, 8}, {8, 12}}),
               "the blocks of initializer 'qkv' end at 12 of its 16 along "
               "axis 1");
}

TEST(PlanLoader, ChecksCollectives) {
  PlanBuilder b({{"x", 2}, {"y", 2}});
  int x = b.value({4, 2});
  int g = b.value({4, 4});
  int s = b.value({1, 4});
  b.input("x", x, {4, 4}, {{}, {"y"}});
  plan::Op &ag = b.op("AllGather", {x}, {g}, "ag");
  PlanBuilder::attrInt(ag, "dim", 1);
  PlanBuilder::attrStrings(ag, "axes", {"y"});
  plan::Op &ls = b.op("LocalSlice", {g}, {s}, "ls");
  PlanBuilder::attrInt(ls, "dim", 0);
  PlanBuilder::attrStrings(ls, "axes", {"x", "y"});
  b.output("s", s, {4, 4}, {{"x", "y"}, {}});
  std::string msg = errorOf(b, 4);
  EXPECT_EQ(msg, "");
  LoadedPlan p = checkPlan(b.plan, "test.plan", 4);
  EXPECT_EQ(p.collectiveAxes, (std::vector<std::vector<int>>{{1}}));
  EXPECT_EQ(p.ops[1].attrs.groupSize, 4);

  PlanBuilder::attrStrings(ag, "axes", {"w"});
  EXPECT_NE(errorOf(b, 4).find("mesh axis 'w' is not in the mesh"),
            std::string::npos);
}

TEST(PlanLoader, LoadPlanReportsUnreadableFiles) {
  std::string dir = makeTempDir();
  try {
    loadPlan(dir + "/missing.plan", 1);
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "plan " + dir + "/missing.plan not found");
  }
  writeFile(dir + "/garbage.plan", "\xff\xff\xff garbage");
  try {
    loadPlan(dir + "/garbage.plan", 1);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("is not a valid shoal plan"),
              std::string::npos);
  }
}

//===----------------------------------------------------------------------===//
// Format version 2
//===----------------------------------------------------------------------===//

namespace {

/// Expects `text` in the error of checking `b` on rank `rank` of 4.
#define EXPECT_ERROR_ON(builder, rank, text)                                   \
  do {                                                                         \
    std::string msg_ = errorOf(builder, 4, rank);                              \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message was: " << msg_;  \
    EXPECT_EQ(msg_.rfind("plan test.plan: ", 0), 0u) << msg_;                  \
  } while (0)

} // namespace

TEST(PlanLoaderV2, PicksThisRanksProgram) {
  PlanBuilder b = twoProgramPlan();
  LoadedPlan p = checkPlan(b.plan, "test.plan", 4, 1);
  EXPECT_EQ(p.formatVersion, 2);
  EXPECT_EQ(p.program, 0);
  EXPECT_EQ(p.numPrograms, 2);
  EXPECT_EQ(p.role, "first");
  EXPECT_EQ(p.meshRank, 1);
  EXPECT_EQ(p.programRanks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.numMicroBatches, 2);
  EXPECT_EQ(p.mesh.microBatchAxis(), 0);
  EXPECT_EQ(p.mesh.worldSize(), 2);
  ASSERT_EQ(p.tasks.size(), 1u);
  EXPECT_EQ(p.tasks[0].begin, 0);
  EXPECT_EQ(p.tasks[0].end, 1);
  ASSERT_EQ(p.schedule.size(), 2u);
  EXPECT_EQ(p.schedule[1].microBatch, 1);
  ASSERT_EQ(p.transfers.size(), 1u);
  EXPECT_EQ(p.ops[0].transfer, 0);
  EXPECT_EQ(p.transfers[0].id, 7);
  EXPECT_EQ(p.transfers[0].blockOffsets, (Shape{0, 3}));
  // Each of ranks 2, 3 gets its row from both senders.
  EXPECT_EQ(p.transfers[0].messages.size(), 4u);
  EXPECT_TRUE(p.pipeline.present);
  EXPECT_EQ(p.pipeline.stages, 2);
  EXPECT_TRUE(p.isPipelined());

  p = checkPlan(b.plan, "test.plan", 4, 3);
  EXPECT_EQ(p.program, 1);
  EXPECT_EQ(p.stage, 1);
  EXPECT_EQ(p.meshRank, 1);
  EXPECT_EQ(p.programRanks, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.transfers[0].blockOffsets, (Shape{1, 0}));
  EXPECT_EQ(p.lastUse[0], 1);
  EXPECT_EQ(p.definingTask[0], 0);
}

TEST(PlanLoaderV2, KeepsVersionOnePlansAsTheyWere) {
  PlanBuilder b = validPlan();
  LoadedPlan p = checkPlan(b.plan, "test.plan", 2, 1);
  EXPECT_EQ(p.formatVersion, 1);
  EXPECT_EQ(p.meshRank, 1);
  EXPECT_EQ(p.numMicroBatches, 1);
  EXPECT_FALSE(p.isPipelined());
  ASSERT_EQ(p.schedule.size(), 1u);
  EXPECT_EQ(p.tasks[0].end, 1);
}

TEST(PlanLoaderV2, RejectsPlacementsThatDoNotTileTheWorld) {
  PlanBuilder b = twoProgramPlan();
  b.prog->mutable_placement()->set_offset(1);
  EXPECT_ERROR_ON(b, 0,
                  "world rank 1 is in the placement of program #0 'first' "
                  "and of program #1 'second'; every rank runs exactly one "
                  "program");
  b = twoProgramPlan();
  b.worldOf(5);
  EXPECT_NE(errorOf(b, 5, 0).find("plan test.plan: world rank 4 runs no "
                                  "program: no program's placement covers it"),
            std::string::npos)
      << errorOf(b, 5, 0);
  b = twoProgramPlan();
  b.prog->mutable_placement()->set_offset(3);
  EXPECT_ERROR_ON(b, 0,
                  "program #1 'second': placement (offset 3, stride 0) puts "
                  "mesh rank 1 on world rank 4, outside the world of 4 ranks");
}

TEST(PlanLoaderV2, RejectsSendsWithoutTransfers) {
  PlanBuilder b = twoProgramPlan();
  b.plan.mutable_programs(0)->mutable_ops(0)->clear_transfer();
  EXPECT_ERROR_ON(b, 0,
                  "program #0 'first': op #0 'send_h' (Send): a Send needs a "
                  "transfer");
  // Without a Recv.
  b = twoProgramPlan();
  b.prog->mutable_ops(0)->mutable_transfer()->set_id(8);
  EXPECT_ERROR_ON(b, 0,
                  "transfer 7 is sent by program #0 'first' but nothing "
                  "receives it");
  // Both ends must agree.
  b = twoProgramPlan();
  PlanBuilder::setSharding(b.prog->mutable_ops(0)
                               ->mutable_transfer()
                               ->mutable_src()
                               ->mutable_sharding(),
                           {{"x"}, {}});
  b.prog->mutable_ops(0)
      ->mutable_transfer()
      ->mutable_src()
      ->mutable_sharding()
      ->clear_dims();
  EXPECT_ERROR_ON(b, 0,
                  "transfer 7 differs between its Send in program #0 "
                  "'first' and its Recv in program #1 'second'");
}

TEST(PlanLoaderV2, RejectsTransfersThatDoNotMatchTheirValues) {
  PlanBuilder b = twoProgramPlan();
  b.prog->mutable_values(0)->clear_shape();
  PlanBuilder::setType(b.prog->mutable_values(0), plan::F32, {2, 6});
  EXPECT_ERROR_ON(b, 2,
                  "program #1 'second': op #0 'recv_h' (Recv): value 0 is "
                  "declared f32[2, 6], but transfer 7 of f32[2, 6] sharded "
                  "[{y}, {}] over its destination mesh (y=2) gives f32[1, 6] "
                  "on world rank 2");
  // The sending side must be the program's ranks.
  b = twoProgramPlan();
  for (int k = 0; k < 2; ++k)
    b.plan.mutable_programs(k)
        ->mutable_ops(0)
        ->mutable_transfer()
        ->mutable_src()
        ->mutable_placement()
        ->set_offset(1);
  EXPECT_ERROR_ON(b, 0,
                  "op #0 'send_h' (Send): the transfer's source ranks [1, 2] "
                  "are not the ranks of the program [0, 1]");
  // Transfers move one micro-batch: their shardings never name "mb".
  b = twoProgramPlan();
  for (int k = 0; k < 2; ++k) {
    plan::Layout *dst = b.plan.mutable_programs(k)
                            ->mutable_ops(0)
                            ->mutable_transfer()
                            ->mutable_dst();
    PlanBuilder::setMesh(dst->mutable_mesh(), {{"mb", 2}, {"y", 2}});
    dst->mutable_sharding()->clear_dims();
    PlanBuilder::setSharding(dst->mutable_sharding(), {{"mb"}, {}});
  }
  EXPECT_ERROR_ON(b, 0, "the sharding names the micro-batch axis 'mb'");
}

TEST(PlanLoaderV2, ChecksTheMicroBatchAxis) {
  PlanBuilder b = twoProgramPlan();
  b.place({{"mb", 3}, {"y", 2}}, 2, 0, 2);
  EXPECT_ERROR_ON(b, 2,
                  "program #1 'second': mesh axis 'mb' has size 3 but the "
                  "program has num_micro_batches 2");
  // Collectives that move data never run over micro-batches (an
  // AllReduce over "mb" accumulates them; see docs/Training.md).
  b = twoProgramPlan();
  int s = b.value({2, 6});
  plan::Op &ag = b.op("AllGather", {1}, {s}, "ag");
  PlanBuilder::attrInt(ag, "dim", 0);
  PlanBuilder::attrStrings(ag, "axes", {"mb"});
  EXPECT_ERROR_ON(b, 3,
                  "op #2 'ag' (AllGather): runs over the micro-batch axis "
                  "'mb'; collectives never run over micro-batches");
  // Weights are the same for every micro-batch.
  b = twoProgramPlan();
  int w = b.value({1, 6});
  std::string dir = makeTempDir();
  writeFile(dir + "/m.onnx", "");
  b.weight("w", w, b.source(dir + "/m.onnx"), {2, 6}, {{"mb"}, {}});
  EXPECT_ERROR_ON(b, 2,
                  "weight 'w': weights are the same for every "
                  "micro-batch and cannot be sharded over 'mb'");
}

TEST(PlanLoaderV2, ChecksTasksAndSchedules) {
  // One program on a world of 1: task a (Relu), task b (Neg of a's value).
  auto build = [] {
    PlanBuilder b({{"world", 1}});
    b.worldOf(1);
    b.place({{"mb", 2}}, 0, 0, 2);
    int x = b.value({1, 2}), r = b.value({1, 2}), n = b.value({1, 2});
    b.input("x", x, {2, 2}, {{"mb"}, {}});
    b.op("Relu", {x}, {r}, "relu").set_task_graph("a");
    b.op("Neg", {r}, {n}, "neg").set_task_graph("b");
    b.output("n", n, {2, 2}, {{"mb"}, {}});
    b.prog->add_tasks("a");
    b.prog->add_tasks("b");
    return b;
  };
  PlanBuilder b = build();
  LoadedPlan p = checkPlan(b.plan, "test.plan", 1, 0);
  ASSERT_EQ(p.tasks.size(), 2u);
  EXPECT_EQ(p.tasks[1].begin, 1);
  EXPECT_EQ(p.tasks[1].imports, std::vector<int>{1});
  EXPECT_EQ(p.tasks[0].exports, std::vector<int>{1});
  EXPECT_EQ(p.ops[1].task, 1);
  // Default schedule: task-major.
  ASSERT_EQ(p.schedule.size(), 4u);
  EXPECT_EQ(p.schedule[1].task, 0);
  EXPECT_EQ(p.schedule[1].microBatch, 1);

  auto step = [](PlanBuilder &pb, int task, int mb, bool backward = false) {
    plan::ScheduleStep *s = pb.prog->add_schedule();
    s->set_task(task);
    s->set_micro_batch(mb);
    s->set_backward(backward);
  };
  auto error = [](const PlanBuilder &pb) { return errorOf(pb, 1, 0); };
  b = build();
  step(b, 0, 0);
  step(b, 1, 0);
  step(b, 0, 1);
  step(b, 1, 1, true);
  EXPECT_NE(error(b).find("the schedule never runs the forward of task 'b' "
                          "for micro-batch 1"),
            std::string::npos)
      << error(b);
  b = build();
  step(b, 1, 0);
  step(b, 0, 0);
  step(b, 0, 1);
  step(b, 1, 1);
  EXPECT_NE(error(b).find("the schedule runs task 'b' for micro-batch 0 (step "
                          "#0) before task 'a' (step #1), which defines value "
                          "1 that it reads"),
            std::string::npos)
      << error(b);
  b = build();
  step(b, 2, 0);
  EXPECT_NE(error(b).find("schedule step #0 runs task 2, out of range"),
            std::string::npos)
      << error(b);
  b = build();
  b.prog->mutable_ops(1)->set_task_graph("c");
  EXPECT_NE(error(b).find("op #1 'neg' (Neg): task_graph 'c' is not one of "
                          "the program's tasks (a, b)"),
            std::string::npos)
      << error(b);
  b = build();
  int z = b.value({1, 2});
  b.op("Relu", {2}, {z}, "again").set_task_graph("a");
  EXPECT_NE(error(b).find("op #2 'again' (Relu): the ops of task 'a' are not "
                          "contiguous"),
            std::string::npos)
      << error(b);
}

TEST(PlanLoaderV2, MicroBatchSharesGiveEachRankItsCount) {
  // One program on 4 ranks; rank 0 runs 3 micro-batches, ranks 1-3 one
  // (Program.micro_batch_shares); the gradient-style AllReduce over {mb, dp}
  // accumulates, then reduces once.
  // Runs of (ranks, micro-batches) for Program.micro_batch_shares.
  auto build = [](std::vector<std::pair<int, int>> shares) {
    PlanBuilder b({{"world", 4}});
    b.worldOf(4);
    b.place({{"mb", 3}, {"dp", 4}}, 0, 0, 3);
    int x = b.value({2, 2}), r = b.value({2, 2}), s = b.value({2, 2});
    b.input("x", x, {12, 2}, {{"mb", "dp"}, {}});
    b.op("Relu", {x}, {r}, "relu");
    plan::Op &ar = b.op("AllReduce", {r}, {s}, "sum");
    PlanBuilder::attrStrings(ar, "axes", {"mb", "dp"});
    b.output("s", s, {2, 2}, {});
    for (auto [ranks, m] : shares) {
      plan::MicroBatchShare *sh = b.prog->add_micro_batch_shares();
      sh->set_ranks(ranks);
      sh->set_micro_batches(m);
    }
    return b;
  };
  PlanBuilder b = build({{1, 3}, {3, 1}});
  LoadedPlan p0 = checkPlan(b.plan, "test.plan", 4, 0);
  EXPECT_EQ(p0.numMicroBatches, 3);
  EXPECT_EQ(p0.schedule.size(), 3u);
  LoadedPlan p2 = checkPlan(b.plan, "test.plan", 4, 2);
  EXPECT_EQ(p2.numMicroBatches, 1);
  ASSERT_EQ(p2.schedule.size(), 1u);
  EXPECT_EQ(p2.schedule[0].microBatch, 0);
  EXPECT_EQ(p2.inputs[0].globalType.shape, (Shape{12, 2}));
  EXPECT_EQ(p2.mesh.numBlocks(p2.inputs[0].sharding.dims[0]), 6);

  // The shares cover the mesh's ranks, each count in [1, num_micro_batches],
  // the largest being num_micro_batches.
  b = build({{1, 3}, {2, 1}});
  EXPECT_ERROR_ON(b, 0, "micro_batch_shares cover 3 ranks, the mesh");
  b = build({{1, 4}, {3, 1}});
  EXPECT_ERROR_ON(b, 0,
                  "micro_batch_shares #0 gives 4 micro-batches to 1 "
                  "ranks; each needs at least 1 rank and 1 to "
                  "num_micro_batches (3) micro-batches");
  b = build({{4, 2}});
  EXPECT_ERROR_ON(b, 0,
                  "num_micro_batches is 3 but the largest of "
                  "micro_batch_shares is 2");
  // A collective that talks to the other ranks once per micro-batch would
  // run a different number of times on each.
  b = build({{1, 3}, {3, 1}});
  int g = b.value({8, 2});
  plan::Op &ag = b.op("AllGather", {1}, {g}, "ag");
  PlanBuilder::attrInt(ag, "dim", 0);
  PlanBuilder::attrStrings(ag, "axes", {"dp"});
  EXPECT_ERROR_ON(b, 1,
                  "op #2 'ag' (AllGather) runs over ranks once per "
                  "micro-batch, but micro_batch_shares gives them "
                  "different numbers of micro-batches");
  // The batch must be split over the ranks with the micro-batches.
  b = build({{1, 3}, {3, 1}});
  b.prog->mutable_inputs(0)->mutable_sharding()->mutable_dims(0)->clear_axes();
  b.prog->mutable_inputs(0)->mutable_sharding()->mutable_dims(0)->add_axes(
      "mb");
  EXPECT_ERROR_ON(b, 0,
                  "input 'x' is sharded [{mb}, {}] over micro-batches "
                  "but not over every device axis");
}

namespace {

/// Shards by speed on mesh {tp: 2} with weights 3:1: an input w[8, 8] split
/// over its columns in uneven blocks (6 and 2), y = x w, gathered whole.
PlanBuilder unevenPlan() {
  PlanBuilder b({{"tp", 2}});
  int x = b.value({4, 8});
  int w = b.value({8, 4});
  int y = b.value({4, 4});
  int g = b.value({4, 8});
  b.input("x", x, {4, 8}, {{}, {}});
  b.input("w", w, {8, 8}, {{}, {"tp"}});
  b.op("MatMul", {x, w}, {y}, "mm");
  plan::Op &ag = b.op("AllGather", {y}, {g}, "ag");
  PlanBuilder::attrInt(ag, "dim", 1);
  PlanBuilder::attrStrings(ag, "axes", {"tp"});
  b.output("g", g, {4, 8}, {{}, {}});
  plan::UnevenAxis *u = b.prog->add_uneven_axes();
  u->set_axis("tp");
  u->add_weights(3);
  u->add_weights(1);
  u->set_multiple(1);
  for (auto [v, shape] : {std::pair<int, Shape>{w, {8, 8}}, {y, {4, 8}}}) {
    plan::ValueLayout *l = b.prog->add_value_layouts();
    l->set_value(v);
    PlanBuilder::setType(l->mutable_global_type(), plan::F32, shape);
    PlanBuilder::setSharding(l->mutable_sharding(), {{}, {"tp"}});
  }
  return b;
}

} // namespace

TEST(PlanLoader, UnevenBlocksFollowTheirWeights) {
  EXPECT_EQ(unevenBlockSizes(8, {3, 1}, 1), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(unevenBlockSizes(1024, {500, 167, 167, 167}, 64),
            (std::vector<int64_t>{512, 192, 192, 128}));
  // Too few units of the multiple for every block: units of 1.
  EXPECT_EQ(unevenBlockSizes(64, {200, 800}, 64),
            (std::vector<int64_t>{13, 51}));
  PlanBuilder b = unevenPlan();
  LoadedPlan p0 = checkPlan(b.plan, "test.plan", 2, 0);
  LoadedPlan p1 = checkPlan(b.plan, "test.plan", 2, 1);
  EXPECT_EQ(p0.values[1].shape, (Shape{8, 6}));
  EXPECT_EQ(p1.values[1].shape, (Shape{8, 2}));
  EXPECT_EQ(p0.values[2].shape, (Shape{4, 6}));
  EXPECT_EQ(p1.ops[1].attrs.gatherBlocks, (std::vector<int64_t>{6, 2}));
  EXPECT_TRUE(p1.inputs[1].sharding.uneven);
  EXPECT_EQ(blockOffsets({8, 8}, p1.inputs[1].sharding, p1.mesh, {1}),
            (Shape{0, 6}));
}

TEST(PlanLoader, RejectsBadUnevenBlocks) {
  {
    PlanBuilder b = unevenPlan();
    b.prog->clear_uneven_axes();
    EXPECT_ERROR(b, "has value_layouts but no uneven_axes");
  }
  {
    PlanBuilder b = unevenPlan();
    b.prog->mutable_uneven_axes(0)->add_weights(5);
    EXPECT_ERROR(b, "has 3 weights for mesh axis 'tp' of size 2");
  }
  {
    PlanBuilder b = unevenPlan();
    b.prog->mutable_uneven_axes(0)->set_weights(0, 0);
    EXPECT_ERROR(b, "has weight 0; weights are in [1, 1000000]");
  }
  {
    PlanBuilder b = unevenPlan();
    b.prog->mutable_value_layouts(1)->set_value(1);
    EXPECT_ERROR(b, "lists value 1 again");
  }
  {
    PlanBuilder b = unevenPlan();
    PlanBuilder::attrInts(*b.prog->mutable_ops(1), "uneven_blocks", {4, 4});
    EXPECT_ERROR(b, "has attribute 'uneven_blocks', which the plan loader "
                    "sets");
  }
}

// Batch blocks (docs/Planner.md "Uneven batch shares"): an output of uneven
// blocks, each rank's its own; an Expand to the even shape expands to this
// rank's block.
TEST(PlanLoader, UnevenOutputsAndExpandsTakeEachRanksBlock) {
  PlanBuilder b = unevenPlan();
  int one = b.value({1, 1});
  int e = b.value({4, 4});
  b.input("one", one, {1, 1}, {{}, {}});
  plan::Op &ex = b.op("Expand", {one}, {e}, "ex");
  PlanBuilder::attrInts(ex, "shape", {4, 4});
  b.output("y", 2, {4, 8}, {{}, {"tp"}});
  b.output("e", e, {4, 8}, {{}, {"tp"}});
  plan::ValueLayout *l = b.prog->add_value_layouts();
  l->set_value(e);
  PlanBuilder::setType(l->mutable_global_type(), plan::F32, {4, 8});
  PlanBuilder::setSharding(l->mutable_sharding(), {{}, {"tp"}});
  for (int rank : {0, 1}) {
    LoadedPlan p = checkPlan(b.plan, "test.plan", 2, rank);
    Shape mine = rank == 0 ? Shape{4, 6} : Shape{4, 2};
    EXPECT_EQ(p.values[e].shape, mine);
    EXPECT_EQ(p.ops[2].attrs.shape, (std::vector<int64_t>(mine)));
    ASSERT_EQ(p.outputs.size(), 3u);
    EXPECT_TRUE(p.outputs[1].sharding.uneven);
    EXPECT_EQ(localShape({4, 8}, p.outputs[1].sharding, p.mesh,
                         p.mesh.coordsOf(rank)),
              mine);
    EXPECT_FALSE(p.outputs[0].sharding.uneven);
  }
  // An output whose global type is not its blocks'.
  PlanBuilder bad = unevenPlan();
  bad.output("y", 2, {4, 4}, {{}, {"tp"}});
  EXPECT_ERROR(bad, "output 'y'");
}
