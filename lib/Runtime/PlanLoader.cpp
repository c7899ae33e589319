//===- PlanLoader.cpp - Reading and validating plans ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "PlanLoader.h"

#include "Npy.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace shoal;
using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

class PlanChecker {
public:
  PlanChecker(const plan::Plan &plan, const std::string &path,
              int64_t worldSize)
      : plan(plan), path(path), worldSize(worldSize) {}

  LoadedPlan run();

private:
  [[noreturn]] void fail(const std::string &msg) const {
    throw Error(fmt::format("plan {}: {}", path, msg));
  }

  void checkMesh();
  void checkSources();
  TensorType convertType(const plan::TensorType &t, const std::string &what);
  ShardSpec convertSharding(const plan::Sharding &s, const Shape &global,
                            const std::string &what);
  void checkProgram(const plan::Program &p, int index);

  const plan::Plan &plan;
  std::string path;
  int64_t worldSize;
  LoadedPlan out;
};

LoadedPlan PlanChecker::run() {
  out.path = path;
  if (plan.magic() != "shoal.plan")
    fail(fmt::format("magic is '{}', expected 'shoal.plan' (is this a shoal "
                     "plan?)",
                     plan.magic()));
  if (plan.format_version() != 1)
    fail(fmt::format("format_version is {}, this runtime reads version 1",
                     plan.format_version()));
  out.defaultCuda = plan.default_device() == plan::CUDA;
  checkMesh();
  if (out.mesh.worldSize() != worldSize)
    throw Error(fmt::format("plan {} is for a world of {} ranks, but this "
                            "run has {} (start it with mpirun -np {})",
                            path, out.mesh.worldSize(), worldSize,
                            out.mesh.worldSize()));
  checkSources();
  if (plan.programs_size() == 0)
    fail("has no program");
  if (plan.programs_size() > 1)
    fail(fmt::format("has {} programs; this runtime runs plans with one SPMD "
                     "program that every rank executes",
                     plan.programs_size()));
  checkProgram(plan.programs(0), 0);
  return std::move(out);
}

void PlanChecker::checkMesh() {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::set<std::string> seen;
  int64_t world = 1;
  for (int i = 0; i < plan.mesh().axes_size(); ++i) {
    const plan::MeshAxis &axis = plan.mesh().axes(i);
    if (axis.name().empty())
      fail(fmt::format("mesh axis #{} has no name", i));
    if (!seen.insert(axis.name()).second)
      fail(fmt::format("mesh axis '{}' appears twice", axis.name()));
    if (axis.size() < 1)
      fail(fmt::format("mesh axis '{}' has size {}, must be >= 1", axis.name(),
                       axis.size()));
    world *= axis.size();
    if (world > (int64_t(1) << 30))
      fail("the mesh has more than 2^30 ranks");
    names.push_back(axis.name());
    sizes.push_back(axis.size());
  }
  out.mesh = Mesh(names, sizes);
}

void PlanChecker::checkSources() {
  fs::path dir = fs::path(path).parent_path();
  for (int i = 0; i < plan.sources_size(); ++i) {
    const plan::WeightSource &src = plan.sources(i);
    if (src.kind() != plan::WeightSource::ONNX)
      fail(fmt::format("weight source #{} ('{}') has kind {}; only ONNX is "
                       "supported",
                       i, src.path(),
                       plan::WeightSource::Kind_Name(src.kind())));
    if (src.path().empty())
      fail(fmt::format("weight source #{} has no path", i));
    fs::path p(src.path());
    if (p.is_relative())
      p = dir / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      fail(fmt::format("weight source #{} '{}' not found (looked for {})", i,
                       src.path(), p.string()));
    out.sourcePaths.push_back(p.string());
  }
}

TensorType PlanChecker::convertType(const plan::TensorType &t,
                                    const std::string &what) {
  TensorType type;
  switch (t.dtype()) {
  case plan::F32:
    type.dtype = DType::F32;
    break;
  case plan::I64:
    type.dtype = DType::I64;
    break;
  case plan::I32:
    type.dtype = DType::I32;
    break;
  case plan::BOOL:
    type.dtype = DType::Bool;
    break;
  default:
    fail(fmt::format("{} has dtype {}, which this runtime does not support "
                     "(supported: F32, I64, I32, BOOL)",
                     what, plan::DType_Name(t.dtype())));
  }
  uint64_t bytes = dtypeSize(type.dtype);
  for (int64_t d : t.shape()) {
    if (d < 0)
      fail(fmt::format("{} has a negative dimension in shape [{}]", what,
                       fmt::join(t.shape(), ", ")));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > (uint64_t(1) << 62))
      fail(fmt::format("{} has shape [{}], which is too large", what,
                       fmt::join(t.shape(), ", ")));
    type.shape.push_back(d);
  }
  return type;
}

ShardSpec PlanChecker::convertSharding(const plan::Sharding &s,
                                       const Shape &global,
                                       const std::string &what) {
  ShardSpec spec;
  if (s.dims_size() == 0)
    return spec;
  if (s.dims_size() != static_cast<int>(global.size()))
    fail(fmt::format("{}: the sharding has {} dimensions but the global "
                     "shape {} has {}",
                     what, s.dims_size(), formatShape(global), global.size()));
  std::set<int> used;
  for (int d = 0; d < s.dims_size(); ++d) {
    std::vector<int> axes;
    for (const std::string &name : s.dims(d).axes()) {
      int a = out.mesh.findAxis(name);
      if (a < 0)
        fail(fmt::format("{}: dimension {} is sharded over mesh axis '{}', "
                         "which is not in the mesh ({})",
                         what, d, name, out.mesh.str()));
      if (!used.insert(a).second)
        fail(fmt::format("{}: mesh axis '{}' shards more than one "
                         "dimension (or one twice)",
                         what, name));
      axes.push_back(a);
    }
    int64_t blocks = out.mesh.numBlocks(axes);
    if (global[d] % blocks != 0)
      fail(fmt::format("{}: dimension {} of size {} does not split evenly "
                       "into {} blocks over mesh axes [{}]",
                       what, d, global[d], blocks,
                       fmt::join(s.dims(d).axes(), ", ")));
    spec.dims.push_back(std::move(axes));
  }
  return spec;
}

void PlanChecker::checkProgram(const plan::Program &p, int index) {
  std::string where = p.role().empty()
                          ? fmt::format("program #{}", index)
                          : fmt::format("program #{} '{}'", index, p.role());
  // Ranks: empty means all; otherwise every rank exactly once.
  if (p.ranks_size() != 0) {
    std::set<int> ranks;
    for (int r : p.ranks()) {
      if (r < 0 || r >= worldSize)
        fail(fmt::format("{}: rank {} is out of range for a world of {}", where,
                         r, worldSize));
      if (!ranks.insert(r).second)
        fail(fmt::format("{}: rank {} is listed twice", where, r));
    }
    if (static_cast<int64_t>(ranks.size()) != worldSize)
      fail(fmt::format("{}: runs on {} of the {} ranks; this runtime needs "
                       "every rank to run it",
                       where, ranks.size(), worldSize));
  }
  out.role = p.role();
  int numValues = p.values_size();
  out.values.clear();
  for (int v = 0; v < numValues; ++v)
    out.values.push_back(
        convertType(p.values(v), fmt::format("{}: value {}", where, v)));

  // Each value is defined once, before it is read.
  std::vector<std::string> definedBy(numValues);
  auto define = [&](int v, const std::string &who) {
    if (v < 0 || v >= numValues)
      fail(fmt::format("{}: {} refers to value {}, out of range (the "
                       "program has {} values)",
                       where, who, v, numValues));
    if (!definedBy[v].empty())
      fail(fmt::format("{}: value {} is defined by {} and again by {}", where,
                       v, definedBy[v], who));
    definedBy[v] = who;
  };
  auto checkLocal = [&](int v, const TensorType &global, const ShardSpec &spec,
                        const std::string &who) {
    TensorType local{global.dtype, localShape(global.shape, spec, out.mesh)};
    if (out.values[v] != local)
      fail(fmt::format("{}: {}: value {} is declared {}, but global type {} "
                       "sharded {} over mesh ({}) gives {}",
                       where, who, v, out.values[v].str(), global.str(),
                       spec.str(out.mesh), out.mesh.str(), local.str()));
  };

  std::set<std::string> inputFiles, outputFiles;
  auto checkPort = [&](const plan::Port &port, bool isInput) -> PortInfo {
    std::string who =
        fmt::format("{} '{}'", isInput ? "input" : "output", port.name());
    if (port.name().empty())
      fail(fmt::format("{}: a program {} has no name", where,
                       isInput ? "input" : "output"));
    std::string file = sanitizeName(port.name());
    if (!(isInput ? inputFiles : outputFiles).insert(file).second)
      fail(fmt::format("{}: two {}s map to the same file name {}.npy", where,
                       isInput ? "input" : "output", file));
    PortInfo info;
    info.name = port.name();
    info.value = port.value();
    if (isInput)
      define(port.value(), who);
    else if (port.value() < 0 || port.value() >= numValues)
      fail(fmt::format("{}: {} refers to value {}, out of range (the "
                       "program has {} values)",
                       where, who, port.value(), numValues));
    info.globalType =
        convertType(port.global_type(), fmt::format("{}: {}", where, who));
    info.sharding = convertSharding(port.sharding(), info.globalType.shape,
                                    fmt::format("{}: {}", where, who));
    checkLocal(port.value(), info.globalType, info.sharding, who);
    return info;
  };
  for (const plan::Port &port : p.inputs())
    out.inputs.push_back(checkPort(port, true));

  for (int i = 0; i < p.weights_size(); ++i) {
    const plan::Weight &w = p.weights(i);
    std::string who = fmt::format("weight '{}'", w.initializer());
    if (w.initializer().empty())
      fail(fmt::format("{}: weight #{} names no initializer", where, i));
    define(w.value(), who);
    if (w.source() < 0 || w.source() >= plan.sources_size())
      fail(fmt::format("{}: {} uses weight source #{}, but the plan has {} "
                       "sources",
                       where, who, w.source(), plan.sources_size()));
    WeightInfo info;
    info.value = w.value();
    info.initializer = w.initializer();
    info.source = w.source();
    info.globalType =
        convertType(w.global_type(), fmt::format("{}: {}", where, who));
    info.sharding = convertSharding(w.sharding(), info.globalType.shape,
                                    fmt::format("{}: {}", where, who));
    checkLocal(w.value(), info.globalType, info.sharding, who);
    out.weights.push_back(std::move(info));
  }

  for (int i = 0; i < p.constants_size(); ++i) {
    const plan::Constant &c = p.constants(i);
    std::string who = fmt::format("constant #{}", i);
    define(c.value(), who);
    std::size_t expected = out.values[c.value()].numBytes();
    if (c.data().size() != expected)
      fail(fmt::format("{}: {} (value {} of type {}) has {} bytes of data, "
                       "expected {}",
                       where, who, c.value(), out.values[c.value()].str(),
                       c.data().size(), expected));
    out.constants.push_back({c.value(), c.data()});
  }

  out.lastUse.assign(numValues, -1);
  std::set<std::vector<int>> seenAxes;
  for (int i = 0; i < p.ops_size(); ++i) {
    const plan::Op &op = p.ops(i);
    std::string who =
        op.name().empty()
            ? fmt::format("op #{} ({})", i, op.kind())
            : fmt::format("op #{} '{}' ({})", i, op.name(), op.kind());
    OpInfo info;
    try {
      info = checkOp(op, i, out.values, out.mesh);
    } catch (const Error &e) {
      fail(fmt::format("{}: {}: {}", where, who, e.what()));
    }
    for (std::size_t k = 0; k < info.inputs.size(); ++k) {
      int v = info.inputs[k];
      if (v < 0)
        continue;
      if (definedBy[v].empty())
        fail(fmt::format("{}: {}: input #{} (value {}) is read before "
                         "anything defines it",
                         where, who, k, v));
      out.lastUse[v] = i;
    }
    for (int v : info.outputs)
      if (v >= 0)
        define(v, who);
    if (info.isCollective() && info.kind != OpKind::LocalSlice &&
        seenAxes.insert(info.attrs.meshAxes).second)
      out.collectiveAxes.push_back(info.attrs.meshAxes);
    out.ops.push_back(std::move(info));
  }

  for (const plan::Port &port : p.outputs()) {
    PortInfo info = checkPort(port, false);
    if (definedBy[info.value].empty())
      fail(fmt::format("{}: output '{}' is value {}, which nothing defines",
                       where, info.name, info.value));
    out.lastUse[info.value] = LoadedPlan::kKeepAlive;
    out.outputs.push_back(std::move(info));
  }
}

} // namespace

LoadedPlan shoal::rt::checkPlan(const plan::Plan &plan, const std::string &path,
                                int64_t worldSize) {
  return PlanChecker(plan, path, worldSize).run();
}

LoadedPlan shoal::rt::loadPlan(const std::string &path, int64_t worldSize) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(fmt::format("plan {} not found", path));
  if (!fs::is_regular_file(path, ec))
    throw Error(fmt::format("plan {} is not a regular file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(
        fmt::format("cannot open plan {}: {}", path, std::strerror(errno)));
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    throw Error(fmt::format("cannot read plan {}", path));
  std::string bytes = buf.str();
  plan::Plan plan;
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX) ||
      !plan.ParseFromString(bytes))
    throw Error(fmt::format("plan {} is not a valid shoal plan (it does not "
                            "parse as a shoal.plan.Plan message)",
                            path));
  return checkPlan(plan, path, worldSize);
}
