//===- IndexedDataTest.cpp - Tests of Megatron indexed data -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The .idx parser's checks, the random streams, the per-epoch sample index
// and the blend order. The samples against an independent implementation of
// docs/Data.md are ctest e2e.data.indexed (test/e2e/check_indexed_data.py).
//
//===----------------------------------------------------------------------===//

#include "tooling/IndexedData.h"

#include "ErrorOf.h"
#include "PlanLoader.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

template <typename T> void append(std::string &out, T v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

/// An index as Megatron's _IndexWriter writes it.
std::string indexBytes(uint8_t code, const std::vector<int32_t> &lengths,
                       const std::vector<int64_t> &pointers,
                       const std::vector<int64_t> &documents,
                       uint64_t version = 1) {
  std::string out("MMIDIDX\0\0", 9);
  append<uint64_t>(out, version);
  append<uint8_t>(out, code);
  append<uint64_t>(out, lengths.size());
  append<uint64_t>(out, documents.size());
  for (int32_t l : lengths)
    append(out, l);
  for (int64_t p : pointers)
    append(out, p);
  for (int64_t d : documents)
    append(out, d);
  return out;
}

/// Contiguous pointers for `lengths` tokens of `size` bytes.
std::vector<int64_t> pointersOf(const std::vector<int32_t> &lengths, int size) {
  std::vector<int64_t> out;
  int64_t p = 0;
  for (int32_t l : lengths) {
    out.push_back(p);
    p += int64_t(l) * size;
  }
  return out;
}

std::string parseError(const std::string &idx, uint64_t binSize) {
  return errorOf([&] {
    MegatronIndex(reinterpret_cast<const uint8_t *>(idx.data()), idx.size(),
                  binSize, "d.idx", "d.bin");
  });
}

/// Writes PREFIX.bin/.idx of uint16 sequences, one document each.
std::string writeDataset(const std::string &prefix,
                         const std::vector<std::vector<uint16_t>> &seqs) {
  std::string bin;
  std::vector<int32_t> lengths;
  std::vector<int64_t> docs{0};
  for (const auto &s : seqs) {
    for (uint16_t t : s)
      append(bin, t);
    lengths.push_back(static_cast<int32_t>(s.size()));
    docs.push_back(static_cast<int64_t>(lengths.size()));
  }
  writeFile(prefix + ".bin", bin);
  writeFile(prefix + ".idx",
            indexBytes(8, lengths, pointersOf(lengths, 2), docs));
  return prefix;
}

/// Sequences whose tokens say where they are: 100 * (seq + 1) + j.
std::vector<std::vector<uint16_t>>
positionalSequences(const std::vector<int> &lengths) {
  std::vector<std::vector<uint16_t>> out;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    out.emplace_back();
    for (int j = 0; j < lengths[s]; ++j)
      out.back().push_back(static_cast<uint16_t>(100 * (s + 1) + j));
  }
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Random streams
//===----------------------------------------------------------------------===//

// The published splitmix64 outputs for the state 0.
TEST(IndexedData, SplitMix64ReferenceOutputs) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
}

TEST(IndexedData, ShuffledRangeIsAPermutation) {
  for (int64_t n : {0, 1, 2, 7, 100}) {
    SplitMix64 rng = dataStream(1234, 0, 0, StreamPurpose::Documents);
    std::vector<int64_t> p = shuffledRange(n, rng);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(sorted[i], i);
  }
  // Streams differ in every key word.
  auto first = [](int64_t seed, int64_t d, int64_t e, StreamPurpose p) {
    return dataStream(seed, d, e, p).next();
  };
  std::set<uint64_t> seen{first(1234, 0, 0, StreamPurpose::Documents),
                          first(1235, 0, 0, StreamPurpose::Documents),
                          first(1234, 1, 0, StreamPurpose::Documents),
                          first(1234, 0, 1, StreamPurpose::Documents),
                          first(1234, 0, 0, StreamPurpose::Samples)};
  EXPECT_EQ(seen.size(), 5u);
}

//===----------------------------------------------------------------------===//
// The .idx parser
//===----------------------------------------------------------------------===//

TEST(IndexedData, ParsesMegatronIndex) {
  std::vector<int32_t> lengths{3, 0, 5};
  std::string idx = indexBytes(8, lengths, pointersOf(lengths, 2), {0, 2, 3});
  MegatronIndex index(reinterpret_cast<const uint8_t *>(idx.data()), idx.size(),
                      16, "d.idx", "d.bin");
  EXPECT_EQ(index.dtypeCode(), 8);
  EXPECT_EQ(index.tokenBytes(), 2);
  EXPECT_STREQ(index.dtypeName(), "uint16");
  EXPECT_EQ(index.numSequences(), 3);
  EXPECT_EQ(index.numDocuments(), 2);
  EXPECT_EQ(index.totalTokens(), 8);
  EXPECT_EQ(index.length(2), 5);
  EXPECT_EQ(index.pointer(2), 6);
  EXPECT_EQ(index.documentOf(0), 0);
  EXPECT_EQ(index.documentOf(1), 0);
  EXPECT_EQ(index.documentOf(2), 1);
  // Multimodal indexes end with one int8 mode per sequence.
  EXPECT_EQ(parseError(idx + std::string(3, '\0'), 16), "");
}

TEST(IndexedData, IndexErrors) {
  std::vector<int32_t> lengths{3, 5};
  std::vector<int64_t> pointers = pointersOf(lengths, 2);
  std::string good = indexBytes(8, lengths, pointers, {0, 2});
  EXPECT_EQ(parseError(good, 16), "");

  EXPECT_EQ(parseError(good.substr(0, 20), 16),
            "d.idx: truncated Megatron index: 20 bytes, but its header alone "
            "takes 34 (the magic MMIDIDX\\x00\\x00, the version, the dtype "
            "code, the sequence and document counts)");
  EXPECT_EQ(parseError(good.substr(0, good.size() - 4), 16),
            "d.idx: truncated Megatron index: 2 sequences and 2 document "
            "indices need 74 bytes, the file has 70");
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_EQ(parseError(magic, 16),
            "d.idx: not a Megatron index: it starts with "
            "'XMIDIDX\\x00\\x00', expected the magic 'MMIDIDX\\x00\\x00'");
  EXPECT_EQ(parseError(indexBytes(8, lengths, pointers, {0, 2}, 2), 16),
            "d.idx: Megatron index version 2; expected 1");
  EXPECT_EQ(
      parseError(indexBytes(6, lengths, pointersOf(lengths, 8), {0, 2}), 64),
      "d.idx: the tokens are float64 (dtype code 6); token ids are "
      "integers: expected the dtype code 1 (uint8), 2 (int8), 3 "
      "(int16), 4 (int32), 5 (int64) or 8 (uint16)");
  EXPECT_EQ(
      parseError(indexBytes(7, lengths, pointersOf(lengths, 4), {0, 2}), 32),
      "d.idx: the tokens are float32 (dtype code 7); token ids are integers: "
      "expected the dtype code 1 (uint8), 2 (int8), 3 (int16), 4 (int32), 5 "
      "(int64) or 8 (uint16)");
  EXPECT_EQ(parseError(indexBytes(9, lengths, pointers, {0, 2}), 16),
            "d.idx: unknown dtype code 9; expected 1 (uint8), 2 (int8), 3 "
            "(int16), 4 (int32), 5 (int64) or 8 (uint16)");
  // The .bin is one token short.
  EXPECT_EQ(parseError(good, 15),
            "d.idx: sequence 1 (5 tokens of 2 bytes at byte 6) ends past the "
            "end of d.bin (15 bytes)");
  EXPECT_EQ(parseError(indexBytes(8, lengths, {0, -2}, {0, 2}), 16),
            "d.idx: sequence 1 (5 tokens of 2 bytes at byte -2) ends past the "
            "end of d.bin (16 bytes)");
  EXPECT_EQ(parseError(indexBytes(8, lengths, {0, 1000}, {0, 2}), 16),
            "d.idx: sequence 1 (5 tokens of 2 bytes at byte 1000) ends past "
            "the end of d.bin (16 bytes)");
  EXPECT_EQ(parseError(indexBytes(8, {3, -1}, {0, 6}, {0, 2}), 16),
            "d.idx: sequence 1 has length -1; expected >= 0");
  EXPECT_EQ(parseError(indexBytes(8, lengths, pointers, {1, 2}), 16),
            "d.idx: document index 0 is 1; expected sequence indices that "
            "rise from 0 to the sequence count 2");
  EXPECT_EQ(parseError(indexBytes(8, lengths, pointers, {0, 1}), 16),
            "d.idx: document index 1 is 1; expected sequence indices that "
            "rise from 0 to the sequence count 2");
  EXPECT_EQ(parseError(indexBytes(8, lengths, pointers, {}), 16),
            "d.idx: no document index; expected at least the leading 0");
  EXPECT_EQ(parseError(good + "x", 16),
            "d.idx: 1 bytes after the document indices; expected none, or 2 "
            "(one mode per sequence)");
  // Counts so large that their byte sizes overflow are truncation.
  std::string huge = good;
  uint64_t many = ~uint64_t(0) / 4;
  std::memcpy(&huge[18], &many, 8);
  EXPECT_NE(parseError(huge, 16).find("truncated Megatron index"),
            std::string::npos);
}

TEST(IndexedData, OpensByPrefixBinOrIdx) {
  std::string dir = makeTempDir();
  std::string prefix = writeDataset(dir + "/d", positionalSequences({4, 2}));
  for (const std::string &path : {prefix, prefix + ".bin", prefix + ".idx"}) {
    IndexedDataset ds(path);
    EXPECT_EQ(ds.prefix(), prefix);
    EXPECT_EQ(ds.token(1, 1), 201);
  }
  EXPECT_EQ(IndexedDataset::prefixOf(dir + "/none"), "");
  EXPECT_EQ(errorOf([&] { IndexedDataset ds(dir + "/none.bin"); }),
            "cannot open Megatron data file " + dir +
                "/none.bin: No such file or directory");
  EXPECT_EQ(errorOf([&] { IndexedDataset(prefix).token(0, 0, 99); }),
            prefix + ".bin: token 100 at position 0 of sequence 0 (document "
                     "0) does not fit the token input's int32 (ids up to 99)");
}

TEST(IndexedData, NegativeTokenNamesTheDocument) {
  std::string dir = makeTempDir();
  std::string bin;
  for (int16_t t : {5, 6, 7, -3, 8})
    append(bin, t);
  writeFile(dir + "/n.bin", bin);
  std::vector<int32_t> lengths{2, 1, 2};
  writeFile(dir + "/n.idx",
            indexBytes(3, lengths, pointersOf(lengths, 2), {0, 2, 3}));
  IndexedDataset ds(dir + "/n");
  EXPECT_EQ(ds.token(2, 1), 8);
  EXPECT_EQ(errorOf([&] { ds.token(2, 0); }),
            dir + "/n.bin: token -3 at position 0 of sequence 2 (document 1) "
                  "is negative; token ids are >= 0");
}

//===----------------------------------------------------------------------===//
// Samples
//===----------------------------------------------------------------------===//

// Every epoch's samples tile its concatenation: each is T + 1 consecutive
// tokens of the concatenation of all sequences in some order, consecutive
// cuts overlap by one token, and the whole epoch covers floor((L - 1) / T)
// cuts, whatever the order.
TEST(IndexedData, EpochSamplesTileAConcatenation) {
  std::string dir = makeTempDir();
  std::vector<int> lengths{5, 0, 3, 9, 1, 4};
  std::string prefix = writeDataset(dir + "/d", positionalSequences(lengths));
  IndexedDataset ds(prefix);
  const int64_t t = 4;
  GptSamples samples(ds, t, 1234, 0);
  int64_t total = 22;
  ASSERT_EQ(samples.samplesPerEpoch(), (total - 1) / t);
  int64_t n = samples.samplesPerEpoch();
  for (int64_t e = 0; e < 3; ++e) {
    std::map<int64_t, int> starts; // first token -> count
    std::vector<std::vector<int64_t>> rows;
    for (int64_t k = e * n; k < (e + 1) * n; ++k) {
      std::vector<int64_t> row(t + 1);
      samples.sample(k, row.data());
      rows.push_back(row);
      // Within a sequence tokens step by one; a new sequence starts at 0.
      for (int64_t i = 1; i <= t; ++i)
        EXPECT_TRUE(row[i] == row[i - 1] + 1 || row[i] % 100 == 0)
            << "epoch " << e << " sample " << k;
      ++starts[row[0]];
    }
    // Each sample's last token is another sample's first (the overlap),
    // except for the epoch's last cut.
    int ends = 0;
    for (const auto &row : rows)
      ends += starts.count(row[t]);
    EXPECT_EQ(ends, n - 1) << "epoch " << e;
    EXPECT_EQ(starts.size(), static_cast<std::size_t>(n));
  }
  // The same sample whatever the reading order (the epoch cache).
  std::vector<int64_t> a(t + 1), b(t + 1);
  samples.sample(1, a.data());
  samples.sample(2 * n + 3, b.data());
  samples.sample(n, b.data());
  samples.sample(1, b.data());
  EXPECT_EQ(a, b);
  // Another seed or dataset index, another order.
  std::vector<std::vector<int64_t>> orders;
  for (auto [seed, d] :
       {std::pair<int64_t, int64_t>{1234, 0}, {1, 0}, {1234, 1}}) {
    GptSamples other(ds, t, seed, d);
    std::vector<int64_t> all;
    for (int64_t k = 0; k < 2 * n; ++k) {
      std::vector<int64_t> row(t + 1);
      other.sample(k, row.data());
      all.insert(all.end(), row.begin(), row.end());
    }
    orders.push_back(all);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[0], orders[2]);
}

TEST(IndexedData, TooFewTokens) {
  std::string dir = makeTempDir();
  std::string prefix = writeDataset(dir + "/d", positionalSequences({2, 2}));
  IndexedDataset ds(prefix);
  GptSamples exact(ds, 3, 0, 0); // 4 tokens: one sample
  EXPECT_EQ(exact.samplesPerEpoch(), 1);
  EXPECT_EQ(errorOf([&] { GptSamples(ds, 4, 0, 0); }),
            prefix + " holds 4 tokens in 2 sequences; a sample takes T + 1 = "
                     "5 tokens (T = 4, the token input's second dimension)");
}

//===----------------------------------------------------------------------===//
// Blends
//===----------------------------------------------------------------------===//

// The greedy blend by hand: weights 0.3 and 0.7 (at k = 4 both errors are
// 0.5: the tie goes to dataset 0).
TEST(IndexedData, BlendOrderIsMegatrons) {
  BlendOrder order({3, 7});
  std::vector<std::pair<int, int64_t>> expected{{1, 0}, {0, 0}, {1, 1}, {1, 2},
                                                {0, 1}, {1, 3}, {1, 4}, {1, 5}};
  for (int64_t k = 0; k < 8; ++k)
    EXPECT_EQ(order.at(k), expected[k]) << "sample " << k;
  // Restarted for an earlier sample.
  EXPECT_EQ(order.at(2), expected[2]);
  std::vector<int64_t> counts(2);
  for (int64_t k = 0; k < 1000; ++k)
    ++counts[order.at(k).first];
  EXPECT_EQ(counts[0], 300);
  // Ties go to the lowest index.
  BlendOrder even({1, 1});
  EXPECT_EQ(even.at(0), (std::pair<int, int64_t>{0, 0}));
  EXPECT_EQ(even.at(1), (std::pair<int, int64_t>{1, 0}));
  // A zero weight is never chosen.
  BlendOrder zero({0, 2});
  for (int64_t k = 0; k < 10; ++k)
    EXPECT_EQ(zero.at(k).first, 1);
}

TEST(IndexedData, BlendSpecErrors) {
  std::string dir = makeTempDir();
  std::string a = writeDataset(dir + "/a", positionalSequences({9}));
  std::string b = writeDataset(dir + "/b", positionalSequences({6, 6}));
  IndexedData blend("0.25 " + a + "\n 0.75 " + b + ".bin", 4, 7);
  EXPECT_EQ(blend.numDatasets(), 2u);
  std::vector<int64_t> row(5);
  blend.sample(0, row.data()); // from b
  EXPECT_EQ(blend.source(0), (std::pair<int, int64_t>{1, 0}));
  EXPECT_GE(row[0], 100);

  auto err = [&](const std::string &spec) {
    return errorOf([&] { IndexedData(spec, 4, 7); });
  };
  std::string spec = "0.5 " + a + " 0.5";
  EXPECT_EQ(err(spec), "--data '" + spec +
                           "': 3 words; a blend is weight-prefix pairs, 'W1 "
                           "PREFIX1 W2 PREFIX2 ...' (Megatron's --data-path)");
  spec = "x " + a + " 1 " + b;
  EXPECT_EQ(err(spec), "--data '" + spec +
                           "': 'x' (word 1) is no weight; a blend is "
                           "weight-prefix pairs, 'W1 PREFIX1 W2 PREFIX2 ...' "
                           "(Megatron's --data-path)");
  spec = "1 " + a + " -0.5 " + b;
  EXPECT_EQ(err(spec), "--data '" + spec + "': the weight -0.5 of " + b +
                           " is negative; weights are >= 0 and are normalised "
                           "by their sum");
  spec = "0 " + a + " 0 " + b;
  EXPECT_EQ(err(spec), "--data '" + spec +
                           "': the weights sum to 0; at least one must be "
                           "positive");
  spec = "1 " + a + " 1 " + dir + "/c";
  EXPECT_EQ(err(spec), "--data '" + spec +
                           "': cannot open Megatron data file " + dir +
                           "/c.bin: No such file or directory");
  spec = "1 " + a + " inf " + b;
  EXPECT_EQ(err(spec).find("'inf' (word 3) is no weight"), spec.size() + 11);
}

//===----------------------------------------------------------------------===//
// Feeding a training plan
//===----------------------------------------------------------------------===//

TEST(IndexedData, StepDataFeedsTokensAndLabels) {
  std::string dir = makeTempDir();
  std::string prefix =
      writeDataset(dir + "/d", positionalSequences({7, 3, 8, 5}));
  TrainingInfo training;
  training.otherInputs = {"ids"};
  training.otherInputTypes = {TensorType{DType::I32, {3, 4}}};
  training.labels = "labels";
  training.labelsType = TensorType{DType::I32, {3, 4}};
  TrainingOptions options;
  options.dataSeed = 42;
  std::unique_ptr<StepData> data = openData(prefix, training, options);
  IndexedData reference(prefix, 4, 42);
  for (int64_t step : {0, 1, 5}) {
    Tensor ids = data->make(step, "ids");
    Tensor labels = data->make(step, "labels");
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<int64_t> row(5);
      reference.sample(step * 3 + i, row.data());
      for (int64_t t = 0; t < 4; ++t) {
        EXPECT_EQ(ids.data<int32_t>()[i * 4 + t], row[t]);
        EXPECT_EQ(labels.data<int32_t>()[i * 4 + t], row[t + 1]);
      }
    }
  }
  // A plan with a float input is refused, naming the form.
  training.otherInputTypes = {TensorType{DType::F32, {3, 4}}};
  EXPECT_EQ(
      errorOf([&] { openData(prefix, training, options, "--eval-data"); }),
      "--eval-data " + prefix +
          ": the token input 'ids' is f32[3, 4] and the labels 'labels' "
          "are i32[3, 4]; --eval-data PREFIX needs both to be integer "
          "[B, T] (use --eval-data DIR, one .npy per input)");
}

TEST(IndexedData, PutTokenChecksTheRange) {
  Tensor i32(DType::I32, {2});
  EXPECT_TRUE(putToken(i32, 0, INT32_MAX));
  EXPECT_FALSE(putToken(i32, 1, int64_t(INT32_MAX) + 1));
  EXPECT_FALSE(putToken(i32, 1, -1));
  Tensor i64(DType::I64, {1});
  EXPECT_TRUE(putToken(i64, 0, int64_t(1) << 40));
}
