//===- PlanCheck.cpp - Checking a plan's programs --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The checks of a plan's programs, placements, tasks, schedules, shares
// and training parts, made while PlanLoader.cpp converts it.
//
//===----------------------------------------------------------------------===//

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

void PlanChecker::checkTraining() {
  if (!plan.has_training())
    return;
  const plan::Training &t = plan.training();
  TrainingInfo &info = out.training;
  info.present = true;
  info.loss = t.loss();
  info.labels = t.labels();
  info.optimizer = t.optimizer();
  if (t.has_grad_bucket_mb()) {
    info.gradBucketMb = t.grad_bucket_mb();
    if (!(info.gradBucketMb >= 0) || !std::isfinite(info.gradBucketMb))
      fail(fmt::format("Plan.training.grad_bucket_mb is {}; expected a "
                       "number >= 0 (MiB)",
                       info.gradBucketMb));
  }
  if (!t.precision().empty())
    info.precision = t.precision();
  if (info.precision != "fp32" && info.precision != "bf16" &&
      info.precision != "fp16")
    fail(fmt::format("Plan.training.precision is '{}'; expected fp32, bf16 "
                     "or fp16",
                     info.precision));
  if (t.has_loss_scale()) {
    const plan::LossScale &ls = t.loss_scale();
    TrainingInfo::LossScale &o = info.lossScale;
    o.present = true;
    o.initial = ls.initial();
    o.growthInterval = ls.growth_interval();
    o.growthFactor = ls.growth_factor();
    o.backoffFactor = ls.backoff_factor();
    o.min = ls.min();
    if (!(o.initial > 0) || !std::isfinite(o.initial) || !(o.min > 0) ||
        o.min > o.initial || !(o.growthFactor >= 1) ||
        !std::isfinite(o.growthFactor) || !(o.backoffFactor > 0) ||
        !(o.backoffFactor < 1) || o.growthInterval < 1)
      fail(fmt::format("Plan.training.loss_scale is {{initial {}, min {}, "
                       "growth_factor {}, backoff_factor {}, growth_interval "
                       "{}}}; expected 0 < min <= initial (finite), "
                       "growth_factor >= 1, 0 < backoff_factor < 1 and "
                       "growth_interval >= 1",
                       o.initial, o.min, o.growthFactor, o.backoffFactor,
                       o.growthInterval));
  }
  if (t.loss().empty())
    fail("the training plan names no loss output (Plan.training.loss)");
  if (t.labels().empty())
    fail("the training plan names no labels input (Plan.training.labels)");
  bool sawLoss = false, sawLabels = false, sawSeed = false;
  for (int i = 0; i < plan.programs_size(); ++i) {
    const plan::Program &p = plan.programs(i);
    std::string where = programName(i);
    for (const plan::Constant &c : p.constants())
      sawSeed |= c.loss_scale();
    for (const plan::Port &port : p.outputs()) {
      if (port.name() != t.loss())
        continue;
      sawLoss = true;
      TensorType type = convertType(
          port.global_type(), fmt::format("{}: output '{}'", where, t.loss()));
      if (type != TensorType{DType::F32, {}})
        fail(fmt::format("{}: the loss output '{}' is {}; it must be a "
                         "float32 scalar (f32[])",
                         where, t.loss(), type.str()));
    }
    for (const plan::Port &port : p.inputs()) {
      TensorType type =
          convertType(port.global_type(),
                      fmt::format("{}: input '{}'", where, port.name()));
      if (port.name() == t.labels()) {
        if (!sawLabels)
          info.labelsType = type;
        sawLabels = true;
      } else if (std::find(info.otherInputs.begin(), info.otherInputs.end(),
                           port.name()) == info.otherInputs.end()) {
        info.otherInputs.push_back(port.name());
        info.otherInputTypes.push_back(type);
      }
    }
    for (const plan::Weight &w : p.weights()) {
      info.initializerProgram.emplace(w.initializer(), i);
      if (w.zero_init())
        continue;
      if (!w.has_range()) {
        info.modelWeights.emplace(w.initializer(), w.source());
        continue;
      }
      info.modelWeights.emplace(w.range().name(), w.source());
      std::vector<WeightBlock> &blocks = info.blocks[w.range().name()];
      int axis = w.range().axis();
      if (std::none_of(
              blocks.begin(), blocks.end(),
              [&](const auto &b) { return b.name == w.initializer(); }) &&
          axis >= 0 && axis < w.global_type().shape_size())
        blocks.push_back({w.initializer(), axis, w.range().start(),
                          w.global_type().shape(axis)});
    }
    for (const plan::Op &op : p.ops()) {
      if (!opKindHas(op.kind(), kOptimizer))
        continue;
      auto it = op.attrs().find("clip_norm");
      if (it == op.attrs().end())
        continue;
      double clip = it->second.has_f()   ? it->second.f()
                    : it->second.has_i() ? double(it->second.i())
                                         : 0.0;
      if (clip > 0)
        info.clipping = true;
    }
  }
  // Without a seed the gradients would be divided by a scale they were
  // never multiplied by.
  if (info.lossScale.present && !sawSeed)
    fail("Plan.training.loss_scale is set, but no program has the loss-scale "
         "seed (a Constant with loss_scale) that the backward starts from");
  if (!sawLoss)
    fail(fmt::format("Plan.training.loss names the output '{}', which no "
                     "program has",
                     t.loss()));
  if (!sawLabels)
    fail(fmt::format("Plan.training.labels names the input '{}', which no "
                     "program has",
                     t.labels()));
}

int PlanChecker::checkPrograms() {
  std::vector<int> owner(worldSize, -1);
  for (int i = 0; i < plan.programs_size(); ++i) {
    const plan::Program &p = plan.programs(i);
    std::string where = programName(i);
    Mesh mesh = p.mesh().axes_size() == 0
                    ? worldMesh
                    : convertMesh(p.mesh(), where + ": ", true);
    std::vector<int64_t> rs = convertPlacement(p.placement(), mesh, where);
    for (std::size_t k = 0; k < rs.size(); ++k) {
      int64_t r = rs[k];
      if (owner[r] >= 0)
        fail(fmt::format("world rank {} is in the placement of {} and of {}; "
                         "every rank runs exactly one program",
                         r, programName(owner[r]), where));
      owner[r] = i;
    }
    if (p.ranks_size() != 0) {
      std::set<int64_t> listed(p.ranks().begin(), p.ranks().end());
      if (listed != std::set<int64_t>(rs.begin(), rs.end()))
        fail(fmt::format("{}: Program.ranks [{}] are not the ranks of its "
                         "placement [{}]",
                         where, fmt::join(p.ranks(), ", "),
                         fmt::join(rs, ", ")));
    }
    meshes.push_back(mesh);
    ranks.push_back(std::move(rs));
  }
  for (int64_t r = 0; r < worldSize; ++r)
    if (owner[r] < 0)
      fail(fmt::format("world rank {} runs no program: no program's placement "
                       "covers it (the world has {} ranks)",
                       r, worldSize));

  // Every Send has one Recv with the same transfer, and each side runs on
  // exactly the ranks of its program.
  struct Ends {
    int sendProgram = -1, recvProgram = -1;
    std::string send, recv;
  };
  std::map<int, Ends> byId;
  for (int i = 0; i < plan.programs_size(); ++i) {
    const plan::Program &p = plan.programs(i);
    for (int k = 0; k < p.ops_size(); ++k) {
      const plan::Op &op = p.ops(k);
      if (!opKindHas(op.kind(), kTransfer))
        continue;
      bool isSend = op.kind() == opKindName(OpKind::Send);
      std::string who = fmt::format("{}: op #{} '{}' ({})", programName(i), k,
                                    op.name(), op.kind());
      if (!op.has_transfer())
        fail(fmt::format("{}: a {} needs a transfer (Op.transfer) saying how "
                         "the value is laid out on both sides",
                         who, op.kind()));
      TransferInfo t = convertTransfer(op.transfer(), who);
      const Layout &mySide = isSend ? t.src : t.dst;
      std::vector<int64_t> sideRanks =
          placeRanks(mySide.mesh, mySide.placement);
      if (std::set<int64_t>(sideRanks.begin(), sideRanks.end()) !=
          std::set<int64_t>(ranks[i].begin(), ranks[i].end()))
        fail(fmt::format("{}: the transfer's {} ranks [{}] are not the ranks "
                         "of the program [{}]",
                         who, isSend ? "source" : "destination",
                         fmt::join(sideRanks, ", "),
                         fmt::join(ranks[i], ", ")));
      Ends &ends = byId[t.id];
      int &prog = isSend ? ends.sendProgram : ends.recvProgram;
      if (prog >= 0)
        fail(fmt::format("{}: transfer {} has a second {} (the first is in "
                         "{})",
                         who, t.id, op.kind(), programName(prog)));
      prog = i;
      (isSend ? ends.send : ends.recv) = op.transfer().SerializeAsString();
    }
  }
  for (const auto &[id, ends] : byId) {
    if (ends.recvProgram < 0)
      fail(fmt::format("transfer {} is sent by {} but nothing receives it", id,
                       programName(ends.sendProgram)));
    if (ends.sendProgram < 0)
      fail(fmt::format("transfer {} is received by {} but nothing sends it", id,
                       programName(ends.recvProgram)));
    if (ends.send != ends.recv)
      fail(fmt::format("transfer {} differs between its Send in {} and its "
                       "Recv in {}",
                       id, programName(ends.sendProgram),
                       programName(ends.recvProgram)));
    // A transfer runs once per micro-batch on both sides: counts that differ
    // leave one side waiting for ever.
    int sendMb =
        std::max(1, plan.programs(ends.sendProgram).num_micro_batches());
    int recvMb =
        std::max(1, plan.programs(ends.recvProgram).num_micro_batches());
    if (sendMb != recvMb)
      fail(fmt::format("transfer {} is sent by {}, which runs {} "
                       "micro-batches, and received by {}, which runs {}; the "
                       "stages of a pipeline must agree on the micro-batch "
                       "count",
                       id, programName(ends.sendProgram), sendMb,
                       programName(ends.recvProgram), recvMb));
  }
  return owner[worldRank];
}

void PlanChecker::checkSources() {
  fs::path dir = fs::path(path).parent_path();
  for (int i = 0; i < plan.sources_size(); ++i) {
    const plan::WeightSource &src = plan.sources(i);
    if (src.kind() == plan::WeightSource::SHAPES_ONLY) {
      if (!predictOnly)
        fail(fmt::format("weight source #{} ('{}') is shapes only: the plan "
                         "was compiled from a model without weight data "
                         "(bench/gpt_mlir.py), so shoal-sim can predict it "
                         "but shoal-run cannot run it",
                         i, src.path()));
      out.sourcePaths.push_back(src.path());
      continue;
    }
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

void PlanChecker::checkProgram(const plan::Program &p, int index) {
  std::string where = programName(index);
  if (out.formatVersion == 1 && p.ranks_size() != 0) {
    // Ranks: empty means all; otherwise every rank exactly once.
    std::set<int> listed;
    for (int r : p.ranks()) {
      if (r < 0 || r >= worldSize)
        fail(fmt::format("{}: rank {} is out of range for a world of {}", where,
                         r, worldSize));
      if (!listed.insert(r).second)
        fail(fmt::format("{}: rank {} is listed twice", where, r));
    }
    if (static_cast<int64_t>(listed.size()) != worldSize)
      fail(fmt::format("{}: runs on {} of the {} ranks; this runtime needs "
                       "every rank to run it",
                       where, listed.size(), worldSize));
  }
  out.role = p.role();
  if (out.formatVersion == 2) {
    if (p.num_micro_batches() < 0 || p.num_micro_batches() > kMaxMicroBatches)
      fail(fmt::format("{}: num_micro_batches is {}, must be in [1, {}]", where,
                       p.num_micro_batches(), kMaxMicroBatches));
    out.numMicroBatches = std::max(1, p.num_micro_batches());
    int mb = out.mesh.microBatchAxis();
    if (mb >= 0 && out.mesh.axisSize(mb) != out.numMicroBatches)
      fail(fmt::format("{}: mesh axis '{}' has size {} but the program has "
                       "num_micro_batches {}",
                       where, kMicroBatchAxis, out.mesh.axisSize(mb),
                       out.numMicroBatches));
    if (p.micro_batch_shares_size())
      checkShares(p, where);
  }
  if (p.uneven_axes_size())
    checkUneven(p, where);
  int numValues = p.values_size();
  out.values.clear();
  for (int v = 0; v < numValues; ++v)
    out.values.push_back(
        convertType(p.values(v), fmt::format("{}: value {}", where, v)));
  applyValueLayouts(p, where);
  const std::vector<int64_t> myCoords = out.mesh.coordsOf(out.meshRank);

  // Each value is defined once, before it is read.
  std::vector<std::string> definedBy(numValues);
  out.definingTask.assign(numValues, -1);
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
                        const Mesh &mesh, const std::string &who) {
    TensorType local{global.dtype,
                     localShape(global.shape, spec, mesh, myCoords)};
    if (out.values[v] != local)
      fail(fmt::format("{}: {}: value {} is declared {}, but global type {} "
                       "sharded {} over mesh ({}) gives {}",
                       where, who, v, out.values[v].str(), global.str(),
                       spec.str(mesh), mesh.str(), local.str()));
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
    info.sharding =
        convertSharding(port.sharding(), info.globalType.shape, out.mesh,
                        fmt::format("{}: {}", where, who));
    info.sharding.uneven = unevenLayouts.count(port.value()) > 0;
    checkLocal(port.value(), info.globalType, info.sharding, out.mesh, who);
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
    if (w.zero_init()) {
      if (!plan.has_training())
        fail(fmt::format("{}: {} is zero_init (optimizer state), which only "
                         "training plans (Plan.training) have",
                         where, who));
    } else if (w.source() < 0 || w.source() >= plan.sources_size())
      fail(fmt::format("{}: {} uses weight source #{}, but the plan has {} "
                       "sources",
                       where, who, w.source(), plan.sources_size()));
    WeightInfo info;
    info.value = w.value();
    info.initializer = w.initializer();
    info.source = w.source();
    info.zeroInit = w.zero_init();
    info.digest = w.digest();
    info.sourceName = w.initializer();
    info.globalType =
        convertType(w.global_type(), fmt::format("{}: {}", where, who));
    info.sharding = convertSharding(w.sharding(), info.globalType.shape,
                                    out.mesh, fmt::format("{}: {}", where, who),
                                    /*allowUneven=*/true);
    info.sharding.uneven = unevenLayouts.count(w.value()) > 0;
    int mb = out.mesh.microBatchAxis();
    if (mb >= 0 && info.sharding.uses(mb))
      fail(fmt::format("{}: {}: weights are the same for every micro-batch "
                       "and cannot be sharded over '{}'",
                       where, who, kMicroBatchAxis));
    checkLocal(w.value(), info.globalType, info.sharding, out.mesh, who);
    if (w.source_shape_size() > 0) {
      int64_t n = 1;
      for (int64_t d : w.source_shape()) {
        if (d < 0)
          fail(fmt::format("{}: {}: source_shape has a negative dimension",
                           where, who));
        info.sourceShape.push_back(d);
        n *= d;
      }
      if (n != info.globalType.numElements())
        fail(fmt::format("{}: {}: source_shape {} has {} elements, but the "
                         "weight is {}",
                         where, who, formatShape(info.sourceShape), n,
                         info.globalType.str()));
    }
    if (w.has_range()) {
      const plan::WeightRange &r = w.range();
      if (w.source_shape_size() > 0)
        fail(fmt::format("{}: {} has both a range and a source_shape", where,
                         who));
      if (r.name().empty())
        fail(fmt::format("{}: {}: its range names no initializer", where, who));
      info.sourceName = r.name();
      info.rangeAxis = r.axis();
      info.rangeStart = r.start();
      info.rangeShape.assign(r.shape().begin(), r.shape().end());
      const Shape &g = info.globalType.shape;
      bool ok = info.rangeShape.size() == g.size() && r.axis() >= 0 &&
                r.axis() < static_cast<int>(g.size()) && r.start() >= 0 &&
                r.start() + g[r.axis()] <= info.rangeShape[r.axis()];
      for (std::size_t d = 0; ok && d < g.size(); ++d)
        ok = static_cast<int>(d) == r.axis() || info.rangeShape[d] == g[d];
      if (!ok)
        fail(fmt::format("{}: {} ({}) is no block of initializer '{}' of "
                         "shape {} starting at {} along axis {}",
                         where, who, info.globalType.str(), r.name(),
                         formatShape(info.rangeShape), r.start(), r.axis()));
    }
    // In a training plan the values of one initializer are one buffer (an
    // optimizer's in-place update is seen by every reader), so they must
    // agree on everything that shapes the buffer.
    if (plan.has_training())
      for (const WeightInfo &other : out.weights) {
        if (other.initializer != info.initializer)
          continue;
        if (other.sharding.dims != info.sharding.dims)
          fail(fmt::format("{}: {} appears with two different shardings ({} "
                           "for value {} and {} for value {}); in a training "
                           "plan the values of one initializer share one "
                           "buffer and must have one sharding",
                           where, who, other.sharding.str(out.mesh),
                           other.value, info.sharding.str(out.mesh),
                           info.value));
        if (other.globalType != info.globalType ||
            other.zeroInit != info.zeroInit || other.source != info.source ||
            other.sourceName != info.sourceName ||
            other.rangeAxis != info.rangeAxis ||
            other.rangeStart != info.rangeStart ||
            other.rangeShape != info.rangeShape)
          fail(fmt::format("{}: {} appears twice with different global "
                           "types, sources, ranges or zero_init (values {} "
                           "and {})",
                           where, who, other.value, info.value));
      }
    out.weights.push_back(std::move(info));
  }
  // A training plan's blocks of one initializer tile it along their axis
  // (the exports put it together again): no overlap, no gap.
  if (plan.has_training()) {
    std::map<std::string, std::map<int64_t, const WeightInfo *>> blocks;
    for (const WeightInfo &w : out.weights)
      if (w.rangeAxis >= 0)
        blocks[w.sourceName].emplace(w.rangeStart, &w);
    for (const auto &[name, starts] : blocks) {
      const WeightInfo *first = starts.begin()->second;
      int64_t end = 0;
      for (const auto &[start, w] : starts) {
        if (w->rangeAxis != first->rangeAxis ||
            w->rangeShape != first->rangeShape)
          fail(fmt::format("{}: the blocks '{}' and '{}' of initializer '{}' "
                           "disagree on its shape or their axis",
                           where, first->initializer, w->initializer, name));
        if (start != end)
          fail(fmt::format(
              "{}: the blocks of initializer '{}' do not tile it along axis "
              "{}: {} at {} (expected {}: {})",
              where, name, first->rangeAxis,
              start < end ? "an overlap" : "a gap", std::min(start, end), end,
              w->initializer));
        // Duplicates (one block read twice) have equal starts: counted once.
        end = start + w->globalType.shape[w->rangeAxis];
      }
      if (end != first->rangeShape[first->rangeAxis])
        fail(fmt::format("{}: the blocks of initializer '{}' end at {} of "
                         "its {} along axis {}",
                         where, name, end, first->rangeShape[first->rangeAxis],
                         first->rangeAxis));
    }
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
    if (c.loss_scale() && out.values[c.value()] != TensorType{DType::F32, {}})
      fail(fmt::format("{}: {} is the loss-scale seed but of type {}; it "
                       "must be a float32 scalar (f32[])",
                       where, who, out.values[c.value()].str()));
    if (c.loss_scale() && !plan.training().has_loss_scale())
      fail(fmt::format("{}: {} is a loss-scale seed, but the plan has no "
                       "Plan.training.loss_scale",
                       where, who));
    out.constants.push_back({c.value(), c.data(), c.loss_scale()});
  }

  out.lastUse.assign(numValues, -1);
  std::set<std::vector<int>> seenAxes;
  std::set<int> sendIds, recvIds;
  for (int i = 0; i < p.ops_size(); ++i) {
    const plan::Op &op = p.ops(i);
    std::string who =
        op.name().empty()
            ? fmt::format("op #{} ({})", i, op.kind())
            : fmt::format("op #{} '{}' ({})", i, op.name(), op.kind());
    OpInfo info;
    // Uneven blocks (value_layouts): the op as this rank checks and runs it.
    plan::Op reshaped;
    const plan::Op *checked = &op;
    if (op.attrs().count("uneven_blocks"))
      fail(fmt::format("{}: op #{} ({}) has attribute 'uneven_blocks', which "
                       "the plan loader sets; plans do not carry it",
                       where, i, op.kind()));
    // An AllGather of a value with uneven blocks: each member's block.
    if (op.kind() == opKindName(OpKind::AllGather) && op.inputs_size() == 1 &&
        unevenLayouts.count(op.inputs(0)) && op.attrs().count("dim") &&
        op.attrs().count("axes")) {
      const auto &[global, spec] = unevenLayouts.at(op.inputs(0));
      int64_t dim = op.attrs().at("dim").i();
      if (dim < 0)
        dim += static_cast<int64_t>(global.shape.size());
      std::vector<int> axes;
      for (const std::string &name : op.attrs().at("axes").strings().values())
        axes.push_back(out.mesh.findAxis(name));
      int a = out.mesh.unevenAxisIn(axes);
      if (dim >= 0 && dim < static_cast<int64_t>(spec.dims.size()) && a >= 0 &&
          std::find(spec.dims[dim].begin(), spec.dims[dim].end(), a) !=
              spec.dims[dim].end()) {
        reshaped = op;
        plan::Ints *ints =
            (*reshaped.mutable_attrs())["uneven_blocks"].mutable_ints();
        for (int64_t b : out.mesh.unevenBlocks(a, global.shape[dim]))
          ints->add_values(b);
        checked = &reshaped;
      }
    }
    // A Reshape's or Expand's static shape is the even one; this rank's is
    // its output's type.
    if ((op.kind() == opKindName(OpKind::Reshape) ||
         op.kind() == opKindName(OpKind::Expand)) &&
        op.outputs_size() == 1 && op.outputs(0) >= 0 &&
        op.outputs(0) < numValues && unevenLayouts.count(op.outputs(0))) {
      reshaped = op;
      plan::Ints *ints = (*reshaped.mutable_attrs())["shape"].mutable_ints();
      ints->clear_values();
      for (int64_t d : out.values[op.outputs(0)].shape)
        ints->add_values(d);
      checked = &reshaped;
    }
    try {
      info = checkOp(*checked, i, out.values, out.mesh);
    } catch (const Error &e) {
      fail(fmt::format("{}: {}: {}", where, who, e.what()));
    }
    // Blocks of different sizes are computed on and summed over (an
    // AllReduce of whole tensors), never gathered, sliced, scattered or
    // sent.
    bool unevenGather = !info.attrs.gatherBlocks.empty() &&
                        !unevenLayouts.count(info.outputs[0]);
    if (!unevenLayouts.empty() && !unevenGather &&
        (info.kind == OpKind::AllGather || info.kind == OpKind::LocalSlice ||
         info.kind == OpKind::ReduceScatter || info.kind == OpKind::AllToAll ||
         info.kind == OpKind::Send || info.kind == OpKind::Recv))
      for (const std::vector<int> *list : {&info.inputs, &info.outputs})
        for (int v : *list)
          if (unevenLayouts.count(v))
            fail(fmt::format("{}: {}: value {} has uneven blocks "
                             "(value_layouts); among collectives and "
                             "transfers only AllReduce and an AllGather "
                             "along the uneven dimension take such values",
                             where, who, v));
    if (info.kind == OpKind::Send || info.kind == OpKind::Recv) {
      bool isSend = info.kind == OpKind::Send;
      std::string what = fmt::format("{}: {}", where, who);
      TransferInfo t = convertTransfer(op.transfer(), what);
      if (!(isSend ? sendIds : recvIds).insert(t.id).second)
        fail(fmt::format("{}: transfer {} is {} twice by the program", what,
                         t.id, isSend ? "sent" : "received"));
      const Layout &side = isSend ? t.src : t.dst;
      std::vector<int64_t> sideRanks = placeRanks(side.mesh, side.placement);
      auto it = std::find(sideRanks.begin(), sideRanks.end(), worldRank);
      if (it == sideRanks.end())
        fail(fmt::format("{}: this rank (world rank {}) is not among the "
                         "transfer's {} ranks [{}]",
                         what, worldRank, isSend ? "source" : "destination",
                         fmt::join(sideRanks, ", ")));
      std::vector<int64_t> coords = side.mesh.coordsOf(it - sideRanks.begin());
      TensorType local{
          t.globalType.dtype,
          localShape(t.globalType.shape, side.sharding, side.mesh)};
      int v = isSend ? info.inputs[0] : info.outputs[0];
      if (out.values[v] != local)
        fail(fmt::format("{}: value {} is declared {}, but transfer {} of {} "
                         "sharded {} over its {} mesh ({}) gives {} on world "
                         "rank {}",
                         what, v, out.values[v].str(), t.id, t.globalType.str(),
                         side.sharding.str(side.mesh),
                         isSend ? "source" : "destination", side.mesh.str(),
                         local.str(), worldRank));
      t.blockOffsets =
          blockOffsets(t.globalType.shape, side.sharding, side.mesh, coords);
      t.messages = planTransfer(t.globalType.shape, t.src, t.dst);
      info.transfer = static_cast<int>(out.transfers.size());
      out.transfers.push_back(std::move(t));
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
    if (info.isCollective() && info.kind != OpKind::LocalSlice) {
      // An AllReduce over "mb" reduces over its other axes (if any) at the
      // last micro-batch.
      std::vector<int> axes;
      for (int a : info.attrs.meshAxes)
        if (a != out.mesh.microBatchAxis())
          axes.push_back(a);
      bool onlyMicroBatches = axes.empty() && !info.attrs.meshAxes.empty();
      if (!onlyMicroBatches && seenAxes.insert(axes).second)
        out.collectiveAxes.push_back(axes);
    }
    // ZeRO 1/2 updates gather their weight over their zero axes.
    if (!info.attrs.zeroAxes.empty() &&
        seenAxes.insert(info.attrs.zeroAxes).second)
      out.collectiveAxes.push_back(info.attrs.zeroAxes);
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
  checkTasks(p, where);
  checkSchedule(p, where);
  if (out.mesh.hasMicroBatchShares())
    checkSharedCollectives(where);
}

void PlanChecker::checkUneven(const plan::Program &p,
                              const std::string &where) {
  if (p.micro_batch_shares_size())
    fail(fmt::format("{}: has both micro_batch_shares and uneven_axes; a "
                     "program has one or the other",
                     where));
  for (int k = 0; k < p.uneven_axes_size(); ++k) {
    const plan::UnevenAxis &u = p.uneven_axes(k);
    std::string who = fmt::format("{}: uneven_axes #{}", where, k);
    int a = out.mesh.findAxis(u.axis());
    if (a < 0)
      fail(fmt::format("{} names mesh axis '{}', which is not in the mesh "
                       "({})",
                       who, u.axis(), out.mesh.str()));
    if (a == out.mesh.microBatchAxis())
      fail(fmt::format("{} names the micro-batch axis '{}'; only device axes "
                       "are uneven",
                       who, u.axis()));
    if (out.mesh.isUneven(a))
      fail(fmt::format("{} names mesh axis '{}' again", who, u.axis()));
    if (u.weights_size() != out.mesh.axisSize(a))
      fail(fmt::format("{} has {} weights for mesh axis '{}' of size {}; it "
                       "needs one per coordinate",
                       who, u.weights_size(), u.axis(), out.mesh.axisSize(a)));
    for (int64_t w : u.weights())
      if (w < 1 || w > 1000000)
        fail(fmt::format("{} has weight {}; weights are in [1, 1000000]", who,
                         w));
    if (u.multiple() < 1 || u.multiple() > (int64_t(1) << 30))
      fail(fmt::format("{} has multiple {}; it must be in [1, 2^30]", who,
                       u.multiple()));
    out.mesh.setUneven(
        a, std::vector<int64_t>(u.weights().begin(), u.weights().end()),
        u.multiple());
  }
}

void PlanChecker::applyValueLayouts(const plan::Program &p,
                                    const std::string &where) {
  if (p.value_layouts_size() && !out.mesh.hasUnevenAxes())
    fail(fmt::format("{}: has value_layouts but no uneven_axes", where));
  std::vector<int64_t> coords = out.mesh.coordsOf(out.meshRank);
  for (int k = 0; k < p.value_layouts_size(); ++k) {
    const plan::ValueLayout &l = p.value_layouts(k);
    std::string who = fmt::format("{}: value_layouts #{}", where, k);
    int v = l.value();
    if (v < 0 || v >= static_cast<int>(out.values.size()))
      fail(fmt::format("{} refers to value {}, out of range (the program has "
                       "{} values)",
                       who, v, out.values.size()));
    if (unevenLayouts.count(v))
      fail(fmt::format("{} lists value {} again", who, v));
    TensorType global = convertType(l.global_type(), who);
    ShardSpec spec = convertSharding(l.sharding(), global.shape, out.mesh, who,
                                     /*allowUneven=*/true);
    spec.uneven = true;
    bool uneven = false;
    for (std::size_t d = 0; d < spec.dims.size(); ++d) {
      int a = out.mesh.unevenAxisIn(spec.dims[d]);
      if (a < 0)
        continue;
      uneven = true;
      for (int other : spec.dims[d])
        if (other != a && out.mesh.axisSize(other) > 1)
          fail(fmt::format("{}: dimension {} is sharded over uneven mesh axis "
                           "'{}' and over '{}' too; an uneven dimension is "
                           "split over one axis",
                           who, d, out.mesh.axisName(a),
                           out.mesh.axisName(other)));
    }
    if (!uneven)
      fail(fmt::format("{}: value {} is sharded {}, over no uneven axis", who,
                       v, spec.str(out.mesh)));
    TensorType even{global.dtype, localShape(global.shape, spec, out.mesh)};
    if (out.values[v] != even)
      fail(fmt::format("{}: value {} is declared {}, but global type {} "
                       "sharded {} evenly gives {}",
                       who, v, out.values[v].str(), global.str(),
                       spec.str(out.mesh), even.str()));
    out.values[v].shape = localShape(global.shape, spec, out.mesh, coords);
    unevenLayouts[v] = {global, spec};
  }
}

void PlanChecker::checkShares(const plan::Program &p,
                              const std::string &where) {
  int mb = out.mesh.microBatchAxis();
  if (mb < 0)
    fail(fmt::format("{}: micro_batch_shares needs a mesh with a '{}' axis",
                     where, kMicroBatchAxis));
  if (plan.programs_size() != 1)
    fail(fmt::format("{}: micro_batch_shares in a plan of {} programs; "
                     "uneven micro-batch counts are for plans of one program",
                     where, plan.programs_size()));
  std::vector<int64_t> perRank;
  int largest = 0;
  for (int k = 0; k < p.micro_batch_shares_size(); ++k) {
    const plan::MicroBatchShare &s = p.micro_batch_shares(k);
    if (s.ranks() < 1 || s.micro_batches() < 1 ||
        s.micro_batches() > out.numMicroBatches)
      fail(fmt::format("{}: micro_batch_shares #{} gives {} micro-batches to "
                       "{} ranks; each needs at least 1 rank and 1 to "
                       "num_micro_batches ({}) micro-batches",
                       where, k, s.micro_batches(), s.ranks(),
                       out.numMicroBatches));
    if (static_cast<int64_t>(perRank.size()) + s.ranks() > out.mesh.worldSize())
      break;
    perRank.insert(perRank.end(), s.ranks(), s.micro_batches());
    largest = std::max(largest, s.micro_batches());
  }
  if (static_cast<int64_t>(perRank.size()) != out.mesh.worldSize())
    fail(fmt::format(
        "{}: micro_batch_shares cover {} ranks, the mesh ({}) "
        "has {}",
        where,
        [&] {
          int64_t n = 0;
          for (const auto &s : p.micro_batch_shares())
            n += s.ranks();
          return n;
        }(),
        out.mesh.str(), out.mesh.worldSize()));
  if (largest != out.numMicroBatches)
    fail(fmt::format("{}: num_micro_batches is {} but the largest of "
                     "micro_batch_shares is {}; it must be the largest",
                     where, out.numMicroBatches, largest));
  out.mesh.setMicroBatchShares(perRank);
  programMicroBatches = out.numMicroBatches;
  out.numMicroBatches = static_cast<int>(perRank[out.meshRank]);
}

void PlanChecker::checkSharedCollectives(const std::string &where) {
  // Tasks that run once a step (the optimizer) may talk to every rank.
  int m = out.numMicroBatches;
  std::vector<int> runs(out.tasks.size(), 0);
  std::vector<char> once(out.tasks.size(), 0);
  for (const ScheduleEntry &e : out.schedule)
    ++runs[e.task];
  for (std::size_t t = 0; t < out.tasks.size(); ++t)
    once[t] = m > 1 && runs[t] == 1;
  int mb = out.mesh.microBatchAxis();
  for (const OpInfo &op : out.ops) {
    if (!op.isCollective() || op.kind == OpKind::LocalSlice || once[op.task])
      continue;
    const std::vector<int> &axes = op.attrs.meshAxes;
    bool overDevices = false;
    for (int a : axes)
      overDevices |= a != mb && out.mesh.axisSize(a) > 1;
    bool accumulates = std::find(axes.begin(), axes.end(), mb) != axes.end();
    if (overDevices && !accumulates)
      fail(fmt::format(
          "{}: {} runs over ranks once per micro-batch, but "
          "micro_batch_shares gives them different numbers of micro-batches; "
          "only AllReduce and ReduceScatter over '{}' (accumulated, reduced "
          "once) may",
          where, op.describe(), kMicroBatchAxis));
  }
  for (const auto *ports : {&out.inputs, &out.outputs})
    for (const PortInfo &port : *ports)
      for (const auto &axes : port.sharding.dims)
        if (!out.mesh.coversShares(axes))
          fail(fmt::format("{}: {} '{}' is sharded {} over micro-batches but "
                           "not over every device axis; under "
                           "micro_batch_shares it must be",
                           where, ports == &out.inputs ? "input" : "output",
                           port.name, port.sharding.str(out.mesh)));
}

void PlanChecker::checkTasks(const plan::Program &p, const std::string &where) {
  int numOps = static_cast<int>(out.ops.size());
  if (out.formatVersion == 1 || p.tasks_size() == 0) {
    out.tasks.push_back({"", 0, numOps, {}, {}});
  } else {
    std::map<std::string, int> byName;
    for (int t = 0; t < p.tasks_size(); ++t) {
      if (!byName.emplace(p.tasks(t), t).second)
        fail(fmt::format("{}: task '{}' is listed twice", where, p.tasks(t)));
      out.tasks.push_back({p.tasks(t), 0, 0, {}, {}});
    }
    std::vector<bool> ended(out.tasks.size(), false);
    int current = -1;
    for (int i = 0; i < numOps; ++i) {
      const std::string &name = p.ops(i).task_graph();
      int t;
      if (name.empty() && p.tasks_size() == 1) {
        t = 0;
      } else {
        auto it = byName.find(name);
        if (it == byName.end())
          fail(fmt::format("{}: {}: task_graph '{}' is not one of the "
                           "program's tasks ({})",
                           where, out.ops[i].describe(), name,
                           fmt::join(p.tasks(), ", ")));
        t = it->second;
      }
      if (t != current) {
        if (ended[t])
          fail(fmt::format("{}: {}: the ops of task '{}' are not contiguous",
                           where, out.ops[i].describe(), out.tasks[t].name));
        if (current >= 0) {
          ended[current] = true;
          out.tasks[current].end = i;
        }
        out.tasks[t].begin = i;
        current = t;
      }
      out.ops[i].task = t;
    }
    if (current >= 0)
      out.tasks[current].end = numOps;
  }
  // Values that cross tasks are kept per micro-batch.
  for (const OpInfo &op : out.ops)
    for (int v : op.outputs)
      if (v >= 0)
        out.definingTask[v] = op.task;
  for (const OpInfo &op : out.ops)
    for (int v : op.inputs) {
      if (v < 0 || out.definingTask[v] < 0 || out.definingTask[v] == op.task)
        continue;
      auto addOnce = [](std::vector<int> &list, int value) {
        if (std::find(list.begin(), list.end(), value) == list.end())
          list.push_back(value);
      };
      addOnce(out.tasks[op.task].imports, v);
      addOnce(out.tasks[out.definingTask[v]].exports, v);
    }
}

void PlanChecker::checkSchedule(const plan::Program &p,
                                const std::string &where) {
  int numTasks = static_cast<int>(out.tasks.size());
  int m = out.numMicroBatches;
  bool training = plan.has_training();
  auto endsWith = [](const std::string &s, const char *suffix) {
    std::size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  if (out.formatVersion == 1 || p.schedule_size() == 0) {
    // Task-major; in a training plan `<scope>.bwd` tasks run backward and
    // `<scope>.opt` tasks once, at the last micro-batch.
    for (int t = 0; t < numTasks; ++t) {
      const std::string &name = out.tasks[t].name;
      bool backward = training && endsWith(name, ".bwd");
      bool once = training && endsWith(name, ".opt");
      for (int j = once ? m - 1 : 0; j < m; ++j)
        out.schedule.push_back({t, j, backward});
    }
  } else {
    // Under micro_batch_shares the schedule is written for the largest
    // count: this rank runs the steps of its own micro-batches, and a task
    // that runs once (at the last micro-batch) at its own last one.
    int written = programMicroBatches > 0 ? programMicroBatches : m;
    std::vector<int> onlyLast(numTasks, written > 1 ? 1 : 0);
    for (const plan::ScheduleStep &step : p.schedule())
      if (step.task() >= 0 && step.task() < numTasks &&
          step.micro_batch() != written - 1)
        onlyLast[step.task()] = 0;
    for (int k = 0; k < p.schedule_size(); ++k) {
      const plan::ScheduleStep &step = p.schedule(k);
      if (step.task() < 0 || step.task() >= numTasks)
        fail(fmt::format("{}: schedule step #{} runs task {}, out of range "
                         "(the program has {} tasks)",
                         where, k, step.task(), numTasks));
      if (step.micro_batch() < 0 || step.micro_batch() >= written)
        fail(fmt::format("{}: schedule step #{} runs micro-batch {}, out of "
                         "range (the program has {} micro-batches)",
                         where, k, step.micro_batch(), written));
      int j = step.micro_batch();
      if (written != m) {
        if (onlyLast[step.task()])
          j = m - 1;
        else if (j >= m)
          continue;
      }
      out.schedule.push_back({step.task(), j, step.backward()});
    }
  }
  // A task runs forward when the schedule runs it forward at all, else
  // backward; either way once for every micro-batch, after the runs that
  // define the values it imports. In a training plan a task may instead run
  // once per step, at the last micro-batch (the optimizer).
  // Forward plans have no backward work: their backward entries are
  // ignored (and dropped below).
  auto ignored = [&](const ScheduleEntry &e) {
    return !training && e.backward;
  };
  std::vector<int> direction(numTasks, -1); // 0 forward, 1 backward
  for (const ScheduleEntry &e : out.schedule)
    if (!ignored(e) && (!e.backward || direction[e.task] < 0))
      direction[e.task] = e.backward ? 1 : 0;
  auto dirName = [&](int t) {
    return direction[t] == 1 ? "backward" : "forward";
  };
  std::vector<std::vector<int>> position(numTasks, std::vector<int>(m, -1));
  for (std::size_t k = 0; k < out.schedule.size(); ++k) {
    const ScheduleEntry &e = out.schedule[k];
    if (ignored(e) || (e.backward ? 1 : 0) != direction[e.task])
      continue; // reported below as a missing run in the task's direction
    int &pos = position[e.task][e.microBatch];
    if (pos >= 0)
      fail(fmt::format("{}: schedule steps #{} and #{} both run the {} of "
                       "task '{}' for micro-batch {}",
                       where, pos, k, dirName(e.task), out.tasks[e.task].name,
                       e.microBatch));
    pos = static_cast<int>(k);
  }
  for (int t = 0; t < numTasks; ++t) {
    bool once = training && m > 1 && position[t][m - 1] >= 0;
    for (int j = 0; j + 1 < m && once; ++j)
      once = position[t][j] < 0;
    for (int j = 0; j < m; ++j) {
      if (position[t][j] < 0) {
        if (once)
          continue;
        fail(fmt::format("{}: the schedule never runs the {} of task '{}' "
                         "for micro-batch {}",
                         where, dirName(t), out.tasks[t].name, j));
      }
      for (int v : out.tasks[t].imports) {
        int u = out.definingTask[v];
        if (position[u][j] < 0)
          fail(fmt::format("{}: task '{}' reads value {} for micro-batch {}, "
                           "but task '{}', which defines it, runs only at "
                           "micro-batch {}",
                           where, out.tasks[t].name, v, j, out.tasks[u].name,
                           m - 1));
        if (position[u][j] > position[t][j])
          fail(fmt::format("{}: the schedule runs task '{}' for micro-batch "
                           "{} (step #{}) before task '{}' (step #{}), which "
                           "defines value {} that it reads",
                           where, out.tasks[t].name, j, position[t][j],
                           out.tasks[u].name, position[u][j], v));
      }
    }
  }
  for (std::size_t k = 0; k < out.schedule.size(); ++k) {
    const ScheduleEntry &e = out.schedule[k];
    if (!ignored(e) && (e.backward ? 1 : 0) != direction[e.task])
      fail(fmt::format("{}: schedule step #{} runs the backward of task '{}', "
                       "which the schedule also runs forward",
                       where, k, out.tasks[e.task].name));
  }
  out.schedule.erase(
      std::remove_if(out.schedule.begin(), out.schedule.end(), ignored),
      out.schedule.end());
}
