//===- RunPlan.cpp - Running a plan on a world of ranks ------------*- C++
//-*-===//
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

#include "tooling/Tooling.h"

#include "Backend.h"
#include "BackendRegistry.h"
#include "Checkpoint.h"
#include "Comm.h"
#include "Executor.h"
#include "MappedFile.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "Safetensors.h"
#include "Sharding.h"
#include "Updates.h"
#include "Watchdog.h"
#include "WeightLoader.h"
#include "shoal/Schema/DeviceCatalog.h"
#include "shoal/Support/Files.h"
#include "tooling/Export.h"
#include "tooling/Profile.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

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

/// What every rank of a job must agree on, one "key: value" line each: the
/// plan (its content fingerprint), the world, the steps, the data (its
/// size and a digest of its first and last 64 KiB, which a file rewritten
/// or another file of the same name changes), the checkpoint resumed and
/// the options that change what the ranks compute.
std::string jobDescription(const LoadedPlan &plan, const RunOptions &options,
                           const TrainingOptions &train, int worldSize,
                           int64_t resumedStep) {
  auto fileSummary = [](const std::string &path) -> std::string {
    if (path.empty())
      return "-";
    std::error_code ec;
    uint64_t size = fs::file_size(path, ec);
    if (ec)
      return "unreadable";
    std::string head, tail;
    std::ifstream in(path, std::ios::binary);
    head.resize(std::min<uint64_t>(size, 65536));
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    if (size > 65536) {
      tail.resize(std::min<uint64_t>(size - 65536, 65536));
      in.seekg(static_cast<std::streamoff>(size - tail.size()));
      in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    }
    // zlib's CRC-32: the same on every rank and build (std::hash is not
    // specified to be).
    uLong crc =
        crc32_z(0L, reinterpret_cast<const Bytef *>(head.data()), head.size());
    crc =
        crc32_z(crc, reinterpret_cast<const Bytef *>(tail.data()), tail.size());
    return fmt::format("{} bytes, crc32 {:08x}", size, crc);
  };
  std::string fingerprint;
  for (std::size_t i = 0; i < plan.contentSha256.size() && i < 8; ++i)
    fingerprint += fmt::format(
        "{:02x}", static_cast<unsigned char>(plan.contentSha256[i]));
  std::vector<std::pair<std::string, std::string>> items = {
      {"plan", "fingerprint " + fingerprint},
      {"world", std::to_string(worldSize)},
      {"steps", std::to_string(options.steps)},
      {"total steps", std::to_string(train.totalSteps)},
      {"warm-up steps", std::to_string(options.warmup)},
      {"data", fileSummary(train.dataPath)},
      {"data seed", std::to_string(train.dataSeed)},
      {"evaluation data", fileSummary(train.evalDataPath)},
      {"evaluation",
       fmt::format("every {} steps, {} steps{}", train.evalEvery,
                   train.evalSteps, train.evalOnly ? ", only" : "")},
      {"resumed step", std::to_string(resumedStep)},
      {"--init-from", fileSummary(train.initFrom)},
      {"checkpoints", fmt::format("every {} steps{}", train.saveEvery,
                                  train.saveDir.empty() ? ", none" : "")},
      {"precision", options.precision},
      {"gradient buckets (MiB)", fmt::format("{}", options.gradBucketMb)},
      {"backend", options.backend.empty() ? "default" : options.backend},
  };
  std::string out;
  for (const auto &[key, value] : items)
    out += key + ": " + value + "\n";
  return out;
}

/// Rank 0's error when the ranks' job descriptions differ: the ranks that
/// differ from rank 0 and the first thing each differs in; "" when all
/// agree.
std::string jobMismatch(const std::vector<std::string> &all) {
  auto lines = [](const std::string &text) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      out.push_back(text.substr(at, end - at));
      at = end == std::string::npos ? text.size() : end + 1;
    }
    return out;
  };
  std::vector<std::string> ours = lines(all.front()), differ;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all.front())
      continue;
    std::vector<std::string> theirs = lines(all[r]);
    std::string what = "its job description";
    for (std::size_t i = 0; i < ours.size(); ++i)
      if (i >= theirs.size() || theirs[i] != ours[i]) {
        std::string key = ours[i].substr(0, ours[i].find(':'));
        what = fmt::format("{} ('{}' on rank {}, '{}' on rank 0)", key,
                           i < theirs.size()
                               ? theirs[i].substr(theirs[i].find(':') + 2)
                               : std::string("?"),
                           r, ours[i].substr(ours[i].find(':') + 2));
        break;
      }
    differ.push_back(fmt::format("rank {}: {}", r, what));
    if (differ.size() == 8)
      break;
  }
  if (differ.empty())
    return "";
  return fmt::format("the ranks do not run the same job: {}; start every "
                     "rank with the same plan, data and options",
                     fmt::join(differ, "; "));
}

/// This run's id, written into its checkpoints and its --save folder's
/// lock: SHOAL_RUN_ID, else the launcher's (torchrun's TORCHELASTIC_RUN_ID,
/// Slurm's SLURM_JOB_ID), else 16 random hex digits.
std::string makeRunId() {
  for (const char *var : {"SHOAL_RUN_ID", "TORCHELASTIC_RUN_ID"})
    if (const char *v = std::getenv(var); v && *v)
      return v;
  if (const char *v = std::getenv("SLURM_JOB_ID"); v && *v)
    return fmt::format("slurm-{}", v);
  std::random_device rd;
  uint64_t id = (uint64_t(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", id);
}

/// The model's weights of a training plan (over every program), sorted.
std::vector<std::string> modelWeightNames(const LoadedPlan &plan) {
  std::vector<std::string> names;
  for (const auto &[name, source] : plan.training.modelWeights)
    names.push_back(name);
  return names;
}

/// "'a', 'b', ... (N more)": at most 10 names of a list for a message.
std::string someNames(const std::vector<std::string> &names) {
  std::vector<std::string> quoted;
  for (std::size_t i = 0; i < names.size() && i < 10; ++i)
    quoted.push_back("'" + names[i] + "'");
  std::string more = names.size() > 10
                         ? fmt::format(" ({} more)", names.size() - 10)
                         : std::string();
  return fmt::format("{}{}", fmt::join(quoted, ", "), more);
}

/// --init-from: which of the model's weights come from `file`, and under
/// which names; throws Error when none does, or when some do not and
/// --init-from-partial is not given.
WeightNameMatch matchInitFrom(const LoadedPlan &plan,
                              const TrainingOptions &train,
                              const SafetensorsWeights &file) {
  std::vector<std::string> names = modelWeightNames(plan);
  WeightNameMatch match = matchWeightNames(
      names, file.names(), train.hfPrefixSet ? &train.hfPrefix : nullptr,
      file.path());
  std::string prefix =
      match.prefix.empty()
          ? std::string()
          : fmt::format(" (less the prefix '{}')", match.prefix);
  if (match.matched.empty()) {
    std::vector<std::string> tensors = file.names();
    throw Error(fmt::format(
        "--init-from {}: none of its {} tensors is a weight of the model{} "
        "(the model's weights are named like {}, the file's tensors like {}); "
        "give the prefix the ONNX names have with --hf-prefix",
        file.path(), file.numTensors(), prefix,
        someNames({names.begin(),
                   names.begin() + std::min<std::size_t>(3, names.size())}),
        someNames(
            {tensors.begin(),
             tensors.begin() + std::min<std::size_t>(3, tensors.size())})));
  }
  if (!match.missing.empty() && !train.initFromPartial)
    throw Error(fmt::format(
        "--init-from {} has no tensor for {} of the model's {} weights{}: "
        "{}; give --init-from-partial to keep their values from the ONNX "
        "model",
        file.path(), match.missing.size(), names.size(), prefix,
        someNames(match.missing)));
  return match;
}

/// Loads this rank's slice of every weight, opening each source once (or
/// reading it from `checkpoint` when resuming, or from the --init-from file
/// when it has the weight). Weights with the same initializer, type and
/// sharding share one buffer, so that an optimizer's in-place update is seen
/// by every value of the initializer. `report`: print what --init-from gave.
void loadWeights(const LoadedPlan &plan, const std::vector<int64_t> &coords,
                 ProgramRunner &exec, const Checkpoint *checkpoint,
                 const TrainingOptions &train, bool report) {
  std::unique_ptr<SafetensorsWeights> init;
  WeightNameMatch initNames;
  if (!train.initFrom.empty() && !train.resumeDir.empty())
    throw Error("give --init-from or --resume DIR, not both");
  if (!train.initFrom.empty() && checkpoint) {
    // --resume auto found a checkpoint: the run goes on from it.
    if (report)
      std::printf("shoal-run: resuming from a checkpoint: --init-from %s is "
                  "not used\n",
                  train.initFrom.c_str());
  } else if (!train.initFrom.empty()) {
    init = std::make_unique<SafetensorsWeights>(train.initFrom);
    initNames = matchInitFrom(plan, train, *init);
    if (report) {
      std::printf("shoal-run: --init-from %s: %zu of the model's %zu weights "
                  "from its tensors%s\n",
                  train.initFrom.c_str(), initNames.matched.size(),
                  plan.training.modelWeights.size(),
                  initNames.prefix.empty()
                      ? ""
                      : fmt::format(" (the weights' names less the prefix "
                                    "'{}')",
                                    initNames.prefix)
                            .c_str());
      if (!initNames.missing.empty())
        std::fprintf(stderr,
                     "shoal-run: warning: --init-from %s: %zu weights have "
                     "no tensor there and keep the ONNX model's values "
                     "(--init-from-partial): %s\n",
                     train.initFrom.c_str(), initNames.missing.size(),
                     someNames(initNames.missing).c_str());
      if (!initNames.unused.empty())
        std::fprintf(stderr,
                     "shoal-run: warning: --init-from %s: %zu tensors are no "
                     "weight of the model (ignored): %s\n",
                     train.initFrom.c_str(), initNames.unused.size(),
                     someNames(initNames.unused).c_str());
      std::fflush(stdout);
    }
  }
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
    // A block of an initializer (Weight.range) is read from the whole
    // initializer, its offsets moved to the block.
    // A slice that pads the block (an uneven split) reads only the block's
    // part and keeps zeros past it, not the next block's elements.
    TensorType sourceType = w.globalType;
    Shape sourceOffsets = offsets;
    Shape readShape = local;
    if (w.rangeAxis >= 0) {
      sourceType.shape = w.rangeShape;
      sourceOffsets[w.rangeAxis] += w.rangeStart;
      readShape[w.rangeAxis] = std::clamp<int64_t>(
          w.globalType.shape[w.rangeAxis] - offsets[w.rangeAxis], 0,
          local[w.rangeAxis]);
    }
    auto readPadded = [&](auto &&read) {
      if (readShape == local)
        return read(local);
      Tensor padded(plan.values[w.value]);
      if (readShape[w.rangeAxis] > 0) {
        Tensor part = read(readShape);
        insertBlock(part.rawData(), readShape, dtypeSize(part.dtype()),
                    Shape(local.size(), 0), padded.rawData(), local);
      }
      return padded;
    };
    Tensor t;
    auto fromInit =
        init ? initNames.matched.find(w.sourceName) : initNames.matched.end();
    if (checkpoint) {
      t = checkpoint->readBlock(w.initializer, w.globalType, offsets, local);
    } else if (w.zeroInit) {
      t = Tensor(plan.values[w.value]);
    } else if (fromInit != initNames.matched.end()) {
      // The ONNX model's fingerprint says nothing of these.
      try {
        t = readPadded([&](const Shape &shape) {
          return init->loadBlock(fromInit->second, sourceType, sourceOffsets,
                                 shape, w.sourceShape);
        });
      } catch (const Error &e) {
        throw Error(fmt::format("--init-from: weight '{}': {}", w.initializer,
                                e.what()));
      }
    } else {
      std::unique_ptr<OnnxWeightFile> &file = files[w.source];
      if (!file)
        file = std::make_unique<OnnxWeightFile>(plan.sourcePaths[w.source]);
      // The weights the plan was compiled with, wherever they are stored
      // now (a re-export with new weights and the same shapes would run and
      // compute garbage).
      if (w.digest && fingerprinted.insert(w.sourceName).second &&
          file->digest(w.sourceName) != w.digest)
        throw Error(fmt::format(
            "weight '{}' in {} is not the one the plan was compiled with "
            "(its fingerprint differs: the model was re-exported or its "
            "weights changed); compile the plan again",
            w.sourceName, file->path()));
      try {
        t = readPadded([&](const Shape &shape) {
          return file->loadBlock(w.sourceName, sourceType, sourceOffsets, shape,
                                 w.sourceShape);
        });
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

/// This rank's index among the ranks of its node, without communicating
/// (so that it is safe before every rank has loaded).
int localRank(int worldRank) {
  for (const char *var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (std::getenv(var))
      return localRankFromEnv();
  return worldRank;
}

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
          {"--export-safetensors", &train.exportSafetensorsDir},
          {"--init-from", &train.initFrom},
          {"--export-hf", &train.exportHfDir},
          {"--eval-data", &train.evalDataPath},
          {"--metrics", &train.metricsPath}})
      if (!value->empty())
        throw Error(fmt::format("{} needs a training plan (shoal-compile "
                                "--train); {} is a forward plan",
                                flag, options.planPath));
    if (train.resumeAuto || train.totalSteps > 0 || train.evalOnly)
      throw Error(fmt::format("{} needs a training plan (shoal-compile "
                              "--train); {} is a forward plan",
                              train.evalOnly         ? "--eval"
                              : train.totalSteps > 0 ? "--total-steps"
                                                     : "--resume auto",
                              options.planPath));
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
  return !train.exportOnnx.empty() || !train.exportSafetensorsDir.empty() ||
         !train.exportHfDir.empty();
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

/// The files of a Hugging Face model folder that --export-hf copies next to
/// the weights: the config and the tokenizer's.
constexpr const char *kHfFiles[] = {"config.json",
                                    "generation_config.json",
                                    "tokenizer.json",
                                    "tokenizer_config.json",
                                    "vocab.json",
                                    "merges.txt",
                                    "special_tokens_map.json",
                                    "added_tokens.json",
                                    "tokenizer.model"};

/// The folder --export-hf copies kHfFiles from: --hf-config, else the
/// --init-from folder; "" when neither.
std::string hfConfigSource(const TrainingOptions &train) {
  std::error_code ec;
  if (!train.hfConfigDir.empty())
    return train.hfConfigDir;
  if (!train.initFrom.empty() && fs::is_directory(train.initFrom, ec))
    return train.initFrom;
  return "";
}

/// --export-hf: (name in model.safetensors, initializer) of every model
/// weight, sorted by name. The name is the initializer's less --hf-prefix,
/// else less the prefix under which the initializer names match the
/// tensors of --init-from (or of --hf-config's weights, if it has some);
/// without either, the initializer's own. A weight the ONNX export shares
/// between two parameters (tied) is one initializer: written once.
std::vector<std::pair<std::string, std::string>>
hfWeightNames(const LoadedPlan &plan, const TrainingOptions &train) {
  std::vector<std::string> names = modelWeightNames(plan);
  WeightNameMatch match;
  std::error_code ec;
  std::string reference = train.initFrom;
  if (reference.empty() && !train.hfConfigDir.empty() &&
      (fs::exists(fs::path(train.hfConfigDir) / "model.safetensors", ec) ||
       fs::exists(fs::path(train.hfConfigDir) / "model.safetensors.index.json",
                  ec)))
    reference = train.hfConfigDir;
  if (train.hfPrefixSet)
    match.prefix = train.hfPrefix;
  else if (!reference.empty())
    match = matchWeightNames(names, SafetensorsWeights(reference).names(),
                             nullptr, reference);
  std::map<std::string, std::string> taken;
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string &name : names) {
    std::string hf = strippedName(match, name);
    auto [it, fresh] = taken.emplace(hf, name);
    if (!fresh)
      throw Error(fmt::format("--export-hf: weights '{}' and '{}' would both "
                              "be written as '{}' (less the prefix '{}')",
                              it->second, name, hf, match.prefix));
    out.emplace_back(hf, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Checks the export's paths before training starts (rank 0 creates their
/// folders), so that a typo does not cost the run.
void checkExportPaths(const LoadedPlan &plan, const TrainingOptions &train) {
  const std::string &source = exportSource(plan);
  // An export folder's model.safetensors must not replace the weights the
  // run starts from (a rerun would then start from the trained ones).
  auto checkNotInitFrom = [&](const std::string &dir, const char *flag) {
    std::error_code ec;
    if (train.initFrom.empty())
      return;
    fs::path written = fs::path(dir) / "model.safetensors";
    bool same = fs::is_directory(train.initFrom, ec)
                    ? fs::equivalent(dir, train.initFrom, ec)
                    : fs::exists(written, ec) &&
                          fs::equivalent(written, train.initFrom, ec);
    if (same)
      throw Error(fmt::format("{} {} would overwrite the weights of "
                              "--init-from {}; write the trained model to "
                              "another folder",
                              flag, dir, train.initFrom));
  };
  if (!train.exportOnnx.empty()) {
    checkOutputFile(train.exportOnnx, "exported model", "--export-onnx");
    std::error_code ec;
    if (fs::exists(train.exportOnnx, ec) &&
        fs::equivalent(train.exportOnnx, source, ec))
      throw Error(fmt::format("--export-onnx {} is the plan's source model; "
                              "write the trained model to another file",
                              train.exportOnnx));
    // The export writes FILE and FILE.data: neither may be a file the run
    // reads (the source model's external data, the plan).
    std::vector<std::string> read = OnnxWeightFile(source).externalLocations();
    read.push_back(plan.path);
    for (const std::string &written :
         {train.exportOnnx, train.exportOnnx + ".data"})
      for (const std::string &r : read)
        if (fs::exists(written, ec) && fs::exists(r, ec) &&
            fs::equivalent(written, r, ec))
          throw Error(fmt::format(
              "--export-onnx {} would write {}, which the run reads ({}); "
              "write the trained model to another file",
              train.exportOnnx, written,
              r == plan.path ? "the plan"
                             : "external data of the source model " + source));
  }
  if (!train.exportSafetensorsDir.empty()) {
    const std::string &dir = train.exportSafetensorsDir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir))
      throw Error(fmt::format("cannot create the folder {} of "
                              "--export-safetensors{}",
                              dir, ec ? ": " + ec.message() : std::string()));
    checkWritableFolder(dir, "exported weights (--export-safetensors)");
    checkNotInitFrom(dir, "--export-safetensors");
  }
  if (!train.exportHfDir.empty()) {
    const std::string &dir = train.exportHfDir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir))
      throw Error(fmt::format("cannot create the folder {} of --export-hf{}",
                              dir, ec ? ": " + ec.message() : std::string()));
    checkWritableFolder(dir, "exported model (--export-hf)");
    for (const std::string &from : {train.initFrom, train.hfConfigDir})
      if (!from.empty() && fs::equivalent(dir, from, ec))
        throw Error(fmt::format("--export-hf {} is the folder the run reads "
                                "from; write the trained model to another "
                                "folder",
                                dir));
    checkNotInitFrom(dir, "--export-hf");
    std::string config = hfConfigSource(train);
    if (!train.hfConfigDir.empty() &&
        !fs::is_regular_file(fs::path(config) / "config.json", ec))
      throw Error(fmt::format("--hf-config {} holds no config.json (give the "
                              "folder that save_pretrained wrote)",
                              config));
    if (config.empty())
      std::fprintf(stderr,
                   "shoal-run: warning: --export-hf %s: without --hf-config "
                   "DIR (or an --init-from folder) only model.safetensors "
                   "is written; from_pretrained also needs the model's "
                   "config.json\n",
                   dir.c_str());
    hfWeightNames(plan, train);
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
    const std::string &folder = !train.exportSafetensorsDir.empty()
                                    ? train.exportSafetensorsDir
                                    : train.exportHfDir;
    scratch = root =
        !folder.empty()
            ? (fs::path(folder) / ".shoal-export-shards").string()
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
      TrainedModel model(checkpoint, exportSource(plan), modelWeightNames(plan),
                         plan.training.blocks);
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
      if (!train.exportHfDir.empty()) {
        const fs::path dir(train.exportHfDir);
        ExportSummary s =
            writeSafetensors((dir / "model.safetensors").string(), model,
                             {{"format", "pt"}, {"shoal.trained_steps", steps}},
                             hfWeightNames(plan, train));
        std::vector<std::string> copied;
        if (std::string from = hfConfigSource(train); !from.empty())
          for (const char *file : kHfFiles) {
            std::error_code ec;
            fs::path src = fs::path(from) / file;
            if (!fs::is_regular_file(src, ec))
              continue;
            fs::copy_file(src, dir / file, fs::copy_options::overwrite_existing,
                          ec);
            if (ec)
              throw Error(fmt::format("--export-hf: cannot copy {} to {}: {}",
                                      src.string(), dir.string(),
                                      ec.message()));
            copied.push_back(file);
          }
        std::printf("shoal-run: exported the model of step %lld for Hugging "
                    "Face to %s: model.safetensors (%zu tensors, %.3f "
                    "MiB)%s\n",
                    static_cast<long long>(step), dir.string().c_str(),
                    s.tensors, mib(s.bytes),
                    copied.empty()
                        ? ""
                        : fmt::format(", {}", fmt::join(copied, ", ")).c_str());
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

/// "12s", "3m05s", "2h07m": the time left at the pace of the last steps.
std::string formatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "n/a";
  long long s = std::llround(seconds);
  if (s < 60)
    return fmt::format("{}s", s);
  if (s < 3600)
    return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

/// A JSON number, or null when it is not finite (JSON has no NaN).
std::string jsonNumber(double x, const char *format = "{:.9g}") {
  return std::isfinite(x) ? fmt::format(fmt::runtime(format), x)
                          : std::string("null");
}

/// --metrics FILE: one JSON object per line, appended (a resumed run goes
/// on in the same file), written and flushed by world rank 0.
class MetricsLog {
public:
  void open(const std::string &path) {
    checkOutputFile(path, "metrics file", "--metrics");
    file = std::fopen(path.c_str(), "a");
    if (!file)
      throw Error(fmt::format("cannot open the metrics file {} (--metrics): "
                              "{}",
                              path, std::strerror(errno)));
    this->path = path;
  }
  ~MetricsLog() {
    if (file)
      std::fclose(file);
  }
  /// Writes `{fields}` (a list of `"key": value` pairs) as one line.
  void write(const std::vector<std::string> &fields) {
    if (!file)
      return;
    std::string line = fmt::format("{{{}}}\n", fmt::join(fields, ", "));
    if (std::fputs(line.c_str(), file) < 0 || std::fflush(file) != 0)
      throw Error(fmt::format("cannot write the metrics file {}: {}", path,
                              std::strerror(errno)));
  }

private:
  std::FILE *file = nullptr;
  std::string path;
};

/// The loss of the last run of `exec` on every rank: it comes from rank
/// `owner`, whose program outputs it (value `lossValue`).
float broadcastLoss(const LoadedPlan &plan, ProgramRunner &exec, int lossValue,
                    int owner, Communicator &world) {
  float loss = std::nanf("");
  if (world.rank() == owner)
    loss =
        exec.fetchOutput(lossValue, plan.numMicroBatches - 1).data<float>()[0];
  world.broadcast(&loss, sizeof loss, owner)->wait();
  return loss;
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
  std::unique_ptr<StepData> data, evalData;
  // Rank 0's run id (checkpoint manifests, the --save folder's lock).
  std::string runId = rank == 0 ? makeRunId() : std::string();
  CheckpointLock saveLock;
  MetricsLog metrics;
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
                                  backendTitle(backend), op->describe()));
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
    // --resume auto: the newest checkpoint of --save DIR, if it has one.
    std::string resumeDir = train.resumeDir;
    if (train.resumeAuto && hasCheckpoint(train.saveDir))
      resumeDir = train.saveDir;
    if (!resumeDir.empty()) {
      checkpoint =
          std::make_unique<Checkpoint>(Checkpoint::openLatest(resumeDir));
      checkpoint->setVerify(!train.noVerify);
      resumedStep = checkpoint->manifest().step;
      // The optimizer settings go on as they were, or the user says not.
      std::string change = settingsChange(checkpoint->manifest().schedule,
                                          optimizerSettings(plan->ops));
      if (!change.empty() && !train.overrideSchedule)
        throw Error(fmt::format(
            "{} was saved with other optimizer settings than this plan's "
            "({}): resuming would switch the run's schedule at step {}; "
            "compile the plan with the checkpoint's settings, or give "
            "--override-schedule to go on with this plan's",
            checkpoint->manifestPath(), change, resumedStep));
      if (!change.empty() && rank == 0)
        std::fprintf(stderr,
                     "shoal-run: note: --override-schedule: the optimizer "
                     "settings change at step %lld (%s)\n",
                     static_cast<long long>(resumedStep), change.c_str());
      static_cast<Executor &>(*exec).setStepsCompleted(resumedStep);
    }
    loadWeights(*plan, coords, *exec, checkpoint.get(), train, rank == 0);
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
      data = openData(train.dataPath, plan->training, train);
    else if (!train.evalOnly)
      loadInputs(*plan, options.inputsDir, coords, *exec);
    if (!train.evalDataPath.empty()) {
      evalData =
          openData(train.evalDataPath, plan->training, train, "--eval-data");
      exec->prepareEvaluation();
    }
    if (rank == 0 && !train.metricsPath.empty())
      metrics.open(train.metricsPath);
    if (plan->meshRank == 0 && !plan->outputs.empty() &&
        !options.outputsDir.empty()) {
      std::error_code ec;
      fs::create_directories(options.outputsDir, ec);
      if (!fs::is_directory(options.outputsDir))
        throw Error(fmt::format("cannot create the outputs folder {}{}",
                                options.outputsDir,
                                ec ? ": " + ec.message() : std::string()));
      checkWritableFolder(options.outputsDir, "outputs (--outputs)");
    }
    if (rank == 0 && !train.saveDir.empty()) {
      std::error_code ec;
      fs::create_directories(train.saveDir, ec);
      if (!fs::is_directory(train.saveDir))
        throw Error(fmt::format("cannot create the checkpoint folder {}{}",
                                train.saveDir,
                                ec ? ": " + ec.message() : std::string()));
      checkWritableFolder(train.saveDir, "checkpoints (--save)");
      saveLock = CheckpointLock(train.saveDir, runId);
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
  // Every rank must run the same job before the first collective that the
  // plan shapes (docs/Runtime.md, "Ranks that disagree").
  if (size > 1) {
    std::vector<std::string> all =
        gatherText(jobDescription(*plan, options, train, size, resumedStep),
                   world, "job description");
    agree(rank == 0 ? jobMismatch(all) : std::string(), world);
  }
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
    std::printf(
        "shoal-run: resumed from %s at step %lld\n",
        (train.resumeDir.empty() ? train.saveDir : train.resumeDir).c_str(),
        static_cast<long long>(resumedStep));
  else if (rank == 0 && train.resumeAuto)
    std::printf("shoal-run: no checkpoint in %s yet: starting at step 0\n",
                train.saveDir.c_str());
  if (std::vector<std::string> extra =
          data ? data->extraFiles() : std::vector<std::string>();
      rank == 0 && !extra.empty())
    std::fprintf(stderr,
                 "shoal-run: warning: --data %s: %s %s no input of the "
                 "plan (ignored)\n",
                 train.dataPath.c_str(),
                 fmt::format("{}", fmt::join(extra, ", ")).c_str(),
                 extra.size() == 1 ? "is" : "are");

  // Phase 2: run. From here on an error on one rank aborts the job.
  auto runStart = Clock::now();
  // Collectives run inside each program, ranks ordered as its mesh.
  // Under a device communicator (--comm nccl) the program's collectives and
  // transfers run on the device, over the world of the backend that has it;
  // the world stays the host communicator (MPI or Gloo) for control.
  std::unique_ptr<Communicator> ncclWorld;
  if (!options.comm.empty() && options.comm != "mpi" && options.comm != "gloo")
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
      // --total-steps: the step the run ends at, wherever it resumed from.
      int64_t first = trainer.stepsCompleted();
      int64_t last =
          train.totalSteps > 0 ? train.totalSteps : first + options.steps;
      if (train.evalOnly)
        last = first;
      int64_t toRun = std::max<int64_t>(0, last - first);
      // The loss comes from the lowest rank whose program outputs it.
      int lossValue = -1;
      for (const PortInfo &port : plan->outputs)
        if (port.name == training.loss)
          lossValue = port.value;
      int owner = static_cast<int>(world.min(lossValue >= 0 ? rank : INT_MAX));
      double allFlops = world.sum(scheduledFlops(*plan));
      summary.stepFlops = allFlops;
      // MFU against the peak of the precision the plan's matrix products
      // run in (Megatron's and PaLM's convention).
      double peak = options.peakTflops;
      if (peak == 0 && exec->deviceSpec())
        peak = peakTflops(*exec->deviceSpec(),
                          training.precision == "bf16"   ? Precision::BF16
                          : training.precision == "fp16" ? Precision::FP16
                                                         : Precision::FP32);
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
      // Evaluation (--eval-data): K forward-only steps over the first K
      // batches of the evaluation data, the mean of their losses (each the
      // mean over its batch).
      auto evaluateAt = [&](int64_t step) {
        auto evalStart = Clock::now();
        double sum = 0;
        for (int k = 0; k < train.evalSteps; ++k) {
          noteStep(step);
          notePhase("evaluating");
          feedData(*plan, *evalData, k, coords, *exec);
          world.barrier();
          trainer.evaluate(comm);
          sum += broadcastLoss(*plan, *exec, lossValue, owner, world);
        }
        double loss = sum / train.evalSteps;
        double seconds = secondsSince(evalStart);
        // The training batch of --inputs is set again (--data sets every
        // step's).
        if (!data && !train.evalOnly)
          loadInputs(*plan, options.inputsDir, coords, *exec);
        if (rank == 0) {
          std::printf("eval step %lld: loss %.6f ppl %.6g (%d batch%s, %.1f "
                      "ms)\n",
                      static_cast<long long>(step), loss, std::exp(loss),
                      train.evalSteps, train.evalSteps == 1 ? "" : "es",
                      seconds * 1e3);
          std::fflush(stdout);
          metrics.write(
              {fmt::format("\"step\": {}", step),
               "\"eval_loss\": " + jsonNumber(loss),
               "\"eval_ppl\": " + jsonNumber(std::exp(loss)),
               fmt::format("\"eval_batches\": {}", train.evalSteps),
               "\"eval_ms\": " + jsonNumber(seconds * 1e3, "{:.3f}")});
        }
        return loss;
      };
      // A checkpoint of `step`; with --keep-last, the older ones go.
      auto saveAt = [&](int64_t step) {
        notePhase("saving a checkpoint");
        saveCheckpoint(train.saveDir, step, training.optimizer, plan->mesh,
                       coords, checkpointTensors(*plan, *exec), world, runId,
                       optimizerSettings(plan->ops));
        if (rank == 0 && train.keepLast > 0) {
          // A folder that cannot be removed costs disk, not the run.
          try {
            pruneCheckpoints(train.saveDir, train.keepLast);
          } catch (const Error &e) {
            std::fprintf(stderr, "shoal-run: warning: %s\n", e.what());
          }
        }
      };
      if (train.evalOnly) {
        evaluateAt(first);
      } else if (toRun == 0 && rank == 0) {
        std::printf("shoal-run: step %lld of --total-steps %lld is reached "
                    "already: nothing to train\n",
                    static_cast<long long>(first),
                    static_cast<long long>(last));
      }
      int64_t lastSaved = -1;
      double sinceLog = 0, lossSinceLog = 0, runSeconds = 0;
      int stepsSinceLog = 0;
      for (int64_t i = 0; i < toRun; ++i) {
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
        runSeconds += slowest;
        ++stepsSinceLog;
        int64_t done = trainer.stepsCompleted();
        // Every step's loss reaches every rank, so that a NaN or Inf one
        // stops them all at the same step (after its progress line, and
        // before any checkpoint of the weights it came from is written).
        float loss = broadcastLoss(*plan, *exec, lossValue, owner, world);
        lossSinceLog += loss;
        const Executor::LossScalerState &scaler = trainer.lossScaler();
        // Under loss scaling an overflow skips the step instead (a NaN or
        // Inf loss makes NaN gradients, so the scaler skipped it too).
        bool finite = std::isfinite(loss) || scaler.lastSkipped;
        if (done % train.logEvery == 0 || i + 1 == toRun || !finite) {
          // The schedule's rate is the same on every rank; a rank without
          // optimizer ops has none.
          double lr = trainer.lastLearningRate();
          lr = world.max(std::isnan(lr) ? -1.0 : lr);
          double peakMiB = 0;
          if (!train.metricsPath.empty())
            peakMiB = world.max(double(exec->memoryReport().peak) / (1 << 20));
          if (rank == 0) {
            double seconds = sinceLog / stepsSinceLog;
            double meanLoss = lossSinceLog / stepsSinceLog;
            double mfu = peak > 0 ? allFlops / seconds / (size * peak * 1e12)
                                  : std::nan("");
            std::string mfuText =
                peak > 0 ? fmt::format("{:.2f}%", 100 * mfu) : "n/a";
            double norm = exec->lastGradNorm();
            std::string lrText = lr >= 0 ? fmt::format("{:.4e}", lr) : "n/a";
            // The pace of the steps since the last line.
            double eta = double(last - done) * seconds;
            // fp16: the scale the next step starts from, and the steps
            // skipped so far (overflows).
            std::string scaled;
            if (scaler.active)
              scaled = fmt::format(" loss_scale {:g} skipped {}", scaler.scale,
                                   scaler.skippedSteps);
            std::printf("step %lld/%lld loss %.6f time %.1f ms %s %.0f mfu "
                        "%s lr %s grad_norm %.4g eta %s%s\n",
                        static_cast<long long>(done),
                        static_cast<long long>(last), meanLoss, seconds * 1e3,
                        unit, perStep / seconds, mfuText.c_str(),
                        lrText.c_str(), norm, formatEta(eta).c_str(),
                        scaled.c_str());
            std::fflush(stdout);
            std::vector<std::string> fields = {
                fmt::format("\"step\": {}", done),
                "\"loss\": " + jsonNumber(meanLoss),
                fmt::format("\"steps_averaged\": {}", stepsSinceLog),
                "\"lr\": " + jsonNumber(lr >= 0 ? lr : std::nan("")),
                "\"grad_norm\": " + jsonNumber(norm),
                "\"step_ms\": " + jsonNumber(seconds * 1e3, "{:.4f}"),
                fmt::format("\"{}\": ", perStep > 0 && unit[0] == 't'
                                            ? "tokens_per_s"
                                            : "samples_per_s") +
                    jsonNumber(perStep / seconds, "{:.2f}"),
                "\"mfu\": " + jsonNumber(mfu, "{:.6f}"),
                "\"memory_peak_mib\": " + jsonNumber(peakMiB, "{:.3f}"),
                "\"elapsed_s\": " + jsonNumber(runSeconds, "{:.3f}")};
            if (scaler.active) {
              fields.push_back("\"loss_scale\": " + jsonNumber(scaler.scale));
              fields.push_back(
                  fmt::format("\"skipped_steps\": {}", scaler.skippedSteps));
            }
            metrics.write(fields);
          }
          sinceLog = 0;
          lossSinceLog = 0;
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
        // The checkpoint first: an evaluation that fails does not cost it.
        if (!train.saveDir.empty() && train.saveEvery > 0 &&
            done % train.saveEvery == 0) {
          saveAt(done);
          lastSaved = done;
        }
        if (evalData && train.evalEvery > 0 && done % train.evalEvery == 0 &&
            i + 1 < toRun)
          evaluateAt(done);
      }
      if (!train.saveDir.empty() && !train.evalOnly &&
          lastSaved != trainer.stepsCompleted() &&
          (toRun > 0 || resumedStep < 0)) {
        saveAt(trainer.stepsCompleted());
      }
      if (exports(train))
        exportModel(*plan, *exec, train, coords, trainer.stepsCompleted(),
                    world);
      if (evalData && toRun > 0)
        evaluateAt(trainer.stepsCompleted());
      summary.stepSeconds = toRun > 0 ? timed / double(toRun) : 0;
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
