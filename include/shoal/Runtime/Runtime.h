//===- Runtime.h - shoal's CPU runtime, public interface --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The public face of the runtime's tooling (lib/Runtime/tooling): run an
// executable plan (see proto/plan.proto) on the ranks of MPI_COMM_WORLD, or
// a whole shoal-run job. Everything else in lib/Runtime is internal. The
// runtime does not depend on MLIR or LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_RUNTIME_H
#define SHOAL_RUNTIME_RUNTIME_H

#include "shoal/Runtime/Error.h"
#include "shoal/Runtime/MemoryReport.h"
#include "shoal/Runtime/Options.h"

#include <cstddef>
#include <string>

namespace shoal {
namespace rt {

/// What a run did, for the summary line.
struct RunSummary {
  int worldSize = 0;
  std::size_t numOps = 0;
  /// Wall time of loading (plan, weights, inputs) and of running the ops plus
  /// writing the outputs, in seconds, as seen by this rank.
  double loadSeconds = 0;
  double runSeconds = 0;
  /// Mean wall time of one timed step (slowest rank), in seconds.
  double stepSeconds = 0;
  /// Matrix-product FLOPs of one step, summed over ranks.
  double stepFlops = 0;
  /// Pipelines (Plan.pipeline): the measured bubble, idle / busy time of the
  /// timed steps averaged over ranks (busy: time in tasks less time blocked
  /// in Recv), and the schedule's (stages - 1) / (chunks * micro-batches).
  /// Both 0 for other plans.
  double bubbleMeasured = 0;
  double bubbleExpected = 0;
  /// This rank's bytes after the last step (RunOptions::reportMemory).
  MemoryReport memory;
};

/// Registers every backend this build has (CPU; CUDA where built), once:
/// tools call it at start-up, before runPlan (ShoalRuntimeBackends).
void registerAllBackends();

/// Runs the plan on MPI_COMM_WORLD (the runtime's internal runPlan takes
/// any world Communicator). MPI must be initialized, and every rank
/// must call this with the same options. Errors found while loading (plan,
/// weights, inputs) are thrown as AgreedError on every rank; errors found
/// later are thrown as Error on the ranks that hit them only, so the caller
/// must MPI_Abort then (see runJob).
RunSummary runPlan(const RunOptions &options);
/// The same with the training options.
RunSummary runPlan(const RunOptions &options, const TrainingOptions &train);

/// Whether `name` names a backend (--backend: "cpu" or "cuda"), whether
/// or not this build has it.
bool isBackendName(const std::string &name);

/// A shoal-run job as its command line asks for it (tools/shoal-run parses
/// the command line; the runtime knows none).
struct JobRequest {
  RunOptions run;
  TrainingOptions train;
  /// --help: `usage` goes to stdout and the job ends with status 0.
  bool help = false;
  /// A bad command line: `shoal-run: error: <usageError>` and `usage` go to
  /// stderr (rank 0) and the job ends with status 1.
  std::string usageError;
  /// The tool's usage text.
  const char *usage = "";
};

/// Runs a shoal-run job in this process: finds how it was launched, makes
/// the world (initializing and finalizing MPI under mpirun, over Gloo from
/// torchrun-style variables), runs the plan and reports errors as
/// `shoal-run: error: <message>`. Returns the process exit status (0 or 1);
/// on an error that only some ranks see it calls MPI_Abort instead.
/// `argc` and `argv` go to MPI_Init. Call registerAllBackends first.
int runJob(int argc, char **argv, const JobRequest &request);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_RUNTIME_H
