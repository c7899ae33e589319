//===- ShardingUtils.cpp - Shared helpers of the sharding passes -*- C++ -*-=//

#include "ShardingUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace shoal;

FactorAxes shoal::getFactorAxes(Operation *op) {
  FactorAxes result;
  auto list = op->getAttrOfType<ArrayAttr>(ShoalDialect::kFactorShardingAttr);
  if (!list)
    return result;
  for (Attribute f : list) {
    auto &axes = result.emplace_back();
    for (Attribute a : cast<ArrayAttr>(f))
      axes.push_back(cast<StringAttr>(a).getValue());
  }
  return result;
}

FactorOuter shoal::getFactorOuter(Operation *op, size_t numFactors) {
  FactorOuter result(numFactors, 1);
  if (auto list = op->getAttrOfType<DenseI64ArrayAttr>(kFactorOuterAttr))
    for (auto [f, o] : llvm::enumerate(list.asArrayRef()))
      if (f < numFactors)
        result[f] = o;
  return result;
}

ShardingAttr shoal::shardingFromFactors(MLIRContext *ctx,
                                        const ShardingRule &rule,
                                        const TensorFactors &dims,
                                        const FactorAxes &axes,
                                        ArrayRef<int64_t> outer) {
  SmallVector<SmallVector<StringRef>> perDim;
  SmallVector<int64_t> outers;
  for (const DimFactors &df : dims) {
    auto &d = perDim.emplace_back();
    int64_t &o = outers.emplace_back(1);
    int64_t before = 1;
    for (int f : df) {
      if (f < (int)axes.size() && !axes[f].empty()) {
        d = axes[f];
        o = before * (f < (int)outer.size() ? outer[f] : 1);
        break;
      }
      before *= rule.factorSizes[f];
    }
  }
  return ShardingAttr::get(ctx, perDim, outers);
}

ShardingAttr shoal::dropStrided(ShardingAttr s) {
  if (!s.isStrided())
    return s;
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < s.getDims().size(); ++d)
    dims.push_back(s.getDimOuter(d) > 1 ? SmallVector<StringRef>()
                                        : s.getDimAxes(d));
  return ShardingAttr::get(s.getContext(), dims);
}

StringRef shoal::onnxNodeName(Operation *op) {
  if (auto loc = dyn_cast<NameLoc>(op->getLoc()))
    return loc.getName().getValue();
  return {};
}

bool shoal::isWeightView(Operation *op) {
  if (isa_and_nonnull<ReshapeOp>(op))
    return op->getOperand(0).getDefiningOp<WeightOp>();
  // A transpose of the model's (the forward's): shoal-autodiff's transposes
  // of weights are computations of the backward.
  return isa_and_nonnull<TransposeOp>(op) &&
         !op->hasAttr(ShoalDialect::kPhaseAttr) &&
         op->getOperand(0).getDefiningOp<WeightOp>();
}

GatherOp shoal::getGatheredWeight(Operation *op) {
  auto g = dyn_cast_or_null<GatherOp>(op);
  if (!g || g.getIndices().getDefiningOp<ConstantOp>() ||
      !g.getData().getDefiningOp<WeightOp>())
    return {};
  auto type = cast<RankedTensorType>(g.getData().getType());
  int64_t axis = static_cast<int64_t>(g.getAxis());
  if (type.getRank() < 3 || (axis != 0 && axis != -type.getRank()))
    return {};
  return g;
}

bool shoal::isStaged(ModuleOp module) {
  if (module->hasAttr(kPipelinedAttr))
    return true;
  if (auto mb =
          module->getAttrOfType<IntegerAttr>(ShoalDialect::kNumMicroBatchAttr);
      mb && mb.getInt() > 1)
    return true;
  auto list = module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr);
  if (!list)
    return false;
  std::optional<int64_t> devices;
  for (auto s : list.getAsRange<ScopeAttr>()) {
    if (devices && *devices != s.getDevices())
      return true;
    devices = s.getDevices();
  }
  return false;
}

ShardingAttr shoal::getValueSharding(Value v) {
  auto rank = cast<RankedTensorType>(v.getType()).getRank();
  ArrayAttr list;
  unsigned index = 0;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    Operation *parent = arg.getOwner()->getParentOp();
    if (parent)
      list = parent->getAttrOfType<ArrayAttr>(kArgShardingsAttr);
    index = arg.getArgNumber();
  } else {
    list = v.getDefiningOp()->getAttrOfType<ArrayAttr>(
        ShoalDialect::kShardingAttr);
    index = cast<OpResult>(v).getResultNumber();
  }
  if (list && index < list.size())
    if (auto s = dyn_cast<ShardingAttr>(list[index]))
      return s;
  return ShardingAttr::getReplicated(v.getContext(), rank);
}

int64_t shoal::getAxesSize(MeshAttr mesh, ArrayRef<StringRef> axes) {
  int64_t n = 1;
  for (StringRef a : axes)
    n *= mesh.getAxisSize(a);
  return n;
}

RankedTensorType shoal::getLocalType(RankedTensorType type,
                                     ShardingAttr sharding, MeshAttr mesh) {
  SmallVector<int64_t> shape(type.getShape());
  // A dimension that does not divide evenly gets ceil-sized blocks; the
  // last ones are padded with zeros (uneven shards).
  for (unsigned d = 0; d < shape.size(); ++d) {
    int64_t n = getAxesSize(mesh, sharding.getDimAxes(d));
    shape[d] = (shape[d] + n - 1) / n;
  }
  return RankedTensorType::get(shape, type.getElementType());
}

LogicalResult
shoal::verifySharding(ShardingAttr sharding, RankedTensorType type,
                      MeshAttr mesh,
                      function_ref<InFlightDiagnostic()> emitError) {
  if ((int64_t)sharding.getDims().size() != type.getRank())
    return emitError() << "it has " << sharding.getDims().size()
                       << " entries for a tensor of rank " << type.getRank();
  for (int64_t d = 0; d < type.getRank(); ++d) {
    SmallVector<StringRef> axes = sharding.getDimAxes(d);
    for (StringRef a : axes)
      if (mesh.getAxisSize(a) == 0)
        return emitError() << "dimension " << d << " uses mesh axis '" << a
                           << "', which the mesh does not have";
    int64_t n = getAxesSize(mesh, axes);
    int64_t outer = sharding.getDimOuter(d);
    if (outer > 1 && (type.getDimSize(d) % outer != 0 ||
                      (type.getDimSize(d) / outer) % n != 0))
      return emitError() << "dimension " << d << " of size "
                         << type.getDimSize(d) << " cannot be split in "
                         << outer << " runs of " << n << " blocks each";
    if (type.getDimSize(d) % n != 0)
      return emitError() << "dimension " << d << " of size "
                         << type.getDimSize(d)
                         << " cannot be split evenly over " << n << " ranks";
  }
  return success();
}

TaskGraphOp shoal::getOwnerTaskGraph(Value v) {
  if (auto tg = v.getDefiningOp<TaskGraphOp>())
    return tg;
  TaskGraphOp first;
  for (Operation *user : v.getUsers()) {
    auto tg = dyn_cast<TaskGraphOp>(user);
    if (tg && (!first || tg->isBeforeInBlock(first)))
      first = tg;
  }
  return first;
}

bool shoal::samePlacement(TaskGraphOp a, TaskGraphOp b) {
  return a.getMeshAttr() == b.getMeshAttr() &&
         a->getAttr(ShoalDialect::kPlacementAttr) ==
             b->getAttr(ShoalDialect::kPlacementAttr);
}

LayoutAttr shoal::getLayout(TaskGraphOp tg, ShardingAttr sharding) {
  int64_t offset = 0, stride = tg.getMeshAttr().getAxisSize("tp");
  if (auto p =
          tg->getAttrOfType<DenseI64ArrayAttr>(ShoalDialect::kPlacementAttr)) {
    offset = p[0];
    stride = p[1];
  }
  return LayoutAttr::get(tg.getContext(), tg.getMeshAttr(), sharding, offset,
                         stride);
}

bool shoal::isZeroPaddedWeight(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (isa<WeightOp>(def))
      return true;
    if (!isa<TransposeOp, ReshapeOp, CastOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return false;
}

void shoal::copyUnevenLayout(Value from, Value to) {
  auto result = dyn_cast<OpResult>(from);
  auto target = dyn_cast<OpResult>(to);
  if (!result || !target)
    return;
  auto list = result.getOwner()->getAttrOfType<ArrayAttr>(kUnevenLayoutsAttr);
  if (!list || result.getResultNumber() >= list.size() ||
      !isa<DictionaryAttr>(list[result.getResultNumber()]))
    return;
  Operation *op = target.getOwner();
  Builder b(op->getContext());
  SmallVector<Attribute> entries;
  if (auto old = op->getAttrOfType<ArrayAttr>(kUnevenLayoutsAttr))
    entries.assign(old.begin(), old.end());
  entries.resize(op->getNumResults(), b.getUnitAttr());
  entries[target.getResultNumber()] = list[result.getResultNumber()];
  op->setAttr(kUnevenLayoutsAttr, b.getArrayAttr(entries));
}

std::string shoal::specLocation(mlir::Operation *op, llvm::StringRef key) {
  auto module = op->getParentOfType<mlir::ModuleOp>();
  if (!module && llvm::isa<mlir::ModuleOp>(op))
    module = llvm::cast<mlir::ModuleOp>(op);
  if (!module)
    return "";
  auto where = module->getAttrOfType<mlir::DictionaryAttr>(kSpecLocationsAttr);
  auto at = where ? where.getAs<mlir::StringAttr>(key) : mlir::StringAttr();
  return at ? " (" + at.getValue().str() + ")" : "";
}

int64_t shoal::getBatchDim(func::FuncOp func, unsigned i) {
  if (auto a =
          func.getArgAttrOfType<IntegerAttr>(i, ShoalDialect::kBatchDimAttr))
    return a.getInt();
  return 0;
}

std::pair<int64_t, int64_t> shoal::getBatch(func::FuncOp func) {
  for (auto [i, t] : llvm::enumerate(func.getArgumentTypes()))
    if (auto rt = dyn_cast<RankedTensorType>(t); rt && rt.getRank() > 0) {
      int64_t d = getBatchDim(func, i);
      return {d, d < rt.getRank() ? rt.getDimSize(d) : -1};
    }
  return {0, -1};
}
