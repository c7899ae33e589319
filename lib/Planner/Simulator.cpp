//===- Simulator.cpp - Predicting a plan's step on a cluster ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Simulator.h"
#include "shoal/Schema/InPlace.h"
#include "shoal/Schema/OpTable.h"
#include "shoal/Schema/UnevenBlocks.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>

using namespace shoal::planner;
namespace rt = shoal::rt;

namespace {

int64_t dtypeBytes(int dtype) {
  switch (dtype) {
  case shoal::plan::F64:
  case shoal::plan::I64:
    return 8;
  case shoal::plan::F32:
  case shoal::plan::I32:
    return 4;
  case shoal::plan::F16:
  case shoal::plan::BF16:
    return 2;
  default:
    return 1;
  }
}

double valueBytes(const shoal::plan::TensorType &t) {
  double n = static_cast<double>(dtypeBytes(t.dtype()));
  for (int64_t d : t.shape())
    n *= static_cast<double>(d);
  return n;
}

/// A program's mesh placed on world ranks.
struct Placed {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int mbAxis = -1;
  int64_t offset = 0, stride = 0;

  std::vector<int> deviceAxes() const {
    std::vector<int> a;
    for (int i = 0; i < static_cast<int>(sizes.size()); ++i)
      if (i != mbAxis)
        a.push_back(i);
    return a;
  }
  int rankOf(const std::vector<int64_t> &coords) const {
    std::vector<int> axes = deviceAxes();
    if (axes.empty())
      return static_cast<int>(offset);
    int64_t inner = 0, innerSize = 1;
    for (std::size_t k = 1; k < axes.size(); ++k) {
      inner = inner * sizes[axes[k]] + coords[axes[k]];
      innerSize *= sizes[axes[k]];
    }
    int64_t s = stride ? stride : innerSize;
    return static_cast<int>(offset + coords[axes[0]] * s + inner);
  }
  /// The groups a collective over `axes` forms: one per coordinate of the
  /// other device axes (each in ranksOver's order).
  std::vector<std::vector<int>> groupsOver(const std::vector<int> &axes) const {
    std::vector<int> others;
    for (int a : deviceAxes())
      if (std::find(axes.begin(), axes.end(), a) == axes.end())
        others.push_back(a);
    std::vector<std::vector<int>> out;
    std::vector<int64_t> fixed(sizes.size(), 0);
    std::function<void(std::size_t)> rec = [&](std::size_t k) {
      if (k == others.size()) {
        out.push_back(ranksOver(axes, fixed));
        return;
      }
      for (int64_t c = 0; c < sizes[others[k]]; ++c) {
        fixed[others[k]] = c;
        rec(k + 1);
      }
      fixed[others[k]] = 0;
    };
    rec(0);
    return out;
  }
  /// World ranks of the coordinates that vary over `vary` (the others as
  /// in `fixed`, or 0).
  std::vector<int> ranksOver(const std::vector<int> &vary,
                             std::vector<int64_t> fixed = {}) const {
    std::vector<int> out;
    std::vector<int64_t> coords =
        fixed.empty() ? std::vector<int64_t>(sizes.size(), 0) : fixed;
    std::function<void(std::size_t)> rec = [&](std::size_t k) {
      if (k == vary.size()) {
        out.push_back(rankOf(coords));
        return;
      }
      for (int64_t c = 0; c < sizes[vary[k]]; ++c) {
        coords[vary[k]] = c;
        rec(k + 1);
      }
      coords[vary[k]] = fixed.empty() ? 0 : fixed[vary[k]];
    };
    rec(0);
    return out;
  }
  int axis(const std::string &name) const {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return static_cast<int>(i);
    return -1;
  }
};

Placed placeOf(const shoal::plan::Plan &plan,
               const shoal::plan::Program &prog) {
  Placed p;
  const shoal::plan::Mesh &mesh =
      prog.mesh().axes_size() ? prog.mesh() : plan.mesh();
  for (const auto &a : mesh.axes()) {
    if (a.size() < 1)
      throw SpecError(fmt::format("program '{}': mesh axis '{}' has size {}",
                                  prog.role(), a.name(), a.size()));
    if (plan.format_version() >= 2 && a.name() == "mb")
      p.mbAxis = static_cast<int>(p.names.size());
    p.names.push_back(a.name());
    p.sizes.push_back(a.size());
  }
  p.offset = prog.placement().offset();
  p.stride = prog.placement().stride();
  return p;
}

bool isMatMulKind(const std::string &k) {
  return rt::opKindHas(k, rt::kMatMulClass);
}

/// Whether `op` is of `kind` (kinds as Ops.def spells them).
bool is(const shoal::plan::Op &op, rt::OpKind kind) {
  return op.kind() == rt::opKindName(kind);
}

/// An AllReduce as the runtime's executor runs it: a copy into its output
/// (or, over "mb", into the step's sum: a copy at micro-batch 0 and an add
/// at the others), then the exchange over `group`, at the rank's last
/// micro-batch when it accumulates. The exchange is asynchronous (beside
/// the compute, on the channel of its group of axes) unless the next op
/// reads its result, as the executor starts it. A ReduceScatter
/// over "mb" (ZeRO-1/2's gradient) accumulates the same way and scatters
/// once, at the last micro-batch, synchronously.
struct AllReduceInfo {
  bool present = false;
  bool accumulates = false; ///< over "mb"
  bool scatter = false;     ///< a ReduceScatter that accumulates
  bool async = false;       ///< the exchange overlaps the ops after it
  /// A gradient only the optimizer reads: packed into the step's buckets
  /// (Plan.training.grad_bucket_mb), as the executor packs them.
  bool bucketable = false;
  std::vector<int> axes; ///< the device axes it exchanges over
  /// Its groups (world ranks; each of one rank: no exchange); the exchange
  /// takes as long as in the slowest.
  std::shared_ptr<const std::vector<std::vector<int>>> groups;
  bool exchanges() const { return groups && groups->front().size() > 1; }
  double seconds(const CostModel &cost, double bytes) const {
    double t = 0;
    for (const std::vector<int> &g : *groups)
      t = std::max(t, cost.allReduceSeconds(g, bytes));
    return t;
  }
  double bytes = 0;
  double copySeconds = 0, addSeconds = 0; ///< on the slowest rank
  /// In a program with uneven blocks, the copy on each of its ranks (a
  /// bucketed gradient's: the ranks do not wait for each other there).
  std::vector<double> copyPerRank;
  double exchangeSeconds = 0; ///< of `bytes`, when it is not bucketed
};

/// Shards by speed (Program.uneven_axes, value_layouts): per value with
/// uneven blocks, each world rank's block against the even one that the
/// ops' figures (Op.flops, Op.bytes) are for. An op that reads or writes
/// such a value does that part of its work on each rank. `rows`: the same
/// for the dimensions but the last (a matrix product's rows: batch blocks
/// change them, column shards do not).
struct UnevenParts {
  std::map<int, std::map<int, double>> all, rows;
  bool empty() const { return all.empty(); }
};
UnevenParts unevenParts(const shoal::plan::Program &prog,
                        const Placed &placed) {
  UnevenParts parts;
  if (prog.uneven_axes_size() == 0)
    return parts;
  // Each axis's weights and multiple, by mesh axis index.
  std::map<int, std::pair<std::vector<int64_t>, int64_t>> axes;
  for (const auto &u : prog.uneven_axes()) {
    int a = placed.axis(u.axis());
    if (a < 0 || u.weights_size() != placed.sizes[a])
      throw SpecError(fmt::format("program '{}': uneven axis '{}' is not an "
                                  "axis of its mesh with one weight per "
                                  "coordinate",
                                  prog.role(), u.axis()));
    axes[a] = {std::vector<int64_t>(u.weights().begin(), u.weights().end()),
               u.multiple()};
  }
  // Every device coordinate of the mesh, with its world rank.
  std::vector<int> devices = placed.deviceAxes();
  std::vector<int> ranks = placed.ranksOver(devices);
  // Mesh rank q's coordinate on device axis a (row-major over `devices`,
  // the order of `ranks`).
  auto coordOn = [&](std::size_t q, int a) {
    int64_t inner = 1;
    for (std::size_t k = devices.size(); k-- > 0 && devices[k] != a;)
      inner *= placed.sizes[devices[k]];
    return (static_cast<int64_t>(q) / inner) % placed.sizes[a];
  };
  for (const auto &l : prog.value_layouts()) {
    const auto &global = l.global_type();
    std::vector<double> part(ranks.size(), 1), rowPart(ranks.size(), 1);
    for (int d = 0; d < l.sharding().dims_size() && d < global.shape_size();
         ++d)
      for (const std::string &name : l.sharding().dims(d).axes()) {
        auto it = axes.find(placed.axis(name));
        if (it == axes.end())
          continue;
        int64_t size = global.shape(d), n = placed.sizes[it->first];
        std::vector<int64_t> blocks =
            rt::unevenBlockSizes(size, it->second.first, it->second.second);
        double even = static_cast<double>((size + n - 1) / n);
        for (std::size_t q = 0; q < ranks.size(); ++q) {
          double x = static_cast<double>(blocks[coordOn(q, it->first)]) / even;
          part[q] *= x;
          if (d + 1 < global.shape_size())
            rowPart[q] *= x;
        }
      }
    for (std::size_t q = 0; q < ranks.size(); ++q) {
      parts.all[l.value()][ranks[q]] = part[q];
      parts.rows[l.value()][ranks[q]] = rowPart[q];
    }
  }
  return parts;
}

/// What shares a buffer in `prog`, by the executor's rules
/// (shoal/Schema/InPlace.h): per op, whether it is an AllReduce that
/// reduces in its operand's buffer, and the op holding the weight copy a
/// cast of a weight computes (-1: none).
struct SharedBuffers {
  std::vector<bool> inPlace;
  std::vector<int> weightCopyOf;
  /// Per op: an accumulating AllReduce whose product sums itself into the
  /// step's sum (rt::productsAccumulatingInPlace).
  std::vector<bool> summedByProduct;
};
SharedBuffers sharedBuffers(const shoal::plan::Program &prog,
                            const Placed &placed) {
  std::vector<rt::InPlaceOp> ops(prog.ops_size());
  std::vector<std::vector<int>> inputs(prog.ops_size()),
      outputs(prog.ops_size());
  std::map<std::string, int> taskOf;
  for (int i = 0; i < prog.ops_size(); ++i) {
    const shoal::plan::Op &op = prog.ops(i);
    rt::InPlaceOp &info = ops[i];
    inputs[i].assign(op.inputs().begin(), op.inputs().end());
    outputs[i].assign(op.outputs().begin(), op.outputs().end());
    info.inputs = &inputs[i];
    info.outputs = &outputs[i];
    if (!rt::lookupOpKind(op.kind(), info.kind))
      info.kind = rt::OpKind::Reshape; // (checked plans know every kind)
    info.task = taskOf.emplace(op.task_graph(), static_cast<int>(taskOf.size()))
                    .first->second;
    auto attr = [&](const char *name) {
      auto it = op.attrs().find(name);
      return it == op.attrs().end() ? nullptr : &it->second;
    };
    bool reduce = info.kind == rt::OpKind::ReduceSum ||
                  info.kind == rt::OpKind::ReduceMean;
    const shoal::plan::Attribute *axes = attr("axes"),
                                 *noop = attr("noop_with_empty_axes");
    info.aliases = info.kind == rt::OpKind::Reshape ||
                   (reduce && (!axes || axes->ints().values().empty()) &&
                    noop && noop->i() != 0);
    if (info.kind == rt::OpKind::AllReduce && axes)
      for (const std::string &a : axes->strings().values())
        info.overMicroBatches |=
            placed.mbAxis >= 0 && placed.axis(a) == placed.mbAxis;
  }
  std::vector<bool> programOutput(prog.values_size(), false);
  for (const shoal::plan::Port &port : prog.outputs())
    if (port.value() >= 0 && port.value() < prog.values_size())
      programOutput[port.value()] = true;
  // Per value, its weight buffer: one per initializer, view and layout
  // (the runtime's rt::weightBufferKey), whichever tasks read it.
  std::vector<int> weight(prog.values_size(), -1);
  std::map<std::string, int> buffers;
  for (const shoal::plan::Weight &w : prog.weights())
    if (!w.zero_init() && w.value() >= 0 && w.value() < prog.values_size())
      weight[w.value()] =
          buffers
              .emplace(w.initializer() + '\n' +
                           w.global_type().SerializeAsString() + '\n' +
                           w.sharding().SerializeAsString(),
                       static_cast<int>(buffers.size()))
              .first->second;
  std::vector<int> dtype(prog.values_size());
  for (int v = 0; v < prog.values_size(); ++v)
    dtype[v] = static_cast<int>(prog.values(v).dtype());
  SharedBuffers out;
  out.weightCopyOf = rt::weightCopies(ops, weight, dtype, programOutput);
  out.inPlace = rt::allReducesInPlace(ops, programOutput, out.weightCopyOf);
  out.summedByProduct.assign(ops.size(), false);
  for (int a : rt::productsAccumulatingInPlace(ops, programOutput))
    if (a >= 0)
      out.summedByProduct[a] = true;
  return out;
}

/// Each op's time on the slowest of `ranks` (the program's ranks that run
/// it), or over its collective group; Send and Recv take none here, nor
/// AllReduce (`allReduces`: the replay times it). `perRank`: in a program
/// with uneven blocks, of each op that runs on its own ranks without
/// communicating, its time on each of `ranks` (empty for the others, and
/// in even programs, whose slowest rank is the slowest at every op).
std::vector<double> opTimes(const shoal::plan::Program &prog,
                            const Placed &placed, const std::vector<int> &ranks,
                            const CostModel &cost, bool byElementType,
                            const SharedBuffers &shared,
                            std::vector<AllReduceInfo> &allReduces,
                            std::vector<std::vector<double>> &perRank) {
  allReduces.assign(prog.ops_size(), AllReduceInfo());
  perRank.assign(prog.ops_size(), {});
  std::map<std::vector<int>,
           std::shared_ptr<const std::vector<std::vector<int>>>>
      groupsByAxes;
  // The mesh groups over `axes` (mesh axis indices), made once per set.
  auto groupsOf = [&](const std::vector<int> &axes)
      -> const std::shared_ptr<const std::vector<std::vector<int>>> & {
    auto &groups = groupsByAxes[axes];
    if (!groups)
      groups = std::make_shared<const std::vector<std::vector<int>>>(
          placed.groupsOver(axes));
    return groups;
  };
  // Values only optimizers read (the executor's gradientOnly).
  std::vector<char> optimizerRead(prog.values_size(), 0),
      otherRead(prog.values_size(), 0);
  for (const shoal::plan::Op &op : prog.ops())
    for (int v : op.inputs())
      if (v >= 0 && v < prog.values_size())
        (rt::opKindHas(op.kind(), rt::kOptimizer) ? optimizerRead
                                                  : otherRead)[v] = 1;
  // Whether op i's first result is read by op i + 1 (the executor then
  // waits for its exchange).
  auto readNext = [&](int i) {
    const auto &op = prog.ops(i);
    if (!op.outputs_size() || i + 1 >= prog.ops_size())
      return false;
    for (int v : prog.ops(i + 1).inputs())
      if (v == op.outputs(0))
        return true;
    return false;
  };
  CostModel half = cost.withPrecision(Precision::FP16),
            bfloat = cost.withPrecision(Precision::BF16);
  const UnevenParts unevenAll = unevenParts(prog, placed);
  const std::map<int, std::map<int, double>> &uneven = unevenAll.all;
  // A matrix product's rows on rank r (its output's rows at r's part).
  auto rowsOn = [&](int out, double rows, int r) {
    auto it = unevenAll.rows.find(out);
    if (it == unevenAll.rows.end())
      return rows;
    auto jt = it->second.find(r);
    return jt == it->second.end() ? rows : rows * jt->second;
  };
  // Rank r's part of `op`'s work (1 without uneven blocks): of its flops,
  // as its largest uneven value's; of its bytes, each value's bytes at its
  // own part (a whole operand is read whole).
  struct Part {
    double flops = 1, bytes = 1;
  };
  auto partOf = [&](const shoal::plan::Op &op, int r) {
    Part part;
    double flops = 0, moved = 0, even = 0;
    bool any = false;
    for (const auto *list : {&op.inputs(), &op.outputs()})
      for (int v : *list) {
        if (v < 0 || v >= prog.values_size())
          continue;
        double b = valueBytes(prog.values(v)), x = 1;
        auto it = uneven.find(v);
        if (it != uneven.end())
          if (auto jt = it->second.find(r); jt != it->second.end()) {
            x = jt->second;
            flops = std::max(flops, x);
            any = true;
          }
        moved += b * x;
        even += b;
      }
    if (any) {
      part.flops = flops;
      part.bytes = even > 0 ? moved / even : flops;
    }
    return part;
  };
  std::vector<double> seconds;
  for (const shoal::plan::Op &op : prog.ops()) {
    const std::string &k = op.kind();
    double t = 0;
    auto bytesOf = [&](int v) {
      return v >= 0 && v < prog.values_size() ? valueBytes(prog.values(v))
                                              : 0.0;
    };
    if (rt::opKindHas(k, rt::kCommunicates)) {
      std::vector<int> axes;
      bool overMb = false;
      auto it = op.attrs().find("axes");
      if (it != op.attrs().end())
        for (const std::string &a : it->second.strings().values()) {
          int i = placed.axis(a);
          // Over "mb" a rank sums its own micro-batches: no other rank.
          overMb |= i >= 0 && i == placed.mbAxis;
          if (i >= 0 && i != placed.mbAxis)
            axes.push_back(i);
        }
      const auto &groups = groupsOf(axes);
      double in = op.inputs_size() ? bytesOf(op.inputs(0)) : 0;
      double outBytes = op.outputs_size() ? bytesOf(op.outputs(0)) : 0;
      bool scatter = is(op, rt::OpKind::ReduceScatter) && overMb;
      if (is(op, rt::OpKind::AllReduce) || scatter) {
        int index = static_cast<int>(seconds.size());
        AllReduceInfo &a = allReduces[index];
        a.present = true;
        a.accumulates = overMb;
        a.scatter = scatter;
        a.axes = axes;
        a.groups = groups;
        a.bytes = in;
        int out = op.outputs_size() ? op.outputs(0) : -1;
        a.bucketable = !scatter && out >= 0 && out < prog.values_size() &&
                       optimizerRead[out] && !otherRead[out];
        a.async = !scatter && out >= 0 && out < prog.values_size() &&
                  (optimizerRead[out] || otherRead[out]) && !readNext(index);
        if (a.exchanges()) {
          if (scatter)
            for (const std::vector<int> &g : *groups)
              a.exchangeSeconds =
                  std::max(a.exchangeSeconds, cost.allToAllSeconds(g, in));
          else
            a.exchangeSeconds = a.seconds(cost, in);
        }
        for (int r : ranks) {
          // (One that reduces in its operand's buffer copies nothing; one
          // whose product sums itself into the step's sum neither copies
          // nor adds.)
          bool summed = shared.summedByProduct[index];
          double copy = shared.inPlace[index] || summed
                            ? 0
                            : cost.opSeconds(r, 0, 2 * in, OpClass::Copy);
          if (!uneven.empty())
            a.copyPerRank.push_back(copy);
          a.copySeconds = std::max(a.copySeconds, copy);
          if (!summed)
            a.addSeconds =
                std::max(a.addSeconds,
                         cost.opSeconds(r, in, 3 * in, OpClass::Elementwise));
        }
        seconds.push_back(0);
        continue;
      }
      for (const std::vector<int> &group : *groups)
        t = std::max(t, is(op, rt::OpKind::AllGather)
                            ? cost.allGatherSeconds(group, outBytes)
                            : cost.allToAllSeconds(group, in));
    } else if (!rt::opKindHas(k, rt::kTransfer) &&
               !is(op, rt::OpKind::Reshape)) {
      // (Reshape is a view of its input in the runtime: no time.)
      // Rows of a matrix product: its result's elements but the last
      // dimension's.
      double rows = 0;
      const CostModel *model = &cost;
      if (isMatMulKind(k) && op.outputs_size() && op.outputs(0) >= 0 &&
          op.outputs(0) < prog.values_size()) {
        const auto &out = prog.values(op.outputs(0));
        rows = 1;
        for (int d = 0; d + 1 < out.shape_size(); ++d)
          rows *= static_cast<double>(out.shape(d));
        // At its operands' precision (a weight gradient: 16-bit operands,
        // a float32 result).
        int in = op.inputs_size() ? op.inputs(0) : -1;
        int dtype = in >= 0 && in < prog.values_size() ? prog.values(in).dtype()
                                                       : out.dtype();
        if (byElementType && dtype == shoal::plan::F16)
          model = &half;
        else if (byElementType && dtype == shoal::plan::BF16)
          model = &bfloat;
      }
      std::vector<double> &mine = perRank[seconds.size()];
      for (int r : ranks) {
        Part part = partOf(op, r);
        double s = model->opSeconds(
            r, static_cast<double>(op.flops()) * part.flops,
            static_cast<double>(op.bytes()) * part.bytes,
            isMatMulKind(k) ? OpClass::MatMul : OpClass::Elementwise,
            rows > 0 ? rowsOn(op.outputs(0), rows, r) : rows);
        if (!uneven.empty())
          mine.push_back(s);
        t = std::max(t, s);
      }
      // ZeRO-1/2: an update that writes its block of the weight then
      // gathers the weight over its ZeRO group (Executor's
      // gatherZeroWeight), synchronously.
      if (auto z = op.attrs().find("zero_axes"); z != op.attrs().end()) {
        std::vector<int> axes;
        for (const std::string &a : z->second.strings().values())
          if (int i = placed.axis(a); i >= 0 && i != placed.mbAxis)
            axes.push_back(i);
        double weight = op.inputs_size() ? bytesOf(op.inputs(0)) : 0;
        double gather = 0;
        for (const std::vector<int> &group : *groupsOf(axes))
          gather = std::max(gather, cost.allGatherSeconds(group, weight));
        t += gather;
      }
    }
    seconds.push_back(t);
  }
  return seconds;
}

} // namespace

double Prediction::bubble() const {
  if (programs.empty())
    return 0;
  double sum = 0;
  for (const ProgramPrediction &p : programs)
    sum +=
        p.busySeconds > 0 ? (stepSeconds - p.busySeconds) / p.busySeconds : 0;
  return sum / programs.size();
}

double Prediction::busiestBubble() const {
  const ProgramPrediction *busiest = nullptr;
  for (const ProgramPrediction &p : programs)
    if (!busiest || p.busySeconds > busiest->busySeconds)
      busiest = &p;
  if (!busiest || busiest->busySeconds <= 0)
    return 0;
  return (stepSeconds - busiest->busySeconds) / busiest->busySeconds;
}

double Prediction::pipelineBubble() const {
  const ProgramPrediction *busiest = nullptr;
  auto working = [](const ProgramPrediction &p) {
    return p.busySeconds + p.exchangeWaitSeconds;
  };
  // The pipeline's span: until the last stage's last step ends (the
  // gradient buckets still running after it are no pipeline idle).
  double span = 0;
  for (const ProgramPrediction &p : programs) {
    span = std::max(span, p.stepsEndSeconds);
    if (!busiest || working(p) > working(*busiest))
      busiest = &p;
  }
  if (!busiest || working(*busiest) <= 0)
    return 0;
  return std::max(0.0, span - working(*busiest)) / working(*busiest);
}

double Prediction::expectedBubble() const {
  return static_cast<double>(stages - 1) /
         (static_cast<double>(chunks) * microBatches);
}

int64_t shoal::planner::planWorldSize(const plan::Plan &plan) {
  int64_t world = 1;
  for (const auto &a : plan.mesh().axes()) {
    int64_t n = std::max<int64_t>(a.size(), 0);
    world = n && world > INT64_MAX / n ? INT64_MAX : world * n;
  }
  return world;
}

void shoal::planner::checkWorldSize(const plan::Plan &plan,
                                    const Cluster &cluster) {
  int64_t world = planWorldSize(plan);
  if (world != cluster.numDevices())
    throw SpecError(fmt::format("the plan is for {} ranks but the cluster has "
                                "{} devices",
                                world, cluster.numDevices()));
}

Prediction shoal::planner::simulate(const plan::Plan &plan,
                                    const Cluster &cluster,
                                    const CostModel &cost, bool byElementType) {
  checkWorldSize(plan, cluster);
  int64_t world = planWorldSize(plan);
  Prediction out;
  if (plan.has_pipeline()) {
    out.schedule = plan.pipeline().schedule();
    out.stages = std::max(1, plan.pipeline().stages());
    out.microBatches = std::max(1, plan.pipeline().micro_batches());
    out.chunks = std::max(1, plan.pipeline().chunks());
  }

  struct Step {
    int task;
    int mb;
    bool backward = false;
  };
  struct ProgState {
    const plan::Program *prog;
    int index = 0;          ///< the program's, in out.programs
    std::vector<int> ranks; ///< the world ranks it times (of the program's)
    Placed placed;
    std::vector<std::vector<int>> taskOps; ///< op indices per task
    std::vector<Step> steps;
    std::size_t next = 0;
    double clock = 0, busy = 0;
    /// Seconds its steps waited for their own exchanges (asynchronous
    /// tensor-parallel all-reduces, gradient buckets): exposed
    /// communication, not pipeline idle.
    double exchangeWait = 0;
    /// When its pipeline work ended (its first update, or its last step;
    /// -1 until then), and how long it then waited for the exchanges still
    /// running (the last gradient buckets).
    double stepsEnd = -1, tailWait = 0;
    std::vector<double> opSeconds; ///< per op; Send/Recv: 0
    std::vector<std::vector<double>> rankSeconds; ///< opTimes' perRank
    std::vector<AllReduceInfo> allReduces;
    int count = 1; ///< its ranks' micro-batches
    /// When its last exchange with other ranks began (-1: none).
    double syncAt = -1;
    std::map<std::string, double> byKind;
    /// The communication channels, one per group of axes (a
    /// communicator of the runtime's): when each one's last exchange ends;
    /// the exchanges they ran beside the compute, by kind; when each value
    /// exchanged beside the compute is ready; the values in each open
    /// bucket.
    std::map<std::vector<int>, double> commFree;
    std::map<std::string, double> overlapped;
    std::map<int, double> readyAt;
    std::map<std::vector<int>, std::vector<int>> bucketValues;
    std::map<int, std::vector<int>> bucketOf; ///< value -> its bucket's axes
    /// Per op, the op holding the weight copy it computes (-1: none), and
    /// the holders made this step (the executor casts a weight once).
    std::vector<int> weightCopyOf;
    std::set<int> copiesMade;
    double lastExchange() const {
      double end = 0;
      for (const auto &[axes, free] : commFree)
        end = std::max(end, free);
      return end;
    }
  };
  std::vector<ProgState> progs;
  for (const plan::Program &prog : plan.programs()) {
    ProgState s;
    s.prog = &prog;
    s.index = static_cast<int>(out.programs.size());
    s.placed = placeOf(plan, prog);
    ProgramPrediction pp;
    pp.role = prog.role();
    pp.ranks = s.placed.ranksOver(s.placed.deviceAxes());
    for (int r : pp.ranks)
      if (r < 0 || r >= world)
        throw SpecError(fmt::format("program '{}' places a rank at {}, "
                                    "outside the world of {}",
                                    prog.role(), r, world));
    pp.capacityBytes = 1e300;
    for (int r : pp.ranks)
      pp.capacityBytes =
          std::min(pp.capacityBytes,
                   cluster.groupOf(r).device.memoryGiB * 1024.0 * 1024 * 1024);
    out.programs.push_back(pp);

    // Tasks: the program's, or one holding every op.
    std::map<std::string, int> taskIndex;
    for (int t = 0; t < prog.tasks_size(); ++t)
      taskIndex[prog.tasks(t)] = t;
    s.taskOps.resize(std::max(1, prog.tasks_size()));
    for (int i = 0; i < prog.ops_size(); ++i) {
      auto it = taskIndex.find(prog.ops(i).task_graph());
      s.taskOps[it == taskIndex.end() ? 0 : it->second].push_back(i);
    }
    int m = std::max(1, prog.num_micro_batches());
    // Ranks by their number of micro-batches (Program.micro_batch_shares,
    // in mesh rank order): each count is simulated on its own ranks.
    std::map<int, std::vector<int>> byCount;
    {
      std::size_t q = 0;
      for (const auto &share : prog.micro_batch_shares())
        for (int k = 0; k < share.ranks() && q < pp.ranks.size(); ++k)
          byCount[share.micro_batches()].push_back(pp.ranks[q++]);
      if (byCount.empty() || q != pp.ranks.size())
        byCount = {{m, pp.ranks}};
    }
    // The schedule as the runtime runs it (PlanLoader): a training plan's
    // backward steps too; with fewer micro-batches than written, a task that
    // runs once (at the last micro-batch) runs at the rank's last.
    std::vector<char> onlyLast(s.taskOps.size(), m > 1);
    for (const auto &st : prog.schedule())
      if (st.task() >= 0 && st.task() < static_cast<int>(onlyLast.size()) &&
          st.micro_batch() != m - 1)
        onlyLast[st.task()] = 0;
    auto stepsFor = [&](int c) {
      std::vector<Step> steps;
      if (prog.schedule_size()) {
        for (const auto &st : prog.schedule()) {
          if (st.backward() && !plan.has_training())
            continue;
          int j = st.micro_batch();
          if (c != m && st.task() >= 0 &&
              st.task() < static_cast<int>(onlyLast.size()) &&
              onlyLast[st.task()])
            j = c - 1;
          else if (j >= c)
            continue;
          steps.push_back({st.task(), j, st.backward()});
        }
      } else {
        for (int t = 0; t < static_cast<int>(s.taskOps.size()); ++t)
          for (int mb = 0; mb < c; ++mb)
            steps.push_back({t, mb});
      }
      return steps;
    };

    // Each count on its own ranks.
    const SharedBuffers shared = sharedBuffers(prog, s.placed);
    s.weightCopyOf = shared.weightCopyOf;
    for (auto &[count, countRanks] : byCount) {
      s.ranks = countRanks;
      s.steps = stepsFor(count);
      s.count = count;
      s.opSeconds = opTimes(prog, s.placed, s.ranks, cost, byElementType,
                            shared, s.allReduces, s.rankSeconds);
      progs.push_back(s);
    }
  }
  if (plan.programs_size() && plan.programs(0).inputs_size() &&
      plan.programs(0).inputs(0).global_type().shape_size())
    out.batch =
        static_cast<double>(plan.programs(0).inputs(0).global_type().shape(0));

  // Gradient buckets (the executor's --grad-bucket-mb; absent: 25 MiB).
  const double bucketBytes = plan.has_training()
                                 ? (plan.training().has_grad_bucket_mb()
                                        ? plan.training().grad_bucket_mb()
                                        : 25.0) *
                                       (1 << 20)
                                 : 0;

  // Replay: a step runs once every message it receives has been sent.
  std::map<std::pair<int, int>, double> arrival; // (transfer id, mb)
  std::map<std::pair<int, int>, double> linkFree; // (src, dst): busy until
  bool progress = true;
  auto done = [&]() {
    return std::all_of(progs.begin(), progs.end(), [](const ProgState &s) {
      return s.next == s.steps.size();
    });
  };
  while (!done() && progress) {
    progress = false;
    for (std::size_t p = 0; p < progs.size(); ++p) {
      ProgState &s = progs[p];
      while (s.next < s.steps.size()) {
        const Step &st = s.steps[s.next];
        const std::vector<int> &ops = s.taskOps.at(st.task);
        bool ready = true;
        // A Send or Recv of a step's sum (last_micro_batch) runs only at
        // the last micro-batch.
        auto skipped = [&](const plan::Op &op) {
          if (st.mb == s.count - 1 ||
              (!is(op, rt::OpKind::Send) && !is(op, rt::OpKind::Recv)))
            return false;
          auto it = op.attrs().find("last_micro_batch");
          return it != op.attrs().end() && it->second.i() != 0;
        };
        for (int i : ops)
          if (is(s.prog->ops(i), rt::OpKind::Recv) &&
              !skipped(s.prog->ops(i)) &&
              !arrival.count({s.prog->ops(i).transfer().id(), st.mb}))
            ready = false;
        if (!ready)
          break;
        double t = s.clock, start = -1, busy = 0, waited = 0;
        // Open buckets by group: bytes waiting to be all-reduced.
        std::map<std::vector<int>, std::pair<const AllReduceInfo *, double>>
            open;
        auto spend = [&](double seconds, const std::string &kind) {
          t += seconds;
          busy += seconds;
          s.byKind[kind] += seconds;
        };
        // An exchange started beside the compute: it runs on its group's
        // channel after the ones before it there, and the ops after it go
        // on. Returns when it ends.
        auto launch = [&](const std::vector<int> &axes, double seconds,
                          const std::string &kind) {
          double &free = s.commFree[axes];
          double begin = std::max(t, free);
          free = begin + seconds;
          s.overlapped[kind] += seconds;
          out.events.push_back({s.index, kind, begin, seconds, 1});
          return free;
        };
        auto waitUntil = [&](double when, const char *what,
                             bool afterSteps = false) {
          if (when > t) {
            out.events.push_back({s.index, what, t, when - t});
            (afterSteps ? s.tailWait : waited) += when - t;
          }
          t = std::max(t, when);
        };
        // Each rank's time (and its ops' kinds) since the ranks last met:
        // they wait for each other only when they communicate, so with
        // uneven blocks a rank's larger part of one op and another's
        // slower whole op add up before they meet.
        std::vector<double> since(s.ranks.size(), 0);
        std::vector<std::map<std::string, double>> sinceKinds(s.ranks.size());
        auto meet = [&] {
          std::size_t last = 0;
          for (std::size_t q = 1; q < since.size(); ++q)
            if (since[q] > since[last])
              last = q;
          if (since.empty() || since[last] <= 0)
            return;
          for (const auto &[kind, seconds] : sinceKinds[last])
            spend(seconds, kind);
          std::fill(since.begin(), since.end(), 0.0);
          for (auto &m : sinceKinds)
            m.clear();
        };
        // Launches an open bucket (the executor's flushBucket).
        auto flush = [&](const std::vector<int> &axes) {
          auto &[info, bytes] = open[axes];
          if (bytes <= 0)
            return;
          double end = launch(axes, info->seconds(cost, bytes), "AllReduce");
          for (int v : s.bucketValues[axes]) {
            s.readyAt[v] = end;
            s.bucketOf.erase(v);
          }
          s.bucketValues[axes].clear();
          bytes = 0;
        };
        auto flushAll = [&] {
          for (auto &[axes, bucket] : open)
            flush(axes);
        };
        for (int i : ops) {
          const plan::Op &op = s.prog->ops(i);
          // A weight's copy made earlier in the step is not made again.
          if (int first = s.weightCopyOf[i];
              first >= 0 && !s.copiesMade.insert(first).second)
            continue;
          // A reader of a value exchanged beside the compute waits for it;
          // an optimizer, which the executor defers to the step's end, for
          // every exchange.
          if (rt::opKindHas(op.kind(), rt::kOptimizer)) {
            meet();
            flushAll();
            // The pipeline's work ends here; what the update then waits
            // for (the last gradient buckets) is no pipeline idle.
            if (s.stepsEnd < 0)
              s.stepsEnd = t;
            waitUntil(s.lastExchange(), "wait for the exchanges",
                      /*afterSteps=*/true);
            s.readyAt.clear();
          }
          for (int v : op.inputs()) {
            if (auto it = s.bucketOf.find(v); it != s.bucketOf.end()) {
              std::vector<int> axes = it->second;
              meet();
              flush(axes);
            }
            if (auto it = s.readyAt.find(v); it != s.readyAt.end()) {
              meet();
              waitUntil(it->second, "wait for an exchange");
              s.readyAt.erase(it);
            }
          }
          if (const std::vector<double> &mine = s.rankSeconds[i];
              mine.size() == since.size() && !mine.empty()) {
            if (start < 0)
              start = t;
            out.flopsPerStep += static_cast<double>(op.flops()) *
                                static_cast<double>(s.ranks.size());
            for (std::size_t q = 0; q < since.size(); ++q) {
              since[q] += mine[q];
              sinceKinds[q][op.kind()] += mine[q];
            }
            continue;
          }
          // A bucketed gradient's all-reduce (with uneven blocks): each
          // rank copies it into the bucket and goes on; the ranks meet
          // where the bucket is exchanged.
          const AllReduceInfo &a = s.allReduces[i];
          bool goesOn = a.present && a.bucketable && bucketBytes > 0 &&
                        !a.accumulates && a.copyPerRank.size() == since.size();
          if (goesOn) {
            if (start < 0)
              start = t;
            for (std::size_t q = 0; q < since.size(); ++q) {
              since[q] += a.copyPerRank[q];
              sinceKinds[q]["AllReduce (local)"] += a.copyPerRank[q];
            }
          } else {
            meet();
          }
          if (a.present) {
            if (start < 0)
              start = t;
            const char *kind = a.scatter ? "ReduceScatter" : "AllReduce";
            if (!goesOn)
              spend(a.accumulates && st.mb > 0 ? a.addSeconds : a.copySeconds,
                    fmt::format("{} (local)", kind));
            if (!a.exchanges() || (a.accumulates && st.mb != s.count - 1))
              continue;
            s.syncAt = t;
            int result = op.outputs_size() ? op.outputs(0) : -1;
            if (a.bucketable && bucketBytes > 0) {
              auto &[info, b] = open[a.axes];
              info = &a;
              b += a.bytes;
              if (result >= 0) {
                s.bucketValues[a.axes].push_back(result);
                s.bucketOf[result] = a.axes;
              }
              if (b >= bucketBytes) {
                meet();
                flush(a.axes);
              }
            } else if (a.async) {
              double end = launch(a.axes, a.exchangeSeconds, kind);
              if (result >= 0)
                s.readyAt[result] = end;
            } else {
              // Synchronous: after the exchanges before it on its channel.
              double &free = s.commFree[a.axes];
              waitUntil(free, "wait for the exchanges");
              spend(a.exchangeSeconds, kind);
              free = t;
            }
            continue;
          }
          if (skipped(op))
            continue;
          if (is(op, rt::OpKind::Recv)) {
            double a = arrival[{op.transfer().id(), st.mb}];
            if (a > t)
              out.events.push_back({s.index,
                                    fmt::format("wait {}", op.transfer().id()),
                                    t, a - t});
            t = std::max(t, a);
            continue;
          }
          if (start < 0)
            start = t;
          out.flopsPerStep += static_cast<double>(op.flops()) *
                              static_cast<double>(s.ranks.size());
          spend(s.opSeconds[i], op.kind());
          if (is(op, rt::OpKind::Send)) {
            double bytes =
                op.inputs_size() ? valueBytes(s.prog->values(op.inputs(0))) : 0;
            int src = s.ranks.front();
            int dst = std::min<int>(
                static_cast<int>(op.transfer().dst().placement().offset()),
                world - 1);
            // Sends are asynchronous: a link carries one message at a time
            // (its bandwidth), and each arrives a latency after it left.
            double latency = cost.sendRecvSeconds(src, dst, 0);
            double &free = linkFree[{src, dst}];
            double leaves = std::max(t, free);
            free = leaves + cost.sendRecvSeconds(src, dst, bytes) - latency;
            arrival[{op.transfer().id(), st.mb}] = free + latency;
          }
        }
        meet();
        // The task's last buckets go out when it ends.
        flushAll();
        std::string task =
            s.prog->tasks_size() ? s.prog->tasks(st.task) : s.prog->role();
        out.events.push_back(
            {s.index,
             fmt::format("{}{} {}", st.backward ? 'B' : 'F', st.mb, task),
             start < 0 ? t : start, busy});
        s.busy += busy;
        s.exchangeWait += waited;
        s.clock = t;
        ++s.next;
        progress = true;
      }
    }
  }
  if (!done())
    throw SpecError("the plan's schedules wait on each other (a receive "
                    "whose send never comes); it cannot be replayed");
  // The step ends when the channel's last exchange has (the executor waits
  // for every exchange before the step's updates).
  for (ProgState &s : progs) {
    if (s.stepsEnd < 0)
      s.stepsEnd = s.clock;
    s.tailWait += std::max(0.0, s.lastExchange() - s.clock);
    s.clock = std::max(s.clock, s.lastExchange());
  }
  // Ranks of one program with different numbers of micro-batches meet at
  // their last all-reduce (the gradients' last bucket, which the optimizer
  // waits for): each goes on from when the last of them gets there.
  std::map<int, double> meet;
  for (const ProgState &s : progs)
    if (s.syncAt >= 0)
      meet[s.index] = std::max(meet[s.index], s.syncAt);
  for (ProgState &s : progs)
    if (s.syncAt >= 0)
      s.clock += meet[s.index] - s.syncAt;
  // A program is as late and as busy as its slowest ranks.
  for (const ProgState &s : progs) {
    ProgramPrediction &pp = out.programs[s.index];
    pp.finishSeconds = std::max(pp.finishSeconds, s.clock);
    if (s.busy >= pp.busySeconds) {
      pp.secondsByKind = s.byKind;
      pp.overlappedByKind = s.overlapped;
      pp.exchangeWaitSeconds = s.exchangeWait;
      pp.tailWaitSeconds = s.tailWait;
    }
    pp.stepsEndSeconds = std::max(pp.stepsEndSeconds, s.stepsEnd);
    pp.busySeconds = std::max(pp.busySeconds, s.busy);
    out.stepSeconds = std::max(out.stepSeconds, s.clock);
  }
  return out;
}

std::string shoal::planner::chromeTrace(const Prediction &p) {
  std::string json = "{\"traceEvents\":[";
  bool first = true;
  for (std::size_t i = 0; i < p.programs.size(); ++i) {
    json += fmt::format("{}{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},"
                        "\"args\":{{\"name\":\"{} (predicted)\"}}}}",
                        first ? "" : ",", i, p.programs[i].role);
    first = false;
  }
  for (const SimEvent &e : p.events)
    json +=
        fmt::format(",{{\"ph\":\"X\",\"name\":\"{}\",\"pid\":{},\"tid\":{},"
                    "\"ts\":{:.3f},\"dur\":{:.3f}}}",
                    e.name, e.program, e.lane, e.start * 1e6, e.seconds * 1e6);
  return json + "]}\n";
}
