//===- Calibration.h - Device and link figures from profiles ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Calibration replaces datasheet figures with measured ones. It reads the
// profiles `shoal-run --profile` writes (docs/Runtime.md) and fits, per
// device type and op class (never per op or per model), the figures the
// cost model (CostModel.h) uses:
//
// - matrix products: peak P and half-rows h of rate = P * m / (m + h);
// - other ops: the memory bandwidth, taking them as memory bound (raised
//   to the most bytes per second a measured matrix product moved, since the
//   cost model applies one bandwidth to every op class);
// - links: bandwidth and latency of the ring formulas (collectives) and of
//   latency + bytes / bandwidth (Send/Recv), per link class (inside a node,
//   between nodes).
//
// Every fit is weighted least squares, each sample weighted by the inverse
// of its size (FLOPs, bytes; for communication its measured time): the
// noise of a timing grows with its length, so neither the longest ops alone
// nor the many tiny ones alone decide the fit.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_PLANNER_CALIBRATION_H
#define SHOAL_PLANNER_CALIBRATION_H

#include "shoal/Planner/Cluster.h"

#include <string>
#include <vector>

namespace shoal {
namespace planner {

/// One op as a profile measured it (medians over the run's steps).
struct OpSample {
  std::string device; ///< device type of the rank that ran it
  std::string kind;   ///< plan op kind ("MatMul", "Gelu", ...)
  double flops = 0, bytes = 0;
  double rows = 0; ///< matrix products: rows of the result (0: unknown)
  double seconds = 0;
};

/// One collective or one Send/Recv as a profile measured it.
struct CommSample {
  std::string device;
  /// "AllReduce", "AllGather", "AllToAll", "ReduceScatter" or "SendRecv".
  std::string kind;
  double bytes = 0; ///< per rank, as the cost model counts them
  int groupSize = 2;
  /// Distinct nodes of the group (or of sender and receiver).
  int nodes = 1;
  double seconds = 0;
};

/// A profile reduced to what calibration fits.
struct Profile {
  std::string path;
  std::string device; ///< rank 0's device type
  Precision precision = Precision::FP32;
  int worldSize = 1;
  std::vector<OpSample> ops;
  std::vector<CommSample> comms;
  /// (device type, copy GB/s) of each rank that measured its copy rate.
  std::vector<std::pair<std::string, double>> copyRates;
};

/// Reads a profile written by shoal-run --profile. Collectives are taken
/// per (program, op, micro-batch) at the fastest rank of the run: the
/// others include time spent waiting for the last member to arrive.
/// Throws SpecError naming the file (and line) and what was expected.
Profile loadProfile(const std::string &path);
/// The same from text; `name` stands for the file in messages.
Profile parseProfile(const std::string &text, const std::string &name);

/// Figures fitted for one device type.
struct DeviceFit {
  std::string device;
  Precision precision = Precision::FP32;
  /// Matrix products: peak TFLOP/s and half rows (0 when only one size was
  /// measured or the fit put it below 0).
  bool matmul = false;
  double peakTflops = 0, halfRows = 0;
  int matmulSamples = 0;
  /// Other ops: memory bandwidth in GB/s.
  bool memory = false;
  double bandwidthGBps = 0;
  int memorySamples = 0;
  /// Plain copies: the median of the ranks' measured copy rates, GB/s.
  bool copy = false;
  double copyGBps = 0;
  int copySamples = 0;
  /// The link between devices of one node, from groups inside one node.
  bool link = false;
  double linkGBps = 0, linkLatencyUs = 0;
  int linkSamples = 0;
};

struct LinkFit {
  bool fitted = false;
  double bandwidthGBps = 0, latencyUs = 0;
  int samples = 0;
};

/// Everything fitted from a set of profiles.
struct Calibration {
  std::vector<std::string> sources; ///< profile files
  std::vector<DeviceFit> devices;
  /// Between nodes: from groups with one rank on each of several nodes and
  /// from transfers between nodes.
  LinkFit interNode;
  /// What could not be fitted, and why.
  std::vector<std::string> notes;

  const DeviceFit *find(const std::string &device) const;
};

/// Fits the figures from every sample of `profiles`. Throws SpecError if
/// there is nothing to fit.
Calibration fitProfiles(const std::vector<Profile> &profiles);

/// Replaces the figures of `cluster` that `cal` fitted: for each node group
/// whose device type was profiled, the peak at the profile's precision, the
/// half rows, the memory bandwidth, the copy rate and the intra-node link; the
/// inter-node link if fitted. Returns one line per figure taken (with the one
/// it replaces). Throws SpecError if no device type of the cluster was
/// profiled.
std::vector<std::string> applyCalibration(const Calibration &cal,
                                          Cluster &cluster);

} // namespace planner
} // namespace shoal

#endif // SHOAL_PLANNER_CALIBRATION_H
