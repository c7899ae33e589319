//===- Cluster.cpp - Devices, nodes and links of a cluster ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Cluster.h"

#include "shoal/Schema/DeviceCatalog.h"
#include "shoal/Support/Files.h"
#include "shoal/Support/Yaml.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

using namespace shoal::planner;

namespace {

/// Spec names of device types: the runtime catalog entry with their peak
/// rates and bandwidth (one table of datasheet figures for both), the memory
/// of this variant, and the usual link between devices of one node.
struct CatalogEntry {
  const char *specName;
  const char *runtimeName;
  double memoryGiB;
  const char *intraLink;
};
const CatalogEntry kCatalog[] = {
    {"P100", "P100", 16, "nvlink1"},
    {"V100-16GB", "V100", 16, "nvlink2"},
    {"V100-32GB", "V100", 32, "nvlink2"},
    {"V100", "V100", 32, "nvlink2"},
    {"T4", "T4", 16, "pcie3"},
    {"T4-16GB", "T4", 16, "pcie3"},
    {"A10", "A10", 24, "pcie4"},
    {"L4", "L4", 24, "pcie4"},
    {"A100-40GB", "A100-SXM4-40GB", 40, "nvlink3"},
    {"A100-80GB", "A100", 80, "nvlink3"},
    {"A100", "A100", 80, "nvlink3"},
    {"A800", "A800", 80, "nvlink3-a800"},
    {"H100", "H100", 80, "nvlink4"},
    {"H100-PCIe", "H100 PCIe", 80, "pcie5"},
    {"H200", "H200", 141, "nvlink4"},
};

// Per-direction bandwidth (GB/s) and latency (us) of one message: NVLink
// from the vendors' aggregate per-GPU figures, PCIe x16 from the standard,
// networks from their line rates.
const Link kLinks[] = {
    {"nvlink1", 80, 3},       {"nvlink2", 150, 3}, {"nvlink3", 300, 3},
    {"nvlink3-a800", 200, 3}, {"nvlink4", 450, 3}, {"pcie3", 16, 5},
    {"pcie4", 32, 5},         {"pcie5", 64, 5},    {"tcp", 3.125, 50},
    {"rdma", 25, 5},          {"shm", 20, 1},
};

DeviceType fromCatalog(const CatalogEntry &e) {
  DeviceType d;
  d.name = e.specName;
  d.memoryGiB = e.memoryGiB;
  d.defaultIntraLink = e.intraLink;
  const shoal::rt::DeviceSpec *spec = shoal::rt::findDevice(e.runtimeName);
  if (spec) {
    for (int p = 0; p < 4; ++p)
      d.peakTflops[p] = spec->peakTflops[p];
    d.bandwidthGBps = spec->bandwidthGBps;
  }
  return d;
}

/// A CPU "device" (one MPI rank): no datasheet applies; these are the
/// figures of one core of a current x86 server (AVX2 FMA at ~3 GHz) and are
/// meant to be calibrated (shoal-run --profile).
DeviceType cpuDevice() {
  DeviceType d;
  d.name = "CPU";
  d.peakTflops[0] = 0.1;
  d.memoryGiB = 16;
  d.bandwidthGBps = 20;
  d.defaultIntraLink = "shm";
  return d;
}

[[noreturn]] void fail(const std::string &file, const YAML::Node &n,
                       const std::string &msg) {
  shoal::yaml::fail(file, n, msg);
}

void checkKeys(const std::string &file, const YAML::Node &map,
               const std::set<std::string> &allowed, const char *what) {
  if (!map.IsMap())
    fail(file, map,
         fmt::format("{} must be a mapping{}, got {}", what,
                     std::string(what) == "peak_tflops"
                         ? " of precision to TFLOP/s, e.g. {fp32: 19.5}"
                         : "",
                     shoal::yaml::describe(map)));
  // The expected keys listed in the set's (sorted) order.
  std::vector<std::string> known(allowed.begin(), allowed.end());
  shoal::yaml::checkKeys(file, map, what, known, shoal::yaml::join(known));
}

/// A scalar as text, or an error at its line.
std::string scalarText(const std::string &file, const YAML::Node &n,
                       const std::string &what) {
  std::optional<std::string> text = shoal::yaml::scalar(n);
  if (!text)
    fail(file, n,
         fmt::format("{} must be a name, got {}", what,
                     shoal::yaml::describe(n)));
  return *text;
}

double number(const std::string &file, const YAML::Node &n,
              const std::string &what) {
  std::optional<double> v = shoal::yaml::as<double>(n);
  if (!v)
    fail(file, n, fmt::format("{} must be a number", what));
  return *v;
}

double positive(const std::string &file, const YAML::Node &n,
                const std::string &what) {
  double v = number(file, n, what);
  if (!(v > 0))
    fail(file, n, fmt::format("{} must be positive, got {}", what, v));
  return v;
}

int count(const std::string &file, const YAML::Node &n,
          const std::string &what) {
  double v = positive(file, n, what);
  // Compared as a double first: converting 1e300 to int is undefined.
  if (v > 1e6)
    fail(file, n, fmt::format("{} must be at most 1000000, got {}", what, v));
  if (v != static_cast<int>(v))
    fail(file, n, fmt::format("{} must be a whole number, got {}", what, v));
  return static_cast<int>(v);
}

/// A link given by `type` and/or explicit figures.
Link readLink(const std::string &file, const YAML::Node &n,
              const std::string &what, const Link *fallback) {
  checkKeys(
      file, n,
      {"type", "bandwidth_GBps", "bandwidth_Gbps", "latency_us", "transport"},
      what.c_str());
  Link link;
  if (fallback)
    link = *fallback;
  std::string type;
  if (n["type"])
    type = scalarText(file, n["type"], "type");
  else if (n["transport"])
    type = scalarText(file, n["transport"], "transport");
  if (!type.empty()) {
    const Link *known = findLinkType(type);
    if (!known)
      fail(file, n["type"] ? n["type"] : n["transport"],
           fmt::format("unknown link type '{}' (known: {})", type,
                       knownLinkTypes()));
    link = *known;
  }
  if (n["bandwidth_GBps"] && n["bandwidth_Gbps"])
    fail(file, n, "give bandwidth_GBps or bandwidth_Gbps, not both");
  if (n["bandwidth_GBps"])
    link.bandwidthGBps = positive(file, n["bandwidth_GBps"], "bandwidth_GBps");
  if (n["bandwidth_Gbps"])
    link.bandwidthGBps =
        positive(file, n["bandwidth_Gbps"], "bandwidth_Gbps") / 8;
  if (n["latency_us"]) {
    link.latencyUs = number(file, n["latency_us"], "latency_us");
    if (link.latencyUs < 0)
      fail(file, n["latency_us"], "latency_us must not be negative");
  }
  if (link.bandwidthGBps <= 0)
    fail(file, n, fmt::format("{} needs a type or a bandwidth", what));
  if (link.name.empty())
    link.name = fmt::format("{:g} GB/s", link.bandwidthGBps);
  return link;
}

DeviceType readDevice(const std::string &file, const YAML::Node &n,
                      int &countOut) {
  checkKeys(file, n,
            {"type", "count", "peak_tflops", "memory_GiB", "bandwidth_GBps",
             "matmul_half_rows", "copy_GBps"},
            "devices");
  if (!n["type"])
    fail(file, n, "devices need a 'type'");
  std::string type = scalarText(file, n["type"], "type");
  const DeviceType *known = findDeviceType(type);
  if (!known)
    fail(file, n["type"],
         fmt::format("unknown device type '{}' (known: {}); give its "
                     "peak_tflops, memory_GiB and bandwidth_GBps to use "
                     "another",
                     type, knownDeviceTypes()));
  DeviceType d = *known;
  countOut = n["count"] ? count(file, n["count"], "device count") : 1;
  if (auto peaks = n["peak_tflops"]) {
    checkKeys(file, peaks, {"fp32", "tf32", "bf16", "fp16"}, "peak_tflops");
    const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
    for (int p = 0; p < 4; ++p)
      if (peaks[names[p]])
        d.peakTflops[p] = positive(file, peaks[names[p]],
                                   std::string("peak_tflops.") + names[p]);
  }
  if (n["memory_GiB"])
    d.memoryGiB = positive(file, n["memory_GiB"], "memory_GiB");
  if (n["bandwidth_GBps"])
    d.bandwidthGBps = positive(file, n["bandwidth_GBps"], "bandwidth_GBps");
  if (n["matmul_half_rows"])
    d.matmulHalfRows =
        positive(file, n["matmul_half_rows"], "matmul_half_rows");
  if (n["copy_GBps"])
    d.copyGBps = positive(file, n["copy_GBps"], "copy_GBps");
  return d;
}

} // namespace

double DeviceType::peakFlops(Precision p) const {
  double t = peakTflops[static_cast<int>(p)];
  if (t <= 0 && p == Precision::BF16)
    t = peakTflops[static_cast<int>(Precision::FP16)];
  if (t <= 0)
    t = peakTflops[static_cast<int>(Precision::FP32)];
  return t * 1e12;
}

const DeviceType *shoal::planner::findDeviceType(const std::string &name) {
  static const std::vector<DeviceType> types = [] {
    std::vector<DeviceType> v;
    for (const CatalogEntry &e : kCatalog)
      v.push_back(fromCatalog(e));
    v.push_back(cpuDevice());
    return v;
  }();
  for (const DeviceType &t : types)
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string shoal::planner::knownDeviceTypes() {
  std::string s;
  for (const CatalogEntry &e : kCatalog)
    s += std::string(s.empty() ? "" : ", ") + e.specName;
  return s + ", CPU";
}

const Link *shoal::planner::findLinkType(const std::string &name) {
  for (const Link &l : kLinks)
    if (l.name == name)
      return &l;
  return nullptr;
}

std::string shoal::planner::knownLinkTypes() {
  std::string s;
  for (const Link &l : kLinks)
    s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

int Cluster::numNodes() const {
  int n = 0;
  for (const NodeGroup &g : groups)
    n += g.count;
  return n;
}

int Cluster::numDevices() const {
  int n = 0;
  for (const NodeGroup &g : groups)
    n += g.count * g.devicesPerNode;
  return n;
}

const NodeGroup &Cluster::locate(int rank, int &node) const {
  int r = rank;
  node = 0;
  for (const NodeGroup &g : groups) {
    int size = g.count * g.devicesPerNode;
    if (r >= 0 && r < size) {
      node += r / g.devicesPerNode;
      return g;
    }
    r -= size;
    node += g.count;
  }
  throw SpecError(fmt::format("rank {} is not among the cluster's {} devices",
                              rank, numDevices()));
}

int Cluster::nodeOf(int rank) const {
  int node;
  locate(rank, node);
  return node;
}

const NodeGroup &Cluster::groupOf(int rank) const {
  int node;
  return locate(rank, node);
}

Link Cluster::slowestLink(const std::vector<int> &ranks) const {
  std::set<int> nodes;
  for (int r : ranks)
    nodes.insert(nodeOf(r));
  if (nodes.size() > 1)
    return interNode;
  Link slowest;
  for (int r : ranks) {
    const Link &l = groupOf(r).intraNode;
    if (slowest.bandwidthGBps == 0 || l.bandwidthGBps < slowest.bandwidthGBps)
      slowest = l;
  }
  return slowest;
}

namespace {

Cluster readCluster(const std::string &text, const std::string &file) {
  YAML::Node root = shoal::yaml::load(file, text, "invalid YAML: ");
  if (!root.IsMap())
    throw SpecError(fmt::format("{}: expected a mapping with 'version', "
                                "'nodes' and 'links'",
                                file));
  checkKeys(file, root, {"version", "nodes", "links"}, "the cluster spec");
  if (!root["version"] || scalarText(file, root["version"], "version") != "1")
    fail(file, root["version"] ? root["version"] : root,
         "expected 'version: 1'");
  YAML::Node nodes = root["nodes"];
  if (!nodes || !nodes.IsSequence() || nodes.size() == 0)
    fail(file, nodes ? nodes : root, "'nodes' must be a non-empty list");
  YAML::Node links = root["links"];
  Link intraDefault;
  bool haveIntra = false;
  Cluster cluster;
  if (links) {
    checkKeys(file, links, {"intra_node", "inter_node"}, "links");
    if (links["intra_node"]) {
      intraDefault =
          readLink(file, links["intra_node"], "links.intra_node", nullptr);
      haveIntra = true;
    }
    if (links["inter_node"])
      cluster.interNode =
          readLink(file, links["inter_node"], "links.inter_node", nullptr);
  }
  for (const YAML::Node &n : nodes) {
    checkKeys(file, n, {"count", "devices"}, "a node group");
    if (!n["devices"])
      fail(file, n, "a node group needs 'devices'");
    NodeGroup g;
    g.count = n["count"] ? count(file, n["count"], "node count") : 1;
    g.device = readDevice(file, n["devices"], g.devicesPerNode);
    if (haveIntra) {
      g.intraNode = intraDefault;
    } else {
      const Link *l = findLinkType(g.device.defaultIntraLink);
      g.intraNode = l ? *l : Link{"pcie3", 16, 5};
    }
    cluster.groups.push_back(g);
  }
  if (cluster.numNodes() > 1 && cluster.interNode.bandwidthGBps <= 0)
    fail(file, links ? links : root,
         fmt::format("{} nodes need links.inter_node (a type such as tcp or "
                     "rdma, or bandwidth_Gbps and latency_us)",
                     cluster.numNodes()));
  return cluster;
}

} // namespace

Cluster shoal::planner::parseClusterSpecText(const std::string &text,
                                             const std::string &file) {
  try {
    return readCluster(text, file);
  } catch (const shoal::yaml::Error &e) {
    throw SpecError(e.what());
  }
}

Cluster shoal::planner::parseClusterSpec(const std::string &path) {
  std::string text;
  if (std::string e = readRegularFile(path, text, kMaxSpecBytes); !e.empty())
    throw SpecError(
        fmt::format("{}: cannot read the cluster spec: {}", path, e));
  return parseClusterSpecText(text, path);
}
