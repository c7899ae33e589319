//===- Backend.h - Where a rank's program runs ------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A ProgramRunner holds one program's values on one device and runs its ops.
// Its one implementation is the Executor, which runs every plan kind on
// every Device (Device.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_BACKEND_H
#define SHOAL_RUNTIME_BACKEND_H

#include "KernelRegistry.h"
#include "Ops.h"
#include "Tensor.h"
#include "shoal/Schema/DeviceCatalog.h"

#include <memory>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

class Comm;
struct LoadedPlan;

/// One event of a step's trace (Chrome trace "X" events), relative to the
/// start of the step.
struct TraceEvent {
  std::string name;
  /// 0: compute (tasks), 1: communication (Send, Recv).
  int track = 0;
  double startUs = 0, durationUs = 0;
  /// The event's "args" as the text of a JSON object.
  std::string args;
};

/// The time one op took (profiling, ProgramRunner::setProfiling).
struct OpTime {
  int op = 0;
  int microBatch = 0;
  double seconds = 0;
};

/// A Send's or Recv's messages to or from other ranks (profiling): when the
/// op started and, for a Recv, when its last message had arrived, in
/// microseconds from the start of the step.
struct TransferTime {
  int transfer = 0;
  int microBatch = 0;
  bool send = false;
  double startUs = 0, endUs = 0;
  /// Bytes to or from other ranks (not counting messages to itself).
  int64_t bytes = 0;
  std::vector<int64_t> peers;
};

/// What a runner measured during its last step.
struct StepProfile {
  /// Time in the ops of tasks, less the time blocked waiting for Recvs.
  double busySeconds = 0;
  std::vector<TraceEvent> events;
  /// With profiling on: every op run, and every Send and Recv that
  /// exchanged messages with other ranks.
  std::vector<OpTime> ops;
  std::vector<TransferTime> transfers;
};

/// Parses "cpu" or "cuda"; false otherwise.
bool parseBackend(const std::string &text, BackendKind &out);
const char *backendName(BackendKind kind);
/// "CPU" or "CUDA", for messages.
const char *backendTitle(BackendKind kind);

/// Runs one program on one device.
class ProgramRunner {
public:
  virtual ~ProgramRunner() = default;
  /// Sets a value defined outside the ops (input, weight or constant) from a
  /// host tensor of the value's local type. Such values persist across steps.
  virtual void setValue(int id, Tensor tensor) = 0;
  /// Collective setup after every rank has loaded (e.g. NCCL
  /// communicators); called once before the first run().
  virtual void connect(Comm &) {}
  /// Runs every op once (one step). Errors are thrown naming the op.
  virtual void run(Comm &comm, bool verbose) = 0;
  /// A host copy of value `id` after run() (program outputs).
  virtual Tensor fetch(int id) = 0;
  /// Sets an input that differs per micro-batch (sharded over "mb"). Only
  /// runners of pipelined plans support it.
  virtual void setMicroBatchValue(int id, int microBatch, Tensor tensor) {
    if (microBatch != 0)
      throw Error("the " + deviceName() +
                  " backend runs one micro-batch per step only");
    setValue(id, std::move(tensor));
  }
  /// A host copy of program output value `id` as micro-batch `microBatch`
  /// left it.
  virtual Tensor fetchOutput(int id, int microBatch) {
    (void)microBatch;
    return fetch(id);
  }
  /// Timings of the last step, or null if the runner does not measure them.
  virtual const StepProfile *profile() const { return nullptr; }
  /// With `on`, each run() times every op (StepProfile::ops) and the
  /// transfers; returns false if the runner cannot.
  virtual bool setProfiling(bool on) { return !on; }
  /// A name for reports ("cpu", "cuda:0 NVIDIA H100 80GB HBM3").
  virtual std::string deviceName() const = 0;
  /// The catalog entry of the device, or null when unknown (CPUs).
  virtual const DeviceSpec *deviceSpec() const { return nullptr; }
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_BACKEND_H
