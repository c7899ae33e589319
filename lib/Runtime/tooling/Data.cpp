//===- Data.cpp - Feeding inputs to a run --------------------------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "tooling/Tooling.h"

#include "Backend.h"
#include "MappedFile.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "Sharding.h"
#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

/// Sets this rank's block(s) of input `port` from its global tensor at
/// `global` (one block per micro-batch for an input sharded over "mb").
void setInputBlocks(const LoadedPlan &plan, const PortInfo &port,
                    const uint8_t *global, const std::vector<int64_t> &coords,
                    ProgramRunner &exec) {
  int mbAxis = plan.mesh.microBatchAxis();
  bool perMicroBatch = mbAxis >= 0 && port.sharding.uses(mbAxis);
  for (int j = 0; j < (perMicroBatch ? plan.numMicroBatches : 1); ++j) {
    Tensor t(plan.values[port.value]);
    Shape offsets =
        blockOffsets(port.globalType.shape, port.sharding, plan.mesh,
                     plan.mesh.withMicroBatch(coords, j));
    extractBlock(global, port.globalType.shape, dtypeSize(t.dtype()), offsets,
                 t.shape(), t.rawData());
    if (t.dtype() == DType::Bool) {
      uint8_t *b = t.data<uint8_t>();
      for (int64_t i = 0, n = t.numElements(); i < n; ++i)
        b[i] = b[i] != 0;
    }
    if (perMicroBatch)
      exec.setMicroBatchValue(port.value, j, std::move(t));
    else
      exec.setValue(port.value, std::move(t));
  }
}

/// Sample i of step `step` when `rows` samples are taken `batch` at a time:
/// (step * batch + i) mod rows, without overflow.
int64_t dataRow(int64_t step, int64_t batch, int64_t i, int64_t rows) {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(step) * batch + i) % rows);
}

/// --data FILE: token rows [N, T + 1] feeding a training plan's token input
/// (row[:T]) and labels (row[1:]); step s takes rows (s * B + i) mod N.
class TokenData final : public StepData {
public:
  TokenData(const std::string &path, const TrainingInfo &training)
      : path(path) {
    if (training.otherInputs.size() != 1)
      throw Error(fmt::format(
          "--data {}: the training plan has {} inputs besides the labels "
          "'{}'{}; --data FILE feeds exactly one token input (use --data "
          "DIR, one .npy per input, or --inputs DIR instead)",
          path, training.otherInputs.size(), training.labels,
          training.otherInputs.empty()
              ? std::string()
              : fmt::format(" ({})", fmt::join(training.otherInputs, ", "))));
    tokenName = training.otherInputs[0];
    labelsName = training.labels;
    tokenType = training.otherInputTypes[0];
    labelsType = training.labelsType;
    auto integer = [](const TensorType &t) {
      return (t.dtype == DType::I64 || t.dtype == DType::I32) &&
             t.shape.size() == 2;
    };
    if (!integer(tokenType) || !integer(labelsType) ||
        tokenType.shape != labelsType.shape)
      throw Error(fmt::format("--data {}: the token input '{}' is {} and the "
                              "labels '{}' are {}; --data FILE needs both to "
                              "be integer [B, T] (use --data DIR, one .npy "
                              "per input)",
                              path, tokenName, tokenType.str(), labelsName,
                              labelsType.str()));
    batch = tokenType.shape[0];
    seq = tokenType.shape[1];
    file = std::make_unique<MappedFile>(path, "data file");
    NpyHeader header = parseNpyHeader(file->data(), file->size(), path);
    const TensorType &t = header.type;
    if ((t.dtype != DType::I64 && t.dtype != DType::I32) ||
        t.shape.size() != 2 || t.shape[0] < 1 || t.shape[1] != seq + 1)
      throw Error(fmt::format("--data {} is {}; expected an int32 or int64 "
                              "array [N, {}] of token rows (N >= 1; the token "
                              "input '{}' is {}, so each row holds {} + 1 "
                              "tokens)",
                              path, t.str(), seq + 1, tokenName,
                              tokenType.str(), seq));
    rows = t.shape[0];
    dtype = t.dtype;
    data = file->data() + header.dataOffset;
  }

  Tensor make(int64_t step, const std::string &name) const override {
    bool isLabels = name == labelsName;
    if (!isLabels && name != tokenName)
      throw Error(fmt::format("internal error: --data {} has no input '{}'",
                              path, name));
    Tensor out(isLabels ? labelsType : tokenType);
    for (int64_t i = 0; i < batch; ++i) {
      int64_t row = dataRow(step, batch, i, rows);
      for (int64_t t = 0; t < seq; ++t)
        put(out, i * seq + t, at(row, t + (isLabels ? 1 : 0)));
    }
    return out;
  }

private:
  int64_t at(int64_t row, int64_t col) const {
    std::size_t k = static_cast<std::size_t>(row * (seq + 1) + col);
    if (dtype == DType::I64) {
      int64_t v;
      std::memcpy(&v, data + k * 8, 8);
      return v;
    }
    int32_t v;
    std::memcpy(&v, data + k * 4, 4);
    return v;
  }
  static void put(Tensor &t, int64_t k, int64_t v) {
    if (t.dtype() == DType::I64)
      t.data<int64_t>()[k] = v;
    else
      t.data<int32_t>()[k] = static_cast<int32_t>(v);
  }

  std::string path, tokenName, labelsName;
  TensorType tokenType, labelsType;
  int64_t batch = 0, seq = 0, rows = 0;
  DType dtype = DType::I64;
  std::unique_ptr<MappedFile> file;
  const uint8_t *data = nullptr;
};

/// --data DIR: one `<input name>.npy` per input of the training plan
/// (labels included), each [N, ...] with the input's shape after dimension
/// 0; step s feeds rows (s * B + i) mod N, i < B, of every file.
class FolderData final : public StepData {
public:
  FolderData(const std::string &dir, const TrainingInfo &training) : dir(dir) {
    std::vector<std::pair<std::string, TensorType>> inputs;
    for (std::size_t i = 0; i < training.otherInputs.size(); ++i)
      inputs.push_back({training.otherInputs[i], training.otherInputTypes[i]});
    inputs.push_back({training.labels, training.labelsType});
    std::string firstPath;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const auto &[name, type] = inputs[k];
      if (type.shape.empty())
        throw Error(fmt::format("--data {}: the input '{}' is {}, a scalar; "
                                "--data DIR takes the samples of every input "
                                "along its dimension 0, the batch (use "
                                "--inputs DIR)",
                                dir, name, type.str()));
      if (k == 0)
        batch = type.shape[0];
      else if (type.shape[0] != batch)
        throw Error(fmt::format(
            "--data {}: the inputs '{}' ({}) and '{}' ({}) differ in "
            "dimension 0; --data DIR takes the samples of every input along "
            "dimension 0, the batch, so it must be the same in all (use "
            "--inputs DIR)",
            dir, inputs[0].first, inputs[0].second.str(), name, type.str()));
      Shape sample(type.shape.begin() + 1, type.shape.end());
      std::string expected =
          fmt::format("{}[N{}{}]", dtypeName(type.dtype),
                      sample.empty() ? "" : ", ", fmt::join(sample, ", "));
      std::string path =
          (fs::path(dir) / (sanitizeName(name) + ".npy")).string();
      if (!fs::exists(path))
        throw Error(fmt::format("--data {}: no file {} for the input '{}' "
                                "({}); expected {}: N >= 1 samples of the "
                                "input's shape after the batch dimension {}",
                                dir, path, name, type.str(), expected, batch));
      Source src;
      src.file = std::make_unique<MappedFile>(path, "data file");
      NpyHeader header =
          parseNpyHeader(src.file->data(), src.file->size(), path);
      const TensorType &t = header.type;
      // One step's rows of the file: what --inputs would take (npyFeeds).
      TensorType step{t.dtype, t.shape};
      if (!step.shape.empty())
        step.shape[0] = batch;
      if (t.shape.empty() || t.shape[0] < 1 || !npyFeeds(step, type))
        throw Error(fmt::format("--data {} is {}; expected {} with N >= 1 "
                                "(the input '{}' is {}: N samples of its "
                                "shape after the batch dimension {})",
                                path, t.str(), expected, name, type.str(),
                                batch));
      if (k == 0) {
        rows = t.shape[0];
        firstPath = path;
      } else if (t.shape[0] != rows) {
        throw Error(fmt::format(
            "--data {} holds {} samples and {} {}; every file of --data DIR "
            "holds the same N samples (row i of each is one sample)",
            path, t.shape[0], firstPath, rows));
      }
      src.fileType = step;
      src.want = type.dtype;
      src.data = src.file->data() + header.dataOffset;
      src.rowBytes =
          static_cast<std::size_t>(numElements(sample)) * dtypeSize(t.dtype);
      sources.emplace(name, std::move(src));
    }
    std::set<std::string> known;
    for (const auto &[name, type] : inputs)
      known.insert(sanitizeName(name) + ".npy");
    std::error_code ec;
    for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
      std::string file = e.path().filename().string();
      if (e.path().extension() == ".npy" && !known.count(file))
        extra.push_back(file);
    }
    std::sort(extra.begin(), extra.end());
  }

  Tensor make(int64_t step, const std::string &name) const override {
    auto it = sources.find(name);
    if (it == sources.end())
      throw Error(fmt::format("internal error: --data {} has no input '{}'",
                              dir, name));
    const Source &src = it->second;
    Tensor out(src.fileType);
    for (int64_t i = 0; i < batch; ++i)
      if (src.rowBytes)
        std::memcpy(out.bytes() + i * src.rowBytes,
                    src.data + dataRow(step, batch, i, rows) * src.rowBytes,
                    src.rowBytes);
    // float32 given for bf16, as with --inputs (docs/Runtime.md).
    if (src.fileType.dtype != src.want)
      return convertNpyData(out.bytes(), src.fileType, src.want);
    return out;
  }

  /// The .npy files of the folder that are no input of the plan.
  std::vector<std::string> extraFiles() const override { return extra; }

private:
  struct Source {
    std::unique_ptr<MappedFile> file;
    const uint8_t *data = nullptr;
    /// The file's dtype with the input's global shape; the input's dtype.
    TensorType fileType;
    DType want = DType::F32;
    std::size_t rowBytes = 0;
  };
  std::string dir;
  std::map<std::string, Source> sources;
  std::vector<std::string> extra;
  int64_t batch = 0, rows = 0;
};

} // namespace

/// --data FILE (token rows) or --data DIR (one .npy per input).
std::unique_ptr<StepData> shoal::rt::openData(const std::string &path,
                                              const TrainingInfo &training) {
  if (fs::is_directory(path))
    return std::make_unique<FolderData>(path, training);
  return std::make_unique<TokenData>(path, training);
}

/// Sets this rank's blocks of every input for step `step`.
void shoal::rt::feedData(const LoadedPlan &plan, const StepData &data,
                         int64_t step, const std::vector<int64_t> &coords,
                         ProgramRunner &exec) {
  for (const PortInfo &port : plan.inputs) {
    Tensor global = data.make(step, port.name);
    setInputBlocks(plan, port, global.bytes(), coords, exec);
  }
}

void shoal::rt::loadInputs(const LoadedPlan &plan, const std::string &dir,
                           const std::vector<int64_t> &coords,
                           ProgramRunner &exec) {
  if (!plan.inputs.empty() && dir.empty())
    throw Error(fmt::format("the plan has {} inputs but no inputs folder was "
                            "given (--inputs DIR)",
                            plan.inputs.size()));
  for (const PortInfo &port : plan.inputs) {
    std::string path =
        (fs::path(dir) / (sanitizeName(port.name) + ".npy")).string();
    try {
      MappedFile file(path, "input file");
      NpyHeader header = parseNpyHeader(file.data(), file.size(), path);
      if (!npyFeeds(header.type, port.globalType))
        throw Error(fmt::format("{} is {}, expected {}", path,
                                header.type.str(), port.globalType.str()));
      const uint8_t *data = file.data() + header.dataOffset;
      Tensor converted; // float32 given for bf16 (docs/Runtime.md)
      if (header.type.dtype != port.globalType.dtype) {
        converted = convertNpyData(data, header.type, port.globalType.dtype);
        data = converted.bytes();
      }
      setInputBlocks(plan, port, data, coords, exec);
    } catch (const Error &e) {
      throw Error(fmt::format("input '{}': {}", port.name, e.what()));
    }
  }
}
