//===- Cluster.h - Devices, nodes and links of a cluster --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The cluster the planner plans for (DESIGN.md, "The cluster spec"): nodes
// of devices, the link between devices of one node and the link between
// nodes. Device figures come from the built-in catalog (datasheets) unless
// the spec overrides them. Ranks are numbered node by node, in spec order.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_PLANNER_CLUSTER_H
#define SHOAL_PLANNER_CLUSTER_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shoal {
namespace planner {

/// Precisions of matrix products, as in shoal-run --precision.
enum class Precision { FP32, TF32, BF16, FP16 };

/// A spec or planning error; the message names the file and line when it
/// comes from a file.
class SpecError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A device type: peak rates, memory and memory bandwidth.
struct DeviceType {
  std::string name;
  /// Dense peak TFLOP/s per Precision (0: not supported; the planner then
  /// uses the next wider precision the device has).
  double peakTflops[4] = {0, 0, 0, 0};
  double memoryGiB = 0;
  double bandwidthGBps = 0;
  /// Name of the link between devices of one node by default.
  std::string defaultIntraLink;
  /// Matrix products with m rows reach peak * m / (m + matmulHalfRows) (0:
  /// the peak at any size). Calibrated, like the peak, from measurements.
  double matmulHalfRows = 0;
  /// Bytes (read and written) per second, in GB/s, of a plain copy (an
  /// all-reduce's result, a gradient's first micro-batch): 0 means
  /// bandwidthGBps. Calibrated: other ops (GELU on a CPU) can be compute
  /// bound far below a copy's rate.
  double copyGBps = 0;

  /// Peak FLOP/s at `p`, falling back to FP32 when `p` is not supported.
  double peakFlops(Precision p) const;
};

/// A link: bandwidth per direction and latency of one message.
struct Link {
  std::string name;
  double bandwidthGBps = 0; ///< Gigabytes (1e9 bytes) per second.
  double latencyUs = 0;
};

/// The catalog entry for a spec's device type name ("V100-32GB", "T4",
/// "A100-80GB", "H100", "CPU", ...); null if unknown.
const DeviceType *findDeviceType(const std::string &name);
/// Every catalog name, for messages.
std::string knownDeviceTypes();
/// A named link type ("nvlink2", "pcie4", "tcp", "rdma", ...); null if
/// unknown.
const Link *findLinkType(const std::string &name);
std::string knownLinkTypes();

/// One group of identical nodes.
struct NodeGroup {
  int count = 1;
  DeviceType device;
  int devicesPerNode = 1;
  Link intraNode;
};

struct Cluster {
  std::vector<NodeGroup> groups;
  Link interNode;

  int numNodes() const;
  int numDevices() const;
  /// The node and device type of rank `r` (ranks fill nodes in order).
  int nodeOf(int rank) const;
  const NodeGroup &groupOf(int rank) const;
  /// The slowest link a group of ranks crosses: inter-node if they span
  /// nodes, else the slowest intra-node link among them.
  Link slowestLink(const std::vector<int> &ranks) const;

private:
  /// The group of rank `rank` and its node; SpecError if there is none.
  const NodeGroup &locate(int rank, int &node) const;
};

/// Reads a cluster spec (YAML, DESIGN.md). Throws SpecError naming the
/// file and line of the first problem.
Cluster parseClusterSpec(const std::string &path);
/// The same from text; `name` stands for the file in messages.
Cluster parseClusterSpecText(const std::string &text, const std::string &name);

} // namespace planner
} // namespace shoal

#endif // SHOAL_PLANNER_CLUSTER_H
