//===- Outputs.cpp - Outputs and traces of a run -------------------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "tooling/Tooling.h"

#include "Backend.h"
#include "Comm.h"
#include "Communicator.h"
#include "Json.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "Sharding.h"
#include "shoal/Support/Files.h"
#include "tooling/Profile.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <random>

#include <fcntl.h>
#include <unistd.h>

using namespace shoal::rt;
namespace fs = std::filesystem;

/// Assembles every output, over the program's ranks and micro-batches, on
/// the program's rank 0, which writes it.
void shoal::rt::writeOutputs(const LoadedPlan &plan, const std::string &dir,
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
void shoal::rt::writeTrace(const std::string &path, const LoadedPlan &plan,
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

void shoal::rt::checkWritableFolder(const std::string &dir,
                                    const std::string &what) {
  // A probe file of this process (its host, its id and a random number:
  // ranks of other hosts may share the folder): permissions, read-only
  // mounts, a full inode table all show up here, before the first step.
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0)
    host[0] = '\0';
  std::random_device random;
  fs::path probe = fs::path(dir.empty() ? "." : dir) /
                   fmt::format(".shoal-write-check.{}.{}.{:08x}", host,
                               ::getpid(), random());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    ::unlink(probe.c_str());
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0)
    throw Error(fmt::format("cannot write into the folder {} of the {}: {}",
                            dir.empty() ? "." : dir, what,
                            std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

/// Creates the folder of the file `path` (if any) that `flag` names and
/// checks that `path` is not a folder and that the folder takes new files.
void shoal::rt::checkOutputFile(const std::string &path, const char *what,
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
  checkWritableFolder(folder.string(),
                      fmt::format("{} {} ({})", what, path, flag));
}
