//===- Runtime.cpp - Running a plan on a world of ranks ---------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The order of a run is what keeps failures clean on many ranks: everything
// that can fail because of a bad plan or bad files (validation, weights,
// inputs, the output folder) happens before the first collective, and the
// ranks then agree on whether any of them failed. Only kernel errors can remain
// after that point, and those abort the job.
//
//===----------------------------------------------------------------------===//

#include "shoal/Runtime/Runtime.h"

#include "Backend.h"
#include "BackendRegistry.h"
#include "Checkpoint.h"
#include "Comm.h"
#include "Executor.h"
#include "Export.h"
#include "MappedFile.h"
#include "Watchdog.h"
#include "shoal/Schema/DeviceCatalog.h"

#include "Npy.h"
#include "PlanLoader.h"
#include "Profile.h"
#include "Sharding.h"
#include "WeightLoader.h"
#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

/// "CUDA" for "cuda".
std::string upperName(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Every rank calls this with its error message (empty if it succeeded).
/// If any rank failed, every rank throws AgreedError with the message of the
/// lowest failing rank.
void agree(const std::string &error, Communicator &world) {
  int64_t first = world.min(error.empty() ? INT_MAX : world.rank());
  if (first == INT_MAX)
    return;
  std::string msg = world.broadcastString(
      error.substr(0, std::min<std::size_t>(error.size(), 1 << 20)),
      static_cast<int>(first));
  if (first != 0)
    msg = fmt::format("rank {}: {}", first, msg);
  throw AgreedError(msg);
}

/// Loads this rank's slice of every weight, opening each source once (or
/// reading it from `checkpoint` when resuming). Weights with the same
/// initializer, type and sharding share one buffer, so that an optimizer's
/// in-place update is seen by every value of the initializer.
void loadWeights(const LoadedPlan &plan, const std::vector<int64_t> &coords,
                 ProgramRunner &exec, const Checkpoint *checkpoint) {
  std::map<int, std::unique_ptr<OnnxWeightFile>> files;
  std::map<std::string, Tensor> loaded;
  std::set<std::string> fingerprinted; // initializers already checked
  for (const WeightInfo &w : plan.weights) {
    std::string key = weightBufferKey(w, plan.mesh);
    auto it = loaded.find(key);
    if (it != loaded.end()) {
      exec.setValue(w.value, it->second);
      continue;
    }
    Shape offsets =
        blockOffsets(w.globalType.shape, w.sharding, plan.mesh, coords);
    const Shape &local = plan.values[w.value].shape;
    Tensor t;
    if (checkpoint) {
      t = checkpoint->readBlock(w.initializer, w.globalType, offsets, local);
    } else if (w.zeroInit) {
      t = Tensor(plan.values[w.value]);
    } else {
      std::unique_ptr<OnnxWeightFile> &file = files[w.source];
      if (!file)
        file = std::make_unique<OnnxWeightFile>(plan.sourcePaths[w.source]);
      // The weights the plan was compiled with, wherever they are stored
      // now (a re-export with new weights and the same shapes would run and
      // compute garbage).
      if (w.digest && fingerprinted.insert(w.initializer).second &&
          file->digest(w.initializer) != w.digest)
        throw Error(fmt::format(
            "weight '{}' in {} is not the one the plan was compiled with "
            "(its fingerprint differs: the model was re-exported or its "
            "weights changed); compile the plan again",
            w.initializer, file->path()));
      try {
        t = file->loadBlock(w.initializer, w.globalType, offsets, local,
                            w.sourceShape);
      } catch (const Error &e) {
        throw Error(fmt::format("weight '{}': {}", w.initializer, e.what()));
      }
    }
    loaded.emplace(key, t);
    exec.setValue(w.value, std::move(t));
  }
}

void loadConstants(const LoadedPlan &plan, ProgramRunner &exec) {
  for (const ConstantInfo &c : plan.constants) {
    Tensor t(plan.values[c.value]);
    if (!c.data.empty())
      std::memcpy(t.rawData(), c.data.data(), c.data.size());
    if (t.dtype() == DType::Bool) {
      uint8_t *b = t.data<uint8_t>();
      for (int64_t i = 0, n = t.numElements(); i < n; ++i)
        b[i] = b[i] != 0;
    }
    exec.setValue(c.value, std::move(t));
  }
}

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

/// --data: the global tensor of each input of a training plan at each step.
class StepData {
public:
  virtual ~StepData() = default;
  /// The global tensor of input `name` at step `step` (0-based, counted
  /// from the start of training: a resumed run goes on from the
  /// checkpoint's step, so from the same data position).
  virtual Tensor make(int64_t step, const std::string &name) const = 0;
};

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
  const std::vector<std::string> &extraFiles() const { return extra; }

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

/// --data FILE (token rows) or --data DIR (one .npy per input).
std::unique_ptr<StepData> openData(const std::string &path,
                                   const TrainingInfo &training) {
  if (fs::is_directory(path))
    return std::make_unique<FolderData>(path, training);
  return std::make_unique<TokenData>(path, training);
}

/// Sets this rank's blocks of every input for step `step`.
void feedData(const LoadedPlan &plan, const StepData &data, int64_t step,
              const std::vector<int64_t> &coords, ProgramRunner &exec) {
  for (const PortInfo &port : plan.inputs) {
    Tensor global = data.make(step, port.name);
    setInputBlocks(plan, port, global.bytes(), coords, exec);
  }
}

void loadInputs(const LoadedPlan &plan, const std::string &dir,
                const std::vector<int64_t> &coords, ProgramRunner &exec) {
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

/// Assembles every output, over the program's ranks and micro-batches, on
/// the program's rank 0, which writes it.
void writeOutputs(const LoadedPlan &plan, const std::string &dir,
                  ProgramRunner &exec, Comm &comm) {
  int mbAxis = plan.mesh.microBatchAxis();
  int m = plan.numMicroBatches;
  for (const PortInfo &port : plan.outputs) {
    std::string path =
        (fs::path(dir) / (sanitizeName(port.name) + ".npy")).string();
    bool perMicroBatch = mbAxis >= 0 && port.sharding.uses(mbAxis);
    bool overRanks = false;
    for (const std::vector<int> &axes : port.sharding.dims)
      for (int a : axes)
        overRanks |= a != mbAxis;
    // A value not sharded over micro-batches is the same in all of them:
    // take the last.
    std::vector<Tensor> local;
    for (int j = 0; j < (perMicroBatch ? m : 1); ++j)
      local.push_back(exec.fetchOutput(port.value, perMicroBatch ? j : m - 1));
    if (!overRanks && !perMicroBatch) {
      if (comm.rank() == 0)
        writeNpy(path, local[0]);
      continue;
    }
    // Uneven blocks (value_layouts): each rank sends room for the largest.
    std::size_t blockBytes = local[0].numBytes();
    if (port.sharding.uneven) {
      std::size_t elem = dtypeSize(local[0].dtype());
      for (int r = 0; r < comm.size(); ++r) {
        Shape s = localShape(port.globalType.shape, port.sharding, plan.mesh,
                             plan.mesh.coordsOf(r));
        blockBytes = std::max<std::size_t>(
            blockBytes, elem * static_cast<std::size_t>(numElements(s)));
      }
    }
    // Under micro_batch_shares ranks hold different numbers of blocks: each
    // sends room for the most (the mesh's micro-batch axis), root reads
    // each rank's own count.
    bool shares = perMicroBatch && plan.mesh.hasMicroBatchShares();
    std::size_t slots =
        shares ? static_cast<std::size_t>(plan.mesh.numMicroBatches())
               : local.size();
    std::vector<uint8_t> mine(blockBytes * slots);
    for (std::size_t j = 0; j < local.size(); ++j)
      if (local[j].numBytes())
        std::memcpy(mine.data() + j * blockBytes, local[j].rawData(),
                    local[j].numBytes());
    int ranks = overRanks ? comm.size() : 1;
    std::vector<uint8_t> blocks;
    if (overRanks) {
      if (comm.rank() == 0)
        blocks.resize(mine.size() * comm.size());
      comm.gatherBytesToRoot(mine.data(), mine.size(), blocks.data());
    } else {
      blocks = std::move(mine);
    }
    if (comm.rank() != 0)
      continue;
    Tensor global(port.globalType);
    std::size_t elem = dtypeSize(global.dtype());
    for (int r = 0; r < ranks; ++r)
      for (std::size_t j = 0;
           j < (shares ? static_cast<std::size_t>(plan.mesh.microBatchesOf(r))
                       : local.size());
           ++j) {
        std::vector<int64_t> coords = plan.mesh.withMicroBatch(
            plan.mesh.coordsOf(r), static_cast<int64_t>(j));
        Shape offsets = blockOffsets(port.globalType.shape, port.sharding,
                                     plan.mesh, coords);
        Shape shape = port.sharding.uneven
                          ? localShape(port.globalType.shape, port.sharding,
                                       plan.mesh, coords)
                          : local[0].shape();
        insertBlock(blocks.data() + (r * slots + j) * blockBytes, shape, elem,
                    offsets, global.rawData(), global.shape());
      }
    writeNpy(path, global);
  }
}

/// Gathers every rank's events of the last step to world rank 0, which
/// writes them as a Chrome trace.
void writeTrace(const std::string &path, const LoadedPlan &plan,
                const StepProfile *profile, Communicator &world) {
  int rank = world.rank(), size = world.size();
  std::vector<std::string> parts;
  parts.push_back(fmt::format(
      "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, "
      "\"args\": {{\"name\": {}}}}}",
      rank, jsonString(fmt::format("rank {} (stage {})", rank, plan.stage))));
  parts.push_back(
      fmt::format("{{\"name\": \"process_sort_index\", \"ph\": "
                  "\"M\", \"pid\": {0}, \"args\": {{\"sort_index\": "
                  "{0}}}}}",
                  rank));
  const char *tracks[] = {"compute", "comm"};
  for (int tid = 0; tid < 2; ++tid)
    parts.push_back(fmt::format("{{\"name\": \"thread_name\", \"ph\": \"M\", "
                                "\"pid\": {}, \"tid\": {}, \"args\": "
                                "{{\"name\": \"{}\"}}}}",
                                rank, tid, tracks[tid]));
  if (profile)
    for (const TraceEvent &e : profile->events)
      parts.push_back(fmt::format(
          "{{\"name\": {}, \"ph\": \"X\", \"pid\": {}, \"tid\": {}, "
          "\"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {}}}",
          jsonString(e.name), rank, e.track, e.startUs, e.durationUs,
          e.args.empty() ? std::string("{}") : e.args));
  std::string mine = fmt::format("{}", fmt::join(parts, ",\n"));
  if (mine.size() > static_cast<std::size_t>(INT_MAX / 2))
    mine = parts.front();
  std::vector<std::string> all = gatherText(mine, world, "trace");
  if (rank != 0)
    return;
  std::string text = "{\"traceEvents\": [\n";
  for (int r = 0; r < size; ++r) {
    if (r)
      text += ",\n";
    text += all[r];
  }
  text += "\n],\n\"displayTimeUnit\": \"ms\"}\n";
  if (std::string e = shoal::writeFileAtomically(path, text); !e.empty())
    throw Error(fmt::format("cannot write the trace {}", e));
}

/// Creates the folder of the file `path` (if any) that `flag` names and
/// checks that `path` is not a folder.
void checkOutputFile(const std::string &path, const char *what,
                     const char *flag) {
  if (path.empty())
    return;
  fs::path folder = fs::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty())
    fs::create_directories(folder, ec);
  if (!folder.empty() && !fs::is_directory(folder))
    throw Error(fmt::format("cannot create the folder of the {} {}{}", what,
                            path, ec ? ": " + ec.message() : std::string()));
  if (fs::is_directory(path))
    throw Error(fmt::format("the {} {} is a folder; {} needs a file", what,
                            path, flag));
}

/// Lets every backend share the node among its ranks (the CPU kernels'
/// and BLAS threads) and check its settings, before any op runs.
void configureBackendsForNode(Communicator &world) {
  std::vector<int> node = nodeOfRanks(world);
  int ranksHere = static_cast<int>(
      std::count(node.begin(), node.end(), node[world.rank()]));
  configureBackends(ranksHere);
}

/// This rank's index among the ranks of its node, without communicating
/// (so that it is safe before every rank has loaded).
int localRank(int worldRank) {
  for (const char *var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (std::getenv(var))
      return localRankFromEnv();
  return worldRank;
}

/// The memory line of the rank with the largest measured peak, printed by
/// rank 0.
void printMemoryReport(const MemoryReport &r, Communicator &world,
                       bool everyRank) {
  int rank = world.rank();
  auto mib = [](double b) { return b / double(1 << 20); };
  if (everyRank)
    for (int from = 0; from < world.size(); ++from) {
      double bytes[5] = {double(r.weights), double(r.grads),
                         double(r.optimizer), double(r.activations),
                         double(r.peak)};
      world.broadcast(bytes, sizeof bytes, from)->wait();
      if (rank == 0)
        std::printf("shoal-run: memory of rank %d: weights %.3f MiB, grads "
                    "%.3f MiB, optimizer %.3f MiB, activations %.3f MiB, "
                    "peak %.3f MiB\n",
                    from, mib(bytes[0]), mib(bytes[1]), mib(bytes[2]),
                    mib(bytes[3]), mib(bytes[4]));
    }
  // The largest peak, ties to the lowest rank.
  int64_t largest = world.max(static_cast<double>(r.peak));
  int owner = static_cast<int>(
      world.min(static_cast<int64_t>(r.peak) == largest ? rank : INT_MAX));
  double bytes[5] = {double(r.weights), double(r.grads), double(r.optimizer),
                     double(r.activations), double(r.peak)};
  world.broadcast(bytes, sizeof bytes, owner)->wait();
  if (rank == 0) {
    std::printf("shoal-run: memory: weights %.3f MiB, grads %.3f MiB, "
                "optimizer %.3f MiB, activations %.3f MiB, peak %.3f MiB "
                "(rank %d)\n",
                mib(bytes[0]), mib(bytes[1]), mib(bytes[2]), mib(bytes[3]),
                mib(bytes[4]), owner);
  }
}

/// FLOPs of this rank's matrix products in one step.
double matmulFlops(const LoadedPlan &plan) {
  std::vector<int> runs(plan.tasks.size(), 0);
  for (const ScheduleEntry &e : plan.schedule)
    if (!e.backward)
      ++runs[e.task];
  double flops = 0;
  for (const OpInfo &op : plan.ops) {
    if (op.kind != OpKind::MatMul && op.kind != OpKind::Gemm)
      continue;
    const Shape &a = plan.values[op.inputs[0]].shape;
    double k =
        op.kind == OpKind::Gemm && op.attrs.transA ? a.front() : a.back();
    flops += 2.0 * k * plan.values[op.outputs[0]].numElements() * runs[op.task];
  }
  return flops;
}

void printStepReport(const LoadedPlan &plan, const RunSummary &s,
                     const RunOptions &options, const ProgramRunner &exec) {
  std::string line = fmt::format(
      "shoal-run: {} steps on {} x {}: {:.3f} ms/step", options.steps,
      s.worldSize, exec.deviceName(), s.stepSeconds * 1e3);
  if (!plan.inputs.empty()) {
    const TensorType &in = plan.inputs.front().globalType;
    if (!in.shape.empty()) {
      double samples = static_cast<double>(in.shape[0]);
      line += fmt::format(", {:.1f} samples/s", samples / s.stepSeconds);
      bool tokens = (in.dtype == DType::I64 || in.dtype == DType::I32) &&
                    in.shape.size() >= 2;
      if (tokens)
        line += fmt::format(", {:.1f} tokens/s",
                            samples * in.shape[1] / s.stepSeconds);
    }
  }
  double perDevice = s.stepFlops / s.worldSize / s.stepSeconds / 1e12;
  line += fmt::format(", {:.3f} TFLOP/s per device", perDevice);
  double peak = options.peakTflops;
  Precision p = Precision::FP32;
  parsePrecision(options.precision, p);
  if (peak == 0 && exec.deviceSpec())
    peak = peakTflops(*exec.deviceSpec(), p);
  if (peak > 0)
    line += fmt::format(", MFU {:.1f}% of {:.4g} TFLOP/s ({})",
                        100 * perDevice / peak, peak,
                        options.peakTflops > 0 ? "given" : precisionName(p));
  std::printf("%s\n", line.c_str());
}

const char kUsage[] =
    "usage: shoal-run PLAN --inputs DIR --outputs DIR [options]\n"
    "\n"
    "Runs a shoal plan on the ranks of an MPI job; without mpirun it runs as\n"
    "a world of one rank. Start a plan made for N ranks with\n"
    "  mpirun -np N shoal-run PLAN --inputs DIR --outputs DIR\n"
    "or without MPI, as torchrun does, with one process per rank started with\n"
    "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (docs/Runtime.md)\n"
    "\n"
    "  PLAN           the plan file (written by shoal-compile)\n"
    "  --inputs DIR   folder with one <name>.npy per program input\n"
    "  --outputs DIR  folder for one <name>.npy per program output, written\n"
    "                 by the program's first rank (created if missing)\n"
    "  --verbose      print per-op timings of rank 0 to stderr\n"
    "  --backend B    cpu or cuda (default: the plan's device, see\n"
    "                 shoal-compile --device)\n"
    "  --comm C       mpi (under mpirun), gloo (TCP, torchrun-style\n"
    "                 variables; the default when they are set without\n"
    "                 mpirun) or nccl (with --backend cuda)\n"
    "  --strict       an op without a kernel on the backend is an error, not\n"
    "                 a warning and a CPU fallback\n"
    "  --report-memory  print the bytes of the rank with the largest peak:\n"
    "                 weights, gradients, optimizer state, activations\n"
    "                 (planned) and the measured peak; =ranks: every\n"
    "                 rank's too\n"
    "  --grad-bucket-mb MB  gradient all-reduces packed into buckets of MB\n"
    "                 (default 25; 0: one all-reduce per gradient)\n"
    "  --precision P  matrix products on the GPU: fp32 (default), tf32,\n"
    "                 bf16 or fp16 (fp32 accumulation and storage)\n"
    "  --allow-tf32   same as --precision tf32\n"
    "  --steps N      run the program N times and report step time,\n"
    "                 samples/s, tokens/s and MFU (default 1)\n"
    "  --warmup N     untimed steps before those (default 0)\n"
    "  --peak-tflops X  a device's peak TFLOP/s for MFU when it is not in\n"
    "                 the catalog (e.g. a CPU)\n"
    "  --trace FILE   write a Chrome trace (JSON, chrome://tracing or\n"
    "                 Perfetto) of the last timed step: one track per rank\n"
    "                 for tasks and one for Send/Recv\n"
    "  --profile FILE write every rank's op, collective and Send/Recv times\n"
    "                 (JSON, medians over the timed steps) for the planner's\n"
    "                 calibration (shoal-sim --calibration)\n"
    "  --stall-timeout S  end the job with an error naming the rank and the\n"
    "                 op it waits in when a rank makes no progress for S\n"
    "                 seconds (another rank stopped or died; default 600,\n"
    "                 0: never)\n"
    "\n"
    "Training plans (shoal-compile --train, docs/Training.md):\n"
    "  --steps N      run N optimizer steps (after the checkpoint's, with\n"
    "                 --resume)\n"
    "  --data FILE    int32/int64 .npy [N, T + 1] of token rows: step s feeds\n"
    "                 rows (s * B + i) mod N, row[:T] to the token input and\n"
    "                 row[1:] to the labels\n"
    "  --data DIR     one <name>.npy per input (labels.npy included), each\n"
    "                 [N, ...] of the input's shape after its batch B (any\n"
    "                 dtype the input has): step s feeds rows\n"
    "                 (s * B + i) mod N of every file, i < B. Without --data,\n"
    "                 --inputs DIR gives one batch used at every step\n"
    "  --log-every K  a progress line every K steps (default 1): step,\n"
    "                 loss, step time, tokens/s and MFU\n"
    "  --save DIR     write a checkpoint at the end (and every K steps with\n"
    "                 --save-every K)\n"
    "  --resume DIR   start from the newest checkpoint in DIR, under this\n"
    "                 plan's layout\n"
    "  --export-onnx FILE  at the end, write the source ONNX model with the\n"
    "                 trained weights (initializers of 1 KiB or more in\n"
    "                 FILE.data, ONNX external data)\n"
    "  --export-safetensors DIR  at the end, write the trained weights to\n"
    "                 DIR/model.safetensors under their initializer names\n"
    "  --outputs DIR  optional: writes the last step's loss.npy\n"
    "\n"
    "  --help         print this help\n"
    "\n"
    "In file names, every character of a tensor name outside [A-Za-z0-9_.-]\n"
    "is replaced by '_'.\n";

/// Parses the command line; returns an error message or "".
std::string parseArgs(int argc, char **argv, RunOptions &opts,
                      TrainingOptions &train, bool &help) {
  help = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *flag, std::string &dst) -> std::string {
      std::string prefix = std::string(flag) + "=";
      if (arg.compare(0, prefix.size(), prefix) == 0) {
        dst = arg.substr(prefix.size());
        return dst.empty() ? fmt::format("{} needs a folder", flag) : "";
      }
      if (i + 1 >= argc)
        return fmt::format("{} needs a folder", flag);
      dst = argv[++i];
      return "";
    };
    if (arg == "--help" || arg == "-h") {
      help = true;
      return "";
    }
    auto number = [&](const char *flag, double &dst) -> std::string {
      std::string text;
      std::string prefix = std::string(flag) + "=";
      if (arg.compare(0, prefix.size(), prefix) == 0)
        text = arg.substr(prefix.size());
      else if (i + 1 < argc)
        text = argv[++i];
      char *end = nullptr;
      dst = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(dst >= 0) || !std::isfinite(dst))
        return fmt::format("{} needs a non-negative number, got '{}'", flag,
                           text);
      return "";
    };
    auto is = [&](const char *flag) {
      std::string f = flag;
      return arg == f || arg.rfind(f + "=", 0) == 0;
    };
    if (arg == "--verbose" || arg == "-v") {
      opts.verbose = true;
    } else if (arg == "--strict") {
      opts.strict = true;
    } else if (arg == "--report-memory") {
      opts.reportMemory = true;
    } else if (arg == "--report-memory=ranks") {
      opts.reportMemory = opts.reportMemoryRanks = true;
    } else if (is("--grad-bucket-mb")) {
      if (std::string e = number("--grad-bucket-mb", opts.gradBucketMb);
          !e.empty())
        return e;
    } else if (arg == "--allow-tf32") {
      opts.precision = "tf32";
    } else if (is("--backend")) {
      if (std::string e = value("--backend", opts.backend); !e.empty())
        return "--backend needs cpu or cuda";
      BackendKind kind;
      if (!parseBackend(opts.backend, kind))
        return fmt::format("--backend must be cpu or cuda, got '{}'",
                           opts.backend);
    } else if (is("--comm")) {
      if (std::string e = value("--comm", opts.comm); !e.empty())
        return "--comm needs mpi, gloo or nccl";
      if (opts.comm != "mpi" && opts.comm != "gloo" && opts.comm != "nccl")
        return fmt::format("--comm must be mpi, gloo or nccl, got '{}'",
                           opts.comm);
    } else if (is("--precision")) {
      if (std::string e = value("--precision", opts.precision); !e.empty())
        return "--precision needs fp32, tf32, bf16 or fp16";
      Precision p;
      if (!parsePrecision(opts.precision, p))
        return fmt::format("--precision must be fp32, tf32, bf16 or fp16, "
                           "got '{}'",
                           opts.precision);
    } else if (is("--steps") || is("--warmup")) {
      bool steps = is("--steps");
      double n = 0;
      if (std::string e = number(steps ? "--steps" : "--warmup", n); !e.empty())
        return e;
      // Compared as doubles first: converting 1e300 to int is undefined.
      if (n > INT_MAX || n != static_cast<int>(n) || (steps && n < 1))
        return fmt::format("{} needs a whole number from {} to {}",
                           steps ? "--steps" : "--warmup", steps ? 1 : 0,
                           INT_MAX);
      (steps ? opts.steps : opts.warmup) = static_cast<int>(n);
    } else if (is("--log-every") || is("--save-every")) {
      bool log = is("--log-every");
      const char *flag = log ? "--log-every" : "--save-every";
      double n = 0;
      if (std::string e = number(flag, n); !e.empty())
        return e;
      if (n > INT_MAX || n != static_cast<int>(n) || n < 1)
        return fmt::format("{} needs a whole number from 1 to {}", flag,
                           INT_MAX);
      (log ? train.logEvery : train.saveEvery) = static_cast<int>(n);
    } else if (is("--data")) {
      if (std::string e = value("--data", train.dataPath); !e.empty())
        return "--data needs a .npy file or a folder";
    } else if (is("--save")) {
      if (std::string e = value("--save", train.saveDir); !e.empty())
        return e;
    } else if (is("--resume")) {
      if (std::string e = value("--resume", train.resumeDir); !e.empty())
        return e;
    } else if (is("--export-onnx")) {
      if (std::string e = value("--export-onnx", train.exportOnnx); !e.empty())
        return "--export-onnx needs a file";
    } else if (is("--export-safetensors")) {
      if (std::string e =
              value("--export-safetensors", train.exportSafetensorsDir);
          !e.empty())
        return e;
    } else if (is("--trace")) {
      if (std::string e = value("--trace", opts.tracePath); !e.empty())
        return "--trace needs a file";
    } else if (is("--profile")) {
      if (std::string e = value("--profile", opts.profilePath); !e.empty())
        return "--profile needs a file";
    } else if (is("--stall-timeout")) {
      if (std::string e = number("--stall-timeout", opts.stallTimeout);
          !e.empty())
        return e;
    } else if (is("--peak-tflops")) {
      if (std::string e = number("--peak-tflops", opts.peakTflops); !e.empty())
        return e;
    } else if (arg == "--inputs" || arg.rfind("--inputs=", 0) == 0) {
      if (std::string e = value("--inputs", opts.inputsDir); !e.empty())
        return e;
    } else if (arg == "--outputs" || arg.rfind("--outputs=", 0) == 0) {
      if (std::string e = value("--outputs", opts.outputsDir); !e.empty())
        return e;
    } else if (!arg.empty() && arg[0] == '-') {
      return fmt::format("unknown option '{}'", arg);
    } else if (opts.planPath.empty()) {
      opts.planPath = arg;
    } else {
      return fmt::format("more than one plan given ('{}' and '{}')",
                         opts.planPath, arg);
    }
  }
  if (opts.planPath.empty())
    return "no plan file given";
  if (train.saveEvery > 0 && train.saveDir.empty())
    return "--save-every needs --save DIR";
  // --inputs and --outputs: forward plans need them (checked once the plan
  // is loaded); training plans may take --data and skip the outputs.
  return "";
}

} // namespace

RunSummary shoal::rt::runPlan(const RunOptions &options) {
  return runPlan(options, TrainingOptions());
}

RunSummary shoal::rt::runPlan(const RunOptions &options,
                              const TrainingOptions &train) {
  std::unique_ptr<Communicator> world = makeMpiWorld();
  return runPlan(options, train, *world);
}

namespace {

/// Checks what a plan asks of the command line: forward plans need --inputs
/// and --outputs and take none of the training options; training plans run
/// on the CPU and take no warm-up.
void checkOptionsForPlan(const LoadedPlan &plan, const RunOptions &options,
                         const TrainingOptions &train, BackendKind backend) {
  if (!plan.training.present) {
    for (auto [flag, value] :
         {std::pair<const char *, const std::string *>{"--data",
                                                       &train.dataPath},
          {"--save", &train.saveDir},
          {"--resume", &train.resumeDir},
          {"--export-onnx", &train.exportOnnx},
          {"--export-safetensors", &train.exportSafetensorsDir}})
      if (!value->empty())
        throw Error(fmt::format("{} needs a training plan (shoal-compile "
                                "--train); {} is a forward plan",
                                flag, options.planPath));
    if (!plan.inputs.empty() && options.inputsDir.empty())
      throw Error("missing --inputs DIR");
    if (options.outputsDir.empty())
      throw Error("missing --outputs DIR");
    return;
  }
  if (options.warmup > 0)
    throw Error("--warmup does not apply to training plans: every step is an "
                "optimizer step (use --steps)");
  if (!train.dataPath.empty() && !options.inputsDir.empty())
    throw Error("give --data or --inputs DIR, not both: --data feeds every "
                "input of every step (the labels included)");
}

/// FLOPs of this rank's ops in one step (Op.flops of every op each time the
/// schedule runs its task).
double scheduledFlops(const LoadedPlan &plan) {
  std::vector<double> perTask(plan.tasks.size(), 0);
  for (const OpInfo &op : plan.ops)
    perTask[op.task] += op.flops;
  double flops = 0;
  for (const ScheduleEntry &e : plan.schedule)
    flops += perTask[e.task];
  return flops;
}

/// The checkpoint tensor of the loss scaler (docs/Training.md "Mixed
/// precision"): f64[3] {scale, clean steps, skipped steps}.
constexpr const char *kLossScalerTensor = "shoal.loss_scaler";

/// The tensors this rank's program writes to checkpoints: one per
/// initializer that no lower program also holds (with `modelOnly`, only the
/// model's weights, not the optimizer state).
std::vector<CheckpointTensor> checkpointTensors(const LoadedPlan &plan,
                                                ProgramRunner &exec,
                                                bool modelOnly = false) {
  std::vector<CheckpointTensor> out;
  std::set<std::string> seen;
  for (const WeightInfo &w : plan.weights) {
    if (modelOnly && w.zeroInit)
      continue;
    auto owner = plan.training.initializerProgram.find(w.initializer);
    if (owner != plan.training.initializerProgram.end() &&
        owner->second != plan.program)
      continue;
    if (!seen.insert(w.initializer).second)
      continue;
    out.push_back(
        {w.initializer, w.globalType, w.sharding, exec.fetch(w.value)});
  }
  // fp16's loss scaler (the same on every rank): scale, clean steps,
  // skipped steps, written by the first program.
  const auto &scaler = static_cast<Executor &>(exec).lossScaler();
  if (!modelOnly && scaler.active && plan.program == 0) {
    Tensor t(TensorType{DType::F64, {3}});
    double *p = t.data<double>();
    p[0] = scaler.scale;
    p[1] = static_cast<double>(scaler.cleanSteps);
    p[2] = static_cast<double>(scaler.skippedSteps);
    ShardSpec whole;
    whole.dims.resize(1);
    out.push_back({kLossScalerTensor, t.type(), whole, t});
  }
  return out;
}

bool exports(const TrainingOptions &train) {
  return !train.exportOnnx.empty() || !train.exportSafetensorsDir.empty();
}

/// The source model of the plan's weights, which --export-onnx rewrites;
/// throws Error when they come from several models.
const std::string &exportSource(const LoadedPlan &plan) {
  std::set<int> sources;
  for (const auto &[name, source] : plan.training.modelWeights)
    sources.insert(source);
  if (sources.size() != 1 || *sources.begin() < 0 ||
      *sources.begin() >= static_cast<int>(plan.sourcePaths.size()))
    throw Error(fmt::format("plan {}: the export needs the model's weights "
                            "to come from one source model; they come from "
                            "{} (of the plan's {})",
                            plan.path, sources.size(),
                            plan.sourcePaths.size()));
  return plan.sourcePaths[*sources.begin()];
}

/// Checks the export's paths before training starts (rank 0 creates their
/// folders), so that a typo does not cost the run.
void checkExportPaths(const LoadedPlan &plan, const TrainingOptions &train) {
  const std::string &source = exportSource(plan);
  if (!train.exportOnnx.empty()) {
    checkOutputFile(train.exportOnnx, "exported model", "--export-onnx");
    std::error_code ec;
    if (fs::exists(train.exportOnnx, ec) &&
        fs::equivalent(train.exportOnnx, source, ec))
      throw Error(fmt::format("--export-onnx {} is the plan's source model; "
                              "write the trained model to another file",
                              train.exportOnnx));
  }
  if (!train.exportSafetensorsDir.empty()) {
    const std::string &dir = train.exportSafetensorsDir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir))
      throw Error(fmt::format("cannot create the folder {} of "
                              "--export-safetensors{}",
                              dir, ec ? ": " + ec.message() : std::string()));
  }
}

/// --export-onnx and --export-safetensors after the last step, collective
/// over `world`. Every rank's blocks of the model's weights reach rank 0
/// through a checkpoint: the one --save just wrote, else a scratch one of
/// the weights alone (no optimizer state) next to the exported files, which
/// is removed afterwards. Rank 0 assembles each weight and writes the files;
/// the ranks agree on its error, if any.
void exportModel(const LoadedPlan &plan, ProgramRunner &exec,
                 const TrainingOptions &train,
                 const std::vector<int64_t> &coords, int64_t step,
                 Communicator &world) {
  std::string root = train.saveDir, scratch;
  if (root.empty()) {
    scratch = root =
        !train.exportSafetensorsDir.empty()
            ? (fs::path(train.exportSafetensorsDir) / ".shoal-export-shards")
                  .string()
            : (fs::path(train.exportOnnx).parent_path() /
               ("." + fs::path(train.exportOnnx).filename().string() +
                ".shards"))
                  .string();
    saveCheckpoint(scratch, step, plan.training.optimizer, plan.mesh, coords,
                   checkpointTensors(plan, exec, /*modelOnly=*/true), world);
  }
  std::string error;
  if (world.rank() == 0) {
    try {
      Checkpoint checkpoint = Checkpoint::open(
          (fs::path(root) / checkpointFolderName(step)).string());
      std::vector<std::string> names;
      for (const auto &[name, source] : plan.training.modelWeights)
        names.push_back(name);
      TrainedModel model(checkpoint, exportSource(plan), names);
      std::string steps = std::to_string(step);
      auto mib = [](uint64_t bytes) { return double(bytes) / (1 << 20); };
      if (!train.exportOnnx.empty()) {
        ExportSummary s = writeTrainedOnnx(train.exportOnnx, model,
                                           {{"shoal.trained_steps", steps}});
        std::printf(
            "shoal-run: exported the model of step %lld to %s: %zu "
            "initializers, %.3f MiB%s\n",
            static_cast<long long>(step), s.path.c_str(), s.tensors,
            mib(s.bytes),
            s.dataPath.empty()
                ? ""
                : fmt::format(" ({} in {})", s.externalTensors, s.dataPath)
                      .c_str());
      }
      if (!train.exportSafetensorsDir.empty()) {
        ExportSummary s = writeSafetensors(
            (fs::path(train.exportSafetensorsDir) / "model.safetensors")
                .string(),
            model, {{"format", "pt"}, {"shoal.trained_steps", steps}});
        std::printf("shoal-run: exported the weights of step %lld to %s: %zu "
                    "tensors, %.3f MiB\n",
                    static_cast<long long>(step), s.path.c_str(), s.tensors,
                    mib(s.bytes));
      }
      std::fflush(stdout);
    } catch (const std::exception &e) {
      error = e.what();
    }
    std::error_code ec;
    if (!scratch.empty())
      fs::remove_all(scratch, ec);
  }
  agree(error, world);
}

} // namespace

RunSummary shoal::rt::runPlan(const RunOptions &options,
                              const TrainingOptions &train,
                              Communicator &world) {
  int rank = world.rank(), size = world.size();
  auto start = Clock::now();
  bool print = options.verbose && rank == 0;

  // Phase 1: everything that can fail on bad input, without communication.
  std::unique_ptr<LoadedPlan> plan;
  std::unique_ptr<Device> device;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<StepData> data;
  std::vector<int64_t> coords;
  int64_t resumedStep = -1;
  std::string error;
  try {
    notePhase("loading the plan, weights and inputs");
    if (options.planPath.empty())
      throw Error("no plan file given");
    plan = std::make_unique<LoadedPlan>(loadPlan(options.planPath, size, rank));
    coords = plan->mesh.coordsOf(plan->meshRank);
    BackendKind backend =
        plan->defaultCuda ? BackendKind::CUDA : BackendKind::CPU;
    if (!options.backend.empty() && !parseBackend(options.backend, backend))
      throw Error(fmt::format("unknown backend '{}'", options.backend));
    checkOptionsForPlan(*plan, options, train, backend);
    // The device starts here: a CUDA run on a machine without a GPU stops
    // with "no CUDA device", whatever the plan kind.
    Precision matmul = Precision::FP32;
    if (backend != kReferenceBackend) {
      if (options.strict)
        if (const OpInfo *op = firstOpWithoutKernel(*plan, backend))
          throw Error(fmt::format("--strict: the {} backend has no kernel "
                                  "for {}",
                                  upperName(backendName(backend)),
                                  op->describe()));
      if (!parsePrecision(options.precision, matmul))
        throw Error(fmt::format("unknown precision '{}'", options.precision));
    }
    device = makeDevice(backend, localRank(rank), matmul);
    ExecutorOptions executorOptions;
    executorOptions.strict = options.strict;
    executorOptions.traceOps = !options.tracePath.empty();
    // --grad-bucket-mb, else the training config's grad_bucket_mb.
    double bucketMb = options.gradBucketMb >= 0 ? options.gradBucketMb
                                                : plan->training.gradBucketMb;
    // Finite and >= 0 (checked by the flag's parser and the plan loader);
    // any size past 2^62 bytes is one bucket for everything.
    if (bucketMb >= 0)
      executorOptions.gradBucketBytes = static_cast<std::size_t>(
          std::min(bucketMb * (1 << 20), std::ldexp(1.0, 62)));
    exec = std::make_unique<Executor>(*plan, *device, executorOptions);
    // Transfers tag their messages id * kMaxMicroBatches + micro-batch.
    for (const TransferInfo &t : plan->transfers) {
      int64_t top =
          int64_t(t.id) * kMaxMicroBatches + plan->numMicroBatches - 1;
      if (top > world.maxTag())
        throw Error(fmt::format("plan {}: transfer {} needs message tags up "
                                "to {} (id * {} + micro-batch), above this "
                                "{} communicator's largest tag {}",
                                options.planPath, t.id, top, kMaxMicroBatches,
                                world.name(), world.maxTag()));
    }
    std::unique_ptr<Checkpoint> checkpoint;
    if (!train.resumeDir.empty()) {
      checkpoint =
          std::make_unique<Checkpoint>(Checkpoint::openLatest(train.resumeDir));
      resumedStep = checkpoint->manifest().step;
      static_cast<Executor &>(*exec).setStepsCompleted(resumedStep);
    }
    loadWeights(*plan, coords, *exec, checkpoint.get());
    // The loss scaler goes on where it was (a checkpoint of a run without
    // one starts it afresh).
    if (checkpoint && plan->training.lossScale.present &&
        checkpoint->manifest().tensors.count(kLossScalerTensor)) {
      Tensor t = checkpoint->readTensor(kLossScalerTensor);
      if (t.type() != TensorType{DType::F64, {3}})
        throw Error(fmt::format("{}: '{}' is {}, expected f64[3]",
                                checkpoint->manifestPath(), kLossScalerTensor,
                                t.type().str()));
      const double *p = t.data<double>();
      if (!(p[0] > 0) || !std::isfinite(p[0]) || !(p[1] >= 0) || !(p[2] >= 0) ||
          p[1] > 1e15 || p[2] > 1e15)
        throw Error(fmt::format("{}: '{}' holds scale {}, clean steps {} and "
                                "skipped steps {}; expected a finite scale "
                                "> 0 and counts >= 0",
                                checkpoint->manifestPath(), kLossScalerTensor,
                                p[0], p[1], p[2]));
      static_cast<Executor &>(*exec).setLossScaler(
          p[0], static_cast<int64_t>(p[1]), static_cast<int64_t>(p[2]));
    }
    loadConstants(*plan, *exec);
    if (!train.dataPath.empty())
      data = openData(train.dataPath, plan->training);
    else
      loadInputs(*plan, options.inputsDir, coords, *exec);
    if (plan->meshRank == 0 && !plan->outputs.empty() &&
        !options.outputsDir.empty()) {
      std::error_code ec;
      fs::create_directories(options.outputsDir, ec);
      if (!fs::is_directory(options.outputsDir))
        throw Error(fmt::format("cannot create the outputs folder {}{}",
                                options.outputsDir,
                                ec ? ": " + ec.message() : std::string()));
    }
    if (rank == 0 && !train.saveDir.empty()) {
      std::error_code ec;
      fs::create_directories(train.saveDir, ec);
      if (!fs::is_directory(train.saveDir))
        throw Error(fmt::format("cannot create the checkpoint folder {}{}",
                                train.saveDir,
                                ec ? ": " + ec.message() : std::string()));
    }
    if (exports(train)) {
      exportSource(*plan);
      if (rank == 0)
        checkExportPaths(*plan, train);
    }
    if (rank == 0) {
      checkOutputFile(options.tracePath, "trace", "--trace");
      checkOutputFile(options.profilePath, "profile", "--profile");
    }
    if (!options.profilePath.empty() && !exec->setProfiling(true))
      throw Error(fmt::format("the {} backend cannot profile (--profile)",
                              exec->deviceName()));
  } catch (const std::exception &e) {
    error = e.what();
    if (error.empty())
      error = "unknown error while loading";
  }
  agree(error, world);
  RunSummary summary;
  summary.worldSize = size;
  summary.numOps = plan->ops.size();
  summary.loadSeconds = secondsSince(start);
  if (print)
    std::fprintf(
        stderr,
        "shoal-run: loaded %s: %s%smesh %s, %zu values, %zu "
        "weights, %zu ops on %s (%.3f s)\n",
        options.planPath.c_str(),
        plan->numPrograms > 1 ? fmt::format("program {} of {}, ", plan->program,
                                            plan->numPrograms)
                                    .c_str()
                              : "",
        plan->numMicroBatches > 1
            ? fmt::format("{} micro-batches, ", plan->numMicroBatches).c_str()
            : "",
        plan->mesh.str().c_str(), plan->values.size(), plan->weights.size(),
        plan->ops.size(), exec->deviceName().c_str(), summary.loadSeconds);
  if (rank == 0 && resumedStep >= 0)
    std::printf("shoal-run: resumed from %s at step %lld\n",
                train.resumeDir.c_str(), static_cast<long long>(resumedStep));
  if (auto *folder = dynamic_cast<const FolderData *>(data.get());
      rank == 0 && folder && !folder->extraFiles().empty())
    std::fprintf(
        stderr,
        "shoal-run: warning: --data %s: %s %s no input of the "
        "plan (ignored)\n",
        train.dataPath.c_str(),
        fmt::format("{}", fmt::join(folder->extraFiles(), ", ")).c_str(),
        folder->extraFiles().size() == 1 ? "is" : "are");

  // Phase 2: run. From here on an error on one rank aborts the job.
  auto runStart = Clock::now();
  // Collectives run inside each program, ranks ordered as its mesh.
  // Under --comm nccl the program's collectives and transfers run over NCCL
  // on the device; the world stays the host communicator for control.
  std::unique_ptr<Communicator> ncclWorld;
  if (findBackendWithWorld(options.comm))
    ncclWorld = makeDeviceWorld(options.comm, world, *device);
  Communicator &dataWorld = ncclWorld ? *ncclWorld : world;
  std::unique_ptr<Communicator> programComm =
      dataWorld.split(plan->program, static_cast<int>(plan->meshRank));
  {
    Comm comm(*programComm, plan->mesh);
    comm.createGroups(plan->collectiveAxes);
    exec->setGlobal(world);
    double timed = 0, busy = 0;
    std::unique_ptr<ProfileRecorder> recorder;
    if (!options.profilePath.empty())
      recorder = std::make_unique<ProfileRecorder>(*plan);
    auto record = [&](double slowest) {
      timed += slowest;
      if (const StepProfile *profile = exec->profile()) {
        busy += profile->busySeconds;
        if (recorder)
          recorder->addStep(*profile, slowest);
      }
    };
    if (plan->training.present) {
      const TrainingInfo &training = plan->training;
      auto &trainer = static_cast<Executor &>(*exec);
      int64_t last = trainer.stepsCompleted() + options.steps;
      // The loss comes from the lowest rank whose program outputs it.
      int lossValue = -1;
      for (const PortInfo &port : plan->outputs)
        if (port.name == training.loss)
          lossValue = port.value;
      int owner = static_cast<int>(world.min(lossValue >= 0 ? rank : INT_MAX));
      double allFlops = world.sum(scheduledFlops(*plan));
      summary.stepFlops = allFlops;
      double peak = options.peakTflops;
      if (peak == 0 && exec->deviceSpec())
        peak = peakTflops(*exec->deviceSpec(), Precision::FP32);
      // Tokens per step: B * T of a [B, T] integer token input, else the
      // labels' leading dimension (samples).
      double perStep = 0;
      const char *unit = "tokens/s";
      if (training.otherInputs.size() == 1 &&
          training.otherInputTypes[0].shape.size() == 2 &&
          training.otherInputTypes[0].dtype != DType::F32) {
        perStep = double(training.otherInputTypes[0].numElements());
      } else if (!training.labelsType.shape.empty()) {
        perStep = double(training.labelsType.shape[0]);
        unit = "samples/s";
      }
      int64_t lastSaved = -1;
      double sinceLog = 0;
      int stepsSinceLog = 0;
      for (int i = 0; i < options.steps; ++i) {
        int64_t step = trainer.stepsCompleted();
        noteStep(step);
        if (data)
          feedData(*plan, *data, step, coords, *exec);
        notePhase("the barrier before the step");
        world.barrier();
        auto stepStart = Clock::now();
        exec->run(comm, options.verbose && i == 0);
        double slowest = world.max(secondsSince(stepStart));
        record(slowest);
        sinceLog += slowest;
        ++stepsSinceLog;
        int64_t done = trainer.stepsCompleted();
        // Every step's loss reaches every rank, so that a NaN or Inf one
        // stops them all at the same step (after its progress line, and
        // before any checkpoint of the weights it came from is written).
        float loss = std::nanf("");
        if (rank == owner)
          loss = exec->fetchOutput(lossValue, plan->numMicroBatches - 1)
                     .data<float>()[0];
        world.broadcast(&loss, sizeof loss, owner)->wait();
        const Executor::LossScalerState &scaler =
            static_cast<Executor &>(*exec).lossScaler();
        // Under loss scaling an overflow skips the step instead (a NaN or
        // Inf loss makes NaN gradients, so the scaler skipped it too).
        bool finite = std::isfinite(loss) || scaler.lastSkipped;
        if (done % train.logEvery == 0 || i + 1 == options.steps || !finite) {
          if (rank == 0) {
            double seconds = sinceLog / stepsSinceLog;
            std::string mfu =
                peak > 0 ? fmt::format("{:.2f}%", 100 * allFlops / seconds /
                                                      (size * peak * 1e12))
                         : std::string("n/a");
            // fp16: the scale the next step starts from, and the steps
            // skipped so far (overflows).
            std::string scaled;
            if (scaler.active)
              scaled = fmt::format(" loss_scale {:g} skipped {}", scaler.scale,
                                   scaler.skippedSteps);
            std::printf("step %lld/%lld loss %.6f time %.1f ms %s %.0f mfu "
                        "%s%s\n",
                        static_cast<long long>(done),
                        static_cast<long long>(last), loss, seconds * 1e3, unit,
                        perStep / seconds, mfu.c_str(), scaled.c_str());
            std::fflush(stdout);
          }
          sinceLog = 0;
          stepsSinceLog = 0;
        }
        if (!finite) {
          // The loss of step k comes from the weights step k - 1 left.
          std::string saved;
          if (lastSaved >= 0 && lastSaved == done - 1)
            saved = fmt::format(" (the checkpoint of step {} holds the "
                                "weights that gave it)",
                                lastSaved);
          else if (lastSaved >= 0)
            saved = fmt::format(" (the last checkpoint is step {})", lastSaved);
          throw Error(fmt::format(
              "step {}: the loss is {}; training stopped, and this step's "
              "update is not saved{}. Lower the learning rate, set "
              "optimizer.clip_norm, or check the inputs",
              done, std::isnan(loss) ? "NaN" : "Inf", saved));
        }
        if (double norm = exec->lastGradNorm();
            !std::isfinite(norm) && scaler.active && !scaler.lastSkipped)
          throw Error(fmt::format(
              "step {}: the gradients overflow (norm {}) at the minimum loss "
              "scale {:g} ({} steps skipped so far; the loss is {:.6g}); "
              "training stopped before this step's update. Lower the "
              "learning rate, set optimizer.clip_norm, lower "
              "loss_scale.min, or train in bf16",
              done, std::isnan(norm) ? "NaN" : "Inf", scaler.scale,
              scaler.skippedSteps, loss));
        if (double norm = exec->lastGradNorm();
            !std::isfinite(norm) && !scaler.lastSkipped)
          throw Error(fmt::format(
              "step {}: the loss is finite ({:.6g}) but the gradient norm is "
              "{}; training stopped before this step's update (an op whose "
              "gradient is infinite at its input, such as Sqrt or Log at "
              "0, or an overflow in the backward). Check the model and "
              "inputs, or lower the learning rate",
              done, loss, std::isnan(norm) ? "NaN" : "Inf"));
        if (!train.saveDir.empty() && train.saveEvery > 0 &&
            done % train.saveEvery == 0) {
          notePhase("saving a checkpoint");
          saveCheckpoint(train.saveDir, done, training.optimizer, plan->mesh,
                         coords, checkpointTensors(*plan, *exec), world);
          lastSaved = done;
        }
      }
      if (!train.saveDir.empty() && lastSaved != trainer.stepsCompleted()) {
        notePhase("saving a checkpoint");
        saveCheckpoint(train.saveDir, trainer.stepsCompleted(),
                       training.optimizer, plan->mesh, coords,
                       checkpointTensors(*plan, *exec), world);
      }
      if (exports(train))
        exportModel(*plan, *exec, train, coords, trainer.stepsCompleted(),
                    world);
      summary.stepSeconds = timed / options.steps;
    } else {
      for (int step = 0; step < options.warmup + options.steps; ++step) {
        noteStep(step);
        notePhase("the barrier before the step");
        world.barrier();
        auto stepStart = Clock::now();
        exec->run(comm, options.verbose && step == options.warmup);
        double slowest = world.max(secondsSince(stepStart));
        if (step >= options.warmup)
          record(slowest);
      }
      summary.stepSeconds = timed / options.steps;
      summary.stepFlops = world.sum(matmulFlops(*plan));
      if (rank == 0 && (options.steps > 1 || options.warmup > 0))
        printStepReport(*plan, summary, options, *exec);
    }
    notePhase("reporting and writing the results");
    if (options.reportMemory) {
      summary.memory = exec->memoryReport();
      printMemoryReport(summary.memory, world, options.reportMemoryRanks);
    }
    if (!options.tracePath.empty())
      writeTrace(options.tracePath, *plan, exec->profile(), world);
    if (recorder) {
      ProfileRunInfo info;
      info.planPath = options.planPath;
      const DeviceSpec *spec = exec->deviceSpec();
      info.deviceType = spec                          ? spec->name
                        : exec->deviceName() == "cpu" ? "CPU"
                                                      : exec->deviceName();
      info.deviceName = exec->deviceName();
      info.precision = exec->deviceName() == "cpu" ? "fp32" : options.precision;
      info.steps = options.steps;
      info.warmup = options.warmup;
      recorder->setCopyBandwidth(measureCopyBandwidth(*device));
      recorder->write(options.profilePath, info, world);
    }
    const PipelineInfo &pipe = plan->pipeline;
    if (pipe.present && (pipe.stages > 1 || pipe.microBatches > 1)) {
      // Idle / busy per rank, averaged over the ranks that did any work.
      double mineRatio[2] = {busy > 0 ? (timed - busy) / busy : 0,
                             busy > 0 ? 1.0 : 0.0};
      double *sum = mineRatio;
      world.allReduceNow(sum, 2, DType::F64);
      summary.bubbleMeasured = sum[1] > 0 ? sum[0] / sum[1] : 0;
      summary.bubbleExpected =
          double(pipe.stages - 1) / (double(pipe.chunks) * pipe.microBatches);
      if (rank == 0)
        std::printf("shoal-run: pipeline %s, %d stages x %d micro-batches%s: "
                    "bubble measured %.3g (idle / busy time, mean over "
                    "ranks), schedule's (p-1)/(v*m) = %.3g\n",
                    pipe.schedule.empty() ? "(unnamed)" : pipe.schedule.c_str(),
                    pipe.stages, pipe.microBatches,
                    pipe.chunks > 1
                        ? fmt::format(" x {} chunks", pipe.chunks).c_str()
                        : "",
                    summary.bubbleMeasured, summary.bubbleExpected);
    }
    if (!options.outputsDir.empty())
      writeOutputs(*plan, options.outputsDir, *exec, comm);
  }
  programComm.reset();
  ncclWorld.reset();
  summary.runSeconds = secondsSince(runStart);
  // The plan's ops go away with this frame.
  notePhase("finishing the run");
  return summary;
}

namespace {

/// This process's rank before any communicator exists (for who prints a
/// usage error): the launcher's variables, else 0.
int rankFromEnv() {
  for (const char *var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"})
    if (const char *v = std::getenv(var))
      return std::atoi(v);
  return 0;
}

} // namespace

int shoal::rt::runPlanMain(int argc, char **argv) {
  RunOptions opts;
  TrainingOptions train;
  bool help = false;
  std::string usageError = parseArgs(argc, argv, opts, train, help);
  // The world comes from mpirun, or from torchrun-style variables without
  // MPI at all (--comm gloo, or RANK/WORLD_SIZE and no MPI launcher).
  Bootstrap bootstrap = detectBootstrap();
  if (usageError.empty() && !help) {
    if (opts.comm == "gloo")
      bootstrap = Bootstrap::Env;
    else if (opts.comm == "mpi" && bootstrap == Bootstrap::Env)
      usageError = "--comm mpi needs a launch by mpirun, but this process "
                   "has torchrun-style variables (RANK, WORLD_SIZE) and no "
                   "MPI launcher's; use --comm gloo or start it with mpirun";
    else if (opts.comm == "nccl" && opts.backend != "cuda")
      usageError = "--comm nccl needs --backend cuda";
  }
  bool useMpi = bootstrap == Bootstrap::MPI;
  if (useMpi)
    mpiInit(argc, argv);
  auto finish = [&](int status) {
    if (useMpi)
      mpiFinalize();
    return status;
  };
  int rank = rankFromEnv();
  if (useMpi)
    rank = mpiWorldRank();
  if (help || !usageError.empty()) {
    if (rank == 0) {
      if (help) {
        std::fputs(kUsage, stdout);
      } else {
        std::fprintf(stderr, "shoal-run: error: %s\n", usageError.c_str());
        std::fputs(kUsage, stderr);
      }
    }
    return finish(help ? 0 : 1);
  }

  std::unique_ptr<Communicator> world;
  try {
    world = useMpi ? makeMpiWorld() : makeEnvWorld();
  } catch (const std::exception &e) {
    // Every rank sees its own environment: each reports.
    std::fprintf(stderr, "shoal-run: error: %s\n", e.what());
    return finish(1);
  }
  rank = world->rank();
  int size = world->size();
  try {
    configureBackendsForNode(*world);
  } catch (const std::exception &e) {
    // SHOAL_NUM_THREADS or SHOAL_CPU_ISA: each rank reads its own.
    std::fprintf(stderr, "shoal-run: error: %s\n", e.what());
    world.reset();
    return finish(1);
  }

  RunSummary summary;
  // Ends the job when this rank makes no progress for --stall-timeout s.
  std::unique_ptr<Watchdog> watchdog =
      std::make_unique<Watchdog>(opts.stallTimeout, rank, useMpi);
  try {
    summary = runPlan(opts, train, *world);
  } catch (const AgreedError &e) {
    if (rank == 0)
      std::fprintf(stderr, "shoal-run: error: %s\n", e.what());
    world.reset();
    return finish(1);
  } catch (const std::exception &e) {
    if (size == 1) {
      // Nobody can be left waiting: finish normally.
      std::fprintf(stderr, "shoal-run: error: %s\n", e.what());
      world.reset();
      return finish(1);
    }
    // The other ranks may be blocked in a collective: abort the job (under
    // Gloo, leaving closes the connections, which ends theirs with an error).
    std::fprintf(stderr, "shoal-run: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    if (useMpi)
      mpiAbort(1);
    std::fflush(stdout);
    std::_Exit(1);
  }
  if (rank == 0)
    std::printf("shoal-run: %s: world %d, %zu ops, %.3f s (load %.3f s, run "
                "%.3f s)\n",
                opts.planPath.c_str(), summary.worldSize, summary.numOps,
                summary.loadSeconds + summary.runSeconds, summary.loadSeconds,
                summary.runSeconds);
  // Every rank is done with the others before any tears its connections
  // down.
  notePhase("the barrier at the end of the run");
  world->barrier();
  watchdog.reset();
  world.reset();
  return finish(0);
}
