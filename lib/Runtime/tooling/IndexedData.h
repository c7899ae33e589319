//===- IndexedData.h - Megatron indexed datasets as data --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// `--data PREFIX` and `--data "W1 PREFIX1 W2 PREFIX2 ..."`: token data kept
// as Megatron-Core keeps it (a .bin of token ids and a .idx index,
// megatron/core/datasets/indexed_dataset.py), cut into samples of T + 1
// tokens and shuffled as docs/Data.md specifies, so that an independent
// implementation of that text reads the same samples at the same steps.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_TOOLING_INDEXEDDATA_H
#define SHOAL_RUNTIME_TOOLING_INDEXEDDATA_H

#include "MappedFile.h"
#include "tooling/Tooling.h"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

//===----------------------------------------------------------------------===//
// The random streams (docs/Data.md, "Random streams")
//===----------------------------------------------------------------------===//

/// splitmix64 (Steele, Lea and Flood, 2014): a 64-bit state advanced by the
/// golden-ratio constant, each output the state through `mix`.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state(state) {}
  /// The next output.
  uint64_t next();
  /// splitmix64's output function (a bijection of 64-bit words).
  static uint64_t mix(uint64_t z);

private:
  uint64_t state;
};

/// What a stream shuffles: the documents of an epoch or its samples.
enum class StreamPurpose : int { Documents = 0, Samples = 1 };

/// The generator of stream (seed, dataset, epoch, purpose).
SplitMix64 dataStream(int64_t seed, int64_t dataset, int64_t epoch,
                      StreamPurpose purpose);

/// The permutation of [0, n) that Fisher-Yates draws from `rng`: i from
/// n - 1 down to 1 swaps a[i] with a[rng.next() mod (i + 1)].
std::vector<int64_t> shuffledRange(int64_t n, SplitMix64 &rng);

//===----------------------------------------------------------------------===//
// The .idx and .bin files
//===----------------------------------------------------------------------===//

/// A Megatron index (.idx) checked against the size of its data (.bin).
class MegatronIndex {
public:
  /// Parses the index held in `data[0, size)`; every sequence must lie in
  /// a .bin of `binSize` bytes. Throws Error naming `idxPath` (and
  /// `binPath` for a pointer past its end) and what was expected.
  MegatronIndex(const uint8_t *data, std::size_t size, uint64_t binSize,
                const std::string &idxPath, const std::string &binPath);

  /// Megatron's dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
  /// 8 uint16) and the bytes of one token.
  int dtypeCode() const { return code; }
  int tokenBytes() const { return itemSize; }
  /// numpy's name of the token dtype (uint16, ...).
  const char *dtypeName() const;
  int64_t numSequences() const { return sequences; }
  /// Documents (the document index's entries less one).
  int64_t numDocuments() const { return documents - 1; }
  int64_t length(int64_t i) const;
  int64_t pointer(int64_t i) const;
  /// The document that sequence `i` belongs to.
  int64_t documentOf(int64_t i) const;
  /// Tokens of all sequences.
  int64_t totalTokens() const { return tokens; }

private:
  const uint8_t *base = nullptr;
  int code = 0, itemSize = 0;
  int64_t sequences = 0, documents = 0, tokens = 0;
  std::size_t lengthsAt = 0, pointersAt = 0, documentsAt = 0;
};

/// The .bin/.idx pair of a prefix, mapped.
class IndexedDataset {
public:
  /// `path` is the prefix, or the path of the .bin or the .idx. Throws
  /// Error naming the file.
  explicit IndexedDataset(const std::string &path);

  const MegatronIndex &index() const { return *idx; }
  const std::string &prefix() const { return prefixPath; }
  const std::string &binPath() const { return bin.path(); }
  /// Token `j` of sequence `seq`; throws Error naming the .bin, the
  /// sequence and its document if it is negative or over `maxToken`.
  int64_t token(int64_t seq, int64_t j, int64_t maxToken = INT64_MAX) const;

  /// The prefix of `path` if it names an indexed dataset (PREFIX.idx
  /// exists, or `path` ends in .bin or .idx), else "".
  static std::string prefixOf(const std::string &path);

private:
  std::string prefixPath;
  MappedFile bin, idxFile;
  std::unique_ptr<MegatronIndex> idx;
};

//===----------------------------------------------------------------------===//
// Samples
//===----------------------------------------------------------------------===//

/// The samples of one dataset: each epoch concatenates every sequence in
/// the order of its Documents stream, cuts samples of T + 1 tokens that
/// overlap by one (a shorter tail is dropped) and takes them in the order of
/// its Samples stream.
class GptSamples {
public:
  /// `seqLen` is T; `datasetIndex` the dataset's place in a blend (0 for
  /// one dataset); token ids over `maxToken` are errors. Throws Error if
  /// the dataset holds fewer than T + 1 tokens.
  GptSamples(const IndexedDataset &data, int64_t seqLen, int64_t seed,
             int64_t datasetIndex, int64_t maxToken = INT64_MAX);

  /// Samples per epoch: floor((L - 1) / T), L the dataset's tokens.
  int64_t samplesPerEpoch() const { return perEpoch; }
  /// The T + 1 tokens of the dataset's own sample `k` (epoch k / n).
  void sample(int64_t k, int64_t *out) const;

private:
  struct Epoch {
    int64_t number = -1;
    /// Sequences in concatenation order, where each starts (one more
    /// entry: the total), and the cut each sample position reads.
    std::vector<int64_t> order, starts, cuts;
  };
  const Epoch &epoch(int64_t e) const;

  const IndexedDataset &data;
  int64_t seq, seed, datasetIndex, maxToken, perEpoch = 0;
  /// The two epochs last used (a batch may straddle an epoch's end).
  mutable std::mutex mutex;
  mutable Epoch cache[2];
  mutable int next = 0;
};

/// Megatron's BlendedDataset order: global sample k comes from the dataset
/// d maximising weights[d] * (k + 1) - count[d] (ties to the lowest d),
/// count[d] being how many samples d gave before k.
class BlendOrder {
public:
  /// `weights` normalised by their sum (left to right).
  explicit BlendOrder(std::vector<double> weights);
  /// The dataset of global sample `k` and its own sample index.
  std::pair<int, int64_t> at(int64_t k) const;

private:
  std::vector<double> weights;
  /// The state before sample `position` (walked forward, restarted for an
  /// earlier k).
  mutable std::mutex mutex;
  mutable int64_t position = 0;
  mutable std::vector<int64_t> counts;
};

/// A --data spec of indexed datasets: one prefix, or weight-prefix pairs.
class IndexedData {
public:
  /// Samples of `seqLen` + 1 tokens, ids up to `maxToken`. Throws Error
  /// naming `flag` and `spec` for a bad spec or dataset.
  IndexedData(const std::string &spec, int64_t seqLen, int64_t seed,
              const char *flag = "--data", int64_t maxToken = INT64_MAX);

  int64_t seqLen() const { return seq; }
  std::size_t numDatasets() const { return datasets.size(); }
  const IndexedDataset &dataset(std::size_t d) const { return *datasets[d]; }
  /// The dataset of global sample `k` and its own index there.
  std::pair<int, int64_t> source(int64_t k) const;
  /// The T + 1 tokens of global sample `k`.
  void sample(int64_t k, int64_t *out) const;

  /// Whether `spec` names indexed data: whitespace (a blend) or a prefix.
  static bool matches(const std::string &spec);

private:
  int64_t seq;
  std::vector<std::unique_ptr<IndexedDataset>> datasets;
  std::vector<std::unique_ptr<GptSamples>> samples;
  std::unique_ptr<BlendOrder> blend;
};

/// The token input and labels of a training plan that --data FILE and
/// indexed data feed: both integer [B, T].
struct TokenPorts {
  std::string tokens, labels;
  TensorType tokenType, labelsType;
  int64_t batch = 0, seq = 0;
};
/// Checks that `training` has one token input besides the labels, both
/// integer [B, T]; errors say `flag path` and `form` (FILE or PREFIX).
TokenPorts tokenPorts(const std::string &path, const TrainingInfo &training,
                      const char *flag, const char *form);

/// Writes token `v` as element `k` of the integer tensor `t`; false (and
/// nothing written) if it is negative or does not fit t's dtype.
bool putToken(Tensor &t, int64_t k, int64_t v);

/// The StepData of indexed data: step s feeds global samples s * B + i,
/// i < B, row[:T] to the token input and row[1:] to the labels.
std::unique_ptr<StepData> openIndexedData(const std::string &spec,
                                          const TrainingInfo &training,
                                          const TrainingOptions &options,
                                          const char *flag);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_TOOLING_INDEXEDDATA_H
