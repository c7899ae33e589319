//===- Checkpoint.cpp - Saving and resuming training runs -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Checkpoint.h"
#include "Json.h"

#include "MappedFile.h"
#include "Npy.h"

#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

/// The largest step a checkpoint may record (2^53: exact in a double, and
/// far from int64's overflow when counted on).
constexpr int64_t kMaxCheckpointStep = int64_t(1) << 53;

const char *dtypeJsonName(DType d) {
  switch (d) {
  case DType::F32:
    return "float32";
  case DType::I64:
    return "int64";
  case DType::I32:
    return "int32";
  case DType::Bool:
    return "bool";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  case DType::F64:
    return "float64";
  case DType::I8:
    return "int8";
  case DType::U8:
    return "uint8";
  }
  return "?";
}

bool parseDtypeName(const std::string &s, DType &d) {
  if (s == "float32")
    d = DType::F32;
  else if (s == "int64")
    d = DType::I64;
  else if (s == "int32")
    d = DType::I32;
  else if (s == "bool")
    d = DType::Bool;
  else if (s == "float16")
    d = DType::F16;
  else if (s == "bfloat16")
    d = DType::BF16;
  else if (s == "float64")
    d = DType::F64;
  else if (s == "int8")
    d = DType::I8;
  else if (s == "uint8")
    d = DType::U8;
  else
    return false;
  return true;
}

/// Reads manifest-shaped JSON, failing with messages that name `what`.
class ManifestReader {
public:
  explicit ManifestReader(std::string what) : what(std::move(what)) {}

  [[noreturn]] void fail(const std::string &why) const {
    throw Error(fmt::format("{}: {}", what, why));
  }
  const JsonValue &member(const JsonValue &obj, const char *key,
                          JsonValue::Kind kind,
                          const std::string &where) const {
    const JsonValue *v = obj.find(key);
    if (!v)
      fail(fmt::format("{} has no \"{}\"", where, key));
    if (v->kind != kind)
      fail(fmt::format("{}: \"{}\" has the wrong JSON type", where, key));
    return *v;
  }
  int64_t integer(const JsonValue &v, const std::string &where) const {
    if (v.kind != JsonValue::Number)
      fail(fmt::format("{} is not a number", where));
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(v.text.c_str(), &end, 10);
    if (errno || *end != '\0')
      fail(fmt::format("{} is not an integer ({})", where, v.text));
    return n;
  }
  Shape ints(const JsonValue &v, const std::string &where) const {
    if (v.kind != JsonValue::Array)
      fail(fmt::format("{} is not a list", where));
    Shape out;
    for (const JsonValue &item : v.items) {
      int64_t n = integer(item, where);
      if (n < 0)
        fail(fmt::format("{} has a negative entry", where));
      out.push_back(n);
    }
    return out;
  }
  /// {"dtype", "shape", "shards": [{"file", "offset"[, "shape"]}]}.
  CheckpointEntry entry(const JsonValue &t, const std::string &name) const {
    std::string where = fmt::format("tensor '{}'", name);
    if (t.kind != JsonValue::Object)
      fail(fmt::format("{} is not an object", where));
    CheckpointEntry e;
    const std::string &dtype =
        member(t, "dtype", JsonValue::String, where).text;
    if (!parseDtypeName(dtype, e.globalType.dtype))
      fail(fmt::format("{} has dtype '{}' (expected float32, int64, int32 or "
                       "bool)",
                       where, dtype));
    e.globalType.shape =
        ints(member(t, "shape", JsonValue::Array, where), where + " shape");
    uint64_t bytes = 0;
    if (!checkedByteSize(e.globalType.dtype, e.globalType.shape, bytes))
      fail(fmt::format("{} has shape {}, which is too large", where,
                       formatShape(e.globalType.shape)));
    for (const JsonValue &s :
         member(t, "shards", JsonValue::Array, where).items) {
      if (s.kind != JsonValue::Object)
        fail(fmt::format("{} has a shard that is not an object", where));
      CheckpointShard shard;
      shard.file = member(s, "file", JsonValue::String, where + " shard").text;
      if (shard.file.empty() || shard.file.find('/') != std::string::npos ||
          shard.file == "." || shard.file == "..")
        fail(fmt::format("{} has a shard file '{}' that is not a plain file "
                         "name",
                         where, shard.file));
      shard.offset =
          ints(member(s, "offset", JsonValue::Array, where + " shard"),
               where + " shard offset");
      if (shard.offset.size() != e.globalType.shape.size())
        fail(fmt::format("{}: shard {} has an offset of rank {}, the tensor "
                         "has rank {}",
                         where, shard.file, shard.offset.size(),
                         e.globalType.shape.size()));
      for (std::size_t i = 0; i < shard.offset.size(); ++i)
        if (shard.offset[i] > e.globalType.shape[i])
          fail(fmt::format("{}: shard {} has offset {}, outside the tensor's "
                           "shape {}",
                           where, shard.file, formatShape(shard.offset),
                           formatShape(e.globalType.shape)));
      if (const JsonValue *crc = s.find("crc32")) {
        int64_t c = integer(*crc, where + " shard crc32");
        if (c < 0 || c > 0xffffffffLL)
          fail(fmt::format("{}: shard {} has crc32 {}, expected 0 to {}", where,
                           shard.file, c, 0xffffffffLL));
        shard.hasCrc = true;
        shard.crc = static_cast<uint32_t>(c);
      }
      if (const JsonValue *shape = s.find("shape")) {
        shard.shape = ints(*shape, where + " shard shape");
        if (shard.shape.size() != e.globalType.shape.size() ||
            !checkedByteSize(e.globalType.dtype, shard.shape, bytes))
          fail(fmt::format("{}: shard {} has shape {}, which does not fit a "
                           "tensor of shape {}",
                           where, shard.file, formatShape(shard.shape),
                           formatShape(e.globalType.shape)));
      }
      e.shards.push_back(std::move(shard));
    }
    return e;
  }

private:
  std::string what;
};

std::string shapeJson(const Shape &s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string entryJson(const CheckpointEntry &e) {
  std::vector<std::string> shards;
  for (const CheckpointShard &s : e.shards)
    shards.push_back(fmt::format(
        "{{\"file\": {}, \"offset\": {}, \"shape\": {}{}}}", jsonString(s.file),
        shapeJson(s.offset), shapeJson(s.shape),
        s.hasCrc ? fmt::format(", \"crc32\": {}", s.crc) : std::string()));
  return fmt::format("{{\"dtype\": \"{}\", \"shape\": {}, \"shards\": [{}]}}",
                     dtypeJsonName(e.globalType.dtype),
                     shapeJson(e.globalType.shape), fmt::join(shards, ", "));
}

std::string tensorsJson(const std::map<std::string, CheckpointEntry> &tensors,
                        const char *sep) {
  std::vector<std::string> parts;
  for (const auto &[name, e] : tensors)
    parts.push_back(fmt::format("{}: {}", jsonString(name), entryJson(e)));
  return fmt::format("{{{}{}}}", sep, fmt::join(parts, std::string(",") + sep));
}

std::map<std::string, CheckpointEntry> parseTensors(const JsonValue &obj,
                                                    const ManifestReader &r) {
  if (obj.kind != JsonValue::Object)
    r.fail("\"tensors\" is not an object");
  std::map<std::string, CheckpointEntry> out;
  for (const auto &[name, t] : obj.members)
    if (!out.emplace(name, r.entry(t, name)).second)
      r.fail(fmt::format("tensor '{}' is listed twice", name));
  return out;
}

std::string readText(const std::string &path, const char *what) {
  std::string text;
  // Manifests list tensors and shards: generous, but bounded.
  if (std::string e =
          shoal::readRegularFile(path, text, std::uint64_t(1) << 30);
      !e.empty())
    throw Error(fmt::format("cannot read {} {}: {}", what, path, e));
  return text;
}

/// fsync of a file or folder.
void syncPath(const std::string &path, bool folder) {
  int fd = ::open(path.c_str(), folder ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    throw Error(fmt::format("cannot open {} to sync it: {}", path,
                            std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw Error(fmt::format("cannot sync {}: {}", path, std::strerror(err)));
}

/// Writes `text` to `path` (never through a symlink there) and fsyncs it.
void writeDurable(const std::string &path, const std::string &text) {
  if (std::string e = shoal::writeFileAtomically(path, text, /*durable=*/true);
      !e.empty())
    throw Error(e);
}

void renameOrThrow(const fs::path &from, const fs::path &to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw Error(fmt::format("cannot rename {} to {}: {}", from.string(),
                            to.string(), ec.message()));
}

/// Clips the block at `offsets` of shape `local` to `global`.
Shape clippedShape(const Shape &global, const Shape &offsets,
                   const Shape &local) {
  Shape s(local.size());
  for (std::size_t d = 0; d < local.size(); ++d)
    s[d] = std::max<int64_t>(0, std::min(local[d], global[d] - offsets[d]));
  return s;
}

} // namespace

std::string shoal::rt::checkpointFolderName(int64_t step) {
  return fmt::format("step-{:08d}", step);
}

std::map<std::string, CheckpointEntry>
shoal::rt::writeCheckpointShards(const std::string &folder, const Mesh &mesh,
                                 const std::vector<int64_t> &coords,
                                 const std::vector<CheckpointTensor> &tensors) {
  std::map<std::string, CheckpointEntry> written;
  for (const CheckpointTensor &t : tensors) {
    // One replica of each block writes it: coordinate 0 on every device
    // axis the tensor is not split over.
    bool writer = true;
    for (std::size_t a = 0; a < mesh.numAxes(); ++a)
      if (static_cast<int>(a) != mesh.microBatchAxis() &&
          !t.sharding.uses(static_cast<int>(a)) && coords[a] != 0)
        writer = false;
    if (!writer)
      continue;
    const Shape &global = t.globalType.shape;
    Shape offsets = blockOffsets(global, t.sharding, mesh, coords);
    Shape clipped = clippedShape(global, offsets, t.block.shape());
    // The block's index in the tensor's grid of blocks.
    int64_t shard = 0;
    bool first = true;
    for (std::size_t d = 0; d < global.size(); ++d) {
      const std::vector<int> none;
      const std::vector<int> &axes =
          d < t.sharding.dims.size() ? t.sharding.dims[d] : none;
      int64_t index = mesh.blockIndex(axes, coords);
      shard = shard * mesh.numBlocks(axes) + index;
      first = first && index == 0;
    }
    // A block wholly in the padding of an uneven split holds nothing (the
    // first block is kept for tensors without elements).
    if (numElements(clipped) == 0 && !first)
      continue;
    Tensor out(TensorType{t.globalType.dtype, clipped});
    if (out.numBytes())
      copyBox(t.block.rawData(), t.block.shape(), Shape(clipped.size(), 0),
              out.rawData(), clipped, Shape(clipped.size(), 0), clipped,
              dtypeSize(out.dtype()));
    std::string file = fmt::format("{}.{}.npy", sanitizeName(t.name), shard);
    std::string path = (fs::path(folder) / file).string();
    writeNpy(path, out);
    syncPath(path, false);
    CheckpointEntry &e = written[t.name];
    e.globalType = t.globalType;
    e.shards.push_back({file, offsets, clipped, true, fileCrc32(path)});
  }
  return written;
}

std::string shoal::rt::manifestJson(const CheckpointManifest &m) {
  return fmt::format("{{\"format\": \"shoal.checkpoint\", \"version\": 1, "
                     "\"step\": {}, \"world_size\": {},\n \"optimizer\": {},\n "
                     "\"run_id\": {},\n \"schedule\": {},\n \"tensors\": "
                     "{}}}\n",
                     m.step, m.worldSize, jsonString(m.optimizer),
                     jsonString(m.runId), jsonString(m.schedule),
                     tensorsJson(m.tensors, "\n  "));
}

void shoal::rt::commitCheckpoint(const std::string &dir,
                                 const std::string &tmpFolder,
                                 const CheckpointManifest &manifest) {
  // Two tensors must not share a file (names that sanitize alike).
  std::map<std::string, std::string> files;
  for (const auto &[name, e] : manifest.tensors)
    for (const CheckpointShard &s : e.shards) {
      auto [it, fresh] = files.emplace(s.file, name);
      if (!fresh)
        throw Error(fmt::format("checkpoint {}: tensors '{}' and '{}' both "
                                "write {} (their names differ only in "
                                "characters outside [A-Za-z0-9._-])",
                                tmpFolder, it->second, name, s.file));
    }
  fs::path root(dir);
  writeDurable((fs::path(tmpFolder) / "manifest.json").string(),
               manifestJson(manifest));
  syncPath(tmpFolder, true);
  fs::path final = root / checkpointFolderName(manifest.step);
  std::error_code ec;
  if (fs::exists(final, ec)) {
    // Saved again at the same step: move the old one aside first.
    fs::path old = root / (".old-" + checkpointFolderName(manifest.step));
    fs::remove_all(old, ec);
    renameOrThrow(final, old);
    renameOrThrow(tmpFolder, final);
    fs::remove_all(old, ec);
  } else {
    renameOrThrow(tmpFolder, final);
  }
  syncPath(dir, true);
  // Written aside and renamed over `latest` (a symlink there is replaced).
  writeDurable((root / "latest").string(),
               checkpointFolderName(manifest.step) + "\n");
}

void shoal::rt::saveCheckpoint(const std::string &dir, int64_t step,
                               const std::string &optimizer, const Mesh &mesh,
                               const std::vector<int64_t> &coords,
                               const std::vector<CheckpointTensor> &tensors,
                               Communicator &world, const std::string &runId,
                               const std::string &schedule) {
  int rank = world.rank(), size = world.size();
  std::string tmp =
      (fs::path(dir) / (".tmp-" + checkpointFolderName(step))).string();
  if (rank == 0) {
    std::error_code ec;
    // Leftovers of crashed saves (any step), then a fresh folder.
    if (fs::is_directory(dir, ec))
      for (const auto &e : fs::directory_iterator(dir, ec)) {
        std::string name = e.path().filename().string();
        if (name.rfind(".tmp-step-", 0) == 0 ||
            name.rfind(".old-step-", 0) == 0 ||
            name.rfind(".pruned-step-", 0) == 0)
          fs::remove_all(e.path(), ec);
      }
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (!fs::is_directory(tmp))
      throw Error(fmt::format("cannot create the checkpoint folder {}{}", tmp,
                              ec ? ": " + ec.message() : std::string()));
  }
  world.barrier();
  std::string mine =
      tensorsJson(writeCheckpointShards(tmp, mesh, coords, tensors), "");
  // Gathering is also the barrier: a rank sends its list once its files are
  // written and synced.
  std::vector<std::string> all = gatherText(mine, world, "checkpoint list");
  if (rank == 0) {
    CheckpointManifest manifest;
    manifest.step = step;
    manifest.worldSize = size;
    manifest.optimizer = optimizer;
    manifest.runId = runId;
    manifest.schedule = schedule;
    for (int r = 0; r < size; ++r) {
      ManifestReader reader(fmt::format("the checkpoint list of rank {}", r));
      JsonValue parsed = parseJson(
          all[r].data(), all[r].size(),
          fmt::format("the checkpoint list of rank {} is not valid JSON", r));
      for (auto &[name, e] : parseTensors(parsed, reader)) {
        auto [it, fresh] = manifest.tensors.emplace(name, e);
        if (fresh)
          continue;
        if (it->second.globalType != e.globalType)
          throw Error(fmt::format("checkpoint {}: ranks disagree on the type "
                                  "of tensor '{}' ({} and {})",
                                  tmp, name, it->second.globalType.str(),
                                  e.globalType.str()));
        for (CheckpointShard &s : e.shards)
          it->second.shards.push_back(std::move(s));
      }
    }
    for (auto &[name, e] : manifest.tensors)
      std::sort(e.shards.begin(), e.shards.end(),
                [](const CheckpointShard &a, const CheckpointShard &b) {
                  return a.offset < b.offset;
                });
    commitCheckpoint(dir, tmp, manifest);
  }
  world.barrier();
}

std::string Checkpoint::manifestPath() const {
  return (fs::path(dir) / "manifest.json").string();
}

Checkpoint Checkpoint::open(const std::string &folder) {
  Checkpoint c;
  c.dir = folder;
  std::string path = c.manifestPath();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error(fmt::format("checkpoint {} has no manifest ({} not found)",
                            folder, path));
  if (fs::is_symlink(path, ec))
    throw Error(fmt::format("checkpoint manifest {} is a symbolic link; a "
                            "checkpoint's files must be files of its folder",
                            path));
  std::string text = readText(path, "checkpoint manifest");
  JsonValue root =
      parseJson(text.data(), text.size(),
                "checkpoint manifest " + path + " is not valid JSON");
  ManifestReader r("checkpoint manifest " + path);
  if (root.kind != JsonValue::Object)
    r.fail("the manifest is not a JSON object");
  if (r.member(root, "format", JsonValue::String, "the manifest").text !=
      "shoal.checkpoint")
    r.fail("\"format\" is not \"shoal.checkpoint\"");
  int64_t version =
      r.integer(r.member(root, "version", JsonValue::Number, "the manifest"),
                "\"version\"");
  if (version != 1)
    r.fail(fmt::format("version {} is not supported (this runtime reads "
                       "version 1)",
                       version));
  c.info.step = r.integer(
      r.member(root, "step", JsonValue::Number, "the manifest"), "step");
  // Steps are counted on from here (step + 1 must not overflow); no run
  // takes 2^53 steps.
  if (c.info.step < 0 || c.info.step > kMaxCheckpointStep)
    r.fail(fmt::format("\"step\" is {}, expected 0 to {}", c.info.step,
                       kMaxCheckpointStep));
  if (const JsonValue *w = root.find("world_size"))
    c.info.worldSize = r.integer(*w, "\"world_size\"");
  if (const JsonValue *o = root.find("optimizer");
      o && o->kind == JsonValue::String)
    c.info.optimizer = o->text;
  if (const JsonValue *id = root.find("run_id");
      id && id->kind == JsonValue::String)
    c.info.runId = id->text;
  if (const JsonValue *s = root.find("schedule");
      s && s->kind == JsonValue::String)
    c.info.schedule = s->text;
  c.info.tensors = parseTensors(
      r.member(root, "tensors", JsonValue::Object, "the manifest"), r);
  return c;
}

namespace {

/// The step of a step folder's name (`step-<digits>`), or -1.
int64_t stepOfFolderName(const std::string &name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  // A name of more digits than any step has is not a step folder.
  errno = 0;
  long long step = std::strtoll(name.c_str() + 5, nullptr, 10);
  if (errno == ERANGE || step > kMaxCheckpointStep)
    return -1;
  return step;
}

/// The newest complete checkpoint folder of `dir`, or "" if it has none.
std::string latestFolder(const std::string &dir) {
  std::error_code ec;
  fs::path root(dir);
  // `latest` names the newest complete checkpoint.
  fs::path latest = root / "latest";
  if (fs::is_regular_file(latest, ec)) {
    std::string name = readText(latest.string(), "checkpoint pointer");
    while (!name.empty() &&
           std::isspace(static_cast<unsigned char>(name.back())))
      name.pop_back();
    bool plain = !name.empty() && name.find('/') == std::string::npos &&
                 name != "." && name != "..";
    if (plain && fs::is_regular_file(root / name / "manifest.json", ec))
      return (root / name).string();
  }
  // No usable `latest`: the complete step folder with the highest step.
  int64_t best = -1;
  fs::path bestPath;
  for (const fs::directory_entry &e : fs::directory_iterator(root, ec)) {
    int64_t step = stepOfFolderName(e.path().filename().string());
    if (step < 0 || !fs::is_regular_file(e.path() / "manifest.json", ec))
      continue;
    if (step > best) {
      best = step;
      bestPath = e.path();
    }
  }
  return best < 0 ? std::string() : bestPath.string();
}

} // namespace

bool shoal::rt::hasCheckpoint(const std::string &dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !latestFolder(dir).empty();
}

std::vector<std::string> shoal::rt::pruneCheckpoints(const std::string &dir,
                                                     int keep) {
  std::vector<std::string> removed;
  if (keep <= 0)
    return removed;
  std::error_code ec;
  // Complete step folders, newest first; the one `latest` names stays
  // whatever its step.
  std::string latest = latestFolder(dir);
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    int64_t step = stepOfFolderName(e.path().filename().string());
    if (step >= 0 && fs::is_regular_file(e.path() / "manifest.json", ec))
      steps.push_back({step, e.path()});
  }
  std::sort(steps.begin(), steps.end(),
            [](const auto &a, const auto &b) { return a.first > b.first; });
  for (std::size_t i = static_cast<std::size_t>(keep); i < steps.size(); ++i) {
    if (steps[i].second.string() == latest)
      continue;
    // Renamed aside first, so that a kill in the middle leaves no step
    // folder without its manifest (a `.pruned-` leftover goes with the next
    // save's).
    fs::path aside =
        fs::path(dir) / (".pruned-" + steps[i].second.filename().string());
    std::error_code rm;
    fs::remove_all(aside, rm);
    fs::rename(steps[i].second, aside, rm);
    if (!rm)
      fs::remove_all(aside, rm);
    if (rm)
      throw Error(fmt::format("--keep-last: cannot remove {}: {}",
                              steps[i].second.string(), rm.message()));
    removed.push_back(steps[i].second.filename().string());
  }
  return removed;
}

Checkpoint Checkpoint::openLatest(const std::string &dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw Error(fmt::format("checkpoint folder {} not found (--resume DIR "
                            "names the folder given to --save)",
                            dir));
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("checkpoint folder {} is not a folder", dir));
  // A step folder: that step.
  if (fs::is_regular_file(fs::path(dir) / "manifest.json", ec))
    return open(dir);
  std::string folder = latestFolder(dir);
  if (folder.empty())
    throw Error(fmt::format("no checkpoint in {} (no 'latest' naming a step "
                            "folder and no step-* folder with a "
                            "manifest.json)",
                            dir));
  return open(folder);
}

Tensor Checkpoint::readBlock(const std::string &name, const TensorType &global,
                             const Shape &offsets, const Shape &local) const {
  auto it = info.tensors.find(name);
  if (it == info.tensors.end())
    throw Error(
        fmt::format("checkpoint {} has no tensor '{}'", manifestPath(), name));
  const CheckpointEntry &e = it->second;
  if (e.globalType != global)
    throw Error(fmt::format("checkpoint {}: tensor '{}' is {}, but the plan "
                            "expects {}",
                            manifestPath(), name, e.globalType.str(),
                            global.str()));
  Tensor out(TensorType{global.dtype, local});
  std::size_t rank = local.size();
  Shape region = clippedShape(global.shape, offsets, local);
  std::size_t elem = dtypeSize(global.dtype);
  int64_t covered = 0;
  for (const CheckpointShard &s : e.shards) {
    std::string path = (fs::path(dir) / s.file).string();
    auto corrupt = [&](const std::string &why) {
      return Error(fmt::format("checkpoint {}: tensor '{}': shard {} {}",
                               manifestPath(), name, path, why));
    };
    // Skip shards that cannot overlap (when the manifest gives their shape).
    if (s.shape.size() == rank) {
      bool overlaps = true;
      for (std::size_t d = 0; d < rank; ++d)
        overlaps = overlaps && s.offset[d] < offsets[d] + region[d] &&
                   offsets[d] < s.offset[d] + s.shape[d];
      if (!overlaps && numElements(region) > 0)
        continue;
    }
    // Like external data, a shard must be a file of the step folder, not a
    // link to one anywhere.
    std::error_code lec;
    if (fs::is_symlink(path, lec))
      throw corrupt("is a symbolic link; a checkpoint's shards must be files "
                    "of its folder");
    MappedFile file = [&] {
      try {
        return MappedFile(path, "checkpoint shard");
      } catch (const Error &err) {
        throw Error(fmt::format("checkpoint {}: tensor '{}': {}",
                                manifestPath(), name, err.what()));
      }
    }();
    NpyHeader header;
    try {
      header = parseNpyHeader(file.data(), file.size(), path);
    } catch (const Error &err) {
      throw Error(fmt::format("checkpoint {}: tensor '{}': {}", manifestPath(),
                              name, err.what()));
    }
    if (verify && s.hasCrc && !verified.count(path)) {
      uint32_t crc = static_cast<uint32_t>(crc32_z(
          0L, reinterpret_cast<const Bytef *>(file.data()), file.size()));
      if (crc != s.crc)
        throw corrupt(fmt::format(
            "has CRC-32 {:08x}, but the manifest says {:08x}: it changed "
            "after the save (a damaged file, or a shard of another "
            "checkpoint); restore it or resume from another step (--resume "
            "DIR/step-N; --no-verify skips the check)",
            crc, s.crc));
      verified.insert(path);
    }
    const Shape &shape = header.type.shape;
    // bf16 shards are written as float32 (writeNpy); convert them back.
    bool converts = header.type.dtype != global.dtype &&
                    npyFeeds(header.type, {global.dtype, shape});
    if ((header.type.dtype != global.dtype && !converts) ||
        shape.size() != rank)
      throw corrupt(fmt::format("is {}, not a block of {}", header.type.str(),
                                global.str()));
    if (!s.shape.empty() && s.shape != shape)
      throw corrupt(fmt::format("is {}, but the manifest says {}",
                                header.type.str(), formatShape(s.shape)));
    for (std::size_t d = 0; d < rank; ++d)
      if (s.offset[d] + shape[d] > global.shape[d])
        throw corrupt(fmt::format("({} at offset {}) reaches past the global "
                                  "shape {}",
                                  header.type.str(), formatShape(s.offset),
                                  formatShape(global.shape)));
    Shape lo(rank), box(rank);
    bool empty = false;
    for (std::size_t d = 0; d < rank; ++d) {
      lo[d] = std::max(s.offset[d], offsets[d]);
      int64_t hi = std::min(s.offset[d] + shape[d], offsets[d] + region[d]);
      box[d] = hi - lo[d];
      empty = empty || box[d] <= 0;
    }
    if (empty)
      continue;
    Shape src(rank), dst(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      src[d] = lo[d] - s.offset[d];
      dst[d] = lo[d] - offsets[d];
    }
    const uint8_t *data = file.data() + header.dataOffset;
    Tensor converted;
    if (converts) {
      converted = convertNpyData(data, header.type, global.dtype);
      data = converted.bytes();
    }
    copyBox(data, shape, src, out.rawData(), local, dst, box, elem);
    covered += numElements(box);
  }
  if (covered != numElements(region))
    throw Error(fmt::format("checkpoint {}: the shards of tensor '{}' cover {} "
                            "of the {} elements of the block at offset {} "
                            "(a missing or overlapping shard)",
                            manifestPath(), name, covered, numElements(region),
                            formatShape(offsets)));
  if (global.dtype == DType::Bool) {
    uint8_t *b = out.data<uint8_t>();
    for (int64_t i = 0, n = out.numElements(); i < n; ++i)
      b[i] = b[i] != 0;
  }
  return out;
}

Tensor Checkpoint::readTensor(const std::string &name) const {
  auto it = info.tensors.find(name);
  if (it == info.tensors.end())
    throw Error(
        fmt::format("checkpoint {} has no tensor '{}'", manifestPath(), name));
  const TensorType &type = it->second.globalType;
  return readBlock(name, type, Shape(type.shape.size(), 0), type.shape);
}

uint32_t shoal::rt::fileCrc32(const std::string &path) {
  MappedFile file(path, "checkpoint shard");
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef *>(file.data()), file.size()));
}

namespace {

std::string hostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0)
    return "?";
  return buf;
}

} // namespace

CheckpointLock::CheckpointLock(const std::string &dir,
                               const std::string &runId) {
  std::string path = (fs::path(dir) / ".lock").string();
  std::string owner =
      fmt::format("run {} host {} pid {}\n", runId.empty() ? "-" : runId,
                  hostName(), ::getpid());
  int file =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (file < 0) {
    int err = errno;
    throw Error(fmt::format("cannot open the checkpoint lock {}/.lock: {}", dir,
                            err == ELOOP ? "it is a symbolic link"
                                         : std::strerror(err)));
  }
  // The kernel releases the lock when its holder exits, however it ends
  // (NFS too: its client maps flock to the server's locks).
  if (::flock(file, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err == EWOULDBLOCK) {
      std::string held(4096, '\0');
      ssize_t n = ::pread(file, held.data(), held.size(), 0);
      held.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!held.empty() && (held.back() == '\n' || held.back() == '\r'))
        held.pop_back();
      ::close(file);
      throw Error(fmt::format(
          "checkpoint folder {} is in use by another job ({}): two jobs "
          "saving to one folder would mix their checkpoints; give each job "
          "its own --save folder (the lock is released when that job's rank "
          "0 exits)",
          dir, held.empty() ? "it has not named itself yet" : held));
    }
    ::close(file);
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
      // A file system without locks (Lustre mounted without -o flock).
      std::fprintf(stderr,
                   "shoal-run: warning: %s does not support file locks (%s): "
                   "a second job saving to this folder is not detected\n",
                   dir.c_str(), std::strerror(err));
      return;
    }
    throw Error(fmt::format("cannot lock the checkpoint folder {}: {}", dir,
                            std::strerror(err)));
  }
  fd = file;
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, owner.data(), owner.size(), 0) !=
                                     static_cast<ssize_t>(owner.size())) {
    int err = errno;
    release();
    throw Error(fmt::format("cannot write the checkpoint lock {}/.lock: {}",
                            dir, std::strerror(err)));
  }
}

CheckpointLock::CheckpointLock(CheckpointLock &&other) noexcept : fd(other.fd) {
  other.fd = -1;
}

CheckpointLock &CheckpointLock::operator=(CheckpointLock &&other) noexcept {
  if (this != &other) {
    release();
    fd = other.fd;
    other.fd = -1;
  }
  return *this;
}

CheckpointLock::~CheckpointLock() { release(); }

void CheckpointLock::release() {
  // The file stays (removing a lock file that another job may have opened
  // already would let two jobs lock two files); emptied, it names nobody.
  if (fd < 0)
    return;
  (void)::ftruncate(fd, 0);
  ::close(fd);
  fd = -1;
}
