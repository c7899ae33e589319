//===- BackendTest.cpp - Arena planning, backend choice, catalog -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"
#include "BackendRegistry.h"
#include "Device.h"
#include "MemoryPlan.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "PollWait.h"
#include "shoal/Runtime/Runtime.h"
#include "shoal/Schema/DeviceCatalog.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

/// x[8,16] -> Relu -> Exp -> Reshape[128] -> Tanh -> y, plus a side branch
/// Sigmoid(x) added back at the end, so lifetimes overlap in several ways.
LoadedPlan chainPlan() {
  PlanBuilder b({{"x", 1}});
  int x = b.value({8, 16});
  int r = b.value({8, 16});
  int e = b.value({8, 16});
  int s = b.value({8, 16});
  int f = b.value({128});
  int t = b.value({128});
  int g = b.value({128});
  int y = b.value({128});
  b.input("x", x, {8, 16}, {{}, {}});
  b.op("Relu", {x}, {r});
  b.op("Sigmoid", {x}, {s});
  b.op("Exp", {r}, {e});
  auto &reshape = b.op("Reshape", {e}, {f});
  PlanBuilder::attrInts(reshape, "shape", {128});
  b.op("Tanh", {f}, {t});
  auto &reshape2 = b.op("Reshape", {s}, {g});
  PlanBuilder::attrInts(reshape2, "shape", {128});
  b.op("Add", {t, g}, {y});
  b.output("y", y, {128}, {{}});
  return checkPlan(b.plan, "test.plan", 1);
}

std::size_t bytesOf(const LoadedPlan &p, int v) {
  return (p.values[v].numBytes() + 255) / 256 * 256;
}

} // namespace

TEST(MemoryPlan, NoTwoLiveBuffersOverlap) {
  LoadedPlan p = chainPlan();
  MemoryPlan mp = planMemory(p);
  std::vector<int> arena;
  for (std::size_t v = 0; v < p.values.size(); ++v)
    if (mp.offset[v] >= 0)
      arena.push_back(static_cast<int>(v));
  ASSERT_FALSE(arena.empty());
  for (int a : arena) {
    EXPECT_LE(mp.offset[a] + bytesOf(p, a), mp.arenaBytes);
    EXPECT_EQ(mp.offset[a] % 256, 0);
    for (int b : arena) {
      if (a >= b)
        continue;
      bool liveTogether =
          mp.firstUse[a] <= mp.lastUse[b] && mp.firstUse[b] <= mp.lastUse[a];
      bool overlap = mp.offset[a] < mp.offset[b] + (int64_t)bytesOf(p, b) &&
                     mp.offset[b] < mp.offset[a] + (int64_t)bytesOf(p, a);
      EXPECT_FALSE(liveTogether && overlap)
          << "values " << a << " and " << b << " share memory while both live";
    }
  }
}

TEST(MemoryPlan, ReusesMemoryAndAliasesReshapes) {
  LoadedPlan p = chainPlan();
  MemoryPlan mp = planMemory(p);
  // The input is persistent, outside the arena.
  EXPECT_EQ(mp.offset[0], -1);
  EXPECT_EQ(mp.persistentBytes, bytesOf(p, 0));
  // Reshape results share their input's buffer, which then lives until the
  // alias's last reader.
  EXPECT_EQ(mp.aliasOf[4], 2);
  EXPECT_EQ(mp.offset[4], -1);
  EXPECT_EQ(mp.aliasOf[6], 3);
  EXPECT_GE(mp.lastUse[3], 6); // Sigmoid's result lives to the final Add
  // Relu's result dies at Exp (op 2); its memory is reused.
  EXPECT_LT(mp.arenaBytes, mp.unsharedBytes);
  // Every op result is 512 bytes: at most 4 are alive at once here.
  EXPECT_LE(mp.arenaBytes, 4u * 512u);
}

// Weight gradients on their way to the optimizer: the optimizer's operand
// and whatever only adds, reduces, reshapes, casts or slices into it (a
// shared weight's two uses summed, one of them all-reduced), but not the
// activations the products read, nor a gradient something else reads too.
TEST(MemoryPlan, FindsTheWeightGradientsOnTheirWayToTheOptimizer) {
  LoadedPlan p;
  p.values.resize(11);
  auto op = [&](OpKind kind, std::vector<int> in, std::vector<int> out) {
    OpInfo o;
    o.kind = kind;
    o.index = static_cast<int>(p.ops.size());
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    p.ops.push_back(std::move(o));
  };
  // 0 x, 1 w, 2 m, 3 v (from outside the ops).
  op(OpKind::MatMul, {0, 1}, {4});     // h: activation
  op(OpKind::Tanh, {4}, {5});          // a: activation
  op(OpKind::MatMul, {0, 5}, {6});     // first use's gradient
  op(OpKind::MatMul, {5, 0}, {7});     // second use's, partial
  op(OpKind::AllReduce, {7}, {8});     // summed over ranks
  op(OpKind::Add, {6, 8}, {9});        // the weight's gradient
  op(OpKind::AdamW, {1, 9, 2, 3}, {}); // reads it
  op(OpKind::Exp, {7}, {10});          // 7 is read by another op too
  std::vector<bool> g = gradientTransients(p);
  EXPECT_EQ(g, (std::vector<bool>{false, false, false, false, false, false,
                                  true, false, true, true, false}));
  p.ops.pop_back();
  g = gradientTransients(p);
  EXPECT_TRUE(g[7]);
  EXPECT_FALSE(g[5]);

  // A pipeline stage's step sum over micro-batches that it sends (a tied
  // weight's gradient, to the stage updating it), and the product summed
  // into it; a value sent without such a sum is an activation.
  LoadedPlan q;
  q.mesh = Mesh({"mb", "dp"}, {2, 1}, /*hasMicroBatchAxis=*/true);
  q.values.resize(6);
  auto qop = [&](OpKind kind, std::vector<int> in, std::vector<int> out,
                 std::vector<int> axes = {}) {
    OpInfo o;
    o.kind = kind;
    o.index = static_cast<int>(q.ops.size());
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.attrs.meshAxes = std::move(axes);
    q.ops.push_back(std::move(o));
  };
  qop(OpKind::MatMul, {0, 1}, {2});                            // its gradient
  qop(OpKind::AllReduce, {2}, {3}, {q.mesh.microBatchAxis()}); // step sum
  qop(OpKind::Send, {3}, {});
  qop(OpKind::Tanh, {0}, {4}); // an activation
  qop(OpKind::Send, {4}, {});
  g = gradientTransients(q);
  EXPECT_EQ(g, (std::vector<bool>{false, false, true, true, false, false}));
}

// A host wait on device work (NcclWork::wait, with the communicator's
// asynchronous error as `failure`): returns when the work is ready, and ends
// with the failure as soon as one is reported, however long the work would
// have taken (a dead peer's collective never completes).
TEST(PollWait, ReturnsWhenReadyAndThrowsOnAsyncFailure) {
  int polls = 0;
  long n = pollUntilReady([&] { return ++polls == 200; },
                          [] { return std::string(); }, "op",
                          std::chrono::microseconds(0));
  EXPECT_EQ(n, 200);
  // The failure is asked every `checkEvery` (here at every poll).
  int failureChecks = 0;
  try {
    pollUntilReady([] { return false; },
                   [&] {
                     return ++failureChecks < 100
                                ? std::string()
                                : std::string("the peer is gone");
                   },
                   "NCCL operation", std::chrono::microseconds(0));
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "NCCL operation: the peer is gone");
  }
  EXPECT_EQ(failureChecks, 100);
  // Work ready before the first check never asks.
  failureChecks = 0;
  pollUntilReady([] { return true; },
                 [&] {
                   ++failureChecks;
                   return std::string();
                 },
                 "op", std::chrono::seconds(1));
  EXPECT_EQ(failureChecks, 0);
}

// The data movement around device-buffer collectives (Executor, under
// NCCL): packBlocks cuts along a dimension into ceil-sized dense blocks,
// the last zero-padded, as Comm::reduceScatter packs; concatBlocks puts
// gathered blocks side by side. The host defaults, on the CPU device.
TEST(Device, PacksAndConcatenatesBlocksAsTheCollectivesDo) {
  registerAllBackends();
  std::unique_ptr<Device> cpu =
      makeDevice(BackendKind::CPU, 0, Precision::FP32);
  // [2, 5] along dim 1 into 2 blocks of 3: [[0 1 2][5 6 7]] then
  // [[3 4 0][8 9 0]].
  Tensor in(DType::F32, {2, 5});
  for (int i = 0; i < 10; ++i)
    in.data<float>()[i] = float(i);
  Tensor packed(DType::F32, {12});
  cpu->packBlocks(in, 2, 1, packed);
  const float want[] = {0, 1, 2, 5, 6, 7, 3, 4, 0, 8, 9, 0};
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(packed.data<float>()[i], want[i]) << i;
  // Two gathered [2, 2] blocks placed along dim 1 of [2, 4].
  Tensor blocks(DType::F32, {8});
  for (int i = 0; i < 8; ++i)
    blocks.data<float>()[i] = float(i);
  Tensor out(DType::F32, {2, 4});
  cpu->concatBlocks(blocks, 2, 1, out);
  const float cat[] = {0, 1, 4, 5, 2, 3, 6, 7};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out.data<float>()[i], cat[i]) << i;
}

TEST(Backend, ParsesNamesAndPrecisions) {
  BackendKind k;
  EXPECT_TRUE(parseBackend("cuda", k));
  EXPECT_EQ(k, BackendKind::CUDA);
  EXPECT_TRUE(parseBackend("cpu", k));
  EXPECT_EQ(k, BackendKind::CPU);
  EXPECT_FALSE(parseBackend("gpu", k));
  Precision pr;
  EXPECT_TRUE(parsePrecision("bf16", pr));
  EXPECT_EQ(pr, Precision::BF16);
  EXPECT_FALSE(parsePrecision("fp8", pr));
}

TEST(Backend, CudaKernelsAreARegistryLookup) {
  registerAllBackends();
  registerBackendKernels(BackendKind::CPU);
  registerBackendKernels(BackendKind::CUDA);
  EXPECT_NE(findKernel(OpKind::Add, BackendKind::CPU), nullptr);
  EXPECT_NE(findKernel(OpKind::LayerNormalization, BackendKind::CPU), nullptr);
  // The CUDA backend has the matrix products and elementwise ops; the
  // scheduler runs the rest on the CPU. A build without CUDA has none.
  bool cuda = findBackend(BackendKind::CUDA) != nullptr;
  EXPECT_EQ(findKernel(OpKind::MatMul, BackendKind::CUDA) != nullptr, cuda);
  EXPECT_EQ(findKernel(OpKind::Add, BackendKind::CUDA) != nullptr, cuda);
  EXPECT_EQ(findKernel(OpKind::Send, BackendKind::CUDA), nullptr);
}

namespace {
/// The lines of /proc/self/maps that name one of the CUDA libraries or
/// shoal's CUDA module.
std::string cudaMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line))
    for (const char *lib : {"libcudart", "libcublas", "libnccl", "libcuda.",
                            "libshoal_cuda_backend"})
      if (line.find(lib) != std::string::npos) {
        found += line + "\n";
        break;
      }
  return found;
}
} // namespace

TEST(Backend, CpuRunsMapNoCudaLibrary) {
  // In a fresh process: the CPU backend's device and kernels map none of
  // the CUDA libraries; asking for the CUDA backend loads its module (in a
  // build with one), which brings them.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        registerAllBackends();
        std::unique_ptr<Device> cpu =
            makeDevice(BackendKind::CPU, 0, Precision::FP32);
        registerBackendKernels(BackendKind::CPU);
        std::string mapped = cudaMappings();
        if (!mapped.empty()) {
          std::fprintf(stderr, "mapped on the CPU:\n%s", mapped.c_str());
          std::exit(1);
        }
        bool cuda = findBackend(BackendKind::CUDA) != nullptr;
        registerBackendKernels(BackendKind::CUDA);
        mapped = cudaMappings();
        bool module = mapped.find("libshoal_cuda_backend") != std::string::npos;
        std::exit(cuda == module && (!cuda || findKernel(OpKind::MatMul,
                                                         BackendKind::CUDA))
                      ? 0
                      : 2);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(DeviceCatalog, MatchesReportedNames) {
  const DeviceSpec *h100 = findDevice("NVIDIA H100 80GB HBM3");
  ASSERT_NE(h100, nullptr);
  EXPECT_STREQ(h100->name, "H100");
  EXPECT_DOUBLE_EQ(peakTflops(*h100, Precision::BF16), 989.4);
  const DeviceSpec *pcie = findDevice("NVIDIA H100 PCIe");
  ASSERT_NE(pcie, nullptr);
  EXPECT_STREQ(pcie->name, "H100 PCIe");
  const DeviceSpec *a10 = findDevice("NVIDIA A10");
  ASSERT_NE(a10, nullptr);
  EXPECT_STREQ(a10->name, "A10");
  EXPECT_STREQ(findDevice("NVIDIA A100-SXM4-80GB")->name, "A100");
  EXPECT_EQ(findDevice("Intel Xeon"), nullptr);
}

namespace {
/// A saved plan with an op (Cos) the CUDA backend has no kernel for.
std::string saveFallbackPlan(const std::string &dir) {
  PlanBuilder b({{"x", 1}});
  int x = b.value({4, 8});
  int g = b.value({8});
  int y = b.value({4, 8});
  int c = b.value({4, 8});
  b.input("x", x, {4, 8}, {{}, {}});
  b.constantF32(g, std::vector<float>(8, 1.f));
  // The CUDA backend has no Cos kernel.
  b.op("Cos", {x}, {c}, "/act/Cos");
  b.op("Mul", {c, g}, {y});
  b.output("y", y, {4, 8}, {{}, {}});
  std::string path = dir + "/ln.plan";
  b.save(path);
  std::mt19937 rng(1);
  writeNpy(dir + "/x.npy", randomF32({4, 8}, rng));
  return path;
}

std::string runError(const RunOptions &o) {
  try {
    runPlan(o);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(Backend, StrictRefusesCpuFallbacksBeforeTouchingTheGpu) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "needs a world of one";
  std::string dir = makeTempDir();
  RunOptions o;
  o.planPath = saveFallbackPlan(dir);
  o.inputsDir = dir;
  o.outputsDir = dir + "/out";
  o.backend = "cuda";
  o.strict = true;
  EXPECT_NE(runError(o).find("--strict: the CUDA backend has no kernel for op "
                             "#0 '/act/Cos' (Cos)"),
            std::string::npos)
      << runError(o);
  // The CPU backend runs it, also with --strict.
  o.backend = "cpu";
  EXPECT_EQ(runError(o), "");
}

TEST(Backend, RepeatedStepsGiveTheSameOutputs) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "needs a world of one";
  std::string dir = makeTempDir();
  RunOptions o;
  o.planPath = saveFallbackPlan(dir);
  o.inputsDir = dir;
  o.outputsDir = dir + "/one";
  RunSummary once = runPlan(o);
  o.outputsDir = dir + "/many";
  o.steps = 3;
  o.warmup = 1;
  RunSummary many = runPlan(o);
  EXPECT_GT(many.stepSeconds, 0);
  EXPECT_EQ(once.stepFlops, 0); // no matrix products here
  EXPECT_EQ(readFile(dir + "/one/y.npy"), readFile(dir + "/many/y.npy"));
}
