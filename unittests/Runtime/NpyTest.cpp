//===- NpyTest.cpp - Tests of .npy reading and writing ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Npy.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

/// A .npy file with the given header dict and `dataBytes` bytes of data.
std::string npyBytes(const std::string &dict, std::size_t dataBytes,
                     int version = 1) {
  std::string header = dict;
  std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(version);
  out += '\0';
  std::size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version != 1) {
    out += '\0';
    out += '\0';
  }
  return out + header + std::string(dataBytes, '\x01');
}

std::string errorOf(const std::string &path) {
  try {
    readNpy(path);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

class NpyTest : public ::testing::Test {
protected:
  void SetUp() override { dir = makeTempDir(); }
  std::string dir;
};

} // namespace

TEST_F(NpyTest, RoundTripAllDTypes) {
  std::mt19937 rng(1);
  std::vector<Tensor> tensors = {
      randomF32({2, 3, 4}, rng),
      makeTensor<int64_t>({5}, {1, -2, 3, INT64_MAX, INT64_MIN}),
      makeTensor<int32_t>({2, 2}, {7, -8, 9, 10}),
      makeTensor<uint8_t>({3}, {1, 0, 1}),
      makeTensor<float>({}, {3.5f}),
      Tensor(DType::F32, {0, 4}),
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::string path = dir + "/t" + std::to_string(i) + ".npy";
    writeNpy(path, tensors[i]);
    std::string bytes = readFile(path);
    // numpy aligns the data to 64 bytes.
    std::size_t headerLen =
        static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    EXPECT_EQ((10 + headerLen) % 64, 0u);
    Tensor back = readNpy(path);
    EXPECT_EQ(back.type(), tensors[i].type()) << path;
    EXPECT_EQ(0, std::memcmp(back.rawData(), tensors[i].rawData(),
                             tensors[i].numBytes()));
  }
}

TEST_F(NpyTest, HeaderTextMatchesNumpy) {
  std::string path = dir + "/a.npy";
  writeNpy(path, Tensor(DType::F32, {5}));
  EXPECT_NE(readFile(path).find(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"),
            std::string::npos);
  writeNpy(path, Tensor(DType::I64, {}));
  EXPECT_NE(readFile(path).find("'descr': '<i8', 'fortran_order': False, "
                                "'shape': (), }"),
            std::string::npos);
}

TEST_F(NpyTest, ReadsVersion2AndDoubleQuotes) {
  std::string path = dir + "/v2.npy";
  writeFile(path, npyBytes("{\"descr\": \"<i4\", \"fortran_order\": False, "
                           "\"shape\": (2, 1)}",
                           8, 2));
  Tensor t = readNpy(path);
  EXPECT_EQ(t.type(), (TensorType{DType::I32, {2, 1}}));
  EXPECT_EQ(toVector<int32_t>(t)[0], 0x01010101);
}

TEST_F(NpyTest, RejectsFortranOrder) {
  std::string path = dir + "/f.npy";
  writeFile(path, npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': "
                           "(2, 3), }",
                           24));
  std::string msg = errorOf(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fortran-order"), std::string::npos) << msg;
}

TEST_F(NpyTest, RejectsUnsupportedDTypes) {
  std::string path = dir + "/d.npy";
  writeFile(path, npyBytes("{'descr': '<u2', 'fortran_order': False, 'shape': "
                           "(2,), }",
                           4));
  std::string msg = errorOf(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsupported dtype '<u2'"), std::string::npos) << msg;

  writeFile(path, npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': "
                           "(2,), }",
                           8));
  msg = errorOf(path);
  EXPECT_NE(msg.find("big-endian"), std::string::npos) << msg;
}

TEST_F(NpyTest, RejectsTruncatedAndMalformedFiles) {
  std::string path = dir + "/t.npy";
  writeFile(path, npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                           "(2, 3), }",
                           20));
  std::string msg = errorOf(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  writeFile(path, npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                           "(2, 3), }",
                           28));
  EXPECT_NE(errorOf(path).find("unexpected bytes"), std::string::npos);

  writeFile(path, "not a numpy file at all");
  EXPECT_NE(errorOf(path).find("not a .npy file"), std::string::npos);

  writeFile(path, std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18));
  EXPECT_NE(errorOf(path).find("truncated .npy header"), std::string::npos);

  writeFile(path, npyBytes("{'descr': '<f4', 'shape': (2, 3), }", 24));
  EXPECT_NE(errorOf(path).find("malformed"), std::string::npos);

  writeFile(path, "");
  EXPECT_NE(errorOf(path).find("not a .npy file"), std::string::npos);

  std::string missing = dir + "/missing.npy";
  msg = errorOf(missing);
  EXPECT_NE(msg.find("cannot open input file " + missing), std::string::npos)
      << msg;
}

TEST(NpyNames, Sanitize) {
  EXPECT_EQ(sanitizeName("input_ids"), "input_ids");
  EXPECT_EQ(sanitizeName("/h.0/attn/q/MatMul:0"), "_h.0_attn_q_MatMul_0");
  EXPECT_EQ(sanitizeName("a b-c"), "a_b-c");
}
