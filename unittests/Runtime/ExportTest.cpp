//===- ExportTest.cpp - Tests of the trained model's export -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// writeTrainedOnnx and writeSafetensors from a checkpoint saved in blocks
// over a 2 x 2 mesh: the bytes of the safetensors file, which initializers
// the ONNX model holds inline, in its external data file or untouched, a
// weight viewed in another shape (source_shape), and the errors.
//
//===----------------------------------------------------------------------===//

#include "tooling/Export.h"

#include "CheckpointUtil.h"
#include "TestUtil.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>

using namespace shoal::rt;
using namespace shoal::rt::test;
namespace fs = std::filesystem;

namespace {

std::string bytesOf(const std::vector<float> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()),
                     v.size() * sizeof(float));
}

std::vector<float> iota(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = start + float(i);
  return v;
}

/// A source model in `dir`:
///   w      f32 [6, 4] raw_data        a weight (saved viewed as [2, 3, 4])
///   bias   f32 [3] float_data         a weight
///   big    f32 [300] raw_data         a weight of 1200 bytes (external)
///   shape  i64 [2] int64_data         not a weight, left as it is
///   table  f32 [300] in source.data   not a weight, its data carried over
std::string makeSource(const std::string &dir) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto *prop = model.add_metadata_props();
  prop->set_key("shoal.trained_steps");
  prop->set_value("1");
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("g");
  onnx::NodeProto *node = graph->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  auto add = [&](const std::string &name, int32_t type, Shape dims) {
    onnx::TensorProto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims)
      t->add_dims(d);
    return t;
  };
  add("w", onnx::TensorProto::FLOAT, {6, 4})
      ->set_raw_data(bytesOf(iota(24, 0)));
  onnx::TensorProto *bias = add("bias", onnx::TensorProto::FLOAT, {3});
  for (float f : {0.5f, 1.5f, 2.5f})
    bias->add_float_data(f);
  add("big", onnx::TensorProto::FLOAT, {300})
      ->set_raw_data(bytesOf(iota(300, 0)));
  onnx::TensorProto *shape = add("shape", onnx::TensorProto::INT64, {2});
  shape->add_int64_data(6);
  shape->add_int64_data(-1);
  onnx::TensorProto *table = add("table", onnx::TensorProto::FLOAT, {300});
  table->set_data_location(onnx::TensorProto::EXTERNAL);
  auto *loc = table->add_external_data();
  loc->set_key("location");
  loc->set_value("source.data");
  auto *off = table->add_external_data();
  off->set_key("offset");
  off->set_value("8");
  writeFile(dir + "/source.data",
            std::string(8, '\0') + bytesOf(iota(300, 1000)));
  std::string path = dir + "/source.onnx";
  writeFile(path, model.SerializeAsString());
  return path;
}

/// The trained values, saved in blocks over a 2 x 2 mesh: w as [2, 3, 4]
/// split over x and y, big split over both, bias whole; and an optimizer
/// state that the export leaves out.
void saveTrained(const std::string &dir) {
  Mesh mesh({"x", "y"}, {2, 2});
  Tensor w(DType::F32, {2, 3, 4}), bias(DType::F32, {3}),
      big(DType::F32, {300}), m(DType::F32, {300});
  for (int64_t i = 0; i < 24; ++i)
    w.data<float>()[i] = -float(i);
  for (int64_t i = 0; i < 3; ++i)
    bias.data<float>()[i] = 10.f + float(i);
  for (int64_t i = 0; i < 300; ++i)
    big.data<float>()[i] = 0.25f * float(i);
  saveAsMesh(dir, 3, mesh,
             {{"w", w, {{"x"}, {}, {"y"}}},
              {"bias", bias, {}},
              {"big", big, {{"x", "y"}}},
              {"adam.m/big", m, {{"x", "y"}}}});
}

std::vector<float> floatsOf(const Tensor &t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numElements());
}

struct ExportFixture : ::testing::Test {
  void SetUp() override {
    dir = makeTempDir();
    source = makeSource(dir);
    saveTrained(dir + "/ckpt");
  }
  std::string dir, source;
};

TEST_F(ExportFixture, WritesSafetensors) {
  Checkpoint ckpt = Checkpoint::openLatest(dir + "/ckpt");
  TrainedModel model(ckpt, source, {"w", "big", "bias"});
  std::string path = dir + "/out/model.safetensors";
  fs::create_directories(dir + "/out");
  ExportSummary s = writeSafetensors(path, model, {{"format", "pt"}});
  EXPECT_EQ(s.tensors, 3u);
  EXPECT_EQ(s.bytes, 1308u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  std::string bytes = readFile(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | static_cast<uint8_t>(bytes[i]);
  std::string expected =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
      "\"big\":{\"dtype\":\"F32\",\"shape\":[300],\"data_offsets\":[12,1212]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[6,4],\"data_offsets\":[1212,1308]}}";
  // Padded with spaces to a multiple of 8.
  expected.append((8 - expected.size() % 8) % 8, ' ');
  ASSERT_EQ(n, expected.size());
  EXPECT_EQ(bytes.substr(8, n), expected);
  ASSERT_EQ(bytes.size(), 8 + n + 1308);
  std::vector<float> data(327);
  std::memcpy(data.data(), bytes.data() + 8 + n, 1308);
  EXPECT_EQ(std::vector<float>(data.begin(), data.begin() + 3),
            (std::vector<float>{10, 11, 12}));
  EXPECT_EQ(data[3 + 7], 1.75f);
  // w in its initializer's shape [6, 4]: the same row-major elements.
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(data[303 + i], -float(i));
}

TEST_F(ExportFixture, WritesTheSourceModelWithTheTrainedWeights) {
  Checkpoint ckpt = Checkpoint::openLatest(dir + "/ckpt");
  TrainedModel model(ckpt, source, {"w", "big", "bias"});
  std::string path = dir + "/out/trained.onnx";
  fs::create_directories(dir + "/out");
  ExportSummary s =
      writeTrainedOnnx(path, model, {{"shoal.trained_steps", "3"}});
  // big and table (1200 bytes each) go to the data file, the rest inline.
  EXPECT_EQ(s.tensors, 4u);
  EXPECT_EQ(s.externalTensors, 2u);
  EXPECT_EQ(s.dataPath, dir + "/out/trained.onnx.data");
  EXPECT_EQ(fs::file_size(s.dataPath), 2400u);

  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(readFile(path)));
  ASSERT_EQ(proto.metadata_props_size(), 1);
  EXPECT_EQ(proto.metadata_props(0).value(), "3");
  ASSERT_EQ(proto.graph().node_size(), 1);
  std::map<std::string, const onnx::TensorProto *> inits;
  for (const onnx::TensorProto &t : proto.graph().initializer())
    inits[t.name()] = &t;
  ASSERT_EQ(inits.size(), 5u);
  EXPECT_FALSE(inits["w"]->has_data_location() &&
               inits["w"]->data_location() == onnx::TensorProto::EXTERNAL);
  EXPECT_EQ(inits["bias"]->float_data_size(), 0);
  EXPECT_EQ(inits["shape"]->int64_data_size(), 2); // untouched
  for (const char *name : {"big", "table"}) {
    const onnx::TensorProto &t = *inits[name];
    EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL) << name;
    ASSERT_EQ(t.external_data_size(), 3) << name;
    EXPECT_EQ(t.external_data(0).key(), "location");
    EXPECT_EQ(t.external_data(0).value(), "trained.onnx.data");
    EXPECT_EQ(t.external_data(2).value(), "1200");
  }

  // Read back as shoal reads weights.
  OnnxWeightFile out(path);
  std::vector<float> w = floatsOf(out.loadInitializer("w"));
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(w[i], -float(i));
  EXPECT_EQ(out.loadInitializer("w").shape(), (Shape{6, 4}));
  EXPECT_EQ(floatsOf(out.loadInitializer("bias")),
            (std::vector<float>{10, 11, 12}));
  EXPECT_EQ(floatsOf(out.loadInitializer("big"))[299], 0.25f * 299);
  EXPECT_EQ(floatsOf(out.loadInitializer("table")), iota(300, 1000));
  Tensor shape = out.loadInitializer("shape");
  EXPECT_EQ(shape.data<int64_t>()[1], -1);
}

TEST_F(ExportFixture, ReportsErrorsNamingThePath) {
  Checkpoint ckpt = Checkpoint::openLatest(dir + "/ckpt");
  EXPECT_HAS(errorOf([&] { TrainedModel(ckpt, dir + "/gone.onnx", {"w"}); }),
             "the plan's source model " + dir + "/gone.onnx is gone");
  EXPECT_HAS(errorOf([&] {
               TrainedModel(ckpt, source, {"w", "nope"});
             }),
             "has no initializer 'nope'");
  EXPECT_HAS(errorOf([&] { TrainedModel(ckpt, source, {"shape"}); }),
             "has no tensor 'shape'");
  TrainedModel model(ckpt, source, {"w"});
  EXPECT_HAS(errorOf([&] { writeTrainedOnnx(source, model, {}); }),
             "is the plan's source model");
  EXPECT_HAS(errorOf([&] {
               writeSafetensors(dir + "/missing/model.safetensors", model, {});
             }),
             "cannot write the safetensors file " + dir +
                 "/missing/model.safetensors");
  EXPECT_FALSE(fs::exists(dir + "/missing"));
}

TEST_F(ExportFixture, PutsBlocksTogether) {
  // A weight read in blocks (a multi-query projection: the query columns
  // split over y, the key/value columns whole): the export puts w [6, 4]
  // together from "w[:, 0:3]" and "w[:, 3:4]".
  std::string ck = dir + "/blocks";
  Mesh mesh({"x", "y"}, {1, 3});
  Tensor q(DType::F32, {6, 3}), kv(DType::F32, {6, 1});
  for (int64_t i = 0; i < 18; ++i)
    q.data<float>()[i] = float(100 + i);
  for (int64_t i = 0; i < 6; ++i)
    kv.data<float>()[i] = float(-i);
  saveAsMesh(ck, 1, mesh,
             {{"w[:, 0:3]", q, {{}, {"y"}}}, {"w[:, 3:4]", kv, {}}});
  Checkpoint ckpt = Checkpoint::openLatest(ck);
  std::map<std::string, std::vector<WeightBlock>> blocks{
      {"w", {{"w[:, 3:4]", 1, 3, 1}, {"w[:, 0:3]", 1, 0, 3}}}};
  TrainedModel model(ckpt, source, {"w"}, blocks);
  EXPECT_EQ(model.typeOf("w").str(), "f32[6, 4]");
  std::vector<float> expected;
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t c = 0; c < 3; ++c)
      expected.push_back(float(100 + r * 3 + c));
    expected.push_back(float(-r));
  }
  EXPECT_EQ(floatsOf(model.read("w")), expected);

  // Blocks that leave columns out, or do not fit the initializer.
  EXPECT_HAS(
      errorOf([&] {
        TrainedModel(ckpt, source, {"w"}, {{"w", {{"w[:, 0:3]", 1, 0, 3}}}});
      }),
      "the plan reads initializer 'w' (f32[6, 4]) in blocks that do "
      "not cover it");
  EXPECT_HAS(errorOf([&] {
               TrainedModel(
                   ckpt, source, {"w"},
                   {{"w", {{"w[:, 0:3]", 1, 0, 2}, {"w[:, 3:4]", 1, 2, 2}}}});
             }),
             "weight 'w[:, 0:3]' is f32[6, 3] in checkpoint");
  EXPECT_HAS(errorOf([&] {
               TrainedModel(
                   ckpt, source, {"w"},
                   {{"w", {{"w[:, 0:3]", 1, 0, 3}, {"w[:, 3:5]", 1, 3, 1}}}});
             }),
             "has no tensor 'w[:, 3:5]'");
}

} // namespace
