//===- RunPlanTest.cpp - Whole runs in a world of one rank ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Runtime/Runtime.h"

#include "Npy.h"
#include "TestUtil.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

void addRawInitializer(onnx::GraphProto *g, const std::string &name,
                       const Tensor &t) {
  onnx::TensorProto *init = g->add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : t.shape())
    init->add_dims(d);
  init->set_raw_data(
      std::string(reinterpret_cast<const char *>(t.rawData()), t.numBytes()));
}

/// out = ReduceSum(Relu(Gemm(x, w1, b1)) * c, axes=[1], keepdims=0), with an
/// AllReduce over a mesh axis of size 1 in between.
class RunPlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    ensureMpi();
    if (worldSize() != 1)
      GTEST_SKIP() << "runs in a world of one rank";
    dir = makeTempDir();
    std::mt19937 rng(11);
    x = randomF32({2, 4}, rng);
    w1 = randomF32({4, 3}, rng);
    b1 = randomF32({3}, rng);
    c = {0.5f, -1.f, 2.f};

    onnx::ModelProto model;
    model.set_ir_version(8);
    addRawInitializer(model.mutable_graph(), "fc1.weight", w1);
    addRawInitializer(model.mutable_graph(), "fc1.bias", b1);
    writeFile(dir + "/model.onnx", model.SerializeAsString());

    int vx = b.value({2, 4}), vw = b.value({4, 3}), vb = b.value({3});
    int vh = b.value({2, 3}), va = b.value({2, 3}), vr = b.value({2, 3});
    int vc = b.value({3}), vm = b.value({2, 3}), vs = b.value({2});
    int src = b.source("model.onnx");
    b.input("x:0", vx, {2, 4});
    b.weight("fc1.weight", vw, src, {4, 3});
    b.weight("fc1.bias", vb, src, {3});
    b.constantF32(vc, c);
    b.op("Gemm", {vx, vw, vb}, {vh}, "/fc1/Gemm");
    PlanBuilder::attrStrings(b.op("AllReduce", {vh}, {va}), "axes", {"x"});
    b.op("Relu", {va}, {vr});
    b.op("Mul", {vr, vc}, {vm});
    plan::Op &sum = b.op("ReduceSum", {vm}, {vs});
    PlanBuilder::attrInts(sum, "axes", {-1});
    PlanBuilder::attrInt(sum, "keepdims", 0);
    b.output("out/sum", vs, {2});
    b.save(dir + "/mlp.plan");
    ::mkdir((dir + "/in").c_str(), 0755);
    writeNpy(dir + "/in/x_0.npy", x);
  }

  RunOptions options() {
    RunOptions o;
    o.planPath = dir + "/mlp.plan";
    o.inputsDir = dir + "/in";
    o.outputsDir = dir + "/out/nested";
    return o;
  }

  std::string agreedError(const RunOptions &o) {
    try {
      runPlan(o);
    } catch (const AgreedError &e) {
      return e.what();
    }
    return "";
  }

  std::string dir;
  Tensor x, w1, b1;
  std::vector<float> c;
  PlanBuilder b{{{"x", 1}}};
};

} // namespace

TEST_F(RunPlanTest, RunsAndWritesOutputs) {
  RunSummary s = runPlan(options());
  EXPECT_EQ(s.worldSize, 1);
  EXPECT_EQ(s.numOps, 5u);
  Tensor out = readNpy(dir + "/out/nested/out_sum.npy");
  ASSERT_EQ(out.shape(), (Shape{2}));
  std::vector<double> ref;
  for (int i = 0; i < 2; ++i) {
    double total = 0;
    for (int j = 0; j < 3; ++j) {
      double h = b1.data<float>()[j];
      for (int k = 0; k < 4; ++k)
        h += double(x.data<float>()[i * 4 + k]) * w1.data<float>()[k * 3 + j];
      total += std::max(h, 0.0) * c[j];
    }
    ref.push_back(total);
  }
  expectAllNear(out, ref, 1e-5);
}

TEST_F(RunPlanTest, ReportsMissingAndMismatchedInputs) {
  RunOptions o = options();
  o.inputsDir = dir + "/nowhere";
  std::string msg = agreedError(o);
  EXPECT_NE(msg.find("input 'x:0': cannot open input file " + dir +
                     "/nowhere/x_0.npy"),
            std::string::npos)
      << msg;

  writeNpy(dir + "/in/x_0.npy", Tensor(DType::F32, {3, 4}));
  msg = agreedError(options());
  EXPECT_NE(msg.find(dir + "/in/x_0.npy is f32[3, 4], expected f32[2, 4]"),
            std::string::npos)
      << msg;
  writeNpy(dir + "/in/x_0.npy", Tensor(DType::I64, {2, 4}));
  msg = agreedError(options());
  EXPECT_NE(msg.find("is i64[2, 4], expected f32[2, 4]"), std::string::npos)
      << msg;
}

TEST_F(RunPlanTest, ReportsWeightProblems) {
  b.prog->mutable_weights(1)->set_initializer("fc9.bias");
  b.save(dir + "/mlp.plan");
  std::string msg = agreedError(options());
  EXPECT_NE(msg.find("weight 'fc9.bias': initializer 'fc9.bias' not found in "
                     "weight file " +
                     dir + "/model.onnx"),
            std::string::npos)
      << msg;

  writeFile(dir + "/model.onnx", "this is not an onnx model");
  msg = agreedError(options());
  EXPECT_NE(msg.find(dir + "/model.onnx"), std::string::npos) << msg;
}

TEST_F(RunPlanTest, ReportsKernelErrorsWithTheOp) {
  // Gather with an index beyond the data: found while running.
  PlanBuilder g({});
  int data = g.value({3, 2}), idx = g.value({2}, plan::I64),
      out = g.value({2, 2});
  g.input("data", data, {3, 2});
  g.input("idx", idx, {2}, {}, plan::I64);
  g.op("Gather", {data, idx}, {out}, "/emb/Gather");
  g.output("out", out, {2, 2});
  g.save(dir + "/gather.plan");
  writeNpy(dir + "/in/data.npy", Tensor(DType::F32, {3, 2}));
  writeNpy(dir + "/in/idx.npy", makeTensor<int64_t>({2}, {0, 3}));
  RunOptions o = options();
  o.planPath = dir + "/gather.plan";
  try {
    runPlan(o);
    FAIL();
  } catch (const AgreedError &e) {
    FAIL() << "kernel errors are not agreed: " << e.what();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("op #0 '/emb/Gather' (Gather): "
                                         "index 3"),
              std::string::npos)
        << e.what();
  }
}

//===----------------------------------------------------------------------===//
// Format version 2: micro-batches, tasks and transfers in a world of one
//===----------------------------------------------------------------------===//

namespace {

/// Runs and returns the message of the AgreedError, or "".
std::string agreedErrorOf(const RunOptions &o) {
  try {
    runPlan(o);
  } catch (const AgreedError &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(RunPlanV2, RunsMicroBatchesTasksAndTransfersToItself) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  std::string dir = makeTempDir();
  std::mt19937 rng(5);
  Tensor X = randomF32({4, 3}, rng), W = randomF32({3, 2}, rng);

  // Task a: h = x @ w, sent (transfer 1) to task b of the same rank; task b:
  // y = relu(received h) + h (h also read directly, across tasks).
  PlanBuilder b({{"world", 1}});
  b.worldOf(1);
  b.place({{"mb", 2}, {"x", 1}}, 0, 0, 2);
  int vx = b.value({2, 3}), vw = b.value({3, 2}), vh = b.value({2, 2});
  int vr = b.value({2, 2}), vrelu = b.value({2, 2}), vy = b.value({2, 2});
  b.input("x", vx, {4, 3}, {{"mb"}, {}});
  b.constantF32(vw, toVector<float>(W));
  PlanBuilder::Side self{{{"x", 1}}, {}, 0, 0};
  b.op("MatMul", {vx, vw}, {vh}, "mm").set_task_graph("a");
  b.send(vh, 1, {2, 2}, self, self, "send").set_task_graph("a");
  b.recv(vr, 1, {2, 2}, self, self, "recv").set_task_graph("b");
  b.op("Relu", {vr}, {vrelu}, "relu").set_task_graph("b");
  b.op("Add", {vrelu, vh}, {vy}, "add").set_task_graph("b");
  b.output("y", vy, {4, 2}, {{"mb"}, {}});
  b.output("w", vw, {3, 2});
  b.prog->add_tasks("a");
  b.prog->add_tasks("b");
  // a0, (a backward entry, skipped), a1, b0, b1.
  for (auto [task, mb, backward] :
       std::vector<std::tuple<int, int, bool>>{{0, 0, false},
                                               {1, 0, true},
                                               {0, 1, false},
                                               {1, 0, false},
                                               {1, 1, false}}) {
    plan::ScheduleStep *s = b.prog->add_schedule();
    s->set_task(task);
    s->set_micro_batch(mb);
    s->set_backward(backward);
  }
  b.plan.mutable_pipeline()->set_schedule("gpipe");
  b.plan.mutable_pipeline()->set_stages(1);
  b.plan.mutable_pipeline()->set_micro_batches(2);
  b.save(dir + "/mb.plan");
  ::mkdir((dir + "/in").c_str(), 0755);
  writeNpy(dir + "/in/x.npy", X);

  RunOptions o;
  o.planPath = dir + "/mb.plan";
  o.inputsDir = dir + "/in";
  o.outputsDir = dir + "/out";
  o.tracePath = dir + "/traces/run.json";
  o.steps = 2;
  RunSummary s = runPlan(o);
  EXPECT_EQ(s.bubbleExpected, 0.0);
  EXPECT_GE(s.bubbleMeasured, 0.0);

  std::vector<double> ref;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      double h = 0;
      for (int k = 0; k < 3; ++k)
        h += double(X.data<float>()[i * 3 + k]) * W.data<float>()[k * 2 + j];
      ref.push_back(std::max(h, 0.0) + h);
    }
  expectAllNear(readNpy(dir + "/out/y.npy"), ref, 1e-5);
  EXPECT_EQ(toVector<float>(readNpy(dir + "/out/w.npy")), toVector<float>(W));

  std::string trace = readFile(o.tracePath);
  for (const char *text :
       {"{\"traceEvents\": [", "\"rank 0 (stage 0)\"", "\"name\": \"F0 a\"",
        "\"name\": \"F1 b\"", "\"name\": \"Send 1\"", "\"name\": \"Recv 1\"",
        "\"micro_batch\": 1", "\"ph\": \"X\"", "\"bytes\": 16"})
    EXPECT_NE(trace.find(text), std::string::npos) << text << "\n" << trace;

  // The CUDA backend runs pipelined plans too: without a GPU, the device
  // does not start.
  o.backend = "cuda";
  EXPECT_NE(agreedErrorOf(o).find("no CUDA device"), std::string::npos)
      << agreedErrorOf(o);
}
