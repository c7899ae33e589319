//===- CheckpointTest.cpp - Checkpoints and training runs -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Checkpoints (save/load round trips, uneven shards, resharding, atomicity,
// errors) and training runs of small hand-made plans through runPlan: --data,
// shared weight buffers, gradient accumulation over micro-batches, resuming
// bit for bit, and the errors of the training options.
//
//===----------------------------------------------------------------------===//

#include "Checkpoint.h"

#include "CheckpointUtil.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "TestUtil.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <csignal>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;
namespace fs = std::filesystem;

namespace {

/// Loads every tensor as every rank of `mesh` would and checks each block
/// against the global tensor.
void expectLoadsAsMesh(const Checkpoint &c, const Mesh &mesh,
                       const std::vector<GlobalTensor> &tensors) {
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    std::vector<int64_t> coords = mesh.coordsOf(r);
    for (const GlobalTensor &g : tensors) {
      ShardSpec spec = specOf(mesh, g.sharding);
      Shape offsets = blockOffsets(g.value.shape(), spec, mesh, coords);
      Shape local = localShape(g.value.shape(), spec, mesh);
      Tensor got = c.readBlock(g.name, g.value.type(), offsets, local);
      EXPECT_TRUE(sameBytes(got, blockOf(g.value, offsets, local)))
          << g.name << " on rank " << r << " of mesh " << mesh.str();
    }
  }
}

std::vector<GlobalTensor> sampleTensors() {
  std::mt19937 rng(3);
  return {
      {"h.0.attn.weight", randomF32({4, 6}, rng), {{"x"}, {"y"}}},
      // Uneven: 5 columns over 4 ranks (blocks of 2; the last is empty).
      {"adam.m/h.0.attn.bias", randomF32({3, 5}, rng), {{}, {"x", "y"}}},
      {"ln.scale", randomF32({5}, rng), {}},
      {"scalar", randomF32({}, rng), {}},
      {"steps", randomI64({7}, rng, -5, 5), {{"y"}}},
  };
}

} // namespace

TEST(Checkpoint, RoundTripsAndReshards) {
  std::string dir = makeTempDir() + "/ckpt";
  fs::create_directories(dir);
  Mesh saved({"x", "y"}, {2, 2});
  std::vector<GlobalTensor> tensors = sampleTensors();
  saveAsMesh(dir, 10, saved, tensors);

  EXPECT_EQ(readFile(dir + "/latest"), "step-00000010\n");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-step-00000010"));
  Checkpoint c = Checkpoint::openLatest(dir);
  EXPECT_EQ(c.folder(), dir + "/step-00000010");
  EXPECT_EQ(c.manifest().step, 10);
  EXPECT_EQ(c.manifest().worldSize, 4);
  EXPECT_EQ(c.manifest().optimizer, "adamw");
  ASSERT_EQ(c.manifest().tensors.size(), tensors.size());
  // Each distinct block once, clipped: 4 blocks of the weight; 3 of the
  // uneven bias (the fourth lies wholly in the padding), the third clipped to
  // one column; one of each replicated tensor.
  const CheckpointEntry &w = c.manifest().tensors.at("h.0.attn.weight");
  EXPECT_EQ(w.shards.size(), 4u);
  const CheckpointEntry &b = c.manifest().tensors.at("adam.m/h.0.attn.bias");
  ASSERT_EQ(b.shards.size(), 3u);
  EXPECT_EQ(b.shards[2].offset, (Shape{0, 4}));
  EXPECT_EQ(b.shards[2].shape, (Shape{3, 1}));
  EXPECT_EQ(b.shards[0].file, "adam.m_h.0.attn.bias.0.npy");
  EXPECT_EQ(readNpy(c.folder() + "/" + b.shards[2].file).shape(),
            (Shape{3, 1}));
  EXPECT_EQ(c.manifest().tensors.at("ln.scale").shards.size(), 1u);
  EXPECT_EQ(c.manifest().tensors.at("steps").shards.size(), 2u);

  // The same layout, other layouts (uneven ones too) and one rank.
  expectLoadsAsMesh(c, saved, tensors);
  std::vector<GlobalTensor> other = tensors;
  other[0].sharding = {{}, {"a"}}; // 6 columns over 3
  other[1].sharding = {{"a"}, {}}; // 3 rows over 3
  other[2].sharding = {{"a"}};     // 5 over 3: 2, 2, 1
  other[4].sharding = {{"a"}};     // 7 over 3: 3, 3, 1
  expectLoadsAsMesh(c, Mesh({"a"}, {3}), other);
  std::vector<GlobalTensor> whole = tensors;
  for (GlobalTensor &g : whole)
    g.sharding = {};
  expectLoadsAsMesh(c, Mesh(), whole);

  // Saving again at another step moves `latest`; at the same step replaces
  // the folder.
  for (GlobalTensor &g : whole)
    if (g.value.dtype() == DType::F32)
      g.value.data<float>()[0] += 1;
  saveAsMesh(dir, 12, Mesh(), whole);
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 12);
  expectLoadsAsMesh(Checkpoint::openLatest(dir), Mesh(), whole);
  saveAsMesh(dir, 12, saved, tensors);
  for (std::size_t i = 0; i < whole.size(); ++i)
    whole[i].value = tensors[i].value;
  expectLoadsAsMesh(Checkpoint::openLatest(dir), Mesh(), whole);
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().worldSize, 4);
}

TEST(Checkpoint, IgnoresLeftoversOfCrashedSaves) {
  std::string dir = makeTempDir();
  std::vector<GlobalTensor> tensors = sampleTensors();
  Mesh mesh({"x", "y"}, {2, 2});
  saveAsMesh(dir, 5, mesh, tensors);
  // A save that died before its rename, and a step folder without manifest.
  fs::create_directories(dir + "/.tmp-step-00000007");
  writeFile(dir + "/.tmp-step-00000007/manifest.json", "{broken");
  fs::create_directories(dir + "/step-00000009");
  writeNpy(dir + "/step-00000009/scalar.0.npy", tensors[3].value);
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 5);

  // Without `latest` (or with one naming a missing folder) the complete
  // step folder with the highest step wins.
  saveAsMesh(dir, 6, mesh, tensors);
  fs::remove(dir + "/latest");
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 6);
  writeFile(dir + "/latest", "step-00000042\n");
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 6);
  writeFile(dir + "/latest", "step-00000005");
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 5);
}

TEST(Checkpoint, ChecksShardsAgainstTheirChecksums) {
  std::string dir = makeTempDir() + "/c";
  std::vector<GlobalTensor> tensors = sampleTensors();
  Mesh mesh({"x", "y"}, {2, 2});
  saveAsMesh(dir, 3, mesh, tensors);
  std::string step = dir + "/step-00000003";
  Checkpoint c = Checkpoint::openLatest(dir);
  for (const auto &[name, e] : c.manifest().tensors)
    for (const CheckpointShard &s : e.shards) {
      EXPECT_TRUE(s.hasCrc) << s.file;
      EXPECT_EQ(s.crc, fileCrc32(step + "/" + s.file)) << s.file;
    }
  expectLoadsAsMesh(c, mesh, tensors);

  // A flipped bit in the data of a shard: refused, naming the file.
  std::string shard = step + "/h.0.attn.weight.3.npy";
  std::string bytes = readFile(shard);
  std::string flipped = bytes;
  flipped.back() ^= 0x10;
  writeFile(shard, flipped);
  TensorType wt{DType::F32, {4, 6}};
  Checkpoint fresh = Checkpoint::openLatest(dir);
  std::string msg = errorOf([&] { fresh.readTensor("h.0.attn.weight"); });
  EXPECT_HAS(msg, shard);
  EXPECT_HAS(msg, "but the manifest says");
  EXPECT_HAS(msg, "it changed after the save");
  // --no-verify reads it as it is.
  Checkpoint unchecked = Checkpoint::openLatest(dir);
  unchecked.setVerify(false);
  EXPECT_EQ(errorOf([&] { unchecked.readTensor("h.0.attn.weight"); }), "");
  // A shard of another checkpoint (the same shape, other values).
  std::string other = makeTempDir() + "/o";
  std::vector<GlobalTensor> changed = sampleTensors();
  changed[0].value.data<float>()[0] += 1.0f;
  saveAsMesh(other, 3, mesh, changed);
  fs::copy_file(other + "/step-00000003/h.0.attn.weight.0.npy",
                step + "/h.0.attn.weight.0.npy",
                fs::copy_options::overwrite_existing);
  writeFile(shard, bytes);
  EXPECT_HAS(errorOf([&] {
               Checkpoint::openLatest(dir).readTensor("h.0.attn.weight");
             }),
             "h.0.attn.weight.0.npy has CRC-32");

  // A shard that is a link to a file elsewhere.
  fs::remove(step + "/ln.scale.0.npy");
  fs::create_symlink(other + "/step-00000003/ln.scale.0.npy",
                     step + "/ln.scale.0.npy");
  EXPECT_HAS(
      errorOf([&] { Checkpoint::openLatest(dir).readTensor("ln.scale"); }),
      "ln.scale.0.npy is a symbolic link; a checkpoint's shards must "
      "be files of its folder");
}

TEST(Checkpoint, OpensAStepFolder) {
  std::string dir = makeTempDir();
  std::vector<GlobalTensor> tensors = sampleTensors();
  Mesh mesh({"x", "y"}, {1, 1});
  saveAsMesh(dir, 2, mesh, tensors);
  saveAsMesh(dir, 4, mesh, tensors);
  EXPECT_EQ(Checkpoint::openLatest(dir).manifest().step, 4);
  EXPECT_EQ(Checkpoint::openLatest(dir + "/step-00000002").manifest().step, 2);
}

TEST(Checkpoint, LocksTheFolderForOneJob) {
  std::string dir = makeTempDir();
  {
    CheckpointLock a(dir, "run-a");
    EXPECT_HAS(readFile(dir + "/.lock"), "run run-a host ");
    std::string msg = errorOf([&] { CheckpointLock b(dir, "run-b"); });
    EXPECT_HAS(msg, "checkpoint folder " + dir +
                        " is in use by another job (run run-a host ");
    EXPECT_HAS(msg, "give each job its own --save folder (the lock is "
                    "released when that job's rank 0 exits)");
    // The refused job left the holder's lock as it was.
    EXPECT_HAS(readFile(dir + "/.lock"), "run run-a host ");
  }
  // Released with its holder: the file stays, naming nobody.
  EXPECT_EQ(readFile(dir + "/.lock"), "");
  // What a killed run's lock file says does not matter: nobody holds it.
  writeFile(dir + "/.lock", "run old host elsewhere.example pid 1\n");
  EXPECT_EQ(errorOf([&] { CheckpointLock c(dir, "run-c"); }), "");
  // A holder in another process, killed: the kernel releases its lock
  // (even while nobody has reaped it).
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    CheckpointLock held(dir, "run-child");
    char one = 1;
    (void)!::write(ready[1], &one, 1);
    ::pause();
    ::_exit(0);
  }
  char got = 0;
  ASSERT_EQ(::read(ready[0], &got, 1), 1);
  EXPECT_HAS(errorOf([&] { CheckpointLock d(dir, "run-d"); }),
             "in use by another job (run run-child host ");
  ::kill(child, SIGKILL);
  ::usleep(100000);
  EXPECT_EQ(errorOf([&] { CheckpointLock e(dir, "run-e"); }), "");
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  // A symbolic link is not followed.
  std::string other = makeTempDir();
  fs::remove(other + "/.lock");
  fs::remove(dir + "/.lock");
  fs::create_symlink(other + "/target", dir + "/.lock");
  EXPECT_HAS(errorOf([&] { CheckpointLock f(dir, "run-f"); }),
             "cannot open the checkpoint lock " + dir +
                 "/.lock: it is a symbolic link");
  EXPECT_FALSE(fs::exists(other + "/target"));
}

TEST(Checkpoint, ReportsErrorsWithTheFileAndTensor) {
  std::string root = makeTempDir();
  EXPECT_HAS(errorOf([&] { Checkpoint::openLatest(root + "/nope"); }),
             "checkpoint folder " + root + "/nope not found");
  fs::create_directories(root + "/empty");
  EXPECT_HAS(errorOf([&] { Checkpoint::openLatest(root + "/empty"); }),
             "no checkpoint in " + root + "/empty");

  std::string dir = root + "/c";
  std::vector<GlobalTensor> tensors = sampleTensors();
  saveAsMesh(dir, 3, Mesh({"x", "y"}, {2, 2}), tensors);
  Checkpoint c = Checkpoint::openLatest(dir);
  std::string manifest = dir + "/step-00000003/manifest.json";
  TensorType wt{DType::F32, {4, 6}};
  EXPECT_HAS(errorOf([&] {
               c.readBlock("missing", wt, {0, 0}, {4, 6});
             }),
             "checkpoint " + manifest + " has no tensor 'missing'");
  EXPECT_HAS(errorOf([&] {
               c.readBlock("h.0.attn.weight", TensorType{DType::F32, {4, 7}},
                           {0, 0}, {4, 7});
             }),
             "checkpoint " + manifest +
                 ": tensor 'h.0.attn.weight' is f32[4, 6], but the plan "
                 "expects f32[4, 7]");

  // A missing and a truncated shard file.
  std::string shard = dir + "/step-00000003/h.0.attn.weight.3.npy";
  std::string bytes = readFile(shard);
  fs::remove(shard);
  std::string msg = errorOf([&] {
    c.readBlock("h.0.attn.weight", wt, {0, 0}, {4, 6});
  });
  EXPECT_HAS(msg, "tensor 'h.0.attn.weight'");
  EXPECT_HAS(msg, shard);
  writeFile(shard, bytes.substr(0, bytes.size() - 4));
  msg = errorOf([&] { c.readBlock("h.0.attn.weight", wt, {0, 0}, {4, 6}); });
  EXPECT_HAS(msg, shard);
  EXPECT_HAS(msg, "truncated");
  // Blocks that do not need the broken shard still load.
  EXPECT_EQ(errorOf([&] {
              c.readBlock("h.0.attn.weight", wt, {0, 0}, {2, 3});
            }),
            "");

  // A corrupt manifest.
  writeFile(manifest, "{\"format\": \"shoal.checkpoint\", \"version\": 1,");
  EXPECT_HAS(errorOf([&] { Checkpoint::openLatest(dir); }),
             "checkpoint manifest " + manifest + " is not valid JSON");
  writeFile(manifest, "{\"format\": \"other\", \"version\": 1, \"step\": 1, "
                      "\"tensors\": {}}");
  EXPECT_HAS(errorOf([&] { Checkpoint::openLatest(dir); }),
             "\"format\" is not \"shoal.checkpoint\"");
  // Shards that do not cover the tensor.
  writeFile(manifest,
            "{\"format\": \"shoal.checkpoint\", \"version\": 1, \"step\": 3, "
            "\"tensors\": {\"ln.scale\": {\"dtype\": \"float32\", \"shape\": "
            "[6], \"shards\": [{\"file\": \"ln.scale.0.npy\", \"offset\": "
            "[0]}]}}}");
  Checkpoint broken = Checkpoint::openLatest(dir);
  EXPECT_HAS(
      errorOf([&] {
        broken.readBlock("ln.scale", TensorType{DType::F32, {6}}, {0}, {6});
      }),
      "the shards of tensor 'ln.scale' cover 5 of the 6 elements");
}

TEST(Checkpoint, SavesUnderMpi) {
  ensureMpi();
  if (worldSize() != 1)
    GTEST_SKIP() << "runs in a world of one rank";
  std::string dir = makeTempDir() + "/mpi";
  fs::create_directories(dir);
  std::vector<GlobalTensor> tensors = sampleTensors();
  std::vector<CheckpointTensor> mine;
  for (GlobalTensor &g : tensors) {
    g.sharding.clear();
    mine.push_back({g.name, g.value.type(), ShardSpec(), g.value});
  }
  // A leftover of an earlier crash at the same step is replaced.
  fs::create_directories(dir + "/.tmp-step-00000002");
  writeFile(dir + "/.tmp-step-00000002/junk.npy", "junk");
  saveCheckpoint(dir, 2, "sgd", Mesh(), {}, mine, mpiWorld());
  Checkpoint c = Checkpoint::openLatest(dir);
  EXPECT_EQ(c.manifest().step, 2);
  EXPECT_EQ(c.manifest().optimizer, "sgd");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-step-00000002"));
  EXPECT_FALSE(fs::exists(c.folder() + "/junk.npy"));
  expectLoadsAsMesh(c, Mesh(), tensors);
}

// Under mpiexec with 4 ranks (shoal-runtime-mpi-tests): every rank writes
// its own blocks, rank 0 gathers the lists and commits; then every rank
// reads its block under another layout.
TEST(CollectiveCheckpoint, SavesOnFourRanksAndReshards) {
  ensureMpi();
  if (worldSize() != 4)
    GTEST_SKIP() << "needs 4 MPI ranks";
  int rank = worldRank();
  std::string dir = rank == 0 ? makeTempDir() + "/ckpt" : std::string();
  int len = static_cast<int>(dir.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(len);
  MPI_Bcast(dir.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0)
    fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);

  Mesh mesh({"x", "y"}, {2, 2});
  std::vector<int64_t> coords = mesh.coordsOf(rank);
  std::vector<GlobalTensor> tensors = sampleTensors();
  std::vector<CheckpointTensor> mine = blocksOfRank(mesh, coords, tensors);
  saveCheckpoint(dir, 7, "adamw", mesh, coords, mine, mpiWorld());

  Checkpoint c = Checkpoint::openLatest(dir);
  EXPECT_EQ(c.manifest().step, 7);
  EXPECT_EQ(c.manifest().worldSize, 4);
  EXPECT_EQ(c.manifest().tensors.at("h.0.attn.weight").shards.size(), 4u);
  EXPECT_EQ(c.manifest().tensors.at("ln.scale").shards.size(), 1u);
  // Rank r reads its block of a 4-way split of another dimension.
  Mesh other({"a"}, {4});
  std::vector<int64_t> at = other.coordsOf(rank);
  for (GlobalTensor g : tensors) {
    g.sharding = g.value.rank() ? std::vector<std::vector<std::string>>{{"a"}}
                                : std::vector<std::vector<std::string>>{};
    if (g.value.rank() == 2)
      g.sharding.push_back({});
    ShardSpec spec = specOf(other, g.sharding);
    Shape offsets = blockOffsets(g.value.shape(), spec, other, at);
    Shape local = localShape(g.value.shape(), spec, other);
    EXPECT_TRUE(sameBytes(c.readBlock(g.name, g.value.type(), offsets, local),
                          blockOf(g.value, offsets, local)))
        << g.name << " on rank " << rank;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

//===----------------------------------------------------------------------===//
// Training runs
//===----------------------------------------------------------------------===//

namespace {

constexpr int64_t kV = 5, kH = 3, kB = 4, kT = 3;

struct TinyLm {
  /// Micro-batches (2: format version 2 with an "mb" axis, gradients
  /// accumulated by AllReduce over "mb").
  int microBatches = 1;
  /// The optimizer updates another value of the same initializer than the
  /// forward reads (they must share one buffer).
  bool separateUpdateValue = false;
  double clipNorm = 0.5;
};

/// A one-layer language model: logits = Gather(emb, tokens) @ out.w, mean
/// cross-entropy, hand-written backward, AdamW on both weights.
PlanBuilder tinyLmPlan(const TinyLm &cfg, const std::string &onnxPath) {
  int m = cfg.microBatches;
  int64_t b = kB / m, bt = b * kT;
  PlanBuilder p({{"x", 1}});
  bool v2 = m > 1;
  if (v2) {
    p.worldOf(1);
    p.place({{"mb", m}, {"x", 1}}, 0, 0, m);
    p.prog->add_tasks("s");
    p.prog->add_tasks("s.bwd");
    p.prog->add_tasks("s.opt");
  }
  std::vector<std::vector<std::string>> batchSharding;
  if (v2)
    batchSharding = {{"mb"}, {}};
  auto task = [&](plan::Op &op, const char *name) {
    if (v2)
      op.set_task_graph(name);
  };
  int src = p.source(onnxPath);
  int tok = p.value({b, kT}, plan::I64), lab = p.value({b, kT}, plan::I64);
  p.input("tokens", tok, {kB, kT}, batchSharding, plan::I64);
  p.input("labels", lab, {kB, kT}, batchSharding, plan::I64);
  int emb = p.value({kV, kH}), w = p.value({kH, kV});
  p.weight("emb", emb, src, {kV, kH});
  p.weight("out.w", w, src, {kH, kV});
  int wUpd = w;
  if (cfg.separateUpdateValue) {
    wUpd = p.value({kH, kV});
    p.weight("out.w", wUpd, src, {kH, kV});
  }
  auto zeros = [&](const std::string &name, const Shape &shape) {
    int v = p.value(shape);
    p.weight(name, v, 0, shape);
    p.prog->mutable_weights(p.prog->weights_size() - 1)->set_zero_init(true);
    return v;
  };
  int me = zeros("adam.m/emb", {kV, kH}), ve = zeros("adam.v/emb", {kV, kH});
  int mw = zeros("adam.m/out.w", {kH, kV}),
      vw = zeros("adam.v/out.w", {kH, kV});
  int scale = p.value({}), dl = p.value({bt});
  p.constantF32(scale, {1.f / (kB * kT)});
  p.constantF32(dl, std::vector<float>(bt, 1.f / (kB * kT)));

  // Forward.
  int h = p.value({b, kT, kH}), h2 = p.value({bt, kH}),
      logits = p.value({bt, kV});
  int lab2 = p.value({bt}, plan::I64), lp = p.value({bt}), ls = p.value({});
  int lm = p.value({});
  task(p.op("Gather", {emb, tok}, {h}, "embed"), "s");
  plan::Op &r1 = p.op("Reshape", {h}, {h2}, "flat");
  PlanBuilder::attrInts(r1, "shape", {bt, kH});
  task(r1, "s");
  task(p.op("MatMul", {h2, w}, {logits}, "head"), "s");
  plan::Op &r2 = p.op("Reshape", {lab}, {lab2}, "flat_labels");
  PlanBuilder::attrInts(r2, "shape", {bt});
  task(r2, "s");
  task(p.op("SoftmaxCrossEntropy", {logits, lab2}, {lp}, "xent"), "s");
  plan::Op &sum = p.op("ReduceSum", {lp}, {ls}, "sum");
  PlanBuilder::attrInt(sum, "keepdims", 0);
  task(sum, "s");
  task(p.op("Mul", {ls, scale}, {lm}, "mean"), "s");
  int loss = lm;
  if (v2) {
    loss = p.value({});
    plan::Op &ar = p.op("AllReduce", {lm}, {loss}, "loss_acc");
    PlanBuilder::attrStrings(ar, "axes", {"mb"});
    task(ar, "s");
  }
  p.output("loss", loss, {});

  // Backward.
  int dlogits = p.value({bt, kV}), h2t = p.value({kH, bt}),
      gw = p.value({kH, kV});
  int wt = p.value({kV, kH}), dh2 = p.value({bt, kH}),
      dh = p.value({b, kT, kH});
  int gemb = p.value({kV, kH});
  task(p.op("SoftmaxCrossEntropyGrad", {logits, lab2, dl}, {dlogits}, "dxent"),
       "s.bwd");
  task(p.op("Transpose", {h2}, {h2t}, "h2t"), "s.bwd");
  task(p.op("MatMul", {h2t, dlogits}, {gw}, "dhead_w"), "s.bwd");
  task(p.op("Transpose", {w}, {wt}, "wt"), "s.bwd");
  task(p.op("MatMul", {dlogits, wt}, {dh2}, "dhead_x"), "s.bwd");
  plan::Op &r3 = p.op("Reshape", {dh2}, {dh}, "unflat");
  PlanBuilder::attrInts(r3, "shape", {b, kT, kH});
  task(r3, "s.bwd");
  task(p.op("GatherGrad", {tok, dh}, {gemb}, "dembed"), "s.bwd");
  if (v2) {
    for (int *g : {&gw, &gemb}) {
      int acc = p.value(*g == gw ? Shape{kH, kV} : Shape{kV, kH});
      plan::Op &ar = p.op("AllReduce", {*g}, {acc}, "grad_acc");
      PlanBuilder::attrStrings(ar, "axes", {"mb"});
      task(ar, "s.bwd");
      *g = acc;
    }
  }

  // Optimizer.
  for (auto [wv, g, mv, vv] : {std::tuple<int, int, int, int>{wUpd, gw, mw, vw},
                               {emb, gemb, me, ve}}) {
    plan::Op &opt = p.op("AdamW", {wv, g, mv, vv}, {}, "adamw");
    PlanBuilder::attrFloat(opt, "lr", 0.05);
    PlanBuilder::attrFloat(opt, "clip_norm", cfg.clipNorm);
    task(opt, "s.opt");
  }
  if (v2) {
    for (int j = 0; j < m; ++j) {
      auto *s = p.prog->add_schedule();
      s->set_task(0);
      s->set_micro_batch(j);
    }
    for (int j = 0; j < m; ++j) {
      auto *s = p.prog->add_schedule();
      s->set_task(1);
      s->set_micro_batch(j);
      s->set_backward(true);
    }
    auto *s = p.prog->add_schedule();
    s->set_task(2);
    s->set_micro_batch(m - 1);
  }
  p.plan.mutable_training()->set_loss("loss");
  p.plan.mutable_training()->set_labels("labels");
  p.plan.mutable_training()->set_optimizer("adamw");
  return p;
}

class TrainingRun : public ::testing::Test {
protected:
  void SetUp() override {
    ensureMpi();
    if (worldSize() != 1)
      GTEST_SKIP() << "runs in a world of one rank";
    dir = makeTempDir();
    std::mt19937 rng(7);
    emb = randomF32({kV, kH}, rng);
    w = randomF32({kH, kV}, rng);
    writeFile(dir + "/model.onnx", modelBytes());
    // Six rows of T + 1 tokens.
    Tensor rows = randomI64({6, kT + 1}, rng, 0, kV - 1);
    writeNpy(dir + "/tokens.npy", rows);
  }

  std::string modelBytes() const;

  std::string plan(const TinyLm &cfg, const std::string &name) {
    std::string path = dir + "/" + name + ".plan";
    tinyLmPlan(cfg, "model.onnx").save(path);
    return path;
  }

  RunOptions options(const std::string &planPath, int steps) {
    RunOptions o;
    o.planPath = planPath;
    o.steps = steps;
    return o;
  }
  TrainingOptions data() {
    TrainingOptions t;
    t.dataPath = dir + "/tokens.npy";
    return t;
  }

  std::string agreedError(const RunOptions &o, const TrainingOptions &t) {
    try {
      runPlan(o, t);
    } catch (const AgreedError &e) {
      return e.what();
    }
    return "";
  }

  /// Every tensor of the newest checkpoint in `ckpt`, whole.
  std::map<std::string, Tensor> load(const std::string &ckpt) {
    Checkpoint c = Checkpoint::openLatest(ckpt);
    std::map<std::string, Tensor> out;
    for (const auto &[name, e] : c.manifest().tensors)
      out[name] =
          c.readBlock(name, e.globalType, Shape(e.globalType.shape.size(), 0),
                      e.globalType.shape);
    return out;
  }

  std::string dir;
  Tensor emb, w;
};

std::string TrainingRun::modelBytes() const {
  onnx::ModelProto model;
  model.set_ir_version(8);
  for (auto [name, t] :
       {std::pair<const char *, const Tensor *>{"emb", &emb}, {"out.w", &w}}) {
    onnx::TensorProto *init = model.mutable_graph()->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t->shape())
      init->add_dims(d);
    init->set_raw_data(std::string(reinterpret_cast<const char *>(t->rawData()),
                                   t->numBytes()));
  }
  return model.SerializeAsString();
}

} // namespace

TEST_F(TrainingRun, LearnsAndResumesBitForBit) {
  std::string p = plan({}, "lm");
  // 6 straight steps.
  RunOptions o = options(p, 6);
  o.outputsDir = dir + "/out_a";
  TrainingOptions t = data();
  t.saveDir = dir + "/a";
  runPlan(o, t);
  // 3 steps, then 3 more from the checkpoint.
  o = options(p, 3);
  t.saveDir = dir + "/b";
  runPlan(o, t);
  o.outputsDir = dir + "/out_c";
  t.resumeDir = dir + "/b";
  runPlan(o, t);

  auto a = load(dir + "/a"), c = load(dir + "/b");
  EXPECT_EQ(Checkpoint::openLatest(dir + "/b").manifest().step, 6);
  ASSERT_EQ(a.size(), 6u); // emb, out.w and their m and v
  for (const auto &[name, tensor] : a) {
    ASSERT_TRUE(c.count(name)) << name;
    EXPECT_TRUE(sameBytes(tensor, c[name])) << name;
  }
  EXPECT_FALSE(sameBytes(a["out.w"], w)); // it trained
  Tensor la = readNpy(dir + "/out_a/loss.npy"),
         lc = readNpy(dir + "/out_c/loss.npy");
  EXPECT_EQ(la.type(), (TensorType{DType::F32, {}}));
  EXPECT_TRUE(sameBytes(la, lc));

  // The loss falls on the repeated data.
  o = options(p, 1);
  o.outputsDir = dir + "/first";
  runPlan(o, data());
  o = options(p, 30);
  o.outputsDir = dir + "/last";
  runPlan(o, data());
  EXPECT_LT(readNpy(dir + "/last/loss.npy").data<float>()[0],
            readNpy(dir + "/first/loss.npy").data<float>()[0]);
}

TEST_F(TrainingRun, ValuesOfOneInitializerShareTheirBuffer) {
  TinyLm separate;
  separate.separateUpdateValue = true;
  for (auto [cfg, name] :
       {std::pair<TinyLm, const char *>{TinyLm(), "one"}, {separate, "two"}}) {
    RunOptions o = options(plan(cfg, name), 3);
    TrainingOptions t = data();
    t.saveDir = dir + "/" + name;
    runPlan(o, t);
  }
  auto one = load(dir + "/one"), two = load(dir + "/two");
  for (const auto &[name, tensor] : one)
    EXPECT_TRUE(sameBytes(tensor, two[name])) << name;
}

TEST_F(TrainingRun, AccumulatesGradientsOverMicroBatches) {
  TinyLm two;
  two.microBatches = 2;
  std::string p2 = plan(two, "mb2");
  try {
    loadPlan(p2, 1, 0);
  } catch (const Error &e) {
    if (std::string(e.what()).find("collectives never run over "
                                   "micro-batches") != std::string::npos)
      GTEST_SKIP() << "Ops.cpp does not accept AllReduce over 'mb' yet";
    throw;
  }
  for (auto [path, name] :
       {std::pair<std::string, const char *>{plan({}, "mb1"), "mb1"},
        {p2, "mb2"}}) {
    RunOptions o = options(path, 3);
    o.outputsDir = dir + "/out_" + name;
    TrainingOptions t = data();
    t.saveDir = dir + "/" + name;
    runPlan(o, t);
  }
  auto one = load(dir + "/mb1"), two2 = load(dir + "/mb2");
  for (const auto &[name, tensor] : one) {
    const float *a = tensor.data<float>(), *b = two2[name].data<float>();
    for (int64_t i = 0; i < tensor.numElements(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-5 * std::max(1.f, std::fabs(a[i])))
          << name << " at " << i;
  }
  EXPECT_NEAR(readNpy(dir + "/out_mb1/loss.npy").data<float>()[0],
              readNpy(dir + "/out_mb2/loss.npy").data<float>()[0], 1e-5);
}

// The bytes --report-memory prints, against the tiny model's sizes by hand.
TEST_F(TrainingRun, ReportsMemoryByKind) {
  RunOptions o = options(plan({}, "lm"), 2);
  o.reportMemory = true;
  MemoryReport m = runPlan(o, data()).memory;
  const std::size_t f32 = 4, i64 = 8, bt = kB * kT;
  // emb [V, H] and out.w [H, V].
  EXPECT_EQ(m.weights, 2 * kV * kH * f32);
  // AdamW's m and v of both.
  EXPECT_EQ(m.optimizer, 4 * kV * kH * f32);
  // The two gradients the optimizer reads, kept to the end of the step.
  EXPECT_EQ(m.grads, 2 * kV * kH * f32);
  // Inputs (tokens, labels), constants (scale, dl), the loss (an output,
  // kept), and the arena: every op result here is under 256 bytes, so each
  // takes one 256-byte slot, and at most four are alive at once (at the
  // ReduceSum: h, logits, the per-row losses and their sum; the labels
  // reshaped are a view of the input and take none), which the planner's
  // first fit reaches.
  std::size_t inputs = 2 * bt * i64, constants = f32 + bt * f32, loss = f32;
  EXPECT_EQ(m.activations, inputs + constants + loss + 4 * 256);
  // The inputs and constants, printed apart too.
  EXPECT_EQ(m.inputs, inputs + constants);
  EXPECT_GT(m.peak, m.weights + m.optimizer + m.grads + m.activations);
}

TEST_F(TrainingRun, ReportsBadOptionsAndFiles) {
  std::string p = plan({}, "lm");
  // --data of the wrong shape or dtype.
  writeNpy(dir + "/short.npy", Tensor(DType::I64, {6, kT}));
  TrainingOptions t;
  t.dataPath = dir + "/short.npy";
  EXPECT_HAS(agreedError(options(p, 1), t),
             "--data " + dir +
                 "/short.npy is i64[6, 3]; expected an int32 "
                 "or int64 array [N, 4] of token rows");
  writeNpy(dir + "/floats.npy", Tensor(DType::F32, {6, kT + 1}));
  t.dataPath = dir + "/floats.npy";
  EXPECT_HAS(agreedError(options(p, 1), t), "floats.npy is f32[6, 4]");
  t.dataPath = dir + "/none.npy";
  EXPECT_HAS(agreedError(options(p, 1), t), dir + "/none.npy");
  // Neither --data nor --inputs.
  EXPECT_HAS(agreedError(options(p, 1), TrainingOptions()),
             "no inputs folder was given");
  // --resume of a folder without checkpoints.
  t = data();
  t.resumeDir = dir + "/nothing";
  EXPECT_HAS(agreedError(options(p, 1), t),
             "checkpoint folder " + dir + "/nothing not found");
  // Training plans run on the CUDA backend too: without a GPU, the device
  // does not start. They refuse --warmup.
  RunOptions o = options(p, 1);
  o.backend = "cuda";
  EXPECT_HAS(agreedError(o, data()), "no CUDA device");
  o = options(p, 1);
  o.warmup = 1;
  EXPECT_HAS(agreedError(o, data()), "--warmup does not apply to training");
  // A checkpoint that lacks a tensor of the plan.
  t = data();
  t.saveDir = dir + "/ck";
  runPlan(options(p, 1), t);
  std::string manifest =
      dir + "/ck/" + checkpointFolderName(1) + "/manifest.json";
  std::string text = readFile(manifest);
  std::size_t at = text.find("\"adam.v/emb\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"adam.v/EMB\"");
  writeFile(manifest, text);
  t.saveDir.clear();
  t.resumeDir = dir + "/ck";
  EXPECT_HAS(agreedError(options(p, 1), t),
             "checkpoint " + manifest + " has no tensor 'adam.v/emb'");
}

TEST(TrainingPlan, ChecksWeightsAndPorts) {
  std::string dir = makeTempDir();
  writeFile(dir + "/m.onnx", "");
  auto build = [&] { return tinyLmPlan(TinyLm(), dir + "/m.onnx"); };
  auto error = [](const PlanBuilder &b) {
    return errorOf([&] { checkPlan(b.plan, "t.plan", 1, 0); });
  };
  PlanBuilder b = build();
  LoadedPlan p = checkPlan(b.plan, "t.plan", 1, 0);
  EXPECT_TRUE(p.training.present);
  EXPECT_EQ(p.training.otherInputs, std::vector<std::string>{"tokens"});
  EXPECT_TRUE(p.training.clipping);
  EXPECT_TRUE(p.weights[2].zeroInit);
  EXPECT_EQ(p.training.initializerProgram.at("adam.v/out.w"), 0);

  // One initializer, two shardings.
  TinyLm separate;
  separate.separateUpdateValue = true;
  b = tinyLmPlan(separate, dir + "/m.onnx");
  PlanBuilder::setSharding(b.prog->mutable_weights(2)->mutable_sharding(),
                           {{"x"}, {}});
  EXPECT_HAS(error(b), "weight 'out.w' appears with two different shardings");
  // zero_init only in training plans.
  b = build();
  b.plan.clear_training();
  EXPECT_HAS(error(b), "weight 'adam.m/emb' is zero_init (optimizer state), "
                       "which only training plans");
  // Loss and labels must exist; the loss is a float32 scalar.
  b = build();
  b.plan.mutable_training()->set_loss("nope");
  EXPECT_HAS(error(b), "Plan.training.loss names the output 'nope', which no "
                       "program has");
  b = build();
  b.plan.mutable_training()->set_labels("nope");
  EXPECT_HAS(error(b), "Plan.training.labels names the input 'nope'");
  b = build();
  b.plan.mutable_training()->set_loss("labels");
  b.output("labels", 1, {kB, kT}, {}, plan::I64);
  EXPECT_HAS(error(b), "the loss output 'labels' is i64[4, 3]; it must be a "
                       "float32 scalar");
  // grad_bucket_mb: absent is -1 (the runtime's default), else >= 0.
  EXPECT_EQ(p.training.gradBucketMb, -1);
  b = build();
  b.plan.mutable_training()->set_grad_bucket_mb(0.5);
  EXPECT_EQ(checkPlan(b.plan, "t.plan", 1, 0).training.gradBucketMb, 0.5);
  b.plan.mutable_training()->set_grad_bucket_mb(-2);
  EXPECT_HAS(error(b), "Plan.training.grad_bucket_mb is -2; expected a number "
                       ">= 0 (MiB)");
  // Mixed precision: the precision's name, the loss scaler's values, and the
  // seed (constant 0, the loss's 1/N) and the scaler only together.
  b = build();
  b.plan.mutable_training()->set_precision("fp8");
  EXPECT_HAS(error(b), "Plan.training.precision is 'fp8'; expected fp32, bf16 "
                       "or fp16");
  auto scaled = [&](double backoff) {
    PlanBuilder s = build();
    plan::LossScale *ls = s.plan.mutable_training()->mutable_loss_scale();
    ls->set_initial(1024);
    ls->set_growth_interval(10);
    ls->set_growth_factor(2);
    ls->set_backoff_factor(backoff);
    ls->set_min(1);
    s.plan.mutable_training()->set_precision("fp16");
    s.prog->mutable_constants(0)->set_loss_scale(true);
    return s;
  };
  b = scaled(0.5);
  LoadedPlan scaledPlan = checkPlan(b.plan, "t.plan", 1, 0);
  EXPECT_TRUE(scaledPlan.training.lossScale.present);
  EXPECT_EQ(scaledPlan.training.lossScale.initial, 1024);
  EXPECT_TRUE(scaledPlan.constants[0].lossScale);
  EXPECT_EQ(scaledPlan.training.precision, "fp16");
  b = scaled(2);
  EXPECT_HAS(error(b), "Plan.training.loss_scale is {initial 1024, min 1, "
                       "growth_factor 2, backoff_factor 2, growth_interval "
                       "10}; expected");
  b = scaled(0.5);
  b.prog->mutable_constants(0)->set_loss_scale(false);
  EXPECT_HAS(error(b), "Plan.training.loss_scale is set, but no program has "
                       "the loss-scale seed");
  b = build();
  b.prog->mutable_constants(0)->set_loss_scale(true);
  EXPECT_HAS(error(b), "is a loss-scale seed, but the plan has no "
                       "Plan.training.loss_scale");
  b = build();
  b.plan.mutable_training()->mutable_loss_scale()->set_initial(1024);
  b.plan.mutable_training()->mutable_loss_scale()->set_min(1);
  b.plan.mutable_training()->mutable_loss_scale()->set_backoff_factor(0.5);
  b.plan.mutable_training()->mutable_loss_scale()->set_growth_interval(1);
  b.plan.mutable_training()->mutable_loss_scale()->set_growth_factor(2);
  b.prog->mutable_constants(1)->set_loss_scale(true);
  EXPECT_HAS(error(b), "is the loss-scale seed but of type f32[12]; it must "
                       "be a float32 scalar");
}

TEST(TrainingPlan, SchedulesBackwardAndOnceTasks) {
  std::string dir = makeTempDir();
  writeFile(dir + "/m.onnx", "");
  TinyLm two;
  two.microBatches = 2;
  PlanBuilder b = tinyLmPlan(two, dir + "/m.onnx");
  // Let the AllReduces over "mb" through if the op checks refuse them.
  std::string msg = errorOf([&] { checkPlan(b.plan, "t.plan", 1, 0); });
  if (msg.find("collectives never run over micro-batches") != std::string::npos)
    GTEST_SKIP() << "Ops.cpp does not accept AllReduce over 'mb' yet";
  ASSERT_EQ(msg, "");
  LoadedPlan p = checkPlan(b.plan, "t.plan", 1, 0);
  ASSERT_EQ(p.schedule.size(), 5u);
  EXPECT_TRUE(p.schedule[2].backward);
  EXPECT_EQ(p.schedule[4].microBatch, 1);
  // AllReduce over "mb" alone needs no communicator.
  EXPECT_TRUE(p.collectiveAxes.empty());

  // The default schedule: .bwd backward, .opt once at the last micro-batch.
  b.prog->clear_schedule();
  p = checkPlan(b.plan, "t.plan", 1, 0);
  ASSERT_EQ(p.schedule.size(), 5u);
  EXPECT_FALSE(p.schedule[1].backward);
  EXPECT_TRUE(p.schedule[3].backward);
  EXPECT_EQ(p.schedule[4].task, 2);
  EXPECT_EQ(p.schedule[4].microBatch, 1);

  // A backward task missing a micro-batch; the optimizer run too early.
  b = tinyLmPlan(two, dir + "/m.onnx");
  b.prog->mutable_schedule()->DeleteSubrange(3, 1);
  EXPECT_HAS(errorOf([&] { checkPlan(b.plan, "t.plan", 1, 0); }),
             "the schedule never runs the backward of task 's.bwd' for "
             "micro-batch 1");
  b = tinyLmPlan(two, dir + "/m.onnx");
  b.prog->mutable_schedule(4)->set_micro_batch(0);
  EXPECT_HAS(errorOf([&] { checkPlan(b.plan, "t.plan", 1, 0); }),
             "the schedule never runs the forward of task 's.opt' for "
             "micro-batch 1");
}
