//===- Executor.h - The scheduler of every plan on every device -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_EXECUTOR_H
#define SHOAL_RUNTIME_EXECUTOR_H

#include "Backend.h"
#include "Communicator.h"
#include "Device.h"
#include "Json.h"
#include "MemoryPlan.h"
#include "PlanLoader.h"
#include "Tensor.h"
#include "shoal/Runtime/MemoryReport.h"

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

class Comm;

/// Options of the scheduler.
struct ExecutorOptions {
  /// Gradient all-reduces are packed into buckets of about this many bytes
  /// (PyTorch DDP's bucket_cap_mb, 25 MiB by default) and started as soon
  /// as a bucket is full, overlapping the rest of backward; 0 starts each
  /// all-reduce alone.
  std::size_t gradBucketBytes = std::size_t(25) << 20;
  /// Ops without a kernel on the device run on the CPU (their operands
  /// staged through the host) with a one-time warning; with `strict`, that
  /// is an error instead.
  bool strict = false;
  /// Records one trace event per op (shoal-run --trace); without it, the
  /// step's events are its tasks, transfers and collectives only.
  bool traceOps = false;
};

/// The first op of `plan` that would run on the CPU on `backend` for lack
/// of a kernel there (the scheduler's own ops aside), or null. Kernels that
/// refuse their operands at run time (KernelUnsupported) are found only
/// when they run.
const OpInfo *firstOpWithoutKernel(const LoadedPlan &plan, BackendKind backend);

/// The one scheduler: it holds the values of one program on one Device and
/// runs the plan's schedule, whatever the plan kind (forward, pipelined,
/// training) and the device (CPU, CUDA). Each schedule entry runs the ops of
/// one task for one micro-batch, each op through the kernel its device's
/// backend registered (KernelRegistry.h). Op results live where the memory
/// plan put them (MemoryPlan.h): task-local values in one arena, values kept
/// across tasks in one buffer per micro-batch, all allocated before or in
/// the first step and reused after, so the step loop does not allocate.
///
/// The scheduler runs itself what is not a kernel: collectives through the
/// mesh's communicators (asynchronously where no op reads their result
/// right away: gradient all-reduces are bucketed and overlap the rest of
/// backward), Send and Recv between ranks, the accumulation of an
/// AllReduce over "mb" over the step's micro-batches, and the optimizer ops
/// (AdamW, SGD), deferred to the end of the step, after the global gradient
/// norm when some op clips (an all-reduce over the world that every rank of
/// a clipping plan joins). Weights of one initializer share their buffer,
/// so every reader sees the update in later steps.
class Executor : public ProgramRunner {
public:
  /// Runs on `device`, which must outlive the executor.
  Executor(const LoadedPlan &plan, Device &device,
           ExecutorOptions options = {});
  /// Runs on a CPU device of its own.
  explicit Executor(const LoadedPlan &plan, ExecutorOptions options = {});
  ~Executor() override;

  /// Sets a value defined outside the ops (input, weight or constant) from a
  /// host tensor of its local type. It stays across runs.
  void setValue(int id, Tensor tensor) override;
  /// The value `id` as the last step left it (undefined once dead), on the
  /// device.
  const Tensor &value(int id) const { return values.at(id); }

  void setMicroBatchValue(int id, int microBatch, Tensor tensor) override;

  /// Training: optimizer steps completed so far; the next run() is step
  /// stepsCompleted() + 1 (1-based, for the learning-rate schedule and
  /// AdamW's bias correction). Each run() of a training plan adds one.
  int64_t stepsCompleted() const { return completedSteps; }
  void setStepsCompleted(int64_t steps) { completedSteps = steps; }
  /// The global gradient norm of the last step (before clipping; of the
  /// unscaled gradients under loss scaling). When it is NaN or Inf the step
  /// applied no update.
  double lastGradNorm() const { return gradNorm; }
  /// The learning rate of the last step's updates (the schedule at that
  /// step); NaN when this rank has no optimizer op or applied no update.
  double lastLearningRate() const { return lastLr; }

  /// fp16's dynamic loss scaler (Plan.training.loss_scale): the scale the
  /// next step's backward starts from, the clean steps since the last
  /// change, and the steps skipped so far (their gradients overflowed: no
  /// update, the scale backed off). `active` is false without one.
  struct LossScalerState {
    bool active = false;
    double scale = 1;
    int64_t cleanSteps = 0, skippedSteps = 0;
    /// The last step was skipped.
    bool lastSkipped = false;
  };
  const LossScalerState &lossScaler() const { return scaler; }
  /// Restores the scaler from a checkpoint (no-op without a scaler).
  void setLossScaler(double scale, int64_t cleanSteps, int64_t skippedSteps);

  /// Runs one step: the schedule. With `verbose`, world rank 0 prints one
  /// timing line per op to stderr. Errors are thrown as Error naming the op.
  void run(Comm &comm, bool verbose) override;
  /// Training plans: runs the forward of one step and nothing else (no
  /// backward, no optimizer; the step count stays), for evaluation: the
  /// forward tasks of a pipeline's schedule, or the ops the outputs depend
  /// on in a plan of one task. The outputs (the loss) are then fetched as
  /// after run(). Every rank of the run must call it at the same time.
  void evaluate(Comm &comm);
  /// Decides what evaluate() runs; throws Error when the plan's forward
  /// cannot be told from its backward (call it before the first step, so
  /// that the ranks agree on the error before training).
  void prepareEvaluation();
  /// A host copy of value `id`.
  Tensor fetch(int id) override;
  Tensor fetchOutput(int id, int microBatch) override;
  std::string deviceName() const override { return device.name(); }
  const DeviceSpec *deviceSpec() const override { return device.spec(); }
  const StepProfile *profile() const override { return &stepProfile; }
  bool setProfiling(bool on) override {
    profiling = on;
    return true;
  }

  /// The communicator of every rank of the run, for Send and Recv (whose
  /// peers are world ranks) and the clipping norm; without one, the
  /// program's communicator.
  void setGlobal(Communicator &world) { global = &world; }

  /// What this rank holds, after at least one step.
  MemoryReport memoryReport() const;

  Device &getDevice() { return device; }
  const MemoryPlan &memoryPlan() const { return memory; }

private:
  using Clock = std::chrono::steady_clock;
  struct Pending;
  struct Bucket;

  /// run() and evaluate(): the schedule, with `forwardOnly` its forward.
  void runSchedule(Comm &comm, bool verbose, bool forwardOnly);
  /// Runs the ops of `task` for `microBatch` (with `only`, those it marks).
  void runTask(int task, int microBatch, Comm &comm, bool print,
               const std::vector<char> *only = nullptr);
  /// evaluate()'s ops (forwardOps) and schedule entries (forwardEntries),
  /// computed on first use.
  void planForward();
  void runOp(const OpInfo &op, Comm &comm);
  void runKernel(const OpInfo &op, Comm &comm);
  /// The buffer op results of value `v` go to for the current micro-batch.
  Tensor resultBuffer(int v);
  /// Micro-batch `microBatch` has run the last task that reads kept value
  /// `v` (keptReleases): a pooled buffer goes to keptPool, where a later
  /// pooled value of the same kind and size takes it (so a 1F1B stage holds the
  /// activations of the micro-batches in flight, and an interleaved one
  /// those of the chunk passes in flight); a view is dropped.
  void releaseKept(int v, int microBatch);
  /// The pool of v's buffers: (its KeptKind, bytes).
  std::pair<KeptKind, std::size_t> poolKey(int v) const;
  /// Collectives.
  void collective(const OpInfo &op, Comm &comm);
  /// Starts an all-reduce of `t` in place over `axes`, or adds it to the
  /// open gradient bucket.
  void startAllReduce(const OpInfo &op, Tensor t, const std::vector<int> &axes,
                      Comm &comm, bool bucketable);
  void flushBucket(Comm &comm);
  /// Lets outstanding communication progress; with `all`, waits for it.
  void progress(bool all);
  /// Waits for the communication that writes value `v`, if any.
  void waitFor(int v);
  void finishPending(Pending &p);
  /// AllReduce over "mb": adds the input to the op's accumulator; at the
  /// last micro-batch reduces it over the other axes.
  void accumulate(const OpInfo &op, Comm &comm);
  /// ReduceScatter (over "mb" too: the micro-batches are summed into an
  /// accumulator first, and the scatter runs at the last one).
  void reduceScatter(const OpInfo &op, Comm &comm);
  /// ZeRO 1/2: the first of this rank's rows of weight `w` of update `op`
  /// (blocks of `block` rows over its zero axes) and how many there are
  /// (fewer, or none, past the end of w).
  std::pair<int64_t, int64_t> zeroRows(const OpInfo &op, const Tensor &w,
                                       int64_t block, Comm &comm) const;
  /// ZeRO 1/2: gathers weight `w` of update `op` over its zero axes after
  /// this rank updated its block of `blockRows` rows.
  void gatherZeroWeight(const OpInfo &op, const Tensor &w, int64_t blockRows,
                        Comm &comm);
  /// Keeps an optimizer op's operands for the end of the step.
  void defer(const OpInfo &op);
  /// Clipping and the deferred optimizer updates.
  void applyOptimizers(Comm &comm);
  void send(const OpInfo &op, Comm &comm);
  void recv(const OpInfo &op, Comm &comm);
  /// Frees the buffers of completed sends; with `wait`, waits for all.
  void progressSends(bool wait);
  const Tensor &input(const OpInfo &op, std::size_t i);
  double usSinceStart(Clock::time_point t) const;
  void commEvent(const std::string &name, Clock::time_point start,
                 Clock::time_point end, const std::string &args);

  const LoadedPlan &plan;
  std::unique_ptr<Device> ownDevice;
  Device &device;
  ExecutorOptions options;
  Communicator *global = nullptr;
  MemoryPlan memory;
  int worldRank = 0;
  std::vector<Tensor> values;
  /// Values set from outside the ops, kept across runs.
  std::vector<bool> persistent;
  /// Kept values: (value, micro-batch) -> its buffer, allocated on first
  /// use and reused in every later step.
  std::map<std::pair<int, int>, Tensor> kept;
  /// Released kept buffers, by poolKey: any pooled value of that kind and
  /// size takes one (a caching allocator's pools of exact sizes).
  std::map<std::pair<KeptKind, std::size_t>, std::vector<Tensor>> keptPool;
  /// Per value: what its buffers count as (keptKinds), and so their pool.
  std::vector<KeptKind> keptKind;
  /// Per value, what releaseKept does with its kept buffers (keptLives:
  /// pooled ones go to keptPool, views are dropped, the others stay).
  std::vector<KeptLife> keptLife;
  /// Per schedule entry, the kept values released after it (keptReleases).
  std::vector<std::vector<int>> releases;
  /// Per value: its kept buffers are held for good (keptHeld).
  std::vector<bool> keptIsHeld;
  /// (value * micro-batches + micro-batch) -> made in this step.
  std::vector<uint8_t> made;
  /// Weight copies (Residence::WeightCopy): holder value -> its buffer, and
  /// the run (step) whose weights it holds.
  std::map<int, Tensor> weightCopies;
  std::map<int, int64_t> weightCopyRun;
  /// Runs started (run()): a weight copy is fresh in the run that made it.
  int64_t runs = 0;
  /// The op just run reused this step's weight copy (no kernel ran).
  bool reusedWeightCopy = false;
  /// Inputs sharded over micro-batches: value -> one tensor per micro-batch.
  std::map<int, std::vector<Tensor>> microBatchInputs;
  /// Messages this rank sent itself, per (transfer id, micro-batch).
  std::map<std::pair<int, int>, Tensor> selfMessages;
  /// Outstanding sends and their host buffers.
  std::vector<std::unique_ptr<Work>> sendWork;
  std::vector<Tensor> sendBuffers;
  /// Outstanding collectives.
  std::vector<std::unique_ptr<Pending>> pending;
  /// Value -> the outstanding collective that writes it.
  std::map<int, Pending *> pendingOf;
  std::unique_ptr<Bucket> bucket;
  /// Ops with no kernel on the device, warned about once.
  std::set<OpKind> warnedFallback;
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
  /// Bytes of whole gradients summed over the micro-batches before a
  /// ReduceScatter (ZeRO-1): now, and the most at once (memory report).
  std::size_t scatterAccumBytes = 0, scatterAccumPeak = 0;
  /// Weight value -> its weight (for the replica count of clipping).
  std::map<int, const WeightInfo *> weightOfValue;
  /// Per value: only optimizer ops read it (a gradient).
  std::vector<bool> gradientOnly;
  /// evaluate(): per op, it runs; per schedule entry, it runs.
  std::vector<char> forwardOps, forwardEntries;
  int64_t completedSteps = 0;
  double gradNorm = 0;
  double lastLr = std::numeric_limits<double>::quiet_NaN();
  LossScalerState scaler;
  /// The loss-scale seeds (Constant.loss_scale) and the scale they hold.
  std::vector<int> lossScaleSeeds;
  double seededScale = -1;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_EXECUTOR_H
