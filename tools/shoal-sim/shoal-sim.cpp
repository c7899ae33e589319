//===- shoal-sim.cpp - Predict a plan's step on a cluster -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
//   shoal-sim PLAN --cluster SPEC [--precision P] [--trace FILE]
//             [--calibration PROFILE.json]...
//
// Prints the predicted step time, throughput, pipeline bubble and each
// program's memory against its devices' capacity. The plan is validated by
// the runtime's own checker (what shoal-run would refuse, shoal-sim
// refuses), and the memory is the runtime's: its buffer plan for the
// program, counted as shoal-run --report-memory counts it.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Calibration.h"
#include "shoal/Planner/Simulator.h"

#include "plan.pb.h"

// The runtime's plan checker and buffer planner.
#include "shoal/Runtime/Runtime.h"
#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace shoal::planner;

namespace {

/// Milliseconds to three decimals, or three significant digits below
/// 0.1 ms (the CPU examples' steps take microseconds).
std::string millis(double seconds) {
  double ms = seconds * 1e3;
  int decimals = 3;
  if (ms > 0 && ms < 0.1)
    decimals = std::min(9, 2 - static_cast<int>(std::floor(std::log10(ms))));
  return fmt::format("{:.{}f}", ms, decimals);
}

const char kUsage[] =
    "usage: shoal-sim PLAN --cluster SPEC [--precision P] [--trace FILE]\n"
    "                 [--calibration PROFILE.json]...\n"
    "\n"
    "Predicts one step of a shoal plan on the cluster a spec describes\n"
    "(docs/Planner.md), with datasheet figures: step time, samples/s,\n"
    "pipeline bubble, and each program's memory against its devices'.\n"
    "The plan is checked as shoal-run checks it; the memory per rank is\n"
    "the runtime's buffer plan, in the parts of shoal-run --report-memory.\n"
    "\n"
    "  --cluster SPEC   cluster spec (YAML)\n"
    "  --precision P    every matrix product in fp32, tf32, bf16 or fp16\n"
    "                   (default: each at its element type's, f32 as fp32)\n"
    "  --trace FILE     write the predicted timeline as a Chrome trace\n"
    "  --breakdown      print each program's busy time by op kind\n"
    "  --calibration F  use the figures fitted from the profile F (written\n"
    "                   by shoal-run --profile) in place of the datasheet's;\n"
    "                   may be repeated (one fit over all of them)\n";

int usage(const std::string &error) {
  std::fprintf(stderr, "shoal-sim: error: %s\n%s", error.c_str(), kUsage);
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath, clusterPath, tracePath, precisionName;
  std::vector<std::string> calibrations;
  bool breakdown = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &dst) {
      if (i + 1 >= argc)
        return false;
      dst = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--cluster") {
      if (!value(clusterPath))
        return usage("--cluster needs a spec file");
    } else if (a == "--calibration") {
      std::string f;
      if (!value(f))
        return usage("--calibration needs a profile (shoal-run --profile)");
      calibrations.push_back(f);
    } else if (a == "--trace") {
      if (!value(tracePath))
        return usage("--trace needs a file");
    } else if (a == "--breakdown") {
      breakdown = true;
    } else if (a == "--precision") {
      if (!value(precisionName))
        return usage("--precision needs fp32, tf32, bf16 or fp16");
    } else if (!a.empty() && a[0] == '-') {
      return usage(fmt::format("unknown option '{}'", a));
    } else if (planPath.empty()) {
      planPath = a;
    } else {
      return usage(
          fmt::format("more than one plan given ('{}' and '{}')", planPath, a));
    }
  }
  if (planPath.empty())
    return usage("no plan file given");
  if (clusterPath.empty())
    return usage("missing --cluster SPEC");
  const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
  // No --precision: each product at its element type's (fp32 for f32).
  const bool byElementType = precisionName.empty();
  int p = 0;
  while (!byElementType && p < 4 && precisionName != names[p])
    ++p;
  if (p == 4)
    return usage(fmt::format("--precision must be fp32, tf32, bf16 or fp16, "
                             "got '{}'",
                             precisionName));
  try {
    Cluster cluster = parseClusterSpec(clusterPath);
    if (!calibrations.empty()) {
      std::vector<Profile> profiles;
      for (const std::string &f : calibrations)
        profiles.push_back(loadProfile(f));
      Calibration cal = fitProfiles(profiles);
      for (const std::string &line : applyCalibration(cal, cluster))
        std::printf("shoal-sim: calibrated: %s\n", line.c_str());
      for (const DeviceFit &d : cal.devices)
        if (d.matmul && static_cast<int>(d.precision) != p)
          std::printf("shoal-sim: calibrated: note: %s was profiled at %s; "
                      "its %s peak stays the datasheet's\n",
                      d.device.c_str(), names[static_cast<int>(d.precision)],
                      names[p]);
    }
    std::string bytes;
    if (std::string e = shoal::readRegularFile(planPath, bytes, INT32_MAX);
        !e.empty())
      throw SpecError(fmt::format("{}: cannot read the plan: {}", planPath, e));
    shoal::plan::Plan plan;
    if (!plan.ParseFromString(bytes) || plan.magic() != "shoal.plan")
      throw SpecError(fmt::format("{}: not a shoal plan", planPath));
    // shoal-run's checks first (the simulator trusts the plan), then the
    // runtime's buffer plan of each program.
    checkWorldSize(plan, cluster);
    std::vector<shoal::rt::ProgramMemory> memory =
        shoal::rt::checkAndPredictMemory(plan, planPath, cluster.numDevices());
    CostModel cost(cluster, static_cast<Precision>(p));
    Prediction pred = simulate(plan, cluster, cost, byElementType);
    if (memory.size() != pred.programs.size())
      throw SpecError(fmt::format("{}: {} programs checked, {} simulated",
                                  planPath, memory.size(),
                                  pred.programs.size()));
    std::printf("shoal-sim: %s on %d devices (%s): predicted step %s ms",
                planPath.c_str(), cluster.numDevices(),
                byElementType ? "precision by element type" : names[p],
                millis(pred.stepSeconds).c_str());
    if (pred.batch > 0 && pred.stepSeconds > 0)
      std::printf(", %.1f samples/s", pred.batch / pred.stepSeconds);
    if (pred.stepSeconds > 0)
      std::printf(", %.3f TFLOP/s per device", pred.flopsPerStep /
                                                   cluster.numDevices() /
                                                   pred.stepSeconds / 1e12);
    std::printf("\n");
    if (pred.stages > 1 || pred.microBatches > 1)
      std::printf("shoal-sim: pipeline %s, %d stages x %d micro-batches: "
                  "bubble predicted %.3g (idle / busy time, mean over "
                  "stages), %.3g on the busiest stage, %.3g waiting on "
                  "other stages (exposed exchanges counted as work), "
                  "schedule's (p-1)/(v*m) = %.3g\n",
                  pred.schedule.c_str(), pred.stages, pred.microBatches,
                  pred.bubble(), pred.busiestBubble(), pred.pipelineBubble(),
                  pred.expectedBubble());
    bool fits = true;
    for (std::size_t i = 0; i < pred.programs.size(); ++i) {
      const ProgramPrediction &pp = pred.programs[i];
      const shoal::rt::MemoryReport &mem = memory[i].memory;
      double total = static_cast<double>(mem.weights + mem.grads +
                                         mem.optimizer + mem.activations);
      fits &= total <= pp.capacityBytes;
      auto mib = [](std::size_t b) {
        return static_cast<double>(b) / (1 << 20);
      };
      std::printf(
          "shoal-sim: %s (%zu ranks): busy %s ms, waits for its "
          "exchanges %s ms (and %s ms before its update), "
          "finishes at %s ms, "
          "memory %.3f MiB "
          "(weights %.3f MiB, grads %.3f MiB, optimizer %.3f MiB, "
          "activations %.3f MiB) of %.1f GiB%s; inputs and "
          "constants %.3f MiB of the activations; weight gradients before "
          "their sum %.3f MiB of them\n",
          pp.role.c_str(), pp.ranks.size(), millis(pp.busySeconds).c_str(),
          millis(pp.exchangeWaitSeconds).c_str(),
          millis(pp.tailWaitSeconds).c_str(), millis(pp.finishSeconds).c_str(),
          total / (1 << 20), mib(mem.weights), mib(mem.grads),
          mib(mem.optimizer), mib(mem.activations),
          pp.capacityBytes / (1 << 30),
          total > pp.capacityBytes ? " DOES NOT FIT" : "", mib(mem.inputs),
          mib(mem.gradientTemporaries));
      if (breakdown) {
        std::vector<std::pair<double, std::string>> kinds;
        for (const auto &[kind, seconds] : pp.secondsByKind)
          kinds.push_back({seconds, kind});
        std::sort(kinds.rbegin(), kinds.rend());
        for (const auto &[seconds, kind] : kinds)
          std::printf("shoal-sim:   %-24s %10.3f ms %5.1f%%\n", kind.c_str(),
                      seconds * 1e3,
                      pp.busySeconds > 0 ? 100 * seconds / pp.busySeconds : 0);
        // Exchanges beside the compute: not in the busy time.
        for (const auto &[kind, seconds] : pp.overlappedByKind)
          std::printf("shoal-sim:   %-24s %10.3f ms beside the compute\n",
                      kind.c_str(), seconds * 1e3);
      }
    }
    if (!tracePath.empty()) {
      if (std::string e =
              shoal::writeFileAtomically(tracePath, chromeTrace(pred));
          !e.empty())
        throw SpecError(fmt::format("cannot write the trace {}", e));
    }
    return fits ? 0 : 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "shoal-sim: error: %s\n", e.what());
    return 1;
  }
}
