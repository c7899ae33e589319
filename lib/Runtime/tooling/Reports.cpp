//===- Reports.cpp - What a run prints -----------------------------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "tooling/Tooling.h"

#include "Backend.h"
#include "Communicator.h"
#include "PlanLoader.h"
#include "shoal/Schema/DeviceCatalog.h"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <cstdio>
#include <filesystem>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {
/// A report's parts in the order the memory lines print them, to
/// broadcast from one rank.
std::array<double, 7> parts(const MemoryReport &r) {
  return {double(r.weights),
          double(r.grads),
          double(r.optimizer),
          double(r.activations),
          double(r.peak),
          double(r.inputs),
          double(r.gradientTemporaries)};
}
} // namespace

/// The memory line of the rank with the largest measured peak, printed by
/// rank 0.
void shoal::rt::printMemoryReport(const MemoryReport &r, Communicator &world,
                                  bool everyRank) {
  int rank = world.rank();
  auto mib = [](double b) { return b / double(1 << 20); };
  if (everyRank)
    for (int from = 0; from < world.size(); ++from) {
      std::array<double, 7> bytes = parts(r);
      world.broadcast(bytes.data(), sizeof bytes, from)->wait();
      if (rank == 0)
        std::printf("shoal-run: memory of rank %d: weights %.3f MiB, grads "
                    "%.3f MiB, optimizer %.3f MiB, activations %.3f MiB, "
                    "peak %.3f MiB; inputs and constants %.3f MiB of the "
                    "activations; weight gradients before their sum %.3f "
                    "MiB of them\n",
                    from, mib(bytes[0]), mib(bytes[1]), mib(bytes[2]),
                    mib(bytes[3]), mib(bytes[4]), mib(bytes[5]), mib(bytes[6]));
    }
  // The largest peak, ties to the lowest rank.
  int64_t largest = world.max(static_cast<double>(r.peak));
  int owner = static_cast<int>(
      world.min(static_cast<int64_t>(r.peak) == largest ? rank : INT_MAX));
  std::array<double, 7> bytes = parts(r);
  world.broadcast(bytes.data(), sizeof bytes, owner)->wait();
  if (rank == 0) {
    std::printf("shoal-run: memory: weights %.3f MiB, grads %.3f MiB, "
                "optimizer %.3f MiB, activations %.3f MiB, peak %.3f MiB "
                "(rank %d); inputs and constants %.3f MiB of the "
                "activations; weight gradients before their sum %.3f MiB of "
                "them\n",
                mib(bytes[0]), mib(bytes[1]), mib(bytes[2]), mib(bytes[3]),
                mib(bytes[4]), owner, mib(bytes[5]), mib(bytes[6]));
  }
}

/// FLOPs of this rank's matrix products in one step.
double shoal::rt::matmulFlops(const LoadedPlan &plan) {
  std::vector<int> runs(plan.tasks.size(), 0);
  for (const ScheduleEntry &e : plan.schedule)
    if (!e.backward)
      ++runs[e.task];
  double flops = 0;
  for (const OpInfo &op : plan.ops) {
    if (op.kind != OpKind::MatMul && op.kind != OpKind::Gemm)
      continue;
    const Shape &a = plan.values[op.inputs[0]].shape;
    double k =
        op.kind == OpKind::Gemm && op.attrs.transA ? a.front() : a.back();
    flops += 2.0 * k * plan.values[op.outputs[0]].numElements() * runs[op.task];
  }
  return flops;
}

void shoal::rt::printStepReport(const LoadedPlan &plan, const RunSummary &s,
                                const RunOptions &options,
                                const ProgramRunner &exec) {
  std::string line = fmt::format(
      "shoal-run: {} steps on {} x {}: {:.3f} ms/step", options.steps,
      s.worldSize, exec.deviceName(), s.stepSeconds * 1e3);
  if (!plan.inputs.empty()) {
    const TensorType &in = plan.inputs.front().globalType;
    if (!in.shape.empty()) {
      double samples = static_cast<double>(in.shape[0]);
      line += fmt::format(", {:.1f} samples/s", samples / s.stepSeconds);
      bool tokens = (in.dtype == DType::I64 || in.dtype == DType::I32) &&
                    in.shape.size() >= 2;
      if (tokens)
        line += fmt::format(", {:.1f} tokens/s",
                            samples * in.shape[1] / s.stepSeconds);
    }
  }
  double perDevice = s.stepFlops / s.worldSize / s.stepSeconds / 1e12;
  line += fmt::format(", {:.3f} TFLOP/s per device", perDevice);
  double peak = options.peakTflops;
  Precision p = Precision::FP32;
  parsePrecision(options.precision, p);
  if (peak == 0 && exec.deviceSpec())
    peak = peakTflops(*exec.deviceSpec(), p);
  if (peak > 0)
    line += fmt::format(", MFU {:.1f}% of {:.4g} TFLOP/s ({})",
                        100 * perDevice / peak, peak,
                        options.peakTflops > 0 ? "given" : precisionName(p));
  std::printf("%s\n", line.c_str());
}

/// FLOPs of this rank's ops in one step (Op.flops of every op each time the
/// schedule runs its task).
double shoal::rt::scheduledFlops(const LoadedPlan &plan) {
  std::vector<double> perTask(plan.tasks.size(), 0);
  for (const OpInfo &op : plan.ops)
    perTask[op.task] += op.flops;
  double flops = 0;
  for (const ScheduleEntry &e : plan.schedule)
    flops += perTask[e.task];
  return flops;
}
