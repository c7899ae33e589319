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

#include <vector>

namespace shoal {
namespace rt {

class Comm;

/// Holds the values of one program and runs its ops in order, freeing each
/// value after its last use.
class Executor : public ProgramRunner {
public:
  explicit Executor(const LoadedPlan &plan);

  /// Sets a value defined outside the ops (input, weight or constant); its
  /// type must be the value's local type. It stays across runs.
  void setValue(int id, Tensor tensor) override;
  /// The value `id` (undefined once freed).
  const Tensor &value(int id) const { return values.at(id); }

  /// Runs every op. With `verbose`, rank 0 prints one timing line per op to
  /// stderr. Errors are thrown as Error naming the op.
  void run(Comm &comm, bool verbose) override;
  Tensor fetch(int id) override { return values.at(id); }
  std::string deviceName() const override { return "cpu"; }

  /// Runs `op` on the CPU with `inputs` (null for absent optional ones) into
  /// `outs` (allocated here unless the op aliases its input). Used by the
  /// CUDA backend for ops it has no kernel for.
  static void runOnCpu(const LoadedPlan &plan, const OpInfo &op,
                       const std::vector<const Tensor *> &inputs,
                       std::vector<Tensor> &outs, Comm &comm);

private:
  void runOp(const OpInfo &op, Comm &comm);
  const Tensor &input(const OpInfo &op, std::size_t i) const;

  const LoadedPlan &plan;
  std::vector<Tensor> values;
  /// Values set from outside the ops, kept across runs.
  std::vector<bool> persistent;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_EXECUTOR_H
