//===- CollectiveTest.cpp - Collectives on 4 MPI ranks ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Run by ctest under `mpiexec -np 4` (shoal-runtime-mpi-tests); in a world
// of any other size these tests skip. Checks use EXPECT (not ASSERT) before
// collectives so that one failing rank does not leave the others waiting.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "CommunicatorSuite.h"
#include "Npy.h"
#include "TestUtil.h"
#include "cpu/Kernels.h"
#include "shoal/Runtime/Runtime.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

class CollectiveTest : public ::testing::Test {
protected:
  void SetUp() override {
    ensureMpi();
    if (worldSize() != 4)
      GTEST_SKIP() << "needs 4 MPI ranks (run by shoal-runtime-mpi-tests)";
    rank = worldRank();
  }

  /// A folder made by rank 0 and shared with every rank.
  std::string sharedTempDir() {
    std::string dir = rank == 0 ? makeTempDir() : std::string();
    int len = static_cast<int>(dir.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(len);
    MPI_Bcast(dir.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    return dir;
  }

  int rank = 0;
  // 2 x 2 mesh: rank = 2 * x + y.
  Mesh mesh{{"x", "y"}, {2, 2}};
};

} // namespace

TEST_F(CollectiveTest, MpiCommunicatorRunsEveryOperation) {
  EXPECT_EQ(mpiWorld().name(), "mpi");
  runCommunicatorSuite(mpiWorld());
}

TEST_F(CollectiveTest, MpiCommRunsAsynchronousCollectives) {
  runCommSuite(mpiWorld());
}

TEST_F(CollectiveTest, MpiCountsOverIntMaxAreErrors) {
  Communicator &c = mpiWorld();
  std::size_t huge = std::size_t(3) << 30;
  // Refused before any buffer is touched.
  EXPECT_THROW(c.allGather(nullptr, nullptr, huge), Error);
  EXPECT_THROW(c.allToAll(nullptr, nullptr, huge), Error);
  EXPECT_THROW(c.broadcast(nullptr, huge, 0), Error);
  EXPECT_THROW(c.send(nullptr, huge, 0, 1), Error);
  EXPECT_THROW(c.reduceScatter(nullptr, nullptr, int64_t(huge), DType::F32),
               Error);
  EXPECT_THROW(c.allGatherV(nullptr, nullptr, {huge, 1, 1, 1}), Error);
  c.barrier();
}

TEST_F(CollectiveTest, AllReduceSumsOverGroups) {
  Comm comm(mpiWorld(), mesh);
  Tensor in = makeTensor<float>({2}, {float(rank + 1), float(10 * rank)});
  Tensor out(DType::F32, {2});
  // Over x: groups {0, 2} and {1, 3}.
  comm.allReduce(in, out, {0});
  float expectX[4][2] = {{4, 20}, {6, 40}, {4, 20}, {6, 40}};
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{expectX[rank][0], expectX[rank][1]}));
  // Over y: groups {0, 1} and {2, 3}.
  comm.allReduce(in, out, {1});
  float expectY[4][2] = {{3, 10}, {3, 10}, {7, 50}, {7, 50}};
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{expectY[rank][0], expectY[rank][1]}));
  // Over both: everyone.
  comm.allReduce(in, out, {0, 1});
  EXPECT_EQ(toVector<float>(out), (std::vector<float>{10, 60}));
  // Integers too.
  Tensor i = makeTensor<int64_t>({1}, {int64_t(1) << (rank + 40)});
  Tensor io(DType::I64, {1});
  comm.allReduce(i, io, {0, 1});
  EXPECT_EQ(io.data<int64_t>()[0], int64_t(15) << 40);
}

TEST_F(CollectiveTest, AllGatherOrdersBlocksRowMajorOverTheListedAxes) {
  Comm comm(mpiWorld(), mesh);
  // Each rank holds [2, 1] = {rank*10, rank*10 + 1}.
  Tensor in =
      makeTensor<float>({2, 1}, {float(rank * 10), float(rank * 10 + 1)});
  // Along dim 1 over y: ranks {2x, 2x+1} side by side.
  Tensor outY(DType::F32, {2, 2});
  comm.allGather(in, outY, 1, {1});
  float b = float(rank / 2 * 2 * 10);
  EXPECT_EQ(toVector<float>(outY),
            (std::vector<float>{b, b + 10, b + 1, b + 11}));
  // Along dim 0 over (y, x): group index y*2 + x, i.e. ranks 0, 2, 1, 3.
  Tensor outYX(DType::F32, {8, 1});
  comm.allGather(in, outYX, 0, {1, 0});
  EXPECT_EQ(toVector<float>(outYX),
            (std::vector<float>{0, 1, 20, 21, 10, 11, 30, 31}));
  // Along dim 1 over (x, y): ranks 0, 1, 2, 3.
  Tensor outXY(DType::F32, {2, 4});
  comm.allGather(in, outXY, 1, {0, 1});
  EXPECT_EQ(toVector<float>(outXY),
            (std::vector<float>{0, 10, 20, 30, 1, 11, 21, 31}));
}

TEST_F(CollectiveTest, ReduceScatterKeepsThisRanksBlockOfTheSum) {
  Comm comm(mpiWorld(), mesh);
  // Each rank holds [5, 1] = rank + {0, 1, 2, 3, 4}; the sum over all four
  // ranks is 6 + 4 * {0, ..., 4}. Over (x, y): blocks of ceil(5 / 4) = 2
  // rows, the last ones past the end zero-padded.
  std::vector<float> mine;
  for (int i = 0; i < 5; ++i)
    mine.push_back(float(rank + i));
  Tensor in = makeTensor<float>({5, 1}, mine);
  Tensor out(DType::F32, {2, 1});
  comm.reduceScatter(in, out, 0, {0, 1});
  std::vector<float> expect;
  for (int r = 2 * rank; r < 2 * rank + 2; ++r)
    expect.push_back(r < 5 ? float(6 + 4 * r) : 0.f);
  EXPECT_EQ(toVector<float>(out), expect);
  // Over y only: the pair {2x, 2x+1} sums, blocks of 3 rows.
  Tensor outY(DType::F32, {3, 1});
  comm.reduceScatter(in, outY, 0, {1});
  int x = rank / 2, y = rank % 2;
  expect.clear();
  for (int r = 3 * y; r < 3 * y + 3; ++r)
    expect.push_back(r < 5 ? float(4 * x + 1 + 2 * r) : 0.f);
  EXPECT_EQ(toVector<float>(outY), expect);
  Tensor bad(DType::F32, {3, 1});
  EXPECT_THROW(comm.reduceScatter(in, bad, 0, {0, 1}), Error);
  EXPECT_THROW(comm.reduceScatter(in, out, 2, {0, 1}), Error);
}

TEST_F(CollectiveTest, ReduceScatterAlongAnInnerDimension) {
  Comm comm(mpiWorld(), mesh);
  // Sequence parallelism scatters [batch, sequence, hidden] along the
  // sequence. Each rank holds [2, 3, 2] with x[b][s][h] = 100 b + 10 s + h +
  // rank; the sum over all four is 4 x + 6. Blocks of ceil(3 / 4) = 1
  // sequence entry per rank, rank 3's past the end zero-padded.
  std::vector<float> mine;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      for (int h = 0; h < 2; ++h)
        mine.push_back(float(100 * b + 10 * t + h + rank));
  Tensor in = makeTensor<float>({2, 3, 2}, mine);
  Tensor out(DType::F32, {2, 1, 2});
  comm.reduceScatter(in, out, 1, {0, 1});
  std::vector<float> expect;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      expect.push_back(rank < 3 ? float(4 * (100 * b + 10 * rank + h) + 6)
                                : 0.f);
  EXPECT_EQ(toVector<float>(out), expect);
  // Over y only (pairs {2x, 2x+1}): blocks of 2, the second one padded.
  Tensor outY(DType::F32, {2, 2, 2});
  comm.reduceScatter(in, outY, 1, {1});
  int x = rank / 2, y = rank % 2;
  expect.clear();
  for (int b = 0; b < 2; ++b)
    for (int t = 2 * y; t < 2 * y + 2; ++t)
      for (int h = 0; h < 2; ++h)
        expect.push_back(t < 3 ? float(2 * (100 * b + 10 * t + h) + 4 * x + 1)
                               : 0.f);
  EXPECT_EQ(toVector<float>(outY), expect);
}

TEST_F(CollectiveTest, AllToAllTradesOneSplitDimensionForAnother) {
  Comm comm(mpiWorld(), mesh);
  // G[i][j] = 10 i + j, 4 x 4. Rank r holds row r (tokens split over all
  // four ranks) and gets column r (experts split) back.
  std::vector<float> row(4);
  for (int j = 0; j < 4; ++j)
    row[j] = float(rank * 10 + j);
  Tensor in = makeTensor<float>({1, 4}, row);
  Tensor out(DType::F32, {4, 1});
  comm.allToAll(in, out, /*splitDim=*/1, /*concatDim=*/0, {0, 1});
  EXPECT_EQ(toVector<float>(out),
            (std::vector<float>{float(rank), float(10 + rank), float(20 + rank),
                                float(30 + rank)}));
  // And back: column r split into rows again restores the row.
  Tensor back(DType::F32, {1, 4});
  comm.allToAll(out, back, /*splitDim=*/0, /*concatDim=*/1, {0, 1});
  EXPECT_EQ(toVector<float>(back), row);
  // Over y only (pairs {2x, 2x+1}): rank holds [2, 2] and trades dims.
  Tensor in2 =
      makeTensor<float>({2, 2}, {float(rank * 4), float(rank * 4 + 1),
                                 float(rank * 4 + 2), float(rank * 4 + 3)});
  Tensor out2(DType::F32, {4, 1});
  comm.allToAll(in2, out2, 1, 0, {1});
  int y = rank % 2, first = rank - y;
  EXPECT_EQ(toVector<float>(out2),
            (std::vector<float>{float(first * 4 + y), float(first * 4 + 2 + y),
                                float((first + 1) * 4 + y),
                                float((first + 1) * 4 + 2 + y)}));
}

TEST_F(CollectiveTest, LocalSliceTakesThisRanksBlock) {
  Comm comm(mpiWorld(), mesh);
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i)
    v[i] = float(i);
  Tensor full = makeTensor<float>({4, 4}, v);
  // Rows over (y, x): block index y*2 + x.
  Tensor rows(DType::F32, {1, 4});
  std::vector<int> axes = {1, 0};
  cpu::sliceBlock(full, 0, 4, comm.groupIndex(axes), rows);
  int x = rank / 2, y = rank % 2, blk = y * 2 + x;
  EXPECT_EQ(toVector<float>(rows),
            (std::vector<float>{float(blk * 4), float(blk * 4 + 1),
                                float(blk * 4 + 2), float(blk * 4 + 3)}));
  // Columns over x.
  Tensor cols(DType::F32, {4, 2});
  cpu::sliceBlock(full, 1, 2, comm.groupIndex({0}), cols);
  EXPECT_EQ(cols.data<float>()[0], float(2 * x));
  EXPECT_EQ(cols.data<float>()[7], float(12 + 2 * x + 1));
}

TEST_F(CollectiveTest, RunsAShardedPlan) {
  std::string dir = sharedTempDir();
  std::mt19937 rng(21);
  Tensor X = randomF32({4, 8}, rng), W = randomF32({8, 6}, rng);
  PlanBuilder b({{"x", 2}, {"y", 2}});
  int vx = b.value({2, 8}), vw = b.value({4, 6}), vxs = b.value({2, 4});
  int vp = b.value({2, 6}), vy = b.value({2, 6}), vz = b.value({4, 6});
  b.input("X", vx, {4, 8}, {{"x"}, {}});
  b.weight("W", vw, b.source(dir + "/model.onnx"), {8, 6}, {{"y"}, {}});
  plan::Op &ls = b.op("LocalSlice", {vx}, {vxs});
  PlanBuilder::attrInt(ls, "dim", 1);
  PlanBuilder::attrStrings(ls, "axes", {"y"});
  b.op("MatMul", {vxs, vw}, {vp});
  PlanBuilder::attrStrings(b.op("AllReduce", {vp}, {vy}), "axes", {"y"});
  plan::Op &ag = b.op("AllGather", {vy}, {vz});
  PlanBuilder::attrInt(ag, "dim", 0);
  PlanBuilder::attrStrings(ag, "axes", {"x"});
  b.output("Y", vy, {4, 6}, {{"x"}, {}});
  b.output("Z", vz, {4, 6});
  if (rank == 0) {
    onnx::ModelProto model;
    model.set_ir_version(8);
    onnx::TensorProto *w = model.mutable_graph()->add_initializer();
    w->set_name("W");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(8);
    w->add_dims(6);
    w->set_raw_data(
        std::string(reinterpret_cast<const char *>(W.rawData()), W.numBytes()));
    writeFile(dir + "/model.onnx", model.SerializeAsString());
    b.save(dir + "/sharded.plan");
    ::mkdir((dir + "/in").c_str(), 0755);
    writeNpy(dir + "/in/X.npy", X);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  RunOptions o;
  o.planPath = dir + "/sharded.plan";
  o.inputsDir = dir + "/in";
  o.outputsDir = dir + "/out";
  RunSummary s = runPlan(o);
  EXPECT_EQ(s.worldSize, 4);
  if (rank == 0) {
    std::vector<double> ref;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) {
        double acc = 0;
        for (int k = 0; k < 8; ++k)
          acc +=
              double(X.data<float>()[i * 8 + k]) * W.data<float>()[k * 6 + j];
        ref.push_back(acc);
      }
    expectAllNear(readNpy(dir + "/out/Y.npy"), ref, 1e-5);
    expectAllNear(readNpy(dir + "/out/Z.npy"), ref, 1e-5);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(CollectiveTest, LoadErrorsFailOnEveryRankWithoutHanging) {
  std::string dir = sharedTempDir();
  PlanBuilder b({{"x", 8}});
  int v = b.value({1});
  b.input("a", v, {8}, {{"x"}});
  b.output("a", v, {8}, {{"x"}});
  PlanBuilder good({{"x", 4}});
  int g = good.value({1});
  good.input("a", g, {4}, {{"x"}});
  good.output("a", g, {4}, {{"x"}});
  if (rank == 0) {
    b.save(dir + "/eight.plan");
    good.save(dir + "/four.plan");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  RunOptions o;
  o.planPath = dir + "/eight.plan";
  o.inputsDir = dir;
  o.outputsDir = dir + "/out";
  std::string msg;
  try {
    runPlan(o);
  } catch (const AgreedError &e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "plan " + dir +
                     "/eight.plan is for a world of 8 ranks, but "
                     "this run has 4 (start it with mpirun -np 8)");
  // A missing input: the same message on every rank.
  o.planPath = dir + "/four.plan";
  msg.clear();
  try {
    runPlan(o);
  } catch (const AgreedError &e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("input 'a': cannot open input file " + dir + "/a.npy"),
            std::string::npos)
      << msg;
}

// Two programs (ranks 0-1 and 2-3, or interleaved 0, 2 and 1, 3) over two
// micro-batches: the first sends its input, columns over x, to the second,
// which wants rows over y and outputs twice what it received.
TEST_F(CollectiveTest, PipelineSendsMicroBatchesBetweenPrograms) {
  for (bool interleaved : {false, true}) {
    std::string dir = sharedTempDir();
    std::mt19937 rng(8);
    Tensor X = randomF32({4, 6}, rng);
    PlanBuilder b = twoProgramPlan();
    if (interleaved) {
      // Program k on ranks k and k + 2.
      for (int k = 0; k < 2; ++k) {
        plan::Program *p = b.plan.mutable_programs(k);
        p->mutable_placement()->set_offset(k);
        p->mutable_placement()->set_stride(2);
        for (int j = 0; j < 2; ++j) {
          plan::Transfer *t =
              b.plan.mutable_programs(j)->mutable_ops(0)->mutable_transfer();
          plan::Layout *side = k == 0 ? t->mutable_src() : t->mutable_dst();
          side->mutable_placement()->set_offset(k);
          side->mutable_placement()->set_stride(2);
        }
      }
    }
    if (rank == 0) {
      b.save(dir + "/pipe.plan");
      ::mkdir((dir + "/in").c_str(), 0755);
      writeNpy(dir + "/in/x.npy", X);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    RunOptions o;
    o.planPath = dir + "/pipe.plan";
    o.inputsDir = dir + "/in";
    o.outputsDir = dir + "/out";
    o.tracePath = dir + "/trace.json";
    RunSummary s = runPlan(o);
    EXPECT_EQ(s.bubbleExpected, 0.5);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      Tensor y = readNpy(dir + "/out/y.npy");
      std::vector<float> expect = toVector<float>(X);
      for (float &v : expect)
        v *= 2;
      EXPECT_EQ(y.shape(), (Shape{4, 6}));
      EXPECT_EQ(toVector<float>(y), expect) << "interleaved " << interleaved;
      std::string trace = readFile(dir + "/trace.json");
      int second = interleaved ? 1 : 2;
      for (std::string text :
           {std::string("\"rank 0 (stage 0)\""),
            "\"rank " + std::to_string(second) + " (stage 1)\"",
            std::string("\"name\": \"Send 7\""),
            std::string("\"name\": \"Recv 7\""),
            std::string("\"name\": \"F1 task0\"")})
        EXPECT_NE(trace.find(text), std::string::npos) << text;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}
