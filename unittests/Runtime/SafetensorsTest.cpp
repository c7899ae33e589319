//===- SafetensorsTest.cpp - Reading safetensors checkpoints ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// SafetensorsWeights (shoal-run --init-from): headers, blocks, conversions,
// sharded folders and their errors; matchWeightNames: prefixes.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"
#include "ErrorOf.h"
#include "Half.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

using namespace shoal::rt;
using shoal::rt::test::errorOf;
using shoal::rt::test::makeTempDir;
using shoal::rt::test::writeFile;

namespace {

/// A safetensors file of `header` (JSON) and `data`.
std::string safetensors(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float f : values)
    out.append(reinterpret_cast<const char *>(&f), 4);
  return out;
}

std::string bf16s(std::initializer_list<float> values) {
  std::string out;
  for (float f : values) {
    uint16_t h = floatToBF16(f);
    out.append(reinterpret_cast<const char *>(&h), 2);
  }
  return out;
}

/// w: F32 [2, 3] = 0..5; b: BF16 [3] = 1.5, -2, 0.25.
std::string twoTensors() {
  return safetensors(
      R"({"__metadata__":{"format":"pt"},)"
      R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]}})",
      floats({0, 1, 2, 3, 4, 5}) + bf16s({1.5f, -2.f, 0.25f}));
}

TEST(SafetensorsTest, ReadsBlocksAndWidensBF16) {
  std::string dir = makeTempDir();
  writeFile(dir + "/m.safetensors", twoTensors());
  SafetensorsWeights file(dir + "/m.safetensors");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"b", "w"}));
  // The second column block of w: [[1, 2], [4, 5]].
  Tensor block = file.loadBlock("w", {DType::F32, {2, 3}}, {0, 1}, {2, 2});
  EXPECT_EQ(std::vector<float>(block.data<float>(), block.data<float>() + 4),
            (std::vector<float>{1, 2, 4, 5}));
  // A [3] weight viewed as [1, 3].
  Tensor wide = file.loadBlock("b", {DType::F32, {1, 3}}, {0, 0}, {1, 3}, {3});
  EXPECT_EQ(std::vector<float>(wide.data<float>(), wide.data<float>() + 3),
            (std::vector<float>{1.5f, -2.f, 0.25f}));
  Tensor half = file.loadBlock("w", {DType::F16, {2, 3}}, {1, 0}, {1, 3});
  EXPECT_EQ(halfToFloat(half.data<uint16_t>()[2]), 5.f);
}

TEST(SafetensorsTest, ShapeAndTypeErrorsNameTheTensorAndFile) {
  std::string dir = makeTempDir();
  writeFile(dir + "/m.safetensors", twoTensors());
  SafetensorsWeights file(dir + "/m.safetensors");
  EXPECT_EQ(errorOf([&] {
              file.loadBlock("w", {DType::F32, {3, 2}}, {0, 0}, {3, 2});
            }),
            "tensor 'w' of " + dir +
                "/m.safetensors has shape [2, 3], but the model's weight has "
                "shape [3, 2]");
  EXPECT_NE(errorOf([&] {
              file.loadBlock("w", {DType::I64, {2, 3}}, {0, 0}, {2, 3});
            }).find("is F32, but the model's weight is I64"),
            std::string::npos);
}

TEST(SafetensorsTest, BadFiles) {
  std::string dir = makeTempDir();
  auto error = [&](const std::string &bytes) {
    writeFile(dir + "/bad.safetensors", bytes);
    std::string e =
        errorOf([&] { SafetensorsWeights(dir + "/bad.safetensors"); });
    std::string prefix =
        dir + "/bad.safetensors is not a valid safetensors file: ";
    return e.rfind(prefix, 0) == 0 ? e.substr(prefix.size()) : "(" + e + ")";
  };
  EXPECT_EQ(error("abc").substr(0, 52),
            "3 bytes, less than the 8-byte header length; a torch");
  EXPECT_EQ(error(std::string("\xff\0\0\0\0\0\0\0{}", 10)).substr(0, 36),
            "its header length 255 does not fit t");
  EXPECT_EQ(error(safetensors(
                R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                floats({1, 2}))),
            "its header: expected ',' or '}' at byte 53");
  EXPECT_EQ(error(safetensors(
                R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})",
                floats({1, 2}))),
            "tensor 'w' has data_offsets [0, 16] outside its 8 bytes of data");
  EXPECT_EQ(error(safetensors(
                R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                floats({1, 2}))),
            "tensor 'w' is F32 [3] (12 bytes) but has 8 bytes of data");
  EXPECT_EQ(error(safetensors(R"({"w":{"dtype":"F32","shape":[2]}})", "")),
            "tensor 'w' needs \"dtype\", \"shape\" and \"data_offsets\" "
            "[begin, end]");
  EXPECT_EQ(errorOf([&] { SafetensorsWeights(dir + "/nope"); }),
            dir + "/nope: no such file or folder");
}

TEST(SafetensorsTest, ShardedFolders) {
  namespace fs = std::filesystem;
  std::string dir = makeTempDir();
  writeFile(dir + "/model-00001-of-00002.safetensors",
            safetensors(R"({"a":{"dtype":"F32","shape":[1],)"
                        R"("data_offsets":[0,4]}})",
                        floats({7})));
  writeFile(dir + "/model-00002-of-00002.safetensors",
            safetensors(R"({"b":{"dtype":"F32","shape":[1],)"
                        R"("data_offsets":[0,4]}})",
                        floats({8})));
  writeFile(dir + "/model.safetensors.index.json",
            R"({"metadata": {"total_size": 8}, "weight_map": )"
            R"({"a": "model-00001-of-00002.safetensors", )"
            R"("b": "model-00002-of-00002.safetensors"}})");
  SafetensorsWeights set(dir);
  EXPECT_TRUE(set.isFolder());
  EXPECT_EQ(set.loadTensor("b").data<float>()[0], 8.f);
  EXPECT_EQ(set.filePath(*set.find("a")),
            dir + "/model-00001-of-00002.safetensors");

  writeFile(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_EQ(errorOf([&] { SafetensorsWeights{dir}; }),
            dir + "/model.safetensors.index.json is not a valid index: 'a' "
                  "names the file '../elsewhere.safetensors', which is not a "
                  "file of the folder");
  writeFile(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"c": "model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(errorOf([&] { SafetensorsWeights{dir}; }),
            dir + "/model.safetensors.index.json names 'c' in "
                  "model-00001-of-00002.safetensors, whose header has no such "
                  "tensor");
  fs::remove(dir + "/model.safetensors.index.json");
  EXPECT_NE(errorOf([&] { SafetensorsWeights{dir}; })
                .find("holds neither model.safetensors nor "
                      "model.safetensors.index.json"),
            std::string::npos);
}

TEST(SafetensorsTest, MatchesNamesLessAPrefix) {
  std::vector<std::string> weights = {"hf.transformer.wte.weight",
                                      "hf.transformer.h.0.ln_1.weight",
                                      "hf.lm_head.weight"};
  std::vector<std::string> tensors = {"transformer.wte.weight",
                                      "transformer.h.0.ln_1.weight",
                                      "lm_head.weight", "unused.bias"};
  WeightNameMatch m = matchWeightNames(weights, tensors, nullptr, "F");
  EXPECT_EQ(m.prefix, "hf.");
  EXPECT_EQ(m.matched.at("hf.lm_head.weight"), "lm_head.weight");
  EXPECT_TRUE(m.missing.empty());
  EXPECT_EQ(m.unused, std::vector<std::string>{"unused.bias"});
  EXPECT_EQ(strippedName(m, "hf.transformer.wte.weight"),
            "transformer.wte.weight");

  // Equal names need no prefix.
  EXPECT_EQ(matchWeightNames(tensors, tensors, nullptr, "F").prefix, "");

  // A weight without its tensor.
  m = matchWeightNames(weights, {"transformer.wte.weight", "lm_head.weight"},
                       nullptr, "F");
  EXPECT_EQ(m.missing,
            std::vector<std::string>{"hf.transformer.h.0.ln_1.weight"});

  // Two prefixes that match as many weights.
  EXPECT_EQ(errorOf([&] {
              matchWeightNames({"h.0.ln.weight", "h.1.ln.weight"},
                               {"ln.weight"}, nullptr, "F");
            }),
            "the names of the model's weights match the tensors of F equally "
            "well (1 of 2) with any of the prefixes 'h.0.', 'h.1.' stripped; "
            "give the prefix with --hf-prefix");
  std::string given = "h.1.";
  m = matchWeightNames({"h.0.ln.weight", "h.1.ln.weight"}, {"ln.weight"},
                       &given, "F");
  EXPECT_EQ(m.matched.size(), 1u);
  EXPECT_EQ(m.matched.at("h.1.ln.weight"), "ln.weight");
}

} // namespace
