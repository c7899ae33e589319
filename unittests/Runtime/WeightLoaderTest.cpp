//===- WeightLoaderTest.cpp - Tests of ONNX weight slicing ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "WeightLoader.h"

#include "Sharding.h"
#include "TestUtil.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

/// A model with initializers:
///   w_raw   f32 [4, 6] in raw_data, values 0..23
///   w_float f32 [4, 6] in float_data, values 100..123
///   ids     i64 [3] in int64_data
///   ids_raw i64 [2] in raw_data
///   ext     f32 [2] with external data
std::string makeModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("shoal-runtime-tests");
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("g");
  // A node before the initializers, to be skipped.
  onnx::NodeProto *node = graph->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");

  onnx::TensorProto *raw = graph->add_initializer();
  raw->set_name("w_raw");
  raw->set_data_type(onnx::TensorProto::FLOAT);
  raw->add_dims(4);
  raw->add_dims(6);
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i)
    v[i] = float(i);
  raw->set_raw_data(std::string(reinterpret_cast<const char *>(v.data()),
                                v.size() * sizeof(float)));

  onnx::TensorProto *typed = graph->add_initializer();
  typed->set_name("w_float");
  typed->set_data_type(onnx::TensorProto::FLOAT);
  typed->add_dims(4);
  typed->add_dims(6);
  for (int i = 0; i < 24; ++i)
    typed->add_float_data(100.f + i);

  onnx::TensorProto *ids = graph->add_initializer();
  ids->set_name("ids");
  ids->set_data_type(onnx::TensorProto::INT64);
  ids->add_dims(3);
  for (int64_t i : {7, -8, 9})
    ids->add_int64_data(i);

  onnx::TensorProto *idsRaw = graph->add_initializer();
  idsRaw->set_name("ids_raw");
  idsRaw->set_data_type(onnx::TensorProto::INT64);
  idsRaw->add_dims(2);
  std::vector<int64_t> iv = {5, -6};
  idsRaw->set_raw_data(std::string(reinterpret_cast<const char *>(iv.data()),
                                   iv.size() * sizeof(int64_t)));

  onnx::TensorProto *ext = graph->add_initializer();
  ext->set_name("ext");
  ext->set_data_type(onnx::TensorProto::FLOAT);
  ext->add_dims(2);
  ext->set_data_location(onnx::TensorProto::EXTERNAL);
  auto *entry = ext->add_external_data();
  entry->set_key("location");
  entry->set_value("weights.bin");
  return model.SerializeAsString();
}

// Wire-format helpers for a hand-made model with packed dims.
void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void putLen(std::string &out, uint32_t field, const std::string &bytes) {
  putVarint(out, (field << 3) | 2);
  putVarint(out, bytes.size());
  out += bytes;
}

class WeightLoaderTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = makeTempDir();
    path = dir + "/model.onnx";
    writeFile(path, makeModel());
  }
  std::string errorOf(const std::string &name, const TensorType &type) {
    try {
      OnnxWeightFile file(path);
      file.loadBlock(name, type, Shape(type.shape.size(), 0), type.shape);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  }
  std::string dir, path;
};

} // namespace

TEST_F(WeightLoaderTest, IndexesInitializersWithoutParsingTheModel) {
  OnnxWeightFile file(path);
  EXPECT_EQ(file.numInitializers(), 5u);
  const InitializerInfo *raw = file.find("w_raw");
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(raw->dims, (Shape{4, 6}));
  EXPECT_EQ(raw->dataType, 1);
  EXPECT_TRUE(raw->hasRawData);
  EXPECT_EQ(raw->rawSize, 96u);
  // The recorded offset points at the raw bytes inside the file.
  std::string bytes = readFile(path);
  float first;
  std::memcpy(&first, bytes.data() + raw->rawOffset + 4 * 7, 4);
  EXPECT_EQ(first, 7.f);
  EXPECT_TRUE(file.find("w_float")->hasTypedData);
  EXPECT_FALSE(file.find("w_float")->hasRawData);
  EXPECT_TRUE(file.find("ext")->external);
  EXPECT_EQ(file.find("nope"), nullptr);
}

TEST_F(WeightLoaderTest, LoadsSlicesFromRawAndTypedData) {
  OnnxWeightFile file(path);
  Mesh mesh({"x", "y"}, {2, 3});
  ShardSpec spec{{{0}, {1}}}; // rows over x, columns over y
  TensorType global{DType::F32, {4, 6}};
  Shape local = localShape(global.shape, spec, mesh);
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    Shape off = blockOffsets(global.shape, spec, mesh, mesh.coordsOf(r));
    for (const char *name : {"w_raw", "w_float"}) {
      Tensor t = file.loadBlock(name, global, off, local);
      ASSERT_EQ(t.shape(), (Shape{2, 2}));
      float base = std::string(name) == "w_raw" ? 0.f : 100.f;
      std::vector<float> expect;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          expect.push_back(base + float((off[0] + i) * 6 + off[1] + j));
      EXPECT_EQ(toVector<float>(t), expect) << name << " rank " << r;
    }
  }
  Tensor ids = file.loadBlock("ids", {DType::I64, {3}}, {1}, {2});
  EXPECT_EQ(toVector<int64_t>(ids), (std::vector<int64_t>{-8, 9}));
  Tensor idsRaw = file.loadBlock("ids_raw", {DType::I64, {2}}, {0}, {2});
  EXPECT_EQ(toVector<int64_t>(idsRaw), (std::vector<int64_t>{5, -6}));
}

TEST_F(WeightLoaderTest, ChecksTypesAgainstThePlan) {
  std::string msg = errorOf("w_raw", {DType::F32, {6, 4}});
  EXPECT_NE(msg.find("initializer 'w_raw' in " + path +
                     " is f32[4, 6], but the plan expects f32[6, 4]"),
            std::string::npos)
      << msg;
  msg = errorOf("ids", {DType::I32, {3}});
  EXPECT_NE(msg.find("is i64[3], but the plan expects i32[3]"),
            std::string::npos)
      << msg;
  msg = errorOf("missing", {DType::F32, {1}});
  EXPECT_NE(msg.find("initializer 'missing' not found in weight file " + path),
            std::string::npos)
      << msg;
  msg = errorOf("ext", {DType::F32, {2}});
  EXPECT_NE(msg.find("initializer 'ext'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not supported yet"), std::string::npos) << msg;
}

TEST_F(WeightLoaderTest, RejectsTruncatedAndForeignFiles) {
  std::string bytes = readFile(path);
  std::string cut = dir + "/cut.onnx";
  for (std::size_t len : {bytes.size() - 1, bytes.size() / 2, std::size_t(3)}) {
    writeFile(cut, bytes.substr(0, len));
    try {
      OnnxWeightFile file(cut);
      FAIL() << "truncated to " << len << " bytes was accepted";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
    }
  }
  std::string npy = dir + "/x.npy";
  writeFile(npy, std::string("\x93NUMPY\x01\x00", 8) + std::string(120, ' '));
  try {
    OnnxWeightFile file(npy);
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("weight file " + npy),
              std::string::npos)
        << e.what();
  }
  writeFile(npy, "");
  EXPECT_THROW(OnnxWeightFile file(npy), Error);
  EXPECT_THROW(OnnxWeightFile file(dir + "/none.onnx"), Error);
}

TEST_F(WeightLoaderTest, ReadsPackedDims) {
  // TensorProto{dims: [2, 3] packed, data_type: FLOAT, name: "p", raw_data}
  std::string tensor, dims;
  putVarint(dims, 2);
  putVarint(dims, 3);
  putLen(tensor, 1, dims);
  putVarint(tensor, (2 << 3) | 0);
  putVarint(tensor, 1);
  putLen(tensor, 8, "p");
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  putLen(tensor, 9, std::string(reinterpret_cast<const char *>(v.data()), 24));
  std::string graph, model;
  putLen(graph, 5, tensor);
  putVarint(model, (1 << 3) | 0); // ir_version
  putVarint(model, 8);
  putLen(model, 7, graph);
  std::string p = dir + "/packed.onnx";
  writeFile(p, model);
  OnnxWeightFile file(p);
  Tensor t = file.loadBlock("p", {DType::F32, {2, 3}}, {0, 1}, {2, 2});
  EXPECT_EQ(toVector<float>(t), (std::vector<float>{2, 3, 5, 6}));
}
