//===- ReportAnalysis.cpp - What the parallelism report says ----*- C++ -*-===//
//
// Reads a partitioned module and finds, per TaskGraph, where it runs, which
// collectives it contains and why, what it sends to and receives from other
// TaskGraphs, and where it computes work its strategy should have split.
// A collective's reason is the `shoal.reason` its inserting pass wrote, or
// one derived from the IR: who produces its input (an all_reduce sums the
// partial results of a contraction) and who consumes its result (an
// all_gather feeds an op that needs the value whole). The two printers are
// ReportText.cpp and ReportDot.cpp.
//
//===----------------------------------------------------------------------===//

#include "ReportInternal.h"
#include "ShardingUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>

using namespace mlir;
using namespace shoal;
using namespace shoal::report;

namespace {

//===----------------------------------------------------------------------===//
// Formatting
//===----------------------------------------------------------------------===//

/// The ONNX node name of a location (the first name in a fused one).
std::string getNodeName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string name = getNodeName(inner); !name.empty())
        return name;
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return getNodeName(call.getCallee());
  return "";
}

std::string getNodeName(Operation *op) {
  return op ? getNodeName(op->getLoc()) : "";
}

/// `shoal.matmul`, or `shoal.onnx (ONNX Slice)` for an op kept as ONNX.
std::string getOpLabel(Operation *op) {
  std::string label = op->getName().getStringRef().str();
  if (auto onnx = dyn_cast<OnnxOp>(op))
    label += " (ONNX " + onnx.getOpType().str() + ")";
  return label;
}

/// `2x16x64xf32` for `tensor<2x16x64xf32>`.
std::string formatType(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  auto rt = dyn_cast<RankedTensorType>(type);
  if (!rt) {
    os << type;
    return s;
  }
  for (int64_t d : rt.getShape()) {
    if (ShapedType::isDynamic(d))
      os << "?";
    else
      os << d;
    os << "x";
  }
  os << rt.getElementType();
  return s;
}

} // namespace

std::string shoal::report::formatBytes(int64_t bytes) {
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = bytes;
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return llvm::formatv("{0:F1} {1}", value, units[unit]).str();
}

std::string shoal::report::formatRanks(ArrayRef<int64_t> ranks) {
  SmallVector<int64_t> sorted(ranks);
  llvm::sort(sorted);
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string s;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1)
      ++j;
    if (!s.empty())
      s += ",";
    if (j - i >= 2) {
      s += std::to_string(sorted[i]) + "-" + std::to_string(sorted[j]);
    } else {
      for (size_t k = i; k <= j; ++k)
        s += (k == i ? "" : ",") + std::to_string(sorted[k]);
    }
    i = j + 1;
  }
  return s;
}

std::string shoal::report::formatMesh(MeshAttr mesh) {
  std::string s;
  for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape())) {
    if (!s.empty())
      s += " x ";
    s += cast<StringAttr>(axis).getValue().str() + "=" + std::to_string(size);
  }
  return s;
}

std::string shoal::report::formatMesh(TaskGraphOp tg) {
  MeshAttr mesh = tg.getMeshAttr();
  if (tg.getStrategy() != Strategy::replicate)
    return formatMesh(mesh);
  // Every device axis of a replicate TaskGraph splits the batch: data
  // parallelism over all of them.
  std::string s;
  int64_t replicas = 1;
  for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape())) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name == ShoalDialect::kMicroBatchAxis)
      s += (s.empty() ? "" : " x ") + name.str() + "=" + std::to_string(size);
    else
      replicas *= size;
  }
  return s + (s.empty() ? "" : " x ") + "dp=" + std::to_string(replicas);
}

std::string shoal::report::displayAxis(StringRef axis, TaskGraphOp tg) {
  if (tg && tg.getStrategy() == Strategy::replicate &&
      axis != ShoalDialect::kMicroBatchAxis)
    return "dp";
  return axis.str();
}

namespace {

/// `tp` or `dp,tp`; in a replicate TaskGraph `tg` every device axis is `dp`.
std::string formatAxes(ArrayAttr axes, TaskGraphOp tg) {
  SmallVector<std::string> names;
  for (Attribute a : axes) {
    std::string n = displayAxis(cast<StringAttr>(a).getValue(), tg);
    if (!llvm::is_contained(names, n))
      names.push_back(n);
  }
  return llvm::join(names, ",");
}

/// `tp` or `dp,tp`.
std::string formatAxes(ArrayAttr axes) {
  std::string s;
  for (Attribute a : axes) {
    if (!s.empty())
      s += ",";
    s += cast<StringAttr>(a).getValue().str();
  }
  return s;
}

/// `[(mb,dp), -, tp]`: per dimension the axes it is split over, `-` whole.
std::string formatSharding(ShardingAttr sharding) {
  std::string s = "[";
  for (auto [i, dim] : llvm::enumerate(sharding.getDims())) {
    if (i)
      s += ", ";
    auto axes = cast<ArrayAttr>(dim);
    if (axes.empty())
      s += "-";
    else if (axes.size() == 1)
      s += formatAxes(axes);
    else
      s += "(" + formatAxes(axes) + ")";
  }
  return s + "]";
}

} // namespace

//===----------------------------------------------------------------------===//
// Meshes and ranks
//===----------------------------------------------------------------------===//

int64_t shoal::report::getMicroBatches(MeshAttr mesh) {
  return mesh ? std::max<int64_t>(
                    1, mesh.getAxisSize(ShoalDialect::kMicroBatchAxis))
              : 1;
}

namespace {

/// World ranks of `mesh` placed at `offset` with `stride` (#shoal.layout):
/// the rank at device coordinates c is offset + c[0] * stride + the
/// row-major index of c[1:].
SmallVector<int64_t> getRanks(MeshAttr mesh, int64_t offset,
                              std::optional<int64_t> stride) {
  SmallVector<int64_t> dims;
  for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape()))
    if (cast<StringAttr>(axis).getValue() != ShoalDialect::kMicroBatchAxis)
      dims.push_back(size);
  if (dims.empty())
    return {offset};
  int64_t inner = 1;
  for (int64_t d : ArrayRef(dims).drop_front())
    inner *= d;
  SmallVector<int64_t> ranks;
  for (int64_t c0 = 0; c0 < dims[0]; ++c0)
    for (int64_t j = 0; j < inner; ++j)
      ranks.push_back(offset + c0 * stride.value_or(inner) + j);
  return ranks;
}

SmallVector<int64_t> getRanks(TaskGraphOp tg) {
  MeshAttr mesh = tg.getMeshAttr();
  if (!mesh)
    return llvm::to_vector(llvm::seq<int64_t>(0, tg.getDevices()));
  if (auto p =
          tg->getAttrOfType<DenseI64ArrayAttr>(ShoalDialect::kPlacementAttr);
      p && p.size() == 2)
    return getRanks(mesh, p[0], p[1]);
  return getRanks(mesh, 0, std::nullopt);
}

std::string formatLayout(LayoutAttr layout) {
  return formatSharding(layout.getSharding()) + " on ranks " +
         formatRanks(getRanks(layout.getMesh(), layout.getOffset(),
                              layout.getStride()));
}

bool usesAxis(ShardingAttr sharding, StringRef axis) {
  for (Attribute dim : sharding.getDims())
    for (Attribute a : cast<ArrayAttr>(dim))
      if (cast<StringAttr>(a).getValue() == axis)
        return true;
  return false;
}

bool hasAxis(ArrayAttr axes, StringRef axis) {
  return llvm::any_of(axes, [&](Attribute a) {
    return cast<StringAttr>(a).getValue() == axis;
  });
}

//===----------------------------------------------------------------------===//
// Reasons
//===----------------------------------------------------------------------===//

bool isCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, LocalSliceOp, AllToAllOp,
             ReduceScatterOp>(op);
}

ArrayAttr getCollectiveAxes(Operation *op) {
  return llvm::TypeSwitch<Operation *, ArrayAttr>(op)
      .Case<AllReduceOp, AllGatherOp, LocalSliceOp, AllToAllOp,
            ReduceScatterOp>([](auto c) { return c.getAxes(); })
      .Default([](Operation *) { return ArrayAttr(); });
}

/// The value a chain of collectives starts from.
Value skipCollectivesBack(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    // Also through shoal-mixed-precision's casts, to the product.
    if (!isCollective(def) && !def->hasAttr(kPrecisionCastAttr))
      break;
    v = def->getOperand(0);
  }
  return v;
}

/// The first op that reads `v`, looking through further collectives.
Operation *getConsumer(Value v) {
  Operation *first = nullptr;
  for (Operation *user : v.getUsers()) {
    Operation *op = user;
    // Through further collectives, shoal-mixed-precision's casts and the
    // Slices that drop an uneven gather's padding.
    if (isCollective(op) || op->hasAttr(kPrecisionCastAttr) ||
        op->hasAttr(kUnpadAttr))
      if (Operation *next = getConsumer(op->getResult(0)))
        op = next;
    if (!first ||
        (op->getBlock() == first->getBlock() && op->isBeforeInBlock(first)))
      first = op;
  }
  return first;
}

bool isContraction(Operation *op) {
  return isa_and_nonnull<MatMulOp, GemmOp, AttentionOp, AttentionGradOp>(op);
}

bool isConvolution(Operation *op) {
  auto onnx = dyn_cast_or_null<OnnxOp>(op);
  return onnx &&
         (onnx.getOpType() == "Conv" || onnx.getOpType() == "ConvTranspose");
}

/// Whether shoal-partition split weight `w` over `axis` (its
/// `shoal.sharding`).
bool isSplitOver(WeightOp w, StringRef axis) {
  if (auto list = w->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr))
    for (Attribute a : list)
      if (auto s = dyn_cast<ShardingAttr>(a); s && usesAxis(s, axis))
        return true;
  return false;
}

/// The weight whose optimizer update reads `v` as its gradient, directly
/// or through a few local_slice and same-type elementwise ops (micro-batch
/// accumulation, clipping) and TaskGraph outputs; "" if none does.
std::string getGradientOf(Value v) {
  SmallVector<Value> work{v};
  for (int depth = 0; depth < 6 && !work.empty(); ++depth) {
    SmallVector<Value> next;
    for (Value value : work) {
      for (OpOperand &use : value.getUses()) {
        Operation *user = use.getOwner();
        if (isa<AdamWOp, SGDOp>(user) && use.getOperandNumber() == 1) {
          auto w = user->getOperand(0).getDefiningOp<WeightOp>();
          if (w && w.getType() == value.getType())
            return w.getName().str();
        } else if (isa<YieldOp>(user)) {
          // Into the TaskGraph that reads this output (a training step's
          // optimizer TaskGraph).
          Value out = user->getParentOp()->getResult(use.getOperandNumber());
          for (OpOperand &outUse : out.getUses())
            if (auto reader = dyn_cast<TaskGraphOp>(outUse.getOwner()))
              next.push_back(
                  reader.getBody().getArgument(outUse.getOperandNumber()));
        } else if (isa<LocalSliceOp>(user) ||
                   (isa<AddOp, SubOp, MulOp, DivOp>(user) &&
                    user->getResult(0).getType() == value.getType())) {
          next.push_back(user->getResult(0));
        }
      }
    }
    work = std::move(next);
  }
  return "";
}

std::string getPhase(Operation *op) {
  if (!op)
    return "";
  if (auto p = op->getAttrOfType<StringAttr>(ShoalDialect::kPhaseAttr))
    return p.getValue().str();
  return "";
}

/// Whether `axis` cuts the batch in `tg`: `dp` always; in a replicate
/// TaskGraph every device axis does.
bool isBatchAxis(StringRef axis, TaskGraphOp tg) {
  return axis == "dp" ||
         (axis == "tp" && tg.getStrategy() == Strategy::replicate);
}

} // namespace

namespace {

/// The name of a graph input or output.
std::string argName(func::FuncOp func, unsigned i, bool result) {
  auto name = result ? func.getResultAttrOfType<StringAttr>(i, "shoal.name")
                     : func.getArgAttrOfType<StringAttr>(i, "shoal.name");
  if (name)
    return name.getValue().str();
  return "#" + std::to_string(i);
}

/// The global batch: the batch dimension of the first graph input, times
/// the sizes of the axes it is split over in the first TaskGraph that reads
/// it.
int64_t getGlobalBatch(func::FuncOp func) {
  unsigned bd = getBatch(func).first;
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() <= bd || !type.hasStaticShape())
      continue;
    int64_t batch = type.getDimSize(bd);
    auto sharding = func.getArgAttrOfType<ShardingAttr>(
        arg.getArgNumber(), ShoalDialect::kShardingAttr);
    TaskGraphOp reader;
    for (Operation *user : arg.getUsers()) {
      if (auto tg = dyn_cast<TaskGraphOp>(user))
        reader = tg;
      else if (auto bridge = dyn_cast<BridgeOp>(user))
        for (Operation *u : bridge.getResult().getUsers())
          if (auto tg = dyn_cast<TaskGraphOp>(u))
            reader = tg;
      if (reader)
        break;
    }
    if (!sharding || sharding.getDims().size() <= bd || !reader ||
        !reader.getMeshAttr())
      return batch;
    for (StringRef axis : sharding.getDimAxes(bd))
      batch *= std::max<int64_t>(1, reader.getMeshAttr().getAxisSize(axis));
    return batch;
  }
  return 0;
}

} // namespace

void ReportBuilder::buildFunc(func::FuncOp func) {
  Block &entry = func.getBody().front();
  for (auto tg : entry.getOps<TaskGraphOp>()) {
    // A TaskGraph with nothing in it (a scope whose ops all moved to
    // another, as the backward of a `"*"` scope's unclaimed ops) is left
    // out.
    if (llvm::all_of(tg.getBody().front(),
                     [](Operation &op) { return isa<YieldOp>(op); }))
      continue;
    index[tg] = graphs.size();
    TaskGraphInfo info;
    info.tg = tg;
    info.ranks = getRanks(tg);
    graphs.push_back(std::move(info));
    micro = std::max(micro, getMicroBatches(tg.getMeshAttr()));
    if (auto s = tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr))
      stages.insert(s.getInt());
  }

  // Graph inputs and outputs, and which TaskGraphs they meet.
  size_t firstInput = graphInputs.size();
  for (BlockArgument arg : func.getArguments()) {
    std::string id = "in" + std::to_string(graphInputs.size());
    graphInputs.push_back({id, argName(func, arg.getArgNumber(), false) +
                                   "\\n" + formatType(arg.getType())});
    for (Operation *user : arg.getUsers())
      if (auto tg = dyn_cast<TaskGraphOp>(user))
        edges.push_back({id, nodeId(tg), "", ""});
  }
  Operation *ret = entry.getTerminator();
  for (OpOperand &use : ret->getOpOperands()) {
    std::string id = "out" + std::to_string(graphOutputs.size());
    graphOutputs.push_back({id, argName(func, use.getOperandNumber(), true) +
                                    "\\n" + formatType(use.get().getType())});
    if (auto tg = use.get().getDefiningOp<TaskGraphOp>())
      edges.push_back({nodeId(tg), id, "", ""});
  }

  // Sends and receives pair up by id.
  DenseMap<int64_t, TaskGraphOp> senders, receivers;
  func.walk([&](SendOp send) {
    if (auto tg = send->getParentOfType<TaskGraphOp>())
      senders[send.getId()] = tg;
  });
  func.walk([&](RecvOp recv) {
    if (auto tg = recv->getParentOfType<TaskGraphOp>())
      receivers[recv.getId()] = tg;
  });

  // Bridges (before shoal-pipeline turns them into send/recv).
  for (auto bridge : entry.getOps<BridgeOp>()) {
    Value src = bridge.getInput();
    std::string from;
    std::string fromId;
    if (auto tg = src.getDefiningOp<TaskGraphOp>()) {
      from = "\"" + tg.getSymName().str() + "\"";
      fromId = nodeId(tg);
    } else if (auto arg = dyn_cast<BlockArgument>(src)) {
      from = "graph input '" + argName(func, arg.getArgNumber(), false) + "'";
      fromId = "in" + std::to_string(firstInput + arg.getArgNumber());
    }
    for (Operation *user : bridge.getResult().getUsers()) {
      auto tg = dyn_cast<TaskGraphOp>(user);
      if (!tg)
        continue;
      int64_t bytes = getTensorBytes(bridge.getResult().getType());
      bridges.push_back(llvm::formatv("bridge {0} -> \"{1}\": {2} -> {3}, "
                                      "{4} -> {5}",
                                      from, tg.getSymName(),
                                      formatType(bridge.getInput().getType()),
                                      formatType(bridge.getResult().getType()),
                                      formatLayout(bridge.getFrom()),
                                      formatLayout(bridge.getTo()))
                            .str());
      edges.push_back({fromId, nodeId(tg),
                       "bridge\\n" + formatType(bridge.getResult().getType()) +
                           "\\n" + formatBytes(bytes) + " per rank",
                       "dashed"});
    }
  }

  int64_t globalBatch = getGlobalBatch(func);
  for (TaskGraphInfo &info : graphs) {
    if (info.tg->getParentOfType<func::FuncOp>() != func)
      continue;
    TaskGraphOp tg = info.tg;
    // Inputs, and the TaskGraphs on the same devices that feed it (their
    // outputs grouped per producer).
    SmallVector<std::string> inputs;
    SmallVector<std::pair<TaskGraphOp, SmallVector<int64_t>>> producers;
    for (Value in : tg.getInputs()) {
      if (auto arg = dyn_cast<BlockArgument>(in)) {
        inputs.push_back("graph input '" +
                         argName(func, arg.getArgNumber(), false) + "'");
      } else if (auto producer = in.getDefiningOp<TaskGraphOp>()) {
        auto it = llvm::find_if(producers,
                                [&](auto &p) { return p.first == producer; });
        if (it == producers.end()) {
          inputs.push_back("");
          producers.push_back({producer, {}});
          it = std::prev(producers.end());
        }
        it->second.push_back(cast<OpResult>(in).getResultNumber());
      } else if (in.getDefiningOp<BridgeOp>()) {
        inputs.push_back("a bridge");
      }
    }
    // The producers' entries fill the empty places, in order.
    auto slot = inputs.begin();
    for (auto &[producer, numbers] : producers) {
      slot = std::find(slot, inputs.end(), "");
      *slot =
          llvm::formatv("\"{0}\" output{1} {2}", producer.getSymName(),
                        numbers.size() == 1 ? "" : "s", formatRanks(numbers))
              .str();
      std::string label =
          numbers.size() == 1
              ? formatType(producer.getResult(numbers.front()).getType())
              : std::to_string(numbers.size()) + " values";
      edges.push_back({nodeId(producer), nodeId(tg), label, ""});
    }
    info.inputs = llvm::join(inputs, "; ");

    tg.getBody().walk([&](Operation *op) {
      if (isCollective(op)) {
        describeCollective(info, op);
      } else if (auto send = dyn_cast<SendOp>(op)) {
        TaskGraphOp to = receivers.lookup(send.getId());
        int64_t bytes = getTensorBytes(send.getInput().getType());
        std::string toName = to ? to.getSymName().str() : "?";
        std::string node = getNodeName(send.getInput().getDefiningOp());
        if (!node.empty())
          node = " at " + node;
        info.sends.push_back(
            {llvm::formatv("send {0} to \"{1}\"{2}: {3}, {4} per rank, "
                           "{5} -> {6}",
                           send.getId(), toName, node,
                           formatType(send.getInput().getType()),
                           formatBytes(bytes), formatLayout(send.getFrom()),
                           formatLayout(send.getTo()))
                 .str(),
             bytes});
        if (to)
          edges.push_back(
              {nodeId(tg), nodeId(to),
               llvm::formatv("send/recv {0}\\n{1}\\n{2} per rank", send.getId(),
                             formatType(send.getInput().getType()),
                             formatBytes(bytes))
                   .str(),
               "bold"});
      } else if (auto recv = dyn_cast<RecvOp>(op)) {
        TaskGraphOp from = senders.lookup(recv.getId());
        int64_t bytes = getTensorBytes(recv.getResult().getType());
        info.recvs.push_back(
            {llvm::formatv("recv {0} from \"{1}\": {2}, {3} per rank, "
                           "{4} -> {5}",
                           recv.getId(), from ? from.getSymName() : "?",
                           formatType(recv.getResult().getType()),
                           formatBytes(bytes), formatLayout(recv.getFrom()),
                           formatLayout(recv.getTo()))
                 .str(),
             bytes});
      }
    });
    addWarnings(info, globalBatch);
  }
}

void ReportBuilder::describeCollective(TaskGraphInfo &info, Operation *op) {
  CollectiveInfo c;
  c.op = op;
  c.kind = op->getName().stripDialect().str();
  ArrayAttr axes = getCollectiveAxes(op);
  c.axes = formatAxes(axes, info.tg);
  Value input = op->getOperand(0);
  Value result = op->getResult(0);
  c.shapes = formatType(input.getType());
  if (input.getType() != result.getType())
    c.shapes += " -> " + formatType(result.getType());
  Operation *producer = skipCollectivesBack(input).getDefiningOp();
  Operation *consumer = getConsumer(result);

  if (auto ar = dyn_cast<AllReduceOp>(op)) {
    if (ar.getReduction() != "sum")
      c.dims = ar.getReduction().str();
    c.bytes = getTensorBytes(result.getType());
    c.node = getNodeName(producer);
    c.phase = getPhase(producer);
    if (std::string weight = getGradientOf(result); !weight.empty())
      c.reason = "gradient of '" + weight + "' summed over " + c.axes;
    else if (isContraction(producer))
      c.reason = "partial sums of a contraction split over " + c.axes;
    else if (producer)
      c.reason = "partial sums of '" + getOpLabel(producer) +
                 "' (a reduction split over " + c.axes + ")";
    else
      c.reason = "partial sums over " + c.axes;
  } else {
    if (auto g = dyn_cast<AllGatherOp>(op)) {
      c.dims = llvm::formatv("dim {0}", g.getDim()).str();
      c.bytes = getTensorBytes(result.getType());
    } else if (auto s = dyn_cast<LocalSliceOp>(op)) {
      c.dims = llvm::formatv("dim {0}", s.getDim()).str();
      c.bytes = 0;
    } else if (auto r = dyn_cast<ReduceScatterOp>(op)) {
      c.dims = llvm::formatv("dim {0}", r.getDim()).str();
      c.bytes = getTensorBytes(input.getType());
    } else if (auto a = dyn_cast<AllToAllOp>(op)) {
      c.dims = llvm::formatv("split {0} concat {1}", a.getSplitDim(),
                             a.getConcatDim())
                   .str();
      c.bytes = getTensorBytes(input.getType());
    }
    auto wants = [&]() -> std::string {
      if (isa<AllGatherOp>(op))
        return "whole over " + c.axes;
      if (auto s = dyn_cast<LocalSliceOp>(op))
        return llvm::formatv("split over {0} on dim {1}", c.axes, s.getDim())
            .str();
      if (auto r = dyn_cast<ReduceScatterOp>(op))
        return llvm::formatv("summed and split over {0} on dim {1}", c.axes,
                             r.getDim())
            .str();
      auto a = cast<AllToAllOp>(op);
      return llvm::formatv("split over {0} on dim {1}, not {2}", c.axes,
                           a.getSplitDim(), a.getConcatDim())
          .str();
    };
    if (!consumer) {
      c.node = getNodeName(producer);
      c.reason = "its result is unused";
    } else if (isa<YieldOp>(consumer)) {
      unsigned number = 0;
      Value v = result;
      while (!v.hasOneUse() || !isa<YieldOp>(*v.getUsers().begin())) {
        Operation *next = nullptr;
        for (Operation *u : v.getUsers())
          if (isCollective(u) || u->hasAttr(kUnpadAttr))
            next = u;
        if (!next)
          break;
        v = next->getResult(0);
      }
      for (OpOperand &use : v.getUses())
        if (isa<YieldOp>(use.getOwner()))
          number = use.getOperandNumber();
      c.node = getNodeName(producer);
      c.phase = getPhase(producer);
      c.reason =
          llvm::formatv("output {0} of the TaskGraph is {1}", number, wants())
              .str();
    } else if (auto send = dyn_cast<SendOp>(consumer)) {
      c.node = getNodeName(producer);
      c.phase = getPhase(producer);
      c.reason =
          llvm::formatv("send {0} takes it {1}", send.getId(), wants()).str();
    } else {
      c.node = getNodeName(consumer);
      c.phase = getPhase(consumer);
      std::string opName = getOpLabel(consumer);
      bool batch = llvm::all_of(axes, [&](Attribute a) {
        return isBatchAxis(cast<StringAttr>(a).getValue(), info.tg);
      });
      if (isa<AllGatherOp>(op) && batch)
        c.reason = "'" + opName + "' needs the batch whole over " + c.axes;
      else if (isa<AllGatherOp>(op))
        c.reason = "needed whole over " + c.axes + " by '" + opName + "'";
      else
        c.reason = "'" + opName + "' takes it " + wants();
      if (isa<BlockArgument>(skipCollectivesBack(input)))
        c.reason += " (a TaskGraph input)";
    }
  }
  if (c.phase.empty())
    c.phase = getPhase(op);
  if (c.node.empty())
    c.node = getNodeName(op);
  if (auto reason = op->getAttrOfType<StringAttr>(ShoalDialect::kReasonAttr))
    c.reason = reason.getValue().str();
  info.collectives.push_back(std::move(c));
}

namespace {

/// `/a` or `3 ops, /a to /c` for ops in block order.
std::string formatSpan(ArrayRef<Operation *> ops) {
  if (ops.size() == 1)
    return getNodeName(ops.front());
  return llvm::formatv("{0} ops, {1} to {2}", ops.size(),
                       getNodeName(ops.front()), getNodeName(ops.back()))
      .str();
}

/// The ops of `tg` that compute on activations: they read, directly or
/// not, a TaskGraph input or a received value.
DenseSet<Operation *> getActivationOps(TaskGraphOp tg) {
  DenseSet<Value> active(tg.getBody().args_begin(), tg.getBody().args_end());
  DenseSet<Operation *> ops;
  tg.getBody().walk([&](Operation *op) {
    if (isa<RecvOp>(op) || llvm::any_of(op->getOperands(), [&](Value v) {
          return active.contains(v);
        })) {
      ops.insert(op);
      active.insert(op->result_begin(), op->result_end());
    }
  });
  return ops;
}

} // namespace

void ReportBuilder::addWarnings(TaskGraphInfo &info, int64_t globalBatch) {
  TaskGraphOp tg = info.tg;
  MeshAttr mesh = tg.getMeshAttr();
  if (!mesh)
    return;
  int64_t devices = std::max<int64_t>(1, mesh.getAxisSize("dp")) *
                    std::max<int64_t>(1, mesh.getAxisSize("tp"));
  int64_t tp = mesh.getAxisSize("tp");
  DenseSet<Operation *> activation = getActivationOps(tg);
  Block &body = tg.getBody().front();
  auto isCompute = [](Operation *op) {
    return !isCollective(op) &&
           !isa<YieldOp, SendOp, RecvOp, WeightOp, ConstantOp>(op);
  };

  // (c) An activation gathered over an axis that cuts the batch: every rank
  // computes what follows, up to the next local_slice, for the whole batch.
  // Gathers whose whole-batch regions overlap make one warning.
  struct Gathered {
    SmallVector<std::string> nodes;
    llvm::SetVector<std::string, SmallVector<std::string>,
                    std::set<std::string>>
        axes;
    llvm::SetVector<Operation *> ops;
  };
  SmallVector<Gathered> groups;
  for (Operation &op : body) {
    auto gather = dyn_cast<AllGatherOp>(op);
    if (!gather || !activation.contains(&op))
      continue;
    Gathered g;
    for (Attribute a : gather.getAxes())
      if (isBatchAxis(cast<StringAttr>(a).getValue(), tg))
        g.axes.insert(displayAxis(cast<StringAttr>(a).getValue(), tg));
    if (g.axes.empty())
      continue;
    SmallVector<Operation *> work{&op};
    DenseSet<Operation *> seen;
    while (!work.empty()) {
      Operation *cur = work.pop_back_val();
      for (Operation *user : cur->getUsers()) {
        if (isa<LocalSliceOp, YieldOp, SendOp>(user) ||
            !seen.insert(user).second)
          continue;
        work.push_back(user);
        if (isCompute(user))
          g.ops.insert(user);
      }
    }
    if (g.ops.empty())
      continue;
    g.nodes.push_back(getNodeName(getConsumer(gather.getResult())));
    for (auto *it = groups.begin(); it != groups.end();) {
      if (llvm::none_of(it->ops,
                        [&](Operation *o) { return g.ops.contains(o); })) {
        ++it;
        continue;
      }
      g.nodes.insert(g.nodes.begin(), it->nodes.begin(), it->nodes.end());
      g.axes.insert(it->axes.begin(), it->axes.end());
      g.ops.insert(it->ops.begin(), it->ops.end());
      it = groups.erase(it);
    }
    groups.push_back(std::move(g));
  }
  DenseSet<Operation *> covered;
  for (Gathered &g : groups) {
    SmallVector<Operation *> ops(g.ops.begin(), g.ops.end());
    llvm::sort(
        ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    covered.insert(ops.begin(), ops.end());
    std::string at = g.nodes.front();
    size_t shown = std::min<size_t>(g.nodes.size(), 3);
    for (size_t i = 1; i < shown; ++i)
      at += (i + 1 == g.nodes.size() ? " and " : ", ") + g.nodes[i];
    if (g.nodes.size() > shown)
      at += " and " + std::to_string(g.nodes.size() - shown) + " more";
    std::string axes = llvm::join(g.axes, ",");
    info.warnings.push_back(
        (g.nodes.size() == 1
             ? "all_gather over " + axes + " at " + at + " gathers the batch"
             : std::to_string(g.nodes.size()) + " all_gathers over " + axes +
                   " at " + at + " gather the batch") +
        ": each rank computes the whole batch in " + formatSpan(ops) +
        " (replicated work)");
  }

  // (a) A replicate TaskGraph on several devices whose ops compute on the
  // whole batch.
  int64_t whole = globalBatch / getMicroBatches(mesh);
  unsigned bd = getBatch(info.tg->getParentOfType<func::FuncOp>()).first;
  if (tg.getStrategy() == Strategy::replicate && devices > 1 && whole > 1) {
    SmallVector<Operation *> ops;
    for (Operation &op : body) {
      if (!activation.contains(&op) || !isCompute(&op) || covered.contains(&op))
        continue;
      // A weight's gradient has the weight's shape, whatever the batch (a
      // token-type table of 2 rows when the batch is 2 is no batch), also
      // before the all_reduce that sums it over the replicas.
      auto isWeightGradient = [](Value r) {
        while (r.hasOneUse() && isCollective(*r.getUsers().begin()))
          r = r.getUsers().begin()->getResult(0);
        return !getGradientOf(r).empty();
      };
      if (llvm::any_of(op.getResults(), [&](Value r) {
            auto rt = dyn_cast<RankedTensorType>(r.getType());
            return rt && rt.getRank() > bd && rt.getDimSize(bd) == whole &&
                   !isWeightGradient(r);
          }))
        ops.push_back(&op);
    }
    if (!ops.empty())
      info.warnings.push_back(
          llvm::formatv("each of its {0} devices computes the whole batch "
                        "({1} on dim {2}) in {3} (replicated work)",
                        devices, whole, bd, formatSpan(ops))
              .str());
  }

  // (b) A split TaskGraph that splits nothing over tp.
  if (tg.getStrategy() == Strategy::split && tp > 1) {
    bool split = false;
    tg.getBody().walk([&](Operation *op) {
      if (auto w = dyn_cast<WeightOp>(op)) {
        split |= isSplitOver(w, "tp");
      } else if (isa<LocalSliceOp, AllToAllOp>(op)) {
        split |= hasAxis(getCollectiveAxes(op), "tp");
      } else if (auto recv = dyn_cast<RecvOp>(op)) {
        split |= usesAxis(recv.getTo().getSharding(), "tp");
      }
    });
    for (Value in : tg.getInputs())
      if (auto bridge = in.getDefiningOp<BridgeOp>())
        split |= usesAxis(bridge.getTo().getSharding(), "tp");
    if (!split) {
      Operation *first = nullptr;
      for (Operation &op : body) {
        if (!activation.contains(&op) || !isCompute(&op))
          continue;
        if (!first || (isContraction(&op) && !isContraction(first)))
          first = &op;
      }
      // An op of no ONNX node (an optimizer update) by its kind.
      std::string name = first ? getNodeName(first) : "";
      if (first && name.empty())
        name = ("'" + first->getName().getStringRef() + "'").str();
      if (first)
        info.warnings.push_back(
            llvm::formatv("split({0}) but no weight or input is split over "
                          "tp: the {1} ranks of a tp group all compute {2} "
                          "and the rest whole (replicated work)",
                          tg.getDevices(), tp, name)
                .str());
    } else {
      // Some weights are split, but these products use only whole ones.
      SmallVector<Operation *> whole, replicatedBlocks;
      // Initializers of which some block (shoal.source_range) is split
      // over tp in the module, with their widest split block: a whole
      // block narrower than it is a key/value head beside split query
      // heads; one as wide or wider (the query heads whole beside split
      // key/value heads, or beside equal blocks) is warned like any whole
      // product.
      auto blockWidth = [](WeightOp w) -> int64_t {
        auto range =
            w->getAttrOfType<DictionaryAttr>(ShoalDialect::kSourceRangeAttr);
        auto axis = range ? range.getAs<IntegerAttr>("axis") : IntegerAttr();
        if (!axis)
          return -1;
        SmallVector<int64_t> shape(w.getType().getShape());
        if (auto g = w->getAttrOfType<DenseI64ArrayAttr>("shoal.global_shape"))
          shape.assign(g.asArrayRef().begin(), g.asArrayRef().end());
        int64_t a = axis.getInt();
        return a >= 0 && a < static_cast<int64_t>(shape.size()) ? shape[a] : -1;
      };
      llvm::StringMap<int64_t> splitSiblings;
      tg->getParentOfType<ModuleOp>().walk([&](WeightOp w) {
        if (w->hasAttr(ShoalDialect::kSourceRangeAttr) &&
            isSplitOver(w, "tp")) {
          int64_t &widest = splitSiblings[getSourceName(w)];
          widest = std::max(widest, blockWidth(w));
        }
      });
      // Activations split over tp (a sequence split: sliced or
      // reduce-scattered over tp, up to a gather or a sum over tp): a
      // product of them computes its block of the rows on each rank, whole
      // weights or not (a mixture of experts on the local tokens under
      // sequence_parallel).
      DenseSet<Value> tpSplit;
      // Inputs that arrive split over tp: over a bridge into such a layout
      // (a pipeline stage's hidden states under sequence_parallel), or
      // saved split by the forward (shoal-propagate-sharding marks them).
      auto argSplit = tg->getAttrOfType<DenseI64ArrayAttr>(kSequenceSplitAttr);
      for (auto [in, arg] :
           llvm::zip(tg.getInputs(), tg.getBody().front().getArguments())) {
        auto bridge = in.getDefiningOp<BridgeOp>();
        if ((bridge && usesAxis(bridge.getTo().getSharding(), "tp")) ||
            (argSplit &&
             llvm::is_contained(argSplit.asArrayRef(), arg.getArgNumber())))
          tpSplit.insert(arg);
      }
      for (Operation &op : body) {
        bool splits = isa<LocalSliceOp, ReduceScatterOp>(op) &&
                      hasAxis(getCollectiveAxes(&op), "tp");
        bool gathers = isa<AllGatherOp, AllReduceOp>(op) &&
                       hasAxis(getCollectiveAxes(&op), "tp");
        bool carries = !gathers && !isa<WeightOp>(op) &&
                       llvm::any_of(op.getOperands(), [&](Value v) {
                         return tpSplit.contains(v);
                       });
        if (splits || carries)
          tpSplit.insert(op.getResults().begin(), op.getResults().end());
      }
      for (Operation &op : body) {
        if (!isContraction(&op) && !isConvolution(&op))
          continue;
        if (llvm::any_of(op.getOperands(),
                         [&](Value v) { return tpSplit.contains(v); }))
          continue;
        bool weighted = false, split = false, block = true;
        // An attention's mask (a causal buffer) is not a factor of its
        // products.
        OperandRange factors = op.getOperands();
        if (auto a = dyn_cast<AttentionOp>(op); a && a.getMask())
          factors = factors.drop_back();
        if (auto a = dyn_cast<AttentionGradOp>(op); a && a.getMask())
          factors = factors.drop_back();
        // Through a 16-bit plan's cast of a weight (shoal-mixed-precision
        // casts every weight the low ops read).
        auto throughCast = [](Value v) -> Value {
          if (auto c = v.getDefiningOp<CastOp>();
              c && c->hasAttr(kPrecisionCastAttr))
            return c.getInput();
          return v;
        };
        for (Value v : factors) {
          v = throughCast(v);
          // Through a weight view: an nn.Linear exported in training mode
          // reads Transpose(W) (in a 16-bit plan, Transpose(Cast(W))).
          if (Operation *def = v.getDefiningOp();
              isa_and_nonnull<TransposeOp, ReshapeOp>(def) &&
              !def->hasAttr(ShoalDialect::kPhaseAttr) &&
              throughCast(def->getOperand(0)).getDefiningOp<WeightOp>())
            v = def->getOperand(0);
          v = throughCast(v);
          // Through a lookup of whole matrices by ids: a stack of experts'
          // matrices gathered per token (transformers 5's batched_mm
          // experts, `gate_up_proj[expert_ids]`); not an embedding table.
          if (auto g = v.getDefiningOp<GatherOp>())
            if (cast<RankedTensorType>(g->getOperand(0).getType()).getRank() >=
                3)
              v = throughCast(g->getOperand(0));
          if (auto w = v.getDefiningOp<WeightOp>()) {
            weighted = true;
            split |= isSplitOver(w, "tp");
            auto sibling = splitSiblings.find(getSourceName(w));
            block &= sibling != splitSiblings.end() &&
                     w->hasAttr(ShoalDialect::kSourceRangeAttr) &&
                     blockWidth(w) < sibling->second;
          }
        }
        if (weighted && !split && block)
          replicatedBlocks.push_back(&op);
        else if (weighted && !split)
          whole.push_back(&op);
      }
      // A block of a fused projection whose other blocks are split (a
      // multi-query key/value head beside the query heads): replicated as
      // Megatron-LM and vLLM replicate key/value heads when a tp group has
      // more ranks than there are of them. Said, not warned.
      if (replicatedBlocks.size() == 1)
        info.notes.push_back(
            llvm::formatv("{0} computes its block of a fused projection "
                          "whole, while the projection's other blocks are "
                          "split: the {1} ranks of a tp group all compute "
                          "it (replicated work, by design: a key/value head "
                          "beside split query heads)",
                          getNodeName(replicatedBlocks.front()), tp)
                .str());
      else if (!replicatedBlocks.empty())
        info.notes.push_back(
            llvm::formatv("{0} matrix products, {1} to {2}, compute their "
                          "blocks of fused projections whole, while the "
                          "projections' other blocks are split: the {3} "
                          "ranks of a tp group all compute them (replicated "
                          "work, by design: key/value heads beside split "
                          "query heads)",
                          replicatedBlocks.size(),
                          getNodeName(replicatedBlocks.front()),
                          getNodeName(replicatedBlocks.back()), tp)
                .str());
      // Those shoal-propagate-sharding kept whole on purpose: their split
      // would have been gathered at once (a lone projection at a scope's
      // edge); say why, once for the product and its backward's.
      llvm::StringSet<> keptWhole;
      for (Operation *op : whole)
        if (op->hasAttr(kTpKeptWholeAttr) && !getNodeName(op).empty())
          keptWhole.insert(getNodeName(op));
      llvm::erase_if(whole, [&](Operation *op) {
        auto why = op->getAttrOfType<StringAttr>(kTpKeptWholeAttr);
        if (!why)
          return op->hasAttr(ShoalDialect::kPhaseAttr) &&
                 keptWhole.contains(getNodeName(op));
        info.warnings.push_back(
            llvm::formatv("{0} splits no weight over tp: a column split "
                          "would be gathered at once, as {1} needs its "
                          "output whole before any product contracts it; "
                          "the {2} ranks of a tp group all compute it whole "
                          "(replicated work)",
                          getNodeName(op), why.getValue(), tp)
                .str());
        return true;
      });
      if (whole.size() == 1)
        info.warnings.push_back(
            llvm::formatv("{0} splits no weight over tp: the {1} ranks of a "
                          "tp group all compute it whole (replicated work)",
                          getNodeName(whole.front()), tp)
                .str());
      else if (!whole.empty())
        info.warnings.push_back(
            llvm::formatv("{0} matrix products or convolutions, {1} to {2}, "
                          "split no weight over tp: the {3} ranks of a tp "
                          "group all compute them whole (replicated work)",
                          whole.size(), getNodeName(whole.front()),
                          getNodeName(whole.back()), tp)
                .str());
    }
  }
}
