//===- PlanLoader.h - Reading and validating plans --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A plan is checked completely before anything runs, so that every rank of a
// run finds the same problems at the same point, before any communication.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_PLANLOADER_H
#define SHOAL_RUNTIME_PLANLOADER_H

#include "Ops.h"
#include "Sharding.h"
#include "Tensor.h"
#include "Transfer.h"

#include <map>
#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Plan;
} // namespace plan

namespace rt {

/// A program input or output.
struct PortInfo {
  std::string name;
  int value = 0;
  TensorType globalType;
  ShardSpec sharding;
};

/// A weight: the slice of an initializer each rank loads.
struct WeightInfo {
  int value = 0;
  std::string initializer;
  int source = 0;
  TensorType globalType;
  /// The initializer's shape when globalType views it in another shape with
  /// the same elements in the same order; empty when the same.
  Shape sourceShape;
  ShardSpec sharding;
  /// No source: every rank starts it at zeros (optimizer state of training
  /// plans).
  bool zeroInit = false;
  /// The initializer's fingerprint when compiled (tensorDigest); 0: none.
  uint64_t digest = 0;
  /// The initializer the weight is read from: `initializer` itself, or, for
  /// a block (Weight.range), the initializer it is a block of.
  std::string sourceName;
  /// A block: the source initializer's shape, and where along `rangeAxis`
  /// the block starts (rangeAxis -1: not a block).
  Shape rangeShape;
  int rangeAxis = -1;
  int64_t rangeStart = 0;
};

/// A block of an initializer (WeightInfo::rangeAxis >= 0), by the block's
/// name, for the export that puts blocks together again.
struct WeightBlock {
  std::string name;
  int axis = 0;
  int64_t start = 0;
  int64_t size = 0;
};

/// Weights with the same key (initializer, type and sharding) share one
/// buffer on a rank (loadWeights), so that an optimizer's in-place update is
/// seen by every value of the initializer.
std::string weightBufferKey(const WeightInfo &w, const Mesh &mesh);

/// A constant: raw little-endian bytes of the value's local type.
struct ConstantInfo {
  int value = 0;
  std::string data;
  /// The gradient seed of a loss-scaled plan (Constant.loss_scale).
  bool lossScale = false;
};

/// A transfer of a Send or Recv op, with its messages planned.
struct TransferInfo {
  int id = 0;
  /// One micro-batch's global tensor.
  TensorType globalType;
  Layout src, dst;
  std::vector<TransferMessage> messages;
  /// Offsets in the global tensor of this rank's block on the side it runs
  /// (src for a Send, dst for a Recv).
  Shape blockOffsets;
};

/// A task: a TaskGraph of the program; its ops are `ops[begin, end)`.
struct TaskInfo {
  std::string name;
  int begin = 0, end = 0;
  /// Values the task reads that ops of other tasks define: restored per
  /// micro-batch before it runs.
  std::vector<int> imports;
  /// Values the task defines that ops of other tasks read: kept per
  /// micro-batch after it runs.
  std::vector<int> exports;
};

/// One entry of a program's schedule. A task runs either forward or
/// backward (its own TaskGraph, `<scope>.bwd`) for every micro-batch; in a
/// training plan a task may also run once per step, at the last micro-batch
/// (the optimizer's `<scope>.opt`).
struct ScheduleEntry {
  int task = 0;
  int microBatch = 0;
  bool backward = false;
};

/// Plan.pipeline, for reports.
struct PipelineInfo {
  bool present = false;
  std::string schedule;
  int stages = 1, microBatches = 1, chunks = 1;
};

/// Plan.training: what makes a plan a training plan (docs/Training.md).
struct TrainingInfo {
  bool present = false;
  /// The output holding the loss and the input holding the labels.
  std::string loss, labels;
  /// adamw or sgd (for reports and checkpoints).
  std::string optimizer;
  /// Plan.training.grad_bucket_mb; -1 when absent.
  double gradBucketMb = -1;
  /// fp32, bf16 or fp16 (Plan.training.precision; fp32 when empty).
  std::string precision = "fp32";
  /// fp16's dynamic loss scaler (Plan.training.loss_scale).
  struct LossScale {
    bool present = false;
    double initial = 65536, growthFactor = 2, backoffFactor = 0.5, min = 1;
    int64_t growthInterval = 2000;
  } lossScale;
  /// Some optimizer op of some program clips gradients (clip_norm > 0):
  /// every rank then joins the global norm's all-reduce in every step.
  bool clipping = false;
  /// The plan's inputs other than the labels, over every program (distinct
  /// names, in order of first appearance) with their global types; with one
  /// such input, it is the token input that --data feeds.
  std::vector<std::string> otherInputs;
  std::vector<TensorType> otherInputTypes;
  /// The labels' global type (from the program that reads them).
  TensorType labelsType;
  /// The lowest index of a program that holds each initializer (weights and
  /// optimizer states): that program writes it to checkpoints.
  std::map<std::string, int> initializerProgram;
  /// The model's weights over every program (the weights that are not
  /// zero_init: trained, frozen and assigned ones, not optimizer state), each
  /// with the index of its source (Plan.sources). What shoal-run
  /// --export-onnx and --export-safetensors write. Keyed by the source
  /// initializer's name (a block's: the initializer it is cut from).
  std::map<std::string, int> modelWeights;
  /// The blocks of each initializer that the plan reads in blocks.
  std::map<std::string, std::vector<WeightBlock>> blocks;
};

/// A validated plan, reduced to what this rank executes: the one program
/// whose placement covers it.
struct LoadedPlan {
  /// The plan file, as given.
  std::string path;
  /// The plan's content fingerprint (Plan.content_sha256, computed when the
  /// plan has none): what every rank of a job must hold the same of.
  std::string contentSha256;
  /// 1 or 2.
  int formatVersion = 1;
  /// The program's mesh (with its micro-batch axis, if any); in format
  /// version 1, and for programs without a mesh, the plan's mesh.
  Mesh mesh;
  /// Index of this rank's program in the plan, and the number of programs.
  int program = 0;
  int numPrograms = 1;
  /// Pipeline stage of the program (Program.stage).
  int stage = 0;
  Placement placement;
  /// World rank of every rank of the program's mesh, in mesh rank order.
  std::vector<int64_t> programRanks;
  /// This rank's index in the program's mesh.
  int64_t meshRank = 0;
  /// The number of micro-batches of a step (the size of the mesh's "mb" axis
  /// when it has one).
  int numMicroBatches = 1;
  /// The program's tasks (one unnamed task holding every op in format
  /// version 1 or when Program.tasks is empty).
  std::vector<TaskInfo> tasks;
  /// The order of work in a step; never empty.
  std::vector<ScheduleEntry> schedule;
  /// Transfers of the program's Send and Recv ops (OpInfo::transfer).
  std::vector<TransferInfo> transfers;
  PipelineInfo pipeline;
  TrainingInfo training;
  /// Weight source files, resolved against the plan's folder.
  std::vector<std::string> sourcePaths;
  /// The backend the plan asks for (shoal-compile --device).
  bool defaultCuda = false;
  /// The program's role, for messages.
  std::string role;
  /// Local type of every value.
  std::vector<TensorType> values;
  std::vector<PortInfo> inputs, outputs;
  std::vector<WeightInfo> weights;
  std::vector<ConstantInfo> constants;
  std::vector<OpInfo> ops;
  /// For each value, the index of the last op that reads it; -1 if no op
  /// does; kKeepAlive for program outputs.
  std::vector<int> lastUse;
  /// For each value, the task of the op that defines it; -1 for values set
  /// from outside the ops (inputs, weights, constants).
  std::vector<int> definingTask;
  /// Every distinct list of mesh axes a collective runs over (without the
  /// micro-batch axis: an AllReduce over "mb" accumulates over micro-batches
  /// and reduces over its other axes), in order of first use; each rank
  /// creates these communicators in this order.
  std::vector<std::vector<int>> collectiveAxes;

  static constexpr int kKeepAlive = 1 << 30;

  /// True for what only the CPU executor runs: several programs,
  /// micro-batches, several tasks or transfers.
  bool isPipelined() const {
    return numPrograms > 1 || numMicroBatches > 1 || tasks.size() > 1 ||
           !transfers.empty();
  }
};

/// The largest transfer id: MPI tags are id * kMaxMicroBatches + micro-batch
/// and must stay below 2^31 (and MPI_TAG_UB, checked when running).
constexpr int kMaxMicroBatches = 1024;
constexpr int kMaxTransferId = (1 << 21) - 1;

/// Reads and validates the plan file `path` for world rank `worldRank` of a
/// run of `worldSize` ranks. Throws Error (message starting with
/// "plan <path>: ") on any violation.
LoadedPlan loadPlan(const std::string &path, int64_t worldSize,
                    int64_t worldRank = 0);

/// Validates an already parsed plan; `path` is used for messages and to
/// resolve weight sources. `predictOnly` (shoal-sim) accepts a plan whose
/// weights are shapes only (WeightSource SHAPES_ONLY), which shoal-run
/// cannot run.
LoadedPlan checkPlan(const plan::Plan &plan, const std::string &path,
                     int64_t worldSize, int64_t worldRank = 0,
                     bool predictOnly = false);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_PLANLOADER_H
