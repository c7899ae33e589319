//===- Executor.h - Running a program's ops ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_EXECUTOR_H
#define SHOAL_RUNTIME_EXECUTOR_H

#include "Backend.h"
#include "PlanLoader.h"
#include "Tensor.h"

#include <mpi.h>

#include <chrono>
#include <map>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

class Comm;

/// Holds the values of one program and runs its schedule: each entry
/// (forward or backward) runs the ops of one task for one micro-batch,
/// freeing each value after its last use. Values that cross tasks, program
/// outputs and inputs sharded over micro-batches are kept per micro-batch.
/// Send and Recv move values between ranks with point-to-point messages on
/// MPI_COMM_WORLD.
///
/// Training plans (docs/Training.md): an AllReduce over "mb" accumulates its
/// input over the step's micro-batches and reduces over its other axes at
/// the last one. Optimizer ops (AdamW, SGD) are deferred to the end of the
/// step, which then computes the global gradient norm when some op clips
/// (an all-reduce over MPI_COMM_WORLD that every rank of a clipping plan
/// joins) and updates the weights in place; weights of one initializer share
/// their buffer, so every reader sees the update in later steps.
class Executor : public ProgramRunner {
public:
  explicit Executor(const LoadedPlan &plan);

  /// Sets a value defined outside the ops (input, weight or constant); its
  /// type must be the value's local type. It stays across runs.
  void setValue(int id, Tensor tensor) override;
  /// The value `id` (undefined once freed).
  const Tensor &value(int id) const { return values.at(id); }

  void setMicroBatchValue(int id, int microBatch, Tensor tensor) override;

  /// Training: optimizer steps completed so far; the next run() is step
  /// stepsCompleted() + 1 (1-based, for the learning-rate schedule and
  /// AdamW's bias correction). Each run() of a training plan adds one.
  int64_t stepsCompleted() const { return completedSteps; }
  void setStepsCompleted(int64_t steps) { completedSteps = steps; }
  /// The global gradient norm of the last step (before clipping); 0 unless
  /// the plan clips.
  double lastGradNorm() const { return gradNorm; }

  /// Runs one step: the schedule. With `verbose`, world rank 0 prints one
  /// timing line per op to stderr. Errors are thrown as Error naming the op.
  void run(Comm &comm, bool verbose) override;
  Tensor fetch(int id) override { return values.at(id); }
  Tensor fetchOutput(int id, int microBatch) override;
  std::string deviceName() const override { return "cpu"; }
  const StepProfile *profile() const override { return &stepProfile; }
  bool setProfiling(bool on) override {
    profiling = on;
    return true;
  }

  /// Runs `op` on the CPU with `inputs` (null for absent optional ones) into
  /// `outs` (allocated here unless the op aliases its input). Used by the
  /// CUDA backend for ops it has no kernel for.
  static void runOnCpu(const LoadedPlan &plan, const OpInfo &op,
                       const std::vector<const Tensor *> &inputs,
                       std::vector<Tensor> &outs, Comm &comm);

private:
  using Clock = std::chrono::steady_clock;

  void runTask(int task, int microBatch, Comm &comm, bool print);
  void runOp(const OpInfo &op, Comm &comm);
  /// AllReduce over "mb": adds the input to the op's accumulator; at the
  /// last micro-batch reduces it over the other axes.
  void accumulate(const OpInfo &op, Comm &comm);
  /// Keeps an optimizer op's operands for the end of the step.
  void defer(const OpInfo &op);
  /// Clipping and the deferred optimizer updates.
  void applyOptimizers();
  void send(const OpInfo &op);
  void recv(const OpInfo &op);
  /// Frees the buffers of completed sends; with `wait`, waits for all.
  void progressSends(bool wait);
  const Tensor &input(const OpInfo &op, std::size_t i) const;
  double usSinceStart(Clock::time_point t) const;

  const LoadedPlan &plan;
  int worldRank = 0;
  std::vector<Tensor> values;
  /// Values set from outside the ops, kept across runs.
  std::vector<bool> persistent;
  /// Inputs sharded over micro-batches: value -> one tensor per micro-batch.
  std::map<int, std::vector<Tensor>> microBatchInputs;
  /// Program outputs as each micro-batch left them: value -> micro-batch ->
  /// tensor.
  std::map<int, std::vector<Tensor>> outputs;
  /// Values crossing tasks, per (micro-batch, value), for the current step.
  std::map<std::pair<int, int>, Tensor> stash;
  /// Messages this rank sent itself, per (transfer id, micro-batch).
  std::map<std::pair<int, int>, std::vector<uint8_t>> selfMessages;
  /// Outstanding sends and their buffers.
  std::vector<MPI_Request> sendRequests;
  std::vector<std::vector<uint8_t>> sendBuffers;
  int currentMicroBatch = 0;
  Clock::time_point stepStart;
  double recvWaitSeconds = 0;
  StepProfile stepProfile;
  bool profiling = false;

  /// An optimizer op with its operands (w, g, then m, v or buf), held so
  /// that they outlive their last use in the schedule.
  struct DeferredUpdate {
    const OpInfo *op = nullptr;
    std::vector<Tensor> operands;
  };
  std::vector<DeferredUpdate> deferred;
  /// AllReduce-over-"mb" op index -> running sum and micro-batches added.
  struct Accumulator {
    Tensor sum;
    int count = 0;
  };
  std::map<int, Accumulator> accumulators;
  /// Weight value -> its weight (for the replica count of clipping).
  std::map<int, const WeightInfo *> weightOfValue;
  int64_t completedSteps = 0;
  double gradNorm = 0;
};

/// `text` as a JSON string literal (for traces).
std::string jsonString(const std::string &text);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_EXECUTOR_H
