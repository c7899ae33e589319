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

/// Holds the values of one program and runs its schedule: each forward entry
/// runs the ops of one task for one micro-batch, freeing each value after its
/// last use. Values that cross tasks, program outputs and inputs sharded over
/// micro-batches are kept per micro-batch. Send and Recv move values between
/// ranks with point-to-point messages on MPI_COMM_WORLD.
class Executor : public ProgramRunner {
public:
  explicit Executor(const LoadedPlan &plan);

  /// Sets a value defined outside the ops (input, weight or constant); its
  /// type must be the value's local type. It stays across runs.
  void setValue(int id, Tensor tensor) override;
  /// The value `id` (undefined once freed).
  const Tensor &value(int id) const { return values.at(id); }

  void setMicroBatchValue(int id, int microBatch, Tensor tensor) override;

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
};

/// `text` as a JSON string literal (for traces).
std::string jsonString(const std::string &text);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_EXECUTOR_H
