//===- Runtime.h - shoal's CPU runtime, public interface --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The public face of the ShoalRuntime library: run an executable plan (see
// proto/plan.proto) on the ranks of MPI_COMM_WORLD. Everything else in
// lib/Runtime is internal. The runtime does not depend on MLIR or LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_RUNTIME_H
#define SHOAL_RUNTIME_RUNTIME_H

#include "shoal/Runtime/Error.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// What to run and where its files are.
struct RunOptions {
  /// The plan file (`.plan`, a serialized shoal.plan.Plan).
  std::string planPath;
  /// Folder holding one `<name>.npy` per program input.
  std::string inputsDir;
  /// Folder the outputs are written to (rank 0 only); created if missing.
  std::string outputsDir;
  /// Print per-op timings of rank 0 to stderr.
  bool verbose = false;
  /// "cpu" or "cuda"; empty: the plan's default device.
  std::string backend;
  /// The communicator: "mpi", "gloo" or "nccl" (CUDA backend); empty: the
  /// launch decides (mpirun: MPI, torchrun-style variables: Gloo).
  std::string comm;
  /// Make an op without a kernel on the chosen backend an error instead of a
  /// one-time warning and a CPU fallback.
  bool strict = false;
  /// Print the memory line of the rank with the largest peak
  /// (--report-memory).
  bool reportMemory = false;
  /// --report-memory=ranks: a memory line for every rank as well.
  bool reportMemoryRanks = false;
  /// Gradient all-reduce buckets in MiB (--grad-bucket-mb); negative: the
  /// default, 25 (PyTorch DDP's); 0: one all-reduce per gradient.
  double gradBucketMb = -1;
  /// Precision of matrix products on the GPU: fp32, tf32, bf16 or fp16.
  std::string precision = "fp32";
  /// Timed steps (each runs the whole program on the same inputs) and
  /// untimed warm-up steps before them.
  int steps = 1;
  int warmup = 0;
  /// Seconds without progress (no op started, no phase entered) after which
  /// a rank ends the job with an error naming itself and what it waits in
  /// (--stall-timeout); 0: never.
  double stallTimeout = 600;
  /// Peak TFLOP/s of one device for the MFU report when the device is not
  /// in the catalog (CPUs); 0: no MFU.
  double peakTflops = 0;
  /// If set, world rank 0 writes a Chrome trace (JSON) of the last timed
  /// step there: one process per rank, a compute track (one event per task
  /// and micro-batch) and a communication track (one event per Send/Recv).
  std::string tracePath;
  /// If set, world rank 0 writes there (JSON) the median time over the
  /// timed steps of every op, collective and Send/Recv of every rank, for
  /// the planner's calibration (docs/Runtime.md, "Profiles").
  std::string profilePath;
};

/// What a run did, for the summary line.
/// Bytes a rank holds, by kind (shoal-run --report-memory).
struct MemoryReport {
  /// Weights loaded from the model (distinct buffers).
  std::size_t weights = 0;
  /// Gradients the optimizer reads (their kept buffers).
  std::size_t grads = 0;
  /// Optimizer state (zero-initialized weights: AdamW's m and v, SGD's
  /// momentum).
  std::size_t optimizer = 0;
  /// Everything else: the arena of op results (as planned), other kept
  /// values (per micro-batch), inputs and constants.
  std::size_t activations = 0;
  /// The device's measured peak (for the CPU, the process's peak resident
  /// set, which also counts code, libraries and communication buffers).
  std::size_t peak = 0;
};

} // namespace rt
namespace plan {
class Plan;
} // namespace plan
namespace rt {

/// One program of a plan and the bytes each of its ranks holds in a step.
struct ProgramMemory {
  int program = 0;
  std::vector<int64_t> ranks; ///< world ranks
  MemoryReport memory;        ///< peak left 0: it is measured, not planned
};

/// Checks every program of `plan` as shoal-run checks it (one rank of each;
/// `path` names the plan in messages and resolves its weight sources) and
/// predicts each program's memory per rank from the runtime's buffer plan,
/// in the parts of --report-memory (shoal-sim). Programs in plan order.
/// Plans of shapes-only models (no weight data) are accepted.
/// Throws Error with the message shoal-run would give.
std::vector<ProgramMemory> checkAndPredictMemory(const plan::Plan &plan,
                                                 const std::string &path,
                                                 int64_t worldSize);

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
/// must MPI_Abort then (see runPlanMain).
RunSummary runPlan(const RunOptions &options);

/// The whole `shoal-run` tool: parses the command line, makes the world
/// (initializing and finalizing MPI under mpirun, over Gloo from
/// torchrun-style variables), runs the plan and reports errors as
/// `shoal-run: error: <message>`. Returns the process exit status (0 or 1);
/// on an error that only some ranks see it calls MPI_Abort instead.
int runPlanMain(int argc, char **argv);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_RUNTIME_H
