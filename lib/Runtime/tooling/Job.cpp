//===- Job.cpp - A shoal-run job in one process -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What a shoal-run process does once its command line is parsed
// (tools/shoal-run): it finds how it was launched, makes the world
// (initializing and finalizing MPI under mpirun, over Gloo from
// torchrun-style variables), runs the plan and reports errors once.
//
//===----------------------------------------------------------------------===//

#include "tooling/Tooling.h"

#include "Audit.h"
#include "Backend.h"
#include "BackendRegistry.h"
#include "Communicator.h"
#include "Watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace shoal::rt;

namespace {

/// This process's rank before any communicator exists (for who prints a
/// usage error): the launcher's variables, else 0.
int rankFromEnv() {
  for (const char *var :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", "SLURM_PROCID"})
    if (const char *v = std::getenv(var))
      return std::atoi(v);
  return 0;
}

} // namespace

/// Lets every backend share the node among its ranks (the CPU kernels'
/// and BLAS threads) and check its settings, before any op runs.
void shoal::rt::configureBackendsForNode(Communicator &world) {
  std::vector<int> node = nodeOfRanks(world);
  int ranksHere = static_cast<int>(
      std::count(node.begin(), node.end(), node[world.rank()]));
  configureBackends(ranksHere);
}

int shoal::rt::runJob(int argc, char **argv, const JobRequest &request) {
  const RunOptions &opts = request.run;
  const TrainingOptions &train = request.train;
  bool help = request.help;
  std::string usageError = request.usageError;
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
        std::fputs(request.usage, stdout);
      } else {
        std::fprintf(stderr, "shoal-run: error: %s\n", usageError.c_str());
        std::fputs(request.usage, stderr);
      }
    }
    return finish(help ? 0 : 1);
  }
  if (opts.audit) {
    // No world, no device: the plan and the kernels' registrations.
    int status = 0;
    if (rank == 0) {
      try {
        BackendKind backend = BackendKind::CPU;
        std::string name = opts.backend.empty() ? "cpu" : opts.backend;
        if (!parseBackend(name, backend))
          throw Error(fmt::format("--backend {} is not a backend", name));
        if (!findBackend(backend))
          throw Error(
              fmt::format("this build of shoal has no {} backend", name));
        PlanAudit audit =
            auditPlanFile(opts.planPath, backend, opts.comm == "nccl");
        std::fputs(formatAudit(audit, name, opts.comm).c_str(), stdout);
        if (opts.strict && audit.hostFallbacks + audit.hostStaged > 0) {
          std::fprintf(stderr,
                       "shoal-run: error: --strict --audit: %d ops would run "
                       "on the CPU and %d collectives or transfers would go "
                       "through host buffers\n",
                       audit.hostFallbacks, audit.hostStaged);
          status = 1;
        }
      } catch (const std::exception &e) {
        std::fprintf(stderr, "shoal-run: error: %s\n", e.what());
        status = 1;
      }
    }
    return finish(status);
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

bool shoal::rt::isBackendName(const std::string &name) {
  BackendKind kind;
  return parseBackend(name, kind);
}
