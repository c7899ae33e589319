//===- CostModel.h - Time and memory of ops and collectives -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Predicted time of compute (a roofline over the device's peak rate and
// memory bandwidth, each scaled by an efficiency that calibration can set),
// of collectives (ring formulas over the slowest link the group crosses;
// hierarchical when the group spans nodes), of point-to-point transfers, and
// the memory a rank needs.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_PLANNER_COSTMODEL_H
#define SHOAL_PLANNER_COSTMODEL_H

#include "shoal/Planner/Cluster.h"

#include <vector>

namespace shoal {
namespace planner {

/// Classes of ops that get their own efficiency.
/// MatMul: FLOP/s-bound with the size curve; Elementwise: the roofline of
/// the peak and the memory bandwidth; Copy: a plain copy, at the device's
/// copy rate (DeviceType::copyGBps).
enum class OpClass { MatMul, Elementwise, Copy };

/// Fractions of the datasheet figures that are achieved (calibrated per
/// device type and op class, never per model).
struct Efficiency {
  double matmul = 1.0; ///< of the peak FLOP/s
  double memory = 1.0; ///< of the memory bandwidth
  double link = 1.0;   ///< of a link's bandwidth
};

class CostModel {
public:
  CostModel(const Cluster &cluster, Precision precision,
            Efficiency efficiency = {})
      : cluster(cluster), precision(precision), eff(efficiency) {}

  /// Seconds for an op of `flops` that moves `bytes` on `rank`'s device:
  /// the slower of compute and memory traffic. A matrix product with
  /// `rows` rows (0: unknown) runs at the device's size-dependent rate
  /// (DeviceType::matmulHalfRows); that curve then stands for its memory
  /// traffic too.
  double opSeconds(int rank, double flops, double bytes, OpClass cls,
                   double rows = 0) const;

  /// Ring all-reduce of `bytes` (each rank's buffer) among `ranks`:
  /// 2 (n-1)/n * bytes / bandwidth + 2 (n-1) * latency. A group that spans
  /// nodes with several ranks on each reduce-scatters inside the nodes,
  /// all-reduces 1/k of the data across them and all-gathers inside again.
  double allReduceSeconds(const std::vector<int> &ranks, double bytes) const;
  /// Ring all-gather producing `bytes` on every rank:
  /// (n-1)/n * bytes / bandwidth + (n-1) * latency. Reduce-scatter and
  /// all-to-all of `bytes` per rank cost the same.
  double allGatherSeconds(const std::vector<int> &ranks, double bytes) const;
  double reduceScatterSeconds(const std::vector<int> &ranks,
                              double bytes) const {
    return allGatherSeconds(ranks, bytes);
  }
  double allToAllSeconds(const std::vector<int> &ranks, double bytes) const {
    return allGatherSeconds(ranks, bytes);
  }
  /// One message of `bytes` from `src` to `dst`: latency + bytes/bandwidth
  /// (0 when they are the same rank).
  double sendRecvSeconds(int src, int dst, double bytes) const;

  /// The same model with matrix products at `p`.
  CostModel withPrecision(Precision p) const {
    return CostModel(cluster, p, eff);
  }

private:
  double ring(const std::vector<int> &ranks, double bytes, double rounds) const;

  const Cluster &cluster;
  Precision precision;
  Efficiency eff;
};

/// What a rank holds, for the memory model.
struct MemoryInputs {
  double parameters = 0;    ///< this rank's parameter count
  double bytesPerParam = 4; ///< 4 fp32, 2 bf16/fp16
  bool training = false;
  enum class Optimizer {
    None,
    SGD,
    Momentum,
    Adam
  } optimizer = Optimizer::None;
  /// ZeRO stage (0-3) and the data-parallel ranks it splits over: the
  /// optimizer state (1), the gradients (2) and the weights (3) are held
  /// 1/zeroRanks per rank.
  int zeroStage = 0;
  int zeroRanks = 1;
  /// Micro-batches of a step: ZeRO-1 holds the whole summed gradient as
  /// well as its block when there are several (docs/Training.md "ZeRO").
  int microBatches = 1;
  double activationBytes = 0; ///< per micro-batch, kept for backward
  int inFlight = 1;           ///< micro-batches whose activations are kept
  /// Activations alive only while one op sequence runs (the liveness peak,
  /// a recomputed layer's): once, not per micro-batch in flight.
  double transientBytes = 0;
  /// Held for the whole run, once: the program's constants (counted with
  /// the activations, as shoal-run reports them).
  double persistentBytes = 0;
  double workspaceBytes = 0;
  /// Bytes per parameter of the weights' copies in another type, kept for
  /// the step (the whole model in bf16/fp16: 2); counted with the weights.
  double weightCopyBytesPerParam = 0;
};

struct MemoryEstimate {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0,
         workspace = 0;
  double total() const {
    return weights + gradients + optimizer + activations + workspace;
  }
};

/// Weights; when training, gradients (same precision as weights) and the
/// optimizer's state in fp32 (Adam: two moments, plus an fp32 master copy
/// of weights kept in lower precision; momentum: one); activations times
/// the micro-batches in flight; workspace. ZeRO divides the optimizer
/// state, then the gradients, then the weights by zeroRanks.
MemoryEstimate estimateMemory(const MemoryInputs &in);

} // namespace planner
} // namespace shoal

#endif // SHOAL_PLANNER_COSTMODEL_H
