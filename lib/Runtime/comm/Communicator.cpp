//===- Communicator.cpp - What every communicator shares --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Communicator.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <unistd.h>

using namespace shoal::rt;

std::string Communicator::broadcastString(const std::string &text, int root) {
  uint64_t len = rank() == root ? text.size() : 0;
  broadcast(&len, sizeof len, root)->wait();
  std::string out = rank() == root ? text : std::string(len, '\0');
  if (len)
    broadcast(out.data(), len, root)->wait();
  return out;
}

namespace {

/// Environment variables that mpirun/mpiexec launchers set in every rank.
const char *const kMpiLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                        "PMIX_RANK", "MPI_LOCALNRANKS",
                                        "HYDRA_CONTROL_FD"};

} // namespace

Bootstrap shoal::rt::detectBootstrap() {
  for (const char *var : kMpiLauncherVars)
    if (std::getenv(var))
      return Bootstrap::MPI;
  // srun without an MPI plugin: MPI_Init would make every task a world of
  // one, each training alone.
  if (std::getenv("WORLD_SIZE") || std::getenv("RANK") || underSrun())
    return Bootstrap::Env;
  return Bootstrap::MPI;
}

bool shoal::rt::underSrun() {
  const char *step = std::getenv("SLURM_STEP_ID");
  const char *proc = std::getenv("SLURM_PROCID");
  return step && *step && proc && *proc;
}

std::string shoal::rt::slurmFirstHost(const std::string &hostList) {
  auto bad = [&](const char *why) {
    return Error(fmt::format("the Slurm host list '{}' is not valid ({}): "
                             "set MASTER_ADDR to rank 0's host",
                             hostList, why));
  };
  std::string host;
  int depth = 0;
  std::string group; // the bracket group being read
  for (char c : hostList) {
    if (c == '[') {
      if (depth++)
        throw bad("nested '['");
      group.clear();
    } else if (c == ']') {
      if (!depth--)
        throw bad("']' without '['");
      // Its first element: up to the first ',' or '-'.
      std::string first = group.substr(0, group.find_first_of(",-"));
      if (first.empty())
        throw bad("an empty range");
      host += first;
    } else if (depth) {
      group += c;
    } else if (c == ',') {
      break; // the first host ends here
    } else {
      host += c;
    }
  }
  if (depth)
    throw bad("'[' without ']'");
  if (host.empty())
    throw bad("no host");
  return host;
}

int shoal::rt::slurmStorePort(long jobId, long stepId) {
  long v = (32 * (jobId % 40000) + stepId % 32) % 40000;
  return static_cast<int>(20000 + v);
}

int shoal::rt::localRankFromEnv() {
  for (const char *var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *v = std::getenv(var)) {
      char *end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (!*v || *end != '\0' || n < 0 || n > INT_MAX)
        throw Error(fmt::format("{}='{}' is not valid: expected this "
                                "process's rank on its node (an integer from "
                                "0)",
                                var, v));
      return static_cast<int>(n);
    }
  return 0;
}

std::vector<int> shoal::rt::nodeOfRanks(Communicator &comm) {
  char mine[256] = {0};
  ::gethostname(mine, sizeof mine - 1);
  std::vector<char> all(sizeof mine * comm.size());
  comm.allGather(mine, all.data(), sizeof mine)->wait();
  std::map<std::string, int> index;
  std::vector<int> node(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    std::string host(all.data() + r * sizeof mine);
    node[r] = index.emplace(host, static_cast<int>(index.size())).first->second;
  }
  return node;
}

#ifndef SHOAL_HAVE_GLOO
std::unique_ptr<Communicator> shoal::rt::makeEnvWorld() {
  throw Error("this shoal-run was built without Gloo (libgloo-dev), which "
              "the torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR, "
              "MASTER_PORT) needs; start it with mpirun instead");
}
#endif

std::vector<std::string> shoal::rt::gatherText(const std::string &mine,
                                               Communicator &world,
                                               const char *what) {
  int size = world.size();
  // Every rank learns every length, then the texts travel in one uneven
  // all-gather (the communicators have no uneven gather to one rank).
  uint64_t len = mine.size();
  std::vector<uint64_t> lens(size);
  world.allGather(&len, lens.data(), sizeof len)->wait();
  std::vector<std::size_t> bytes(lens.begin(), lens.end());
  uint64_t total = 0;
  for (uint64_t l : lens)
    total += l;
  if (total > static_cast<uint64_t>(INT_MAX))
    throw Error(fmt::format("the {} is too large ({} bytes)", what, total));
  std::string all(static_cast<std::size_t>(total), '\0');
  world.allGatherV(mine.data(), all.data(), bytes)->wait();
  std::vector<std::string> out;
  if (world.rank() == 0) {
    std::size_t offset = 0;
    for (int r = 0; r < size; ++r) {
      out.push_back(all.substr(offset, lens[r]));
      offset += lens[r];
    }
  }
  return out;
}
