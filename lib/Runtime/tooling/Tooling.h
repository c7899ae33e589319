//===- Tooling.h - What shoal-run does around the engine ---------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The tooling layer (docs/Design.md, "Layers"): data feeding (Data.cpp),
// output and trace writing (Outputs.cpp), reports (Reports.cpp), the run
// loop (RunPlan.cpp) and the job around it (Job.cpp). It sits above the
// engine and knows no command line: tools/shoal-run parses that into
// RunOptions and TrainingOptions (shoal/Runtime/Options.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_TOOLING_TOOLING_H
#define SHOAL_RUNTIME_TOOLING_TOOLING_H

#include "shoal/Runtime/Runtime.h"

#include "Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

class Comm;
class Communicator;
class ProgramRunner;
struct LoadedPlan;
struct StepProfile;
struct TrainingInfo;

//===----------------------------------------------------------------------===//
// Data feeding (Data.cpp)
//===----------------------------------------------------------------------===//

/// --data: the global tensor of each input of a training plan at each step.
class StepData {
public:
  virtual ~StepData() = default;
  /// The global tensor of input `name` at step `step` (0-based, counted
  /// from the start of training: a resumed run goes on from the
  /// checkpoint's step, so from the same data position).
  virtual Tensor make(int64_t step, const std::string &name) const = 0;
  /// Files of the data folder that feed no input (warned about).
  virtual std::vector<std::string> extraFiles() const { return {}; }
};

/// --data FILE (token rows), --data DIR (one .npy per input) or an indexed
/// dataset (docs/Data.md); `flag` names the option in errors (--data or
/// --eval-data).
std::unique_ptr<StepData> openData(const std::string &path,
                                   const TrainingInfo &training,
                                   const TrainingOptions &options,
                                   const char *flag = "--data");

/// Sets this rank's blocks of every input for step `step`.
void feedData(const LoadedPlan &plan, const StepData &data, int64_t step,
              const std::vector<int64_t> &coords, ProgramRunner &exec);

/// Sets this rank's blocks of every input from `dir` (--inputs: one
/// `<name>.npy` per input).
void loadInputs(const LoadedPlan &plan, const std::string &dir,
                const std::vector<int64_t> &coords, ProgramRunner &exec);

//===----------------------------------------------------------------------===//
// Outputs and traces (Outputs.cpp)
//===----------------------------------------------------------------------===//

/// Assembles every output, over the program's ranks and micro-batches, on
/// the program's rank 0, which writes it.
void writeOutputs(const LoadedPlan &plan, const std::string &dir,
                  ProgramRunner &exec, Comm &comm);

/// Gathers every rank's events of the last step to world rank 0, which
/// writes them as a Chrome trace.
void writeTrace(const std::string &path, const LoadedPlan &plan,
                const StepProfile *profile, Communicator &world);

/// Creates the folder of the file `path` (if any) that `flag` names and
/// checks that `path` is not a folder.
void checkOutputFile(const std::string &path, const char *what,
                     const char *flag);
/// Checks that a new file can be written into the folder `dir` ("" is the
/// current folder), by writing and removing one; throws Error naming `what`
/// and the system's reason.
void checkWritableFolder(const std::string &dir, const std::string &what);

//===----------------------------------------------------------------------===//
// Reports (Reports.cpp)
//===----------------------------------------------------------------------===//

/// The memory line of the rank with the largest measured peak, printed by
/// rank 0.
void printMemoryReport(const MemoryReport &r, Communicator &world,
                       bool everyRank);

/// FLOPs of this rank's matrix products in one step.
double matmulFlops(const LoadedPlan &plan);

/// The step line (step time, samples/s, tokens/s, MFU), printed by rank 0.
void printStepReport(const LoadedPlan &plan, const RunSummary &s,
                     const RunOptions &options, const ProgramRunner &exec);

/// FLOPs of this rank's ops in one step (Op.flops of every op each time the
/// schedule runs its task).
double scheduledFlops(const LoadedPlan &plan);

//===----------------------------------------------------------------------===//
// The run (RunPlan.cpp, Job.cpp)
//===----------------------------------------------------------------------===//

/// runPlan with the training options, on `world`.
RunSummary runPlan(const RunOptions &options, const TrainingOptions &train,
                   Communicator &world);

/// Lets every backend share the node among its ranks (the CPU kernels'
/// and BLAS threads) and check its settings, before any op runs.
void configureBackendsForNode(Communicator &world);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_TOOLING_TOOLING_H
