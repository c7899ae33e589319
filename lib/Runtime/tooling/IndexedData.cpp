//===- IndexedData.cpp - Megatron indexed datasets as training data -------===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The algorithm is docs/Data.md's, which an independent Python
// implementation (test/e2e/check_indexed_data.py) follows too: change both
// or neither.
//
//===----------------------------------------------------------------------===//

#include "tooling/IndexedData.h"

#include "PlanLoader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

using namespace shoal::rt;
namespace fs = std::filesystem;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Megatron's files are little-endian, read in place");

//===----------------------------------------------------------------------===//
// Random streams
//===----------------------------------------------------------------------===//

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
} // namespace

uint64_t SplitMix64::mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() {
  state += kGolden;
  return mix(state);
}

SplitMix64 shoal::rt::dataStream(int64_t seed, int64_t dataset, int64_t epoch,
                                 StreamPurpose purpose) {
  // Each key word enters as mix(h + golden * (word + 1)), all mod 2^64.
  uint64_t h = static_cast<uint64_t>(seed);
  for (uint64_t word :
       {static_cast<uint64_t>(dataset), static_cast<uint64_t>(epoch),
        static_cast<uint64_t>(purpose)})
    h = SplitMix64::mix(h + kGolden * (word + 1));
  return SplitMix64(h);
}

std::vector<int64_t> shoal::rt::shuffledRange(int64_t n, SplitMix64 &rng) {
  std::vector<int64_t> a(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    a[i] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1));
    std::swap(a[i], a[j]);
  }
  return a;
}

//===----------------------------------------------------------------------===//
// The .idx and .bin files
//===----------------------------------------------------------------------===//

namespace {

/// megatron/core/datasets/indexed_dataset.py: _INDEX_HEADER, then the
/// version (u64), the dtype code (u8), the sequence and document counts
/// (u64 each).
const char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kIndexHeaderBytes = 34;

template <typename T> T readAt(const uint8_t *base, std::size_t offset) {
  T v;
  std::memcpy(&v, base + offset, sizeof v);
  return v;
}

const char *kCodeList = "1 (uint8), 2 (int8), 3 (int16), 4 (int32), "
                        "5 (int64) or 8 (uint16)";

} // namespace

MegatronIndex::MegatronIndex(const uint8_t *data, std::size_t size,
                             uint64_t binSize, const std::string &idxPath,
                             const std::string &binPath)
    : base(data) {
  if (size < kIndexHeaderBytes)
    throw Error(fmt::format(
        "{}: truncated Megatron index: {} bytes, but its header alone takes "
        "{} (the magic MMIDIDX\\x00\\x00, the version, the dtype code, the "
        "sequence and document counts)",
        idxPath, size, kIndexHeaderBytes));
  if (std::memcmp(data, kIndexMagic, sizeof kIndexMagic) != 0) {
    std::string seen;
    for (std::size_t i = 0; i < sizeof kIndexMagic; ++i)
      seen += std::isprint(data[i]) ? std::string(1, char(data[i]))
                                    : fmt::format("\\x{:02x}", data[i]);
    throw Error(fmt::format("{}: not a Megatron index: it starts with '{}', "
                            "expected the magic 'MMIDIDX\\x00\\x00'",
                            idxPath, seen));
  }
  uint64_t version = readAt<uint64_t>(data, 9);
  if (version != 1)
    throw Error(fmt::format("{}: Megatron index version {}; expected 1",
                            idxPath, version));
  code = data[17];
  switch (code) {
  case 1:
  case 2:
    itemSize = 1;
    break;
  case 3:
  case 8:
    itemSize = 2;
    break;
  case 4:
    itemSize = 4;
    break;
  case 5:
    itemSize = 8;
    break;
  case 6:
  case 7:
    throw Error(fmt::format("{}: the tokens are {} (dtype code {}); token ids "
                            "are integers: expected the dtype code {}",
                            idxPath, code == 6 ? "float64" : "float32", code,
                            kCodeList));
  default:
    throw Error(fmt::format("{}: unknown dtype code {}; expected {}", idxPath,
                            code, kCodeList));
  }
  uint64_t s = readAt<uint64_t>(data, 18), d = readAt<uint64_t>(data, 26);
  std::size_t rest = size - kIndexHeaderBytes;
  // 4 + 8 bytes per sequence (length, pointer), 8 per document index.
  if (s > rest / 12 || d > (rest - s * 12) / 8)
    throw Error(fmt::format(
        "{}: truncated Megatron index: {} sequences and {} document indices "
        "need {} bytes, the file has {}",
        idxPath, s, d,
        fmt::format("{}", static_cast<unsigned __int128>(s) * 12 +
                              static_cast<unsigned __int128>(d) * 8 +
                              kIndexHeaderBytes),
        size));
  sequences = static_cast<int64_t>(s);
  documents = static_cast<int64_t>(d);
  lengthsAt = kIndexHeaderBytes;
  pointersAt = lengthsAt + 4 * s;
  documentsAt = pointersAt + 8 * s;
  std::size_t end = documentsAt + 8 * d;
  // Newer indexes of multimodal datasets add one int8 mode per sequence.
  if (size - end != 0 && size - end != s)
    throw Error(fmt::format(
        "{}: {} bytes after the document indices; expected none, or {} (one "
        "mode per sequence)",
        idxPath, size - end, s));
  for (int64_t i = 0; i < sequences; ++i) {
    int64_t len = length(i), ptr = pointer(i);
    if (len < 0)
      throw Error(fmt::format("{}: sequence {} has length {}; expected >= 0",
                              idxPath, i, len));
    if (ptr < 0 || static_cast<uint64_t>(ptr) > binSize ||
        static_cast<uint64_t>(len) * itemSize >
            binSize - static_cast<uint64_t>(ptr))
      throw Error(fmt::format(
          "{}: sequence {} ({} tokens of {} bytes at byte {}) ends past the "
          "end of {} ({} bytes)",
          idxPath, i, len, itemSize, ptr, binPath, binSize));
    tokens += len;
  }
  if (documents < 1)
    throw Error(fmt::format("{}: no document index; expected at least the "
                            "leading 0",
                            idxPath));
  int64_t previous = 0;
  for (int64_t j = 0; j < documents; ++j) {
    int64_t v = readAt<int64_t>(base, documentsAt + 8 * j);
    if ((j == 0 && v != 0) || v < previous || v > sequences ||
        (j == documents - 1 && v != sequences))
      throw Error(fmt::format(
          "{}: document index {} is {}; expected sequence indices that rise "
          "from 0 to the sequence count {}",
          idxPath, j, v, sequences));
    previous = v;
  }
}

const char *MegatronIndex::dtypeName() const {
  switch (code) {
  case 1:
    return "uint8";
  case 2:
    return "int8";
  case 3:
    return "int16";
  case 4:
    return "int32";
  case 5:
    return "int64";
  default:
    return "uint16";
  }
}

int64_t MegatronIndex::length(int64_t i) const {
  return readAt<int32_t>(base, lengthsAt + 4 * i);
}

int64_t MegatronIndex::pointer(int64_t i) const {
  return readAt<int64_t>(base, pointersAt + 8 * i);
}

int64_t MegatronIndex::documentOf(int64_t i) const {
  // The last document index <= i whose successor is > i.
  int64_t lo = 0, hi = documents - 1;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (readAt<int64_t>(base, documentsAt + 8 * mid) <= i)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

std::string IndexedDataset::prefixOf(const std::string &path) {
  auto endsWith = [&](const char *ext) {
    return path.size() > 4 && path.compare(path.size() - 4, 4, ext) == 0;
  };
  if (endsWith(".bin") || endsWith(".idx"))
    return path.substr(0, path.size() - 4);
  std::error_code ec;
  if (fs::is_regular_file(path + ".idx", ec) ||
      fs::is_regular_file(path + ".bin", ec))
    return path;
  return "";
}

namespace {
std::string prefixOrPath(const std::string &path) {
  std::string prefix = IndexedDataset::prefixOf(path);
  return prefix.empty() ? path : prefix;
}
} // namespace

IndexedDataset::IndexedDataset(const std::string &path)
    : prefixPath(prefixOrPath(path)),
      bin(prefixPath + ".bin", "Megatron data file"),
      idxFile(prefixPath + ".idx", "Megatron index file") {
  idx = std::make_unique<MegatronIndex>(idxFile.data(), idxFile.size(),
                                        bin.size(), idxFile.path(), bin.path());
}

int64_t IndexedDataset::token(int64_t seq, int64_t j, int64_t maxToken) const {
  std::size_t at =
      static_cast<std::size_t>(idx->pointer(seq) + j * idx->tokenBytes());
  const uint8_t *p = bin.data();
  int64_t v = 0;
  switch (idx->dtypeCode()) {
  case 1:
    v = readAt<uint8_t>(p, at);
    break;
  case 2:
    v = readAt<int8_t>(p, at);
    break;
  case 3:
    v = readAt<int16_t>(p, at);
    break;
  case 4:
    v = readAt<int32_t>(p, at);
    break;
  case 5:
    v = readAt<int64_t>(p, at);
    break;
  default:
    v = readAt<uint16_t>(p, at);
    break;
  }
  if (v < 0 || v > maxToken)
    throw Error(fmt::format(
        "{}: token {} at position {} of sequence {} (document {}) {}",
        bin.path(), v, j, seq, idx->documentOf(seq),
        v < 0 ? std::string("is negative; token ids are >= 0")
              : fmt::format("does not fit the token input's int32 (ids up "
                            "to {})",
                            maxToken)));
  return v;
}

//===----------------------------------------------------------------------===//
// Samples
//===----------------------------------------------------------------------===//

GptSamples::GptSamples(const IndexedDataset &data, int64_t seqLen, int64_t seed,
                       int64_t datasetIndex, int64_t maxToken)
    : data(data), seq(seqLen), seed(seed), datasetIndex(datasetIndex),
      maxToken(maxToken) {
  int64_t tokens = data.index().totalTokens();
  if (seq < 1 || tokens < seq + 1)
    throw Error(fmt::format(
        "{} holds {} tokens in {} sequences; a sample takes T + 1 = {} "
        "tokens (T = {}, the token input's second dimension)",
        data.prefix(), tokens, data.index().numSequences(), seq + 1, seq));
  perEpoch = (tokens - 1) / seq;
}

const GptSamples::Epoch &GptSamples::epoch(int64_t e) const {
  for (const Epoch &c : cache)
    if (c.number == e)
      return c;
  Epoch &c = cache[next];
  next ^= 1;
  c.number = -1;
  const MegatronIndex &index = data.index();
  SplitMix64 documents =
      dataStream(seed, datasetIndex, e, StreamPurpose::Documents);
  c.order = shuffledRange(index.numSequences(), documents);
  c.starts.assign(c.order.size() + 1, 0);
  for (std::size_t i = 0; i < c.order.size(); ++i)
    c.starts[i + 1] = c.starts[i] + index.length(c.order[i]);
  SplitMix64 samples =
      dataStream(seed, datasetIndex, e, StreamPurpose::Samples);
  c.cuts = shuffledRange(perEpoch, samples);
  c.number = e;
  return c;
}

void GptSamples::sample(int64_t k, int64_t *out) const {
  std::lock_guard<std::mutex> lock(mutex);
  const Epoch &ep = epoch(k / perEpoch);
  int64_t offset = ep.cuts[k % perEpoch] * seq;
  // The sequence holding `offset`: the last start <= offset (empty
  // sequences share their start with the next, which upper_bound skips).
  std::size_t p = std::upper_bound(ep.starts.begin(), ep.starts.end(), offset) -
                  ep.starts.begin() - 1;
  int64_t pos = offset - ep.starts[p];
  const MegatronIndex &index = data.index();
  for (int64_t t = 0; t <= seq; ++t, ++pos) {
    while (pos >= index.length(ep.order[p])) {
      ++p;
      pos = 0;
    }
    out[t] = data.token(ep.order[p], pos, maxToken);
  }
}

BlendOrder::BlendOrder(std::vector<double> w) : weights(std::move(w)) {
  double sum = 0;
  for (double v : weights)
    sum += v;
  for (double &v : weights)
    v /= sum;
  counts.assign(weights.size(), 0);
}

std::pair<int, int64_t> BlendOrder::at(int64_t k) const {
  std::lock_guard<std::mutex> lock(mutex);
  if (k < position) {
    position = 0;
    std::fill(counts.begin(), counts.end(), 0);
  }
  for (;; ++position) {
    // megatron/core/datasets/helpers.cpp, build_blending_indices, with
    // the target count after this sample, k + 1, where Megatron has
    // max(k, 1) (which lets a dataset of weight 0 tie at k = 1).
    double x = static_cast<double>(position + 1);
    int best = 0;
    double bestError = 0;
    for (std::size_t d = 0; d < weights.size(); ++d) {
      // Rounded before the subtraction (no fused multiply-add), as Python
      // and numpy compute it.
      volatile double product = weights[d] * x;
      double error = product - static_cast<double>(counts[d]);
      if (d == 0 || error > bestError) {
        best = static_cast<int>(d);
        bestError = error;
      }
    }
    int64_t own = counts[best]++;
    if (position == k) {
      ++position;
      return {best, own};
    }
  }
}

namespace {

std::vector<std::string> words(const std::string &spec) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < spec.size()) {
    while (i < spec.size() && std::isspace(static_cast<unsigned char>(spec[i])))
      ++i;
    std::size_t j = i;
    while (j < spec.size() &&
           !std::isspace(static_cast<unsigned char>(spec[j])))
      ++j;
    if (j > i)
      out.push_back(spec.substr(i, j - i));
    i = j;
  }
  return out;
}

bool hasSpace(const std::string &s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c));
  });
}

/// `--data SPEC`, the spec quoted when it is a blend.
std::string named(const char *flag, const std::string &spec) {
  return hasSpace(spec) ? fmt::format("{} '{}'", flag, spec)
                        : fmt::format("{} {}", flag, spec);
}

} // namespace

bool IndexedData::matches(const std::string &spec) {
  std::error_code ec;
  if (fs::is_directory(spec, ec))
    return false;
  std::string prefix = IndexedDataset::prefixOf(spec);
  if (!prefix.empty() && prefix != spec)
    return true; // PREFIX.bin or PREFIX.idx
  // An existing file is a .npy, its name with spaces or not.
  if (fs::is_regular_file(spec, ec))
    return false;
  return hasSpace(spec) || !prefix.empty();
}

IndexedData::IndexedData(const std::string &spec, int64_t seqLen, int64_t seed,
                         const char *flag, int64_t maxToken)
    : seq(seqLen) {
  std::string name = named(flag, spec);
  std::vector<std::string> w = words(spec);
  const char *form = "a blend is weight-prefix pairs, 'W1 PREFIX1 W2 "
                     "PREFIX2 ...' (Megatron's --data-path)";
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  if (w.empty())
    throw Error(fmt::format("{}: no dataset; expected PREFIX, or weight-prefix "
                            "pairs 'W1 PREFIX1 W2 PREFIX2 ...'",
                            name));
  if (w.size() == 1) {
    prefixes = w;
  } else {
    if (w.size() % 2)
      throw Error(fmt::format("{}: {} words; {}", name, w.size(), form));
    double sum = 0;
    for (std::size_t i = 0; i < w.size(); i += 2) {
      const std::string &text = w[i];
      char *end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || !std::isfinite(v))
        throw Error(fmt::format("{}: '{}' (word {}) is no weight; {}", name,
                                text, i + 1, form));
      if (v < 0)
        throw Error(fmt::format("{}: the weight {} of {} is negative; "
                                "weights are >= 0 and are normalised by "
                                "their sum",
                                name, text, w[i + 1]));
      sum += v;
      weights.push_back(v);
      prefixes.push_back(w[i + 1]);
    }
    if (!(sum > 0))
      throw Error(fmt::format("{}: the weights sum to 0; at least one must "
                              "be positive",
                              name));
    blend = std::make_unique<BlendOrder>(weights);
  }
  try {
    for (std::size_t d = 0; d < prefixes.size(); ++d) {
      datasets.push_back(std::make_unique<IndexedDataset>(prefixes[d]));
      samples.push_back(std::make_unique<GptSamples>(
          *datasets.back(), seqLen, seed, static_cast<int64_t>(d), maxToken));
    }
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", name, e.what()));
  }
}

std::pair<int, int64_t> IndexedData::source(int64_t k) const {
  if (!blend)
    return {0, k};
  return blend->at(k);
}

void IndexedData::sample(int64_t k, int64_t *out) const {
  auto [d, own] = source(k);
  samples[d]->sample(own, out);
}

//===----------------------------------------------------------------------===//
// Feeding a training plan
//===----------------------------------------------------------------------===//

TokenPorts shoal::rt::tokenPorts(const std::string &path,
                                 const TrainingInfo &training, const char *flag,
                                 const char *form) {
  std::string name = named(flag, path);
  if (training.otherInputs.size() != 1)
    throw Error(fmt::format(
        "{}: the training plan has {} inputs besides the labels '{}'{}; {} "
        "{} feeds exactly one token input (use {} DIR, one .npy per input, "
        "or --inputs DIR instead)",
        name, training.otherInputs.size(), training.labels,
        training.otherInputs.empty()
            ? std::string()
            : fmt::format(" ({})", fmt::join(training.otherInputs, ", ")),
        flag, form, flag));
  TokenPorts ports;
  ports.tokens = training.otherInputs[0];
  ports.labels = training.labels;
  ports.tokenType = training.otherInputTypes[0];
  ports.labelsType = training.labelsType;
  auto integer = [](const TensorType &t) {
    return (t.dtype == DType::I64 || t.dtype == DType::I32) &&
           t.shape.size() == 2;
  };
  if (!integer(ports.tokenType) || !integer(ports.labelsType) ||
      ports.tokenType.shape != ports.labelsType.shape)
    throw Error(fmt::format("{}: the token input '{}' is {} and the labels "
                            "'{}' are {}; {} {} needs both to be integer [B, "
                            "T] (use {} DIR, one .npy per input)",
                            name, ports.tokens, ports.tokenType.str(),
                            ports.labels, ports.labelsType.str(), flag, form,
                            flag));
  ports.batch = ports.tokenType.shape[0];
  ports.seq = ports.tokenType.shape[1];
  return ports;
}

bool shoal::rt::putToken(Tensor &t, int64_t k, int64_t v) {
  if (v < 0)
    return false;
  if (t.dtype() == DType::I64) {
    t.data<int64_t>()[k] = v;
    return true;
  }
  if (v > INT32_MAX)
    return false;
  t.data<int32_t>()[k] = static_cast<int32_t>(v);
  return true;
}

namespace {

/// Step s feeds global samples s * B + i, i < B: row[:T] to the token
/// input, row[1:] to the labels. The rows of the last step are kept, since
/// both inputs read them.
class IndexedStepData final : public StepData {
public:
  IndexedStepData(const std::string &spec, const TrainingInfo &training,
                  const TrainingOptions &options, const char *flag)
      : name(named(flag, spec)),
        ports(tokenPorts(spec, training, flag, "PREFIX")),
        data(spec, ports.seq, options.dataSeed, flag,
             ports.tokenType.dtype == DType::I32 ? INT32_MAX : INT64_MAX) {}

  Tensor make(int64_t step, const std::string &input) const override {
    bool isLabels = input == ports.labels;
    if (!isLabels && input != ports.tokens)
      throw Error(
          fmt::format("internal error: {} has no input '{}'", name, input));
    int64_t b = ports.batch, t = ports.seq;
    std::lock_guard<std::mutex> lock(mutex);
    if (rowsStep != step) {
      rowsStep = -1;
      rows.resize(static_cast<std::size_t>(b * (t + 1)));
      if (step < 0 || step > (INT64_MAX - b) / b)
        throw Error(
            fmt::format("{}: step {} is past the last sample", name, step));
      try {
        for (int64_t i = 0; i < b; ++i)
          data.sample(step * b + i, rows.data() + i * (t + 1));
      } catch (const Error &e) {
        throw Error(fmt::format("{}: {}", name, e.what()));
      }
      rowsStep = step;
    }
    Tensor out(isLabels ? ports.labelsType : ports.tokenType);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < t; ++j)
        putToken(out, i * t + j, rows[i * (t + 1) + j + (isLabels ? 1 : 0)]);
    return out;
  }

private:
  std::string name;
  TokenPorts ports;
  IndexedData data;
  mutable std::mutex mutex;
  mutable int64_t rowsStep = -1;
  mutable std::vector<int64_t> rows;
};

} // namespace

std::unique_ptr<StepData>
shoal::rt::openIndexedData(const std::string &spec,
                           const TrainingInfo &training,
                           const TrainingOptions &options, const char *flag) {
  return std::make_unique<IndexedStepData>(spec, training, options, flag);
}
