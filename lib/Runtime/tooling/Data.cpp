//===- Data.cpp - Feeding inputs to a run -----------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "tooling/IndexedData.h"
#include "tooling/Tooling.h"

#include "Backend.h"
#include "MappedFile.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "Sharding.h"
#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
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

/// A .npy of unsigned token rows (uint16, uint32), which Npy.h does not
/// read: its element size, type text for messages, shape and data offset.
struct UnsignedRows {
  int elemBytes = 0;
  Shape shape;
  std::size_t dataOffset = 0;
  std::string str() const {
    return fmt::format("u{}{}", elemBytes * 8, formatShape(shape));
  }
};

/// `data[0, size)` as a C-order little-endian uint16 or uint32 .npy, or
/// nullopt if its dtype is another (parseNpyHeader's errors then apply).
std::optional<UnsignedRows> parseUnsignedRows(const uint8_t *data,
                                              std::size_t size,
                                              const std::string &path) {
  if (size < 12 || std::memcmp(data, "\x93NUMPY", 6) != 0)
    return std::nullopt;
  std::size_t length = 0, start = 0;
  if (data[6] == 1) {
    length = data[8] | (std::size_t(data[9]) << 8);
    start = 10;
  } else if (data[6] == 2 || data[6] == 3) {
    length = data[8] | (std::size_t(data[9]) << 8) |
             (std::size_t(data[10]) << 16) | (std::size_t(data[11]) << 24);
    start = 12;
  } else {
    return std::nullopt;
  }
  if (length > size - start)
    return std::nullopt;
  std::string text(reinterpret_cast<const char *>(data + start), length);
  std::smatch m;
  static const std::regex descr(R"('descr'\s*:\s*'[<|=]u([24])')");
  static const std::regex fortran(R"('fortran_order'\s*:\s*False)");
  static const std::regex shape(R"('shape'\s*:\s*\(([0-9,\s]*)\))");
  if (!std::regex_search(text, m, descr))
    return std::nullopt;
  UnsignedRows rows;
  rows.elemBytes = m[1] == "2" ? 2 : 4;
  if (!std::regex_search(text, fortran))
    throw Error(fmt::format("{}: Fortran-order arrays are not supported; "
                            "save a C-order array (numpy.ascontiguousarray)",
                            path));
  if (!std::regex_search(text, m, shape))
    throw Error(fmt::format("{}: malformed .npy header: {}", path, text));
  std::string dims = m[1];
  for (std::size_t i = 0; i < dims.size();) {
    std::size_t j = dims.find(',', i);
    std::string d = dims.substr(i, j == std::string::npos ? j : j - i);
    d.erase(std::remove_if(d.begin(), d.end(), ::isspace), d.end());
    if (!d.empty()) {
      if (d.size() > 15)
        throw Error(fmt::format("{}: shape ({}) is too large", path, dims));
      rows.shape.push_back(std::stoll(d));
    }
    if (j == std::string::npos)
      break;
    i = j + 1;
  }
  rows.dataOffset = start + length;
  uint64_t bytes = 0;
  // The byte size of the shape in elements of the same size (f16, i32).
  if (!checkedByteSize(rows.elemBytes == 2 ? DType::F16 : DType::I32,
                       rows.shape, bytes))
    throw Error(fmt::format("{}: shape {} is too large", path,
                            formatShape(rows.shape)));
  if (size - rows.dataOffset != bytes)
    throw Error(fmt::format("{}: a {} array needs {} data bytes, the file has "
                            "{}",
                            path, rows.str(), bytes, size - rows.dataOffset));
  return rows;
}

/// --data FILE: token rows [N, T + 1] (int32, int64, uint16 or uint32)
/// feeding a training plan's token input (row[:T]) and labels (row[1:]);
/// step s takes rows (s * B + i) mod N.
class TokenData final : public StepData {
public:
  TokenData(const std::string &path, const TrainingInfo &training,
            const char *flag)
      : path(path), flag(flag),
        ports(tokenPorts(path, training, flag, "FILE")) {
    batch = ports.batch;
    seq = ports.seq;
    file = std::make_unique<MappedFile>(path, "data file");
    std::optional<UnsignedRows> unsignedRows =
        parseUnsignedRows(file->data(), file->size(), path);
    Shape shape;
    std::string type;
    std::size_t offset = 0;
    if (unsignedRows) {
      shape = unsignedRows->shape;
      type = unsignedRows->str();
      offset = unsignedRows->dataOffset;
      elemBytes = unsignedRows->elemBytes;
      isUnsigned = true;
    } else {
      NpyHeader header = parseNpyHeader(file->data(), file->size(), path);
      const TensorType &t = header.type;
      shape = t.shape;
      type = t.str();
      offset = header.dataOffset;
      if (t.dtype == DType::I64 || t.dtype == DType::I32)
        elemBytes = static_cast<int>(dtypeSize(t.dtype));
    }
    if (!elemBytes || shape.size() != 2 || shape[0] < 1 || shape[1] != seq + 1)
      throw Error(fmt::format("{} {} is {}; expected an int32 or int64 array "
                              "[N, {}] of token rows (N >= 1; the token "
                              "input '{}' is {}, so each row holds {} + 1 "
                              "tokens); uint16 and uint32 are read too",
                              flag, path, type, seq + 1, ports.tokens,
                              ports.tokenType.str(), seq));
    rows = shape[0];
    if (rows < batch)
      throw Error(fmt::format(
          "{} {} holds N = {} token rows, fewer than the batch B = {} of the "
          "token input '{}' ({}): every step would repeat rows; give at "
          "least {} rows",
          flag, path, rows, batch, ports.tokens, ports.tokenType.str(), batch));
    data = file->data() + offset;
  }

  Tensor make(int64_t step, const std::string &name) const override {
    bool isLabels = name == ports.labels;
    if (!isLabels && name != ports.tokens)
      throw Error(fmt::format("internal error: {} {} has no input '{}'", flag,
                              path, name));
    // The rows this step reads: the file must still be the one mapped (a
    // rewrite in place changes the rows under the run, a truncation would
    // kill it with SIGBUS).
    if (file->changedOnDisk())
      throw Error(fmt::format(
          "{} {} changed during the run (rewritten, resized or replaced "
          "after it was opened): the steps would read other rows than the "
          "run started with; give each run a file that stays as it is",
          flag, path));
    std::size_t rowBytes = static_cast<std::size_t>(seq + 1) * elemBytes;
    std::vector<uint8_t> buffer(static_cast<std::size_t>(batch) * rowBytes);
    for (int64_t i = 0; i < batch; ++i) {
      int64_t row = dataRow(step, batch, i, rows);
      file->copyOut(buffer.data() + i * rowBytes,
                    static_cast<std::size_t>(data - file->data()) +
                        static_cast<std::size_t>(row) * rowBytes,
                    rowBytes, "the data file");
    }
    Tensor out(isLabels ? ports.labelsType : ports.tokenType);
    bool narrow = out.dtype() == DType::I32;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t row = dataRow(step, batch, i, rows);
      for (int64_t t = 0; t < seq; ++t) {
        int64_t col = t + (isLabels ? 1 : 0);
        int64_t v = at(buffer.data() + i * rowBytes, col);
        // A token id indexes the embedding's rows from 0; ONNX's Gather
        // would take -1 as the last row. Labels may be negative (an
        // ignored position, -100), which the loss checks.
        if (!isLabels && v < 0)
          throw Error(fmt::format("{} {}: token {} at row {}, column {} is "
                                  "negative; token ids index the "
                                  "embedding's rows from 0",
                                  flag, path, v, row, col));
        if (!narrow) {
          out.data<int64_t>()[i * seq + t] = v;
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
          out.data<int32_t>()[i * seq + t] = static_cast<int32_t>(v);
        } else {
          throw Error(fmt::format("{} {}: token {} at row {}, column {} does "
                                  "not fit the {} '{}' ({})",
                                  flag, path, v, row, col,
                                  isLabels ? "labels" : "token input", name,
                                  out.type().str()));
        }
      }
    }
    return out;
  }

private:
  /// Token `col` of a row copied out of the file.
  int64_t at(const uint8_t *row, int64_t col) const {
    const uint8_t *p = row + static_cast<std::size_t>(col) * elemBytes;
    if (elemBytes == 8) {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    if (elemBytes == 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    if (isUnsigned) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }

  std::string path;
  const char *flag;
  TokenPorts ports;
  int64_t batch = 0, seq = 0, rows = 0;
  int elemBytes = 0;
  bool isUnsigned = false;
  std::unique_ptr<MappedFile> file;
  const uint8_t *data = nullptr;
};

/// --data DIR: one `<input name>.npy` per input of the training plan
/// (labels included), each [N, ...] with the input's shape after dimension
/// 0; step s feeds rows (s * B + i) mod N, i < B, of every file.
class FolderData final : public StepData {
public:
  FolderData(const std::string &dir, const TrainingInfo &training,
             const char *flag)
      : dir(dir) {
    std::vector<std::pair<std::string, TensorType>> inputs;
    for (std::size_t i = 0; i < training.otherInputs.size(); ++i)
      inputs.push_back({training.otherInputs[i], training.otherInputTypes[i]});
    inputs.push_back({training.labels, training.labelsType});
    std::string firstPath;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const auto &[name, type] = inputs[k];
      if (type.shape.empty())
        throw Error(fmt::format("{} {}: the input '{}' is {}, a scalar; "
                                "--data DIR takes the samples of every input "
                                "along its dimension 0, the batch (use "
                                "--inputs DIR)",
                                flag, dir, name, type.str()));
      if (k == 0)
        batch = type.shape[0];
      else if (type.shape[0] != batch)
        throw Error(fmt::format(
            "{} {}: the inputs '{}' ({}) and '{}' ({}) differ in "
            "dimension 0; --data DIR takes the samples of every input along "
            "dimension 0, the batch, so it must be the same in all (use "
            "--inputs DIR)",
            flag, dir, inputs[0].first, inputs[0].second.str(), name,
            type.str()));
      Shape sample(type.shape.begin() + 1, type.shape.end());
      std::string expected =
          fmt::format("{}[N{}{}]", dtypeName(type.dtype),
                      sample.empty() ? "" : ", ", fmt::join(sample, ", "));
      std::string path =
          (fs::path(dir) / (sanitizeName(name) + ".npy")).string();
      if (!fs::exists(path))
        throw Error(fmt::format("{} {}: no file {} for the input '{}' "
                                "({}); expected {}: N >= 1 samples of the "
                                "input's shape after the batch dimension {}",
                                flag, dir, path, name, type.str(), expected,
                                batch));
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
        throw Error(fmt::format("{} {} is {}; expected {} with N >= 1 "
                                "(the input '{}' is {}: N samples of its "
                                "shape after the batch dimension {})",
                                flag, path, t.str(), expected, name, type.str(),
                                batch));
      if (k == 0) {
        rows = t.shape[0];
        firstPath = path;
        if (rows < batch)
          throw Error(fmt::format(
              "{} {}: {} holds N = {} samples, fewer than the batch B = {} "
              "of the input '{}' ({}): every step would repeat samples; give "
              "at least {}",
              flag, dir, path, rows, batch, name, type.str(), batch));
      } else if (t.shape[0] != rows) {
        throw Error(fmt::format(
            "{} {} holds {} samples and {} {}; every file of --data DIR "
            "holds the same N samples (row i of each is one sample)",
            flag, path, t.shape[0], firstPath, rows));
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
    if (src.file->changedOnDisk())
      throw Error(fmt::format(
          "--data {}: {} changed during the run (rewritten, resized or "
          "replaced after it was opened): the steps would read other rows "
          "than the run started with; give each run files that stay as they "
          "are",
          dir, src.file->path()));
    Tensor out(src.fileType);
    for (int64_t i = 0; i < batch; ++i)
      if (src.rowBytes)
        src.file->copyOut(
            out.bytes() + i * src.rowBytes,
            static_cast<std::size_t>(src.data - src.file->data()) +
                dataRow(step, batch, i, rows) * src.rowBytes,
            src.rowBytes, "the data file");
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

/// --data FILE (token rows), --data DIR (one .npy per input) or indexed
/// data (a prefix, or a blend of weight-prefix pairs).
std::unique_ptr<StepData> shoal::rt::openData(const std::string &path,
                                              const TrainingInfo &training,
                                              const TrainingOptions &options,
                                              const char *flag) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return std::make_unique<FolderData>(path, training, flag);
  if (IndexedData::matches(path))
    return openIndexedData(path, training, options, flag);
  return std::make_unique<TokenData>(path, training, flag);
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
