//===- Calibration.cpp - Device and link figures from profiles --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Profiles are JSON; yaml-cpp (which the planner already uses for cluster
// specs) reads JSON as the YAML subset it is, and gives line numbers for
// messages.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Calibration.h"
#include "shoal/Schema/OpTable.h"
#include "shoal/Support/Files.h"
#include "shoal/Support/Yaml.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

using namespace shoal::planner;
namespace rt = shoal::rt;

namespace {

const char *kPrecisionNames[] = {"fp32", "tf32", "bf16", "fp16"};

[[noreturn]] void fail(const std::string &file, const YAML::Node &n,
                       const std::string &msg) {
  shoal::yaml::fail(file, n, msg);
}

/// Reads the key `key` of the record `rec` (`what` names the record).
YAML::Node field(const std::string &file, const YAML::Node &rec,
                 const char *key, const std::string &what) {
  YAML::Node n = rec[key];
  if (!n.IsDefined() || n.IsNull())
    fail(file, rec, fmt::format("{} has no '{}'", what, key));
  return n;
}

double number(const std::string &file, const YAML::Node &rec, const char *key,
              const std::string &what) {
  YAML::Node n = field(file, rec, key, what);
  std::optional<double> parsed = shoal::yaml::as<double>(n);
  if (!parsed)
    fail(file, n, fmt::format("'{}' of {} must be a number", key, what));
  double v = *parsed;
  if (!std::isfinite(v) || v < 0)
    fail(file, n,
         fmt::format("'{}' of {} must be a non-negative number, got {}", key,
                     what, n.Scalar()));
  return v;
}

double optionalNumber(const std::string &file, const YAML::Node &rec,
                      const char *key, const std::string &what, double dflt) {
  if (!rec[key].IsDefined())
    return dflt;
  return number(file, rec, key, what);
}

std::string text(const std::string &file, const YAML::Node &rec,
                 const char *key, const std::string &what) {
  YAML::Node n = field(file, rec, key, what);
  std::optional<std::string> s = shoal::yaml::scalar(n);
  if (!s)
    fail(file, n, fmt::format("'{}' of {} must be a string", key, what));
  return *s;
}

YAML::Node list(const std::string &file, const YAML::Node &rec, const char *key,
                const std::string &what, bool required) {
  YAML::Node n = rec[key];
  if (!n.IsDefined() && !required)
    return YAML::Node(YAML::NodeType::Sequence);
  n = field(file, rec, key, what);
  if (!n.IsSequence())
    fail(file, n, fmt::format("'{}' of {} must be a list", key, what));
  return n;
}

/// Plan op kinds fitted at the rate of matrix products (Ops.def).
bool isMatMulClass(const std::string &k) {
  return rt::opKindHas(k, rt::kMatMulClass);
}

/// Ops whose time says nothing of a device's compute or memory rates:
/// communication, LocalSlice (a copy of a block) and Reshape (an alias).
bool isNotFitted(const std::string &k) {
  rt::OpKind kind;
  return rt::lookupOpKind(k, kind) &&
         (rt::opKindHas(kind, rt::kCommunicates | rt::kTransfer) ||
          kind == rt::OpKind::LocalSlice || kind == rt::OpKind::Reshape);
}

/// Device type names compare without case and punctuation ("h100-pcie"
/// matches "H100 PCIe").
std::string normalize(const std::string &name) {
  std::string out;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

/// Weighted least squares of t = a x + b z.
struct Lsq {
  double sxx = 0, sxz = 0, szz = 0, sxt = 0, szt = 0;
  int n = 0;
  void add(double x, double z, double t, double w) {
    sxx += w * x * x;
    sxz += w * x * z;
    szz += w * z * z;
    sxt += w * x * t;
    szt += w * z * t;
    ++n;
  }
  /// Both coefficients; false when the samples cannot tell them apart
  /// (every sample has the same z / x) or b comes out below 0, and then b
  /// is 0 and a is fitted alone.
  bool solve(double &a, double &b) const {
    double det = sxx * szz - sxz * sxz;
    if (det > 1e-9 * sxx * szz) {
      a = (sxt * szz - szt * sxz) / det;
      b = (sxx * szt - sxz * sxt) / det;
      if (b >= 0 && a > 0)
        return true;
    }
    b = 0;
    a = sxx > 0 ? sxt / sxx : 0;
    return false;
  }
};

std::string fmtRate(double gbps) { return fmt::format("{:.4g} GB/s", gbps); }

Profile readProfile(const std::string &textIn, const std::string &name) {
  YAML::Node root =
      shoal::yaml::load(name, textIn, "not a valid profile (JSON): ");
  const std::string kExpected =
      "expected the JSON that shoal-run --profile writes";
  if (!root.IsMap())
    throw SpecError(
        fmt::format("{}: not a shoal-run profile ({})", name, kExpected));
  YAML::Node format = root["format"];
  if (!format.IsDefined() || !format.IsScalar() ||
      format.Scalar() != "shoal-profile")
    fail(name, format.IsDefined() ? format : root,
         fmt::format("not a shoal-run profile (\"format\" must be "
                     "\"shoal-profile\"; {})",
                     kExpected));
  double version = number(name, root, "version", "the profile");
  if (version != 1)
    fail(name, root["version"],
         fmt::format("profile version {} is not supported (expected 1)",
                     root["version"].Scalar()));

  Profile p;
  p.path = name;
  p.device = text(name, root, "device", "the profile");
  p.worldSize = static_cast<int>(number(name, root, "world_size",
                                        "the "
                                        "profile"));
  std::string precision = root["precision"].IsDefined()
                              ? text(name, root, "precision", "the profile")
                              : "fp32";
  int pi = 0;
  while (pi < 4 && precision != kPrecisionNames[pi])
    ++pi;
  if (pi == 4)
    fail(name, root["precision"],
         fmt::format("unknown precision '{}' (expected fp32, tf32, bf16 or "
                     "fp16)",
                     precision));
  p.precision = static_cast<Precision>(pi);

  YAML::Node ranks = list(name, root, "ranks", "the profile", true);
  if (ranks.size() == 0)
    fail(name, ranks, "the profile has no ranks");
  // Collectives at the fastest rank: (program, op, micro-batch, group) ->
  // sample.
  std::map<std::tuple<int, int, int, int>, CommSample> collectives;
  for (const YAML::Node &r : ranks) {
    if (!r.IsMap())
      fail(name, r, "a rank record must be a JSON object");
    std::string rankName = r["rank"].IsDefined() && r["rank"].IsScalar()
                               ? fmt::format("rank {}", r["rank"].Scalar())
                               : std::string("a rank record");
    std::string device =
        r["device"].IsDefined() ? text(name, r, "device", rankName) : p.device;
    int program =
        static_cast<int>(optionalNumber(name, r, "program", rankName, 0));
    double copy = optionalNumber(name, r, "copy_GBps", rankName, 0);
    if (copy > 0)
      p.copyRates.emplace_back(device, copy);
    for (const YAML::Node &o : list(name, r, "ops", rankName, true)) {
      std::string what = "an op record of " + rankName;
      if (!o.IsMap())
        fail(name, o, what + " must be a JSON object");
      OpSample s;
      s.device = device;
      s.kind = text(name, o, "kind", what);
      s.flops = number(name, o, "flops", what);
      s.bytes = number(name, o, "bytes", what);
      s.rows = optionalNumber(name, o, "rows", what, 0);
      s.seconds = number(name, o, "seconds", what);
      p.ops.push_back(s);
    }
    for (const YAML::Node &c : list(name, r, "collectives", rankName, false)) {
      std::string what = "a collective record of " + rankName;
      if (!c.IsMap())
        fail(name, c, what + " must be a JSON object");
      CommSample s;
      s.device = device;
      s.kind = text(name, c, "kind", what);
      s.bytes = number(name, c, "bytes", what);
      s.groupSize = static_cast<int>(number(name, c, "group_size", what));
      s.nodes =
          static_cast<int>(optionalNumber(name, c, "group_nodes", what, 1));
      s.seconds = number(name, c, "seconds", what);
      int op = static_cast<int>(optionalNumber(name, c, "op", what, 0));
      int mb =
          static_cast<int>(optionalNumber(name, c, "micro_batch", what, 0));
      auto key = std::make_tuple(program, op, mb, s.groupSize);
      auto it = collectives.find(key);
      if (it == collectives.end() || s.seconds < it->second.seconds)
        collectives[key] = s;
    }
  }
  for (auto &entry : collectives)
    p.comms.push_back(entry.second);
  for (const YAML::Node &t :
       list(name, root, "transfers", "the profile", false)) {
    std::string what = "a transfer record";
    if (!t.IsMap())
      fail(name, t, what + " must be a JSON object");
    CommSample s;
    s.device = p.device;
    s.kind = "SendRecv";
    s.bytes = number(name, t, "bytes", what);
    s.groupSize = 2;
    s.nodes = static_cast<int>(optionalNumber(name, t, "nodes", what, 1));
    s.seconds = number(name, t, "seconds", what);
    p.comms.push_back(s);
  }
  return p;
}

} // namespace

Profile shoal::planner::parseProfile(const std::string &text,
                                     const std::string &name) {
  try {
    return readProfile(text, name);
  } catch (const shoal::yaml::Error &e) {
    throw SpecError(e.what());
  }
}

Profile shoal::planner::loadProfile(const std::string &path) {
  std::string text;
  // Profiles list every op of every rank: allow more than a spec.
  if (std::string e = readRegularFile(path, text, 64 * kMaxSpecBytes);
      !e.empty())
    throw SpecError(fmt::format("{}: cannot read the profile: {}", path, e));
  return parseProfile(text, path);
}

const DeviceFit *Calibration::find(const std::string &device) const {
  for (const DeviceFit &d : devices)
    if (normalize(d.device) == normalize(device))
      return &d;
  return nullptr;
}

namespace {

/// Adds a communication sample to a link fit: the ring formulas of the cost
/// model, t = x / bandwidth + z * latency.
void addLink(Lsq &fit, const CommSample &c) {
  double n = std::max(2, c.groupSize);
  double x = c.bytes, z = 1;
  if (c.kind != "SendRecv") {
    double rounds = c.kind == rt::opKindName(rt::OpKind::AllReduce) ? 2 : 1;
    x = rounds * (n - 1) / n * c.bytes;
    z = rounds * (n - 1);
  }
  fit.add(x, z, c.seconds, 1.0 / std::max(c.seconds, 1e-6));
}

/// Bandwidth (GB/s) and latency (us) from a link fit; false if the samples
/// give no positive bandwidth.
bool solveLink(const Lsq &fit, double &gbps, double &us, bool &latencyFitted) {
  double a = 0, b = 0;
  latencyFitted = fit.solve(a, b);
  if (!(a > 0))
    return false;
  gbps = 1.0 / a / 1e9;
  us = b * 1e6;
  return true;
}

} // namespace

Calibration shoal::planner::fitProfiles(const std::vector<Profile> &profiles) {
  Calibration cal;
  struct Fits {
    Precision precision = Precision::FP32;
    Lsq matmul, memory, link;
    std::vector<double> copyRates;
    std::set<double> rows;
    /// The highest bytes / seconds of a matrix product.
    double matmulBytesRate = 0;
  };
  std::map<std::string, Fits> byDevice;
  std::vector<std::string> order;
  Lsq inter;
  auto fitsOf = [&](const std::string &device, Precision p) -> Fits & {
    auto it = byDevice.find(device);
    if (it == byDevice.end()) {
      order.push_back(device);
      it = byDevice.emplace(device, Fits()).first;
      it->second.precision = p;
    }
    return it->second;
  };
  for (const Profile &p : profiles) {
    cal.sources.push_back(p.path);
    for (const OpSample &o : p.ops) {
      if (isNotFitted(o.kind))
        continue;
      Fits &f = fitsOf(o.device, p.precision);
      if (isMatMulClass(o.kind)) {
        // t = flops / P + (flops / m) * h / P; weights 1 / flops: a
        // timing's noise grows with its length.
        if (o.flops <= 0 || o.rows <= 0)
          continue;
        f.matmul.add(o.flops, o.flops / o.rows, o.seconds, 1.0 / o.flops);
        f.rows.insert(o.rows);
        if (o.seconds > 0)
          f.matmulBytesRate = std::max(f.matmulBytesRate, o.bytes / o.seconds);
      } else if (o.bytes > 0) {
        // t = bytes / bandwidth, weights 1 / bytes.
        f.memory.add(o.bytes, 0, o.seconds, 1.0 / o.bytes);
      }
    }
    for (const auto &[device, rate] : p.copyRates)
      fitsOf(device, p.precision).copyRates.push_back(rate);
    for (const CommSample &c : p.comms) {
      if (c.bytes <= 0)
        continue;
      if (c.nodes <= 1)
        addLink(fitsOf(c.device, p.precision).link, c);
      else if (c.nodes == c.groupSize)
        addLink(inter, c);
      // Groups with several ranks on each of several nodes run
      // hierarchically over both links: not fitted.
    }
  }
  for (const std::string &device : order) {
    const Fits &f = byDevice[device];
    DeviceFit d;
    d.device = device;
    d.precision = f.precision;
    double a = 0, b = 0;
    if (f.matmul.n > 0) {
      bool curve = f.matmul.solve(a, b);
      if (a > 0) {
        d.matmul = true;
        d.peakTflops = 1.0 / a / 1e12;
        d.halfRows = b / a;
        d.matmulSamples = f.matmul.n;
        if (!curve)
          cal.notes.push_back(fmt::format(
              "{}: no size curve fitted (half rows 0): {}", device,
              f.rows.size() == 1
                  ? fmt::format("matrix products of {} rows only",
                                *f.rows.begin())
                  : std::string("the fit put the half rows below 0")));
      }
    }
    if (f.memory.n > 0) {
      f.memory.solve(a, b);
      if (a > 0) {
        d.memory = true;
        d.bandwidthGBps = 1.0 / a / 1e9;
        d.memorySamples = f.memory.n;
        // A matrix product with a fitted size curve is compute time alone
        // in the cost model; without one it takes the slower of compute
        // and memory, so a bandwidth under what a measured product moved
        // would make it memory bound, slower than measured.
        double floor = f.matmulBytesRate / 1e9;
        if (d.matmul && d.halfRows <= 0 && floor > d.bandwidthGBps) {
          cal.notes.push_back(fmt::format(
              "{}: memory bandwidth raised from {} (other ops) to {}, the "
              "most a measured matrix product moved, so that none is memory "
              "bound in the cost model (one bandwidth for every op class)",
              device, fmtRate(d.bandwidthGBps), fmtRate(floor)));
          d.bandwidthGBps = floor;
        }
      }
    }
    if (f.link.n > 0) {
      bool latency = false;
      if (solveLink(f.link, d.linkGBps, d.linkLatencyUs, latency)) {
        d.link = true;
        d.linkSamples = f.link.n;
        if (!latency)
          cal.notes.push_back(fmt::format(
              "{}: intra-node latency not fitted (0): the times are of one "
              "size only or the fit put it below 0",
              device));
      } else {
        cal.notes.push_back(fmt::format("{}: the intra-node communication "
                                        "times give no positive bandwidth",
                                        device));
      }
    }
    if (!f.copyRates.empty()) {
      std::vector<double> r = f.copyRates;
      std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
      d.copy = true;
      d.copyGBps = r[r.size() / 2];
      d.copySamples = static_cast<int>(r.size());
    }
    if (d.matmul || d.memory || d.link || d.copy)
      cal.devices.push_back(d);
  }
  if (inter.n > 0) {
    bool latency = false;
    if (solveLink(inter, cal.interNode.bandwidthGBps, cal.interNode.latencyUs,
                  latency)) {
      cal.interNode.fitted = true;
      cal.interNode.samples = inter.n;
      if (!latency)
        cal.notes.push_back("inter-node latency not fitted (0): the times "
                            "are of one size only or the fit put it below 0");
    }
  }
  if (cal.devices.empty() && !cal.interNode.fitted) {
    std::string files;
    for (const std::string &s : cal.sources)
      files += (files.empty() ? "" : ", ") + s;
    throw SpecError(fmt::format("{}: no op or communication times to fit (a "
                                "profile needs ops with FLOPs or bytes, or "
                                "collectives or transfers)",
                                files.empty() ? "calibration" : files));
  }
  return cal;
}

std::vector<std::string>
shoal::planner::applyCalibration(const Calibration &cal, Cluster &cluster) {
  std::vector<std::string> lines;
  std::set<std::string> done;
  bool matched = false;
  for (NodeGroup &g : cluster.groups) {
    const DeviceFit *fit = cal.find(g.device.name);
    if (!fit)
      continue;
    matched = true;
    bool first = done.insert(normalize(g.device.name)).second;
    int p = static_cast<int>(fit->precision);
    if (fit->matmul) {
      if (first)
        lines.push_back(fmt::format(
            "{}: matrix products {:.4g} TFLOP/s {} (was {:.4g}), half of it "
            "at {:.1f} rows (was {:.1f}), from {} ops",
            g.device.name, fit->peakTflops, kPrecisionNames[p],
            g.device.peakTflops[p], fit->halfRows, g.device.matmulHalfRows,
            fit->matmulSamples));
      g.device.peakTflops[p] = fit->peakTflops;
      g.device.matmulHalfRows = fit->halfRows;
    }
    if (fit->memory) {
      if (first)
        lines.push_back(
            fmt::format("{}: memory bandwidth {} (was {}), from {} ops",
                        g.device.name, fmtRate(fit->bandwidthGBps),
                        fmtRate(g.device.bandwidthGBps), fit->memorySamples));
      g.device.bandwidthGBps = fit->bandwidthGBps;
    }
    if (fit->copy) {
      if (first)
        lines.push_back(
            fmt::format("{}: copies {} (was {}), from {} ranks", g.device.name,
                        fmtRate(fit->copyGBps),
                        fmtRate(g.device.copyGBps > 0 ? g.device.copyGBps
                                                      : g.device.bandwidthGBps),
                        fit->copySamples));
      g.device.copyGBps = fit->copyGBps;
    }
    if (fit->link) {
      if (first)
        lines.push_back(fmt::format(
            "{}: intra-node link {}, {:.2f} us (was {}: {}, {:.2f} us), from "
            "{} collectives and transfers",
            g.device.name, fmtRate(fit->linkGBps), fit->linkLatencyUs,
            g.intraNode.name, fmtRate(g.intraNode.bandwidthGBps),
            g.intraNode.latencyUs, fit->linkSamples));
      g.intraNode = {"calibrated", fit->linkGBps, fit->linkLatencyUs};
    }
  }
  if (!matched && !cal.devices.empty()) {
    std::string measured, have;
    for (const DeviceFit &d : cal.devices)
      measured += (measured.empty() ? "" : ", ") + d.device;
    for (const NodeGroup &g : cluster.groups)
      have += (have.empty() ? "" : ", ") + g.device.name;
    std::string files;
    for (const std::string &s : cal.sources)
      files += (files.empty() ? "" : ", ") + s;
    throw SpecError(fmt::format("{}: the profiles measured {} devices, but "
                                "the cluster has none (its devices: {})",
                                files, measured, have));
  }
  if (cal.interNode.fitted) {
    lines.push_back(fmt::format(
        "inter-node link {}, {:.2f} us (was {}, {:.2f} us), from {} "
        "collectives and transfers",
        fmtRate(cal.interNode.bandwidthGBps), cal.interNode.latencyUs,
        fmtRate(cluster.interNode.bandwidthGBps), cluster.interNode.latencyUs,
        cal.interNode.samples));
    cluster.interNode = {"calibrated", cal.interNode.bandwidthGBps,
                         cal.interNode.latencyUs};
  }
  for (const std::string &n : cal.notes)
    lines.push_back("note: " + n);
  return lines;
}
