//===- PlanLoader.cpp - Reading plans ---------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Reading a plan and converting it into a LoadedPlan; the checks of its
// programs are PlanCheck.cpp's (PlanChecker.h).
//
//===----------------------------------------------------------------------===//

#include "PlanLoader.h"
#include "PlanChecker.h"

#include "Npy.h"
#include "shoal/Schema/Fingerprint.h"

#include "plan.pb.h"
#include "shoal/Support/Files.h"

#include <cmath>
#include <fmt/format.h>

#include <algorithm>
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

LoadedPlan PlanChecker::run() {
  out.path = path;
  if (plan.magic() != "shoal.plan")
    fail(fmt::format("magic is '{}', expected 'shoal.plan' (is this a shoal "
                     "plan?)",
                     plan.magic()));
  if (plan.format_version() != 1 && plan.format_version() != 2)
    fail(fmt::format("format_version is {}, this runtime reads versions 1 "
                     "and 2",
                     plan.format_version()));
  out.formatVersion = static_cast<int>(plan.format_version());
  if (!plan.content_sha256().empty() &&
      planContentSha256(plan) != plan.content_sha256())
    fail("its contents do not match the fingerprint shoal-compile recorded "
         "(Plan.content_sha256): it was edited or damaged after it was "
         "compiled; compile it again");
  out.contentSha256 = plan.content_sha256().empty() ? planContentSha256(plan)
                                                    : plan.content_sha256();
  out.defaultCuda = plan.default_device() == plan::CUDA;
  worldMesh = convertMesh(plan.mesh(), "", false);
  if (worldMesh.worldSize() != worldSize)
    throw Error(fmt::format("plan {} is for a world of {} ranks, but this "
                            "run has {} (start it with mpirun -np {})",
                            path, worldMesh.worldSize(), worldSize,
                            worldMesh.worldSize()));
  checkSources();
  if (plan.programs_size() == 0)
    fail("has no program");
  if (plan.has_pipeline()) {
    const plan::Pipeline &pl = plan.pipeline();
    if (pl.stages() < 0 || pl.micro_batches() < 0 || pl.chunks() < 0)
      fail(fmt::format("the pipeline has {} stages, {} micro-batches and {} "
                       "chunks; none may be negative",
                       pl.stages(), pl.micro_batches(), pl.chunks()));
    out.pipeline.present = true;
    out.pipeline.schedule = pl.schedule();
    out.pipeline.stages = std::max(1, pl.stages());
    out.pipeline.microBatches = std::max(1, pl.micro_batches());
    out.pipeline.chunks = std::max(1, pl.chunks());
  }
  if (out.formatVersion == 1) {
    if (plan.programs_size() > 1)
      fail(fmt::format("has {} programs; format version 1 plans have one "
                       "SPMD program that every rank executes",
                       plan.programs_size()));
    out.mesh = worldMesh;
    for (int64_t r = 0; r < worldSize; ++r)
      out.programRanks.push_back(r);
    out.meshRank = worldRank;
    checkProgram(plan.programs(0), 0);
    checkTraining();
    return std::move(out);
  }
  int mine = checkPrograms();
  out.program = mine;
  out.numPrograms = plan.programs_size();
  out.mesh = meshes[mine];
  out.programRanks = ranks[mine];
  out.meshRank = std::find(ranks[mine].begin(), ranks[mine].end(), worldRank) -
                 ranks[mine].begin();
  const plan::Program &p = plan.programs(mine);
  out.stage = p.stage();
  out.placement = {p.placement().offset(), p.placement().stride()};
  checkProgram(p, mine);
  checkTraining();
  return std::move(out);
}

std::string PlanChecker::programName(int index) const {
  const std::string &role = plan.programs(index).role();
  return role.empty() ? fmt::format("program #{}", index)
                      : fmt::format("program #{} '{}'", index, role);
}

Mesh PlanChecker::convertMesh(const plan::Mesh &m, const std::string &prefix,
                              bool v2) {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::set<std::string> seen;
  int64_t world = 1;
  for (int i = 0; i < m.axes_size(); ++i) {
    const plan::MeshAxis &axis = m.axes(i);
    if (axis.name().empty())
      fail(fmt::format("{}mesh axis #{} has no name", prefix, i));
    if (!seen.insert(axis.name()).second)
      fail(fmt::format("{}mesh axis '{}' appears twice", prefix, axis.name()));
    if (axis.size() < 1)
      fail(fmt::format("{}mesh axis '{}' has size {}, must be >= 1", prefix,
                       axis.name(), axis.size()));
    world *= axis.size();
    if (world > (int64_t(1) << 30))
      fail(fmt::format("{}the mesh has more than 2^30 ranks", prefix));
    names.push_back(axis.name());
    sizes.push_back(axis.size());
  }
  return Mesh(names, sizes, v2);
}

std::vector<int64_t> PlanChecker::convertPlacement(const plan::Placement &p,
                                                   const Mesh &mesh,
                                                   const std::string &what) {
  if (p.offset() < 0 || p.stride() < 0)
    fail(fmt::format("{}: placement offset {} and stride {} must not be "
                     "negative",
                     what, p.offset(), p.stride()));
  if (p.offset() >= worldSize || p.stride() > worldSize)
    fail(fmt::format("{}: placement (offset {}, stride {}) does not fit in "
                     "the world of {} ranks",
                     what, p.offset(), p.stride(), worldSize));
  std::vector<int64_t> result = placeRanks(mesh, {p.offset(), p.stride()});
  std::map<int64_t, int64_t> seen;
  for (std::size_t i = 0; i < result.size(); ++i) {
    int64_t r = result[i];
    if (r < 0 || r >= worldSize)
      fail(fmt::format("{}: placement (offset {}, stride {}) puts mesh rank "
                       "{} on world rank {}, outside the world of {} ranks",
                       what, p.offset(), p.stride(), i, r, worldSize));
    auto [it, inserted] = seen.emplace(r, static_cast<int64_t>(i));
    if (!inserted)
      fail(fmt::format("{}: placement (offset {}, stride {}) puts mesh ranks "
                       "{} and {} both on world rank {}",
                       what, p.offset(), p.stride(), it->second, i, r));
  }
  return result;
}

TransferInfo PlanChecker::convertTransfer(const plan::Transfer &t,
                                          const std::string &what) {
  TransferInfo info;
  info.id = t.id();
  if (t.id() < 0 || t.id() > kMaxTransferId)
    fail(fmt::format("{}: transfer id {} is out of range [0, {}]", what, t.id(),
                     kMaxTransferId));
  info.globalType = convertType(t.global_type(),
                                fmt::format("{}: transfer {}", what, t.id()));
  auto side = [&](const plan::Layout &l, const char *name) {
    std::string who = fmt::format("{}: transfer {} {}", what, t.id(), name);
    Layout layout;
    layout.mesh = convertMesh(l.mesh(), who + ": ", true);
    layout.sharding =
        convertSharding(l.sharding(), info.globalType.shape, layout.mesh, who);
    int mb = layout.mesh.microBatchAxis();
    if (mb >= 0 && layout.sharding.uses(mb))
      fail(fmt::format("{}: the sharding names the micro-batch axis '{}'; a "
                       "transfer moves one micro-batch",
                       who, kMicroBatchAxis));
    convertPlacement(l.placement(), layout.mesh, who);
    layout.placement = {l.placement().offset(), l.placement().stride()};
    return layout;
  };
  info.src = side(t.src(), "source");
  info.dst = side(t.dst(), "destination");
  return info;
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
  case plan::F16:
    type.dtype = DType::F16;
    break;
  case plan::BF16:
    type.dtype = DType::BF16;
    break;
  case plan::F64:
    type.dtype = DType::F64;
    break;
  case plan::I8:
    type.dtype = DType::I8;
    break;
  case plan::U8:
    type.dtype = DType::U8;
    break;
  default:
    fail(fmt::format("{} has dtype {}, which this runtime does not support "
                     "(supported: F32, F64, F16, BF16, I64, I32, I8, U8, "
                     "BOOL)",
                     what, plan::DType_Name(t.dtype())));
  }
  for (int64_t d : t.shape()) {
    if (d < 0)
      fail(fmt::format("{} has a negative dimension in shape [{}]", what,
                       fmt::join(t.shape(), ", ")));
    type.shape.push_back(d);
  }
  uint64_t bytes = 0;
  if (!checkedByteSize(type.dtype, type.shape, bytes))
    fail(fmt::format("{} has shape [{}], which is too large", what,
                     fmt::join(t.shape(), ", ")));
  return type;
}

ShardSpec PlanChecker::convertSharding(const plan::Sharding &s,
                                       const Shape &global, const Mesh &mesh,
                                       const std::string &what,
                                       bool allowUneven) {
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
      int a = mesh.findAxis(name);
      if (a < 0)
        fail(fmt::format("{}: dimension {} is sharded over mesh axis '{}', "
                         "which is not in the mesh ({})",
                         what, d, name, mesh.str()));
      if (!used.insert(a).second)
        fail(fmt::format("{}: mesh axis '{}' shards more than one "
                         "dimension (or one twice)",
                         what, name));
      axes.push_back(a);
    }
    int64_t blocks = mesh.numBlocks(axes);
    if (global[d] % blocks != 0 && !allowUneven)
      fail(fmt::format("{}: dimension {} of size {} does not split evenly "
                       "into {} blocks over mesh axes [{}]",
                       what, d, global[d], blocks,
                       fmt::join(s.dims(d).axes(), ", ")));
    spec.dims.push_back(std::move(axes));
  }
  return spec;
}

std::string shoal::rt::weightBufferKey(const WeightInfo &w, const Mesh &mesh) {
  return fmt::format("{}\n{}\n{}", w.initializer, w.globalType.str(),
                     w.sharding.str(mesh));
}

LoadedPlan shoal::rt::checkPlan(const plan::Plan &plan, const std::string &path,
                                int64_t worldSize, int64_t worldRank,
                                bool predictOnly) {
  return PlanChecker(plan, path, worldSize, worldRank, predictOnly).run();
}

LoadedPlan shoal::rt::loadPlan(const std::string &path, int64_t worldSize,
                               int64_t worldRank) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(fmt::format("plan {} not found", path));
  // Checked on the open descriptor: a FIFO or device does not hang it.
  std::string bytes;
  if (std::string e = readRegularFile(path, bytes, INT32_MAX); !e.empty())
    throw Error(fmt::format("cannot read plan {}: {}", path, e));
  plan::Plan plan;
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX) ||
      !plan.ParseFromString(bytes))
    throw Error(fmt::format("plan {} is not a valid shoal plan (it does not "
                            "parse as a shoal.plan.Plan message)",
                            path));
  return checkPlan(plan, path, worldSize, worldRank);
}
