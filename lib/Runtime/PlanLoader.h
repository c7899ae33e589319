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
  ShardSpec sharding;
};

/// A constant: raw little-endian bytes of the value's local type.
struct ConstantInfo {
  int value = 0;
  std::string data;
};

/// A validated plan, reduced to what this runtime executes.
struct LoadedPlan {
  /// The plan file, as given.
  std::string path;
  Mesh mesh;
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
  /// Every distinct list of mesh axes a collective runs over, in order of
  /// first use; each rank creates these communicators in this order.
  std::vector<std::vector<int>> collectiveAxes;

  static constexpr int kKeepAlive = 1 << 30;
};

/// Reads and validates the plan file `path` for a run of `worldSize` ranks.
/// Throws Error (message starting with "plan <path>: ") on any violation.
LoadedPlan loadPlan(const std::string &path, int64_t worldSize);

/// Validates an already parsed plan; `path` is used for messages and to
/// resolve weight sources.
LoadedPlan checkPlan(const plan::Plan &plan, const std::string &path,
                     int64_t worldSize);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_PLANLOADER_H
