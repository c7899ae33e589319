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

std::string errorOf(const PlanBuilder &b, int64_t world = 2) {
  try {
    checkPlan(b.plan, "test.plan", world);
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
  b.plan.set_format_version(2);
  EXPECT_ERROR(b, "format_version is 2");
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
