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

#include <cstring>
#include <filesystem>

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

/// An initializer whose data is in an external file.
struct ExternalInit {
  std::string name;
  Shape dims;
  int32_t dataType;
  std::string location;
  /// Empty: no such entry.
  std::string offset, length;
};

/// A model of external initializers only.
std::string makeExternalModel(const std::vector<ExternalInit> &inits) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("g");
  for (const ExternalInit &init : inits) {
    onnx::TensorProto *t = graph->add_initializer();
    t->set_name(init.name);
    t->set_data_type(init.dataType);
    for (int64_t d : init.dims)
      t->add_dims(d);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const std::string &key, const std::string &value) {
      auto *entry = t->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    if (!init.location.empty())
      add("location", init.location);
    if (!init.offset.empty())
      add("offset", init.offset);
    if (!init.length.empty())
      add("length", init.length);
    add("checksum", "0123456789abcdef");
  }
  return model.SerializeAsString();
}

template <typename T> std::string bytesOf(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()),
                     v.size() * sizeof(T));
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
  // "ext" names weights.bin, which is not there.
  msg = errorOf("ext", {DType::F32, {2}});
  EXPECT_NE(msg.find("initializer 'ext' in " + path), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open external data file"), std::string::npos)
      << msg;
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

TEST_F(WeightLoaderTest, LoadsExternalDataWholeAndSharded) {
  // weights.bin: 100 bytes of padding, w f32[4, 6] = 0.5 * i, then ids
  // i64[3]; data/more.bin holds b f32[6].
  std::vector<float> w(24);
  for (int i = 0; i < 24; ++i)
    w[i] = 0.5f * float(i);
  std::vector<int64_t> ids = {3, -4, 1ll << 40};
  std::vector<float> b = {-1, -2, -3, -4, -5, -6};
  writeFile(dir + "/weights.bin",
            std::string(100, '\x7f') + bytesOf(w) + bytesOf(ids));
  std::filesystem::create_directory(dir + "/data");
  writeFile(dir + "/data/more.bin", bytesOf(b));
  std::string model = dir + "/ext.onnx";
  writeFile(
      model,
      makeExternalModel(
          {{"w", {4, 6}, onnx::TensorProto::FLOAT, "weights.bin", "100", "96"},
           // No length: the tensor's size.
           {"ids", {3}, onnx::TensorProto::INT64, "./weights.bin", "196", ""},
           // No offset: 0.
           {"b", {6}, onnx::TensorProto::FLOAT, "data/more.bin", "", "24"}}));
  OnnxWeightFile file(model);
  const InitializerInfo *info = file.find("w");
  ASSERT_NE(info, nullptr);
  EXPECT_TRUE(info->external);
  EXPECT_FALSE(info->hasRawData);
  EXPECT_EQ(info->externalLocation, "weights.bin");
  EXPECT_TRUE(info->hasExternalOffset);
  EXPECT_EQ(info->externalOffset, "100");
  EXPECT_TRUE(info->hasExternalLength);
  EXPECT_EQ(info->externalLength, "96");
  EXPECT_FALSE(file.find("b")->hasExternalOffset);
  EXPECT_FALSE(file.find("ids")->hasExternalLength);
  EXPECT_EQ(file.numExternalFiles(), 0u);

  TensorType global{DType::F32, {4, 6}};
  Tensor whole = file.loadBlock("w", global, {0, 0}, {4, 6});
  EXPECT_EQ(toVector<float>(whole), w);

  Mesh mesh({"x", "y"}, {2, 3});
  ShardSpec spec{{{0}, {1}}};
  Shape local = localShape(global.shape, spec, mesh);
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    Shape off = blockOffsets(global.shape, spec, mesh, mesh.coordsOf(r));
    Tensor t = file.loadBlock("w", global, off, local);
    ASSERT_EQ(t.shape(), (Shape{2, 2}));
    std::vector<float> expect;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        expect.push_back(w[(off[0] + i) * 6 + off[1] + j]);
    EXPECT_EQ(toVector<float>(t), expect) << "rank " << r;
  }
  Tensor idsBlock = file.loadBlock("ids", {DType::I64, {3}}, {1}, {2});
  EXPECT_EQ(toVector<int64_t>(idsBlock), (std::vector<int64_t>{-4, 1ll << 40}));
  // "weights.bin" and "./weights.bin" are one file, mapped once.
  EXPECT_EQ(file.numExternalFiles(), 1u);
  Tensor bBlock = file.loadBlock("b", {DType::F32, {6}}, {3}, {3});
  EXPECT_EQ(toVector<float>(bBlock), (std::vector<float>{-4, -5, -6}));
  EXPECT_EQ(file.numExternalFiles(), 2u);
}

TEST_F(WeightLoaderTest, RefusesExternalLocationsOutsideTheModelFolder) {
  // The model is in dir/sub; dir/outside.bin exists but is out of bounds.
  std::vector<float> v = {1, 2};
  writeFile(dir + "/outside.bin", bytesOf(v));
  std::string sub = dir + "/sub";
  std::filesystem::create_directory(sub);
  std::filesystem::create_directory(sub + "/inner");
  writeFile(sub + "/inside.bin", bytesOf(v));
  std::filesystem::create_symlink(dir + "/outside.bin", sub + "/out-link.bin");
  std::filesystem::create_symlink(dir, sub + "/up");
  std::filesystem::create_symlink(sub + "/inside.bin", sub + "/in-link.bin");
  std::string model = sub + "/model.onnx";
  std::string absolute = dir + "/outside.bin";
  writeFile(
      model,
      makeExternalModel(
          {{"dotdot", {2}, onnx::TensorProto::FLOAT, "../outside.bin"},
           {"deep", {2}, onnx::TensorProto::FLOAT, "inner/../../outside.bin"},
           {"absolute", {2}, onnx::TensorProto::FLOAT, absolute},
           {"link", {2}, onnx::TensorProto::FLOAT, "out-link.bin"},
           {"dirlink", {2}, onnx::TensorProto::FLOAT, "up/outside.bin"},
           // Allowed: stays inside once normalized or resolved.
           {"inner", {2}, onnx::TensorProto::FLOAT, "inner/../inside.bin"},
           {"inlink", {2}, onnx::TensorProto::FLOAT, "in-link.bin"}}));
  OnnxWeightFile file(model);
  auto error = [&](const std::string &name) -> std::string {
    try {
      file.loadBlock(name, {DType::F32, {2}}, {0}, {2});
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  for (const char *name : {"dotdot", "deep", "link", "dirlink"}) {
    std::string msg = error(name);
    std::string loc = file.find(name)->externalLocation;
    EXPECT_NE(msg.find(std::string("initializer '") + name + "' in " + model +
                       " has external data location '" + loc + "'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("the model's folder"), std::string::npos)
        << name << ": " << msg;
  }
  std::string msg = error("absolute");
  EXPECT_NE(msg.find("initializer 'absolute' in " + model +
                     " has external data location '" + absolute +
                     "', which is an absolute path"),
            std::string::npos)
      << msg;
  EXPECT_EQ(file.numExternalFiles(), 0u);
  for (const char *name : {"inner", "inlink"})
    EXPECT_EQ(
        toVector<float>(file.loadBlock(name, {DType::F32, {2}}, {0}, {2})), v)
        << name;
}

TEST_F(WeightLoaderTest, ChecksExternalFilesAndTheirBounds) {
  std::vector<float> w(24, 1.f);
  std::string bin = dir + "/w.bin";
  writeFile(bin, std::string(16, '\0') + bytesOf(w)); // 112 bytes
  std::string model = dir + "/ext.onnx";
  writeFile(
      model,
      makeExternalModel(
          {{"missing", {4, 6}, onnx::TensorProto::FLOAT, "nope.bin"},
           {"past_end", {4, 6}, onnx::TensorProto::FLOAT, "w.bin", "20", "96"},
           {"offset_past_end",
            {4, 6},
            onnx::TensorProto::FLOAT,
            "w.bin",
            "200"},
           // No length: 96 bytes from offset 17 run past the end.
           {"default_past_end",
            {4, 6},
            onnx::TensorProto::FLOAT,
            "w.bin",
            "17"},
           {"short", {4, 6}, onnx::TensorProto::FLOAT, "w.bin", "16", "92"},
           {"bad_offset", {4, 6}, onnx::TensorProto::FLOAT, "w.bin", "-16"},
           {"no_location", {4, 6}, onnx::TensorProto::FLOAT, ""},
           {"ok", {4, 6}, onnx::TensorProto::FLOAT, "w.bin", "16"}}));
  OnnxWeightFile file(model);
  TensorType type{DType::F32, {4, 6}};
  auto error = [&](const std::string &name) -> std::string {
    try {
      file.loadBlock(name, type, {0, 0}, {4, 6});
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  std::string msg = error("missing");
  EXPECT_NE(msg.find("initializer 'missing' in " + model +
                     " (external data location 'nope.bin'): cannot open "
                     "external data file "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("nope.bin: No such file"), std::string::npos) << msg;

  msg = error("past_end");
  EXPECT_NE(msg.find("initializer 'past_end' in " + model +
                     ": its external data at offset 20 of length 96 runs "
                     "past the end of "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("w.bin (112 bytes)"), std::string::npos) << msg;
  msg = error("offset_past_end");
  EXPECT_NE(msg.find("at offset 200 of length 96 runs past the end of"),
            std::string::npos)
      << msg;
  msg = error("default_past_end");
  EXPECT_NE(msg.find("at offset 17 of length 96 runs past the end of"),
            std::string::npos)
      << msg;

  msg = error("short");
  EXPECT_NE(msg.find("initializer 'short' in " + model +
                     " has 92 bytes of external data in "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("w.bin, but a f32[4, 6] tensor needs 96"),
            std::string::npos)
      << msg;

  msg = error("bad_offset");
  EXPECT_NE(msg.find("external data offset '-16', which is not a byte count"),
            std::string::npos)
      << msg;
  msg = error("no_location");
  EXPECT_NE(msg.find("initializer 'no_location' in " + model +
                     " stores its data externally but its external_data has "
                     "no 'location'"),
            std::string::npos)
      << msg;

  EXPECT_EQ(toVector<float>(file.loadBlock("ok", type, {0, 0}, {4, 6})), w);
}
