//===- Profile.h - Measured op and communication times ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// `shoal-run --profile FILE`: every rank keeps the time of each op, each
// collective and each Send/Recv over the timed steps; at the end world rank
// 0 gathers every rank's records and writes one JSON file, which the
// planner's calibration reads (include/shoal/Planner/Calibration.h). The
// format is described in docs/Runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_PROFILE_H
#define SHOAL_RUNTIME_PROFILE_H

#include "Backend.h"
#include "Communicator.h"
#include "PlanLoader.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

/// What the profile says about the run as a whole.
struct ProfileRunInfo {
  std::string planPath;
  /// The device type: the catalog name of the device (e.g. "H100"), or
  /// "CPU" when the runner has no catalog entry.
  std::string deviceType;
  /// The name the runner reports ("cpu", "cuda:0 NVIDIA H100 ...").
  std::string deviceName;
  std::string precision;
  int steps = 1, warmup = 0;
};

/// Collects one rank's measurements, step by step.
class ProfileRecorder {
public:
  explicit ProfileRecorder(const LoadedPlan &plan) : plan(plan) {}

  /// Adds the runner's profile of one timed step; `stepSeconds` is the
  /// step's time on the slowest rank.
  void addStep(const StepProfile &profile, double stepSeconds);

  /// The bytes (read and written) per second of a plain copy on this rank's
  /// device (measureCopyBandwidth): what the cost model charges for copies.
  void setCopyBandwidth(double bytesPerSecond) { copyRate = bytesPerSecond; }

  /// Gathers every rank's records on world rank 0, which writes them to
  /// `path`. Collective over `world`. Throws Error if the file cannot be
  /// written (on rank 0 only).
  void write(const std::string &path, const ProfileRunInfo &info,
             Communicator &world) const;

private:
  const LoadedPlan &plan;
  /// (op, micro-batch) -> seconds of every timed step.
  std::map<std::pair<int, int>, std::vector<double>> opSeconds;
  /// Sends and Recvs with the index of their step.
  std::vector<std::pair<int, TransferTime>> transfers;
  std::vector<double> stepSeconds;
  double copyRate = 0;
};

class Device;
/// Times copies of a `bytes`-byte buffer on `device` (the fastest of a few
/// repeats, after one to warm up) and returns the bytes read and written
/// per second. The default size is past the caches of CPUs (a copy of a
/// few MiB that stays in the cache runs about three times as fast here):
/// the rate of large copies, low for small ones.
double measureCopyBandwidth(Device &device, std::size_t bytes = 64u << 20);

/// Median of `v` (0 when empty).
double median(std::vector<double> v);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_PROFILE_H
