//===- Simulator.h - Predicting a plan's step on a cluster ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Replays every program of a plan in its schedule order with the cost
// model's times: ops on the program's slowest device, collectives over the
// ranks of their group, sends as soon as their task ends and receives when
// the message has arrived; an exchange the executor starts asynchronously
// (a gradient's all-reduce, alone or in a bucket) runs on the program's
// communication channel beside the compute, and its readers (the
// optimizer's update at the step's end) wait for it. Gives the predicted step
// time, each stage's busy time and bubble, the weights each rank holds, and a
// timeline.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_PLANNER_SIMULATOR_H
#define SHOAL_PLANNER_SIMULATOR_H

#include "shoal/Planner/CostModel.h"

#include <map>
#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Plan;
} // namespace plan

namespace planner {

/// One unit of predicted work, for the timeline.
struct SimEvent {
  int program = 0;
  std::string name; ///< "F3 s1", or "send 2" / "recv 2"
  double start = 0, seconds = 0;
  /// 0: the compute; 1: the communication channel (exchanges that overlap
  /// the compute).
  int lane = 0;
};

struct ProgramPrediction {
  std::string role;
  std::vector<int> ranks;   ///< world ranks
  double busySeconds = 0;   ///< compute and collectives, not waiting
  double finishSeconds = 0; ///< when its last step ends
  /// Of the rest, the seconds its steps waited for its own exchanges (the
  /// asynchronous tensor-parallel all-reduces, gradient buckets):
  /// exposed communication, which Megatron-LM runs synchronously on the
  /// compute stream. (Its wait before the update: tailWaitSeconds.)
  double exchangeWaitSeconds = 0;
  /// When its pipeline work ended (its first update, or its last step),
  /// and how long it then waited for the exchanges still running (the last
  /// gradient buckets, which the update waits for).
  double stepsEndSeconds = 0, tailWaitSeconds = 0;
  double capacityBytes = 0; ///< the smallest device memory among its ranks
  /// Busy seconds by op kind (its slowest ranks'; shoal-sim --breakdown).
  std::map<std::string, double> secondsByKind;
  /// Seconds of the exchanges that ran beside the compute, by kind (not in
  /// busySeconds: the ops after them went on).
  std::map<std::string, double> overlappedByKind;
};

struct Prediction {
  double stepSeconds = 0;
  double flopsPerStep = 0; ///< summed over ranks
  int stages = 1, microBatches = 1, chunks = 1;
  std::string schedule;
  double batch = 0; ///< dimension 0 of the first graph input
  std::vector<ProgramPrediction> programs;
  std::vector<SimEvent> events;

  /// Mean over programs of idle / busy time (what shoal-run reports): with
  /// stages of unequal work, their imbalance counts too.
  double bubble() const;
  /// Idle / busy time of the busiest program: the pipeline's own bubble
  /// (fill, drain, waiting on transfers and exposed exchanges), which the
  /// schedule's (p-1)/(v*m) describes when the stages are balanced.
  double busiestBubble() const;
  /// The pipeline's bubble as the schedule's (p-1)/(v*m) measures it: the
  /// idle time of the program with the most work until the last stage's
  /// last step ends, over that work, where its work is its busy time and
  /// its waits for its own exchanges during its steps (exposed
  /// communication is work to that formula, as in Megatron-LM, where the
  /// tensor-parallel all-reduces run on the compute stream; the gradient
  /// buckets still running after the last step are not pipeline idle).
  /// What is left is waiting on other stages: fill, drain and transfers.
  double pipelineBubble() const;
  /// The schedule's (p-1)/(v*m).
  double expectedBubble() const;
};

/// The world size of `plan`: the product of its mesh's axes (saturating at
/// INT64_MAX, which no cluster has).
int64_t planWorldSize(const plan::Plan &plan);

/// Throws SpecError unless `plan` is for as many ranks as `cluster` has
/// devices.
void checkWorldSize(const plan::Plan &plan, const Cluster &cluster);

/// Predicts `plan` on `cluster` (whose device count must equal the plan's
/// world size). Throws SpecError on a mismatch or a plan it cannot replay.
/// With `byElementType`, a matrix product of f16 or bf16 values runs at
/// that precision's peak and the others at `cost`'s (mixed-precision plans
/// hold both); otherwise every product runs at `cost`'s.
Prediction simulate(const plan::Plan &plan, const Cluster &cluster,
                    const CostModel &cost, bool byElementType = false);

/// Chrome trace JSON of the predicted timeline: one track per program.
std::string chromeTrace(const Prediction &p);

} // namespace planner
} // namespace shoal

#endif // SHOAL_PLANNER_SIMULATOR_H
