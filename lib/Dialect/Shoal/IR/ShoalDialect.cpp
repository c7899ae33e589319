//===- ShoalDialect.cpp - shoal dialect and attributes ----------*- C++ -*-===//

#include "shoal/Dialect/Shoal/IR/ShoalDialect.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace shoal;

#include "shoal/Dialect/Shoal/IR/ShoalDialect.cpp.inc"
#include "shoal/Dialect/Shoal/IR/ShoalEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "shoal/Dialect/Shoal/IR/ShoalAttributes.cpp.inc"

void ShoalDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shoal/Dialect/Shoal/IR/ShoalOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "shoal/Dialect/Shoal/IR/ShoalAttributes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult ScopeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringAttr name, Strategy, int64_t devices) {
  if (!name || name.getValue().empty())
    return emitError() << "scope needs a non-empty name";
  if (devices < 1)
    return emitError() << "scope '" << name.getValue() << "' has device count "
                       << devices << "; expected at least 1";
  return success();
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayAttr axes, ArrayRef<int64_t> shape) {
  if (axes.size() != shape.size())
    return emitError() << "mesh has " << axes.size() << " axis names but "
                       << shape.size() << " sizes";
  llvm::SmallSet<StringRef, 4> seen;
  for (auto [axis, size] : llvm::zip(axes, shape)) {
    auto name = llvm::dyn_cast<StringAttr>(axis);
    if (!name)
      return emitError() << "mesh axis names must be strings";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue()
                         << "' appears twice";
    if (size < 1)
      return emitError() << "mesh axis '" << name.getValue() << "' has size "
                         << size << "; expected at least 1";
  }
  return success();
}

int64_t MeshAttr::getAxisSize(StringRef axis) const {
  for (auto [name, size] : llvm::zip(getAxes(), getShape()))
    if (llvm::cast<StringAttr>(name).getValue() == axis)
      return size;
  return 0;
}

int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (auto [name, size] : llvm::zip(getAxes(), getShape()))
    if (llvm::cast<StringAttr>(name).getValue() !=
        ShoalDialect::kMicroBatchAxis)
      n *= size;
  return n;
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayAttr dims, ArrayRef<int64_t> outer) {
  if (!outer.empty() && outer.size() != dims.size())
    return emitError() << "sharding: 'outer' has " << outer.size()
                       << " entries for " << dims.size() << " dimensions";
  for (auto [d, o] : llvm::enumerate(outer)) {
    if (o < 1)
      return emitError() << "sharding: outer count of dimension " << d
                         << " must be at least 1, got " << o;
    if (o > 1 && llvm::cast<ArrayAttr>(dims[d]).empty())
      return emitError() << "sharding: dimension " << d
                         << " is whole but has outer count " << o;
  }
  llvm::SmallSet<StringRef, 4> seen;
  for (Attribute dim : dims) {
    auto axes = llvm::dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return emitError() << "sharding: each dimension must be a list of axes";
    for (Attribute axis : axes) {
      auto name = llvm::dyn_cast<StringAttr>(axis);
      if (!name)
        return emitError() << "sharding: axis names must be strings";
      if (!seen.insert(name.getValue()).second)
        return emitError() << "sharding uses mesh axis '" << name.getValue()
                           << "' twice";
    }
  }
  return success();
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  SmallVector<StringRef> axes;
  if (dim >= getDims().size())
    return axes;
  for (Attribute a : llvm::cast<ArrayAttr>(getDims()[dim]))
    axes.push_back(llvm::cast<StringAttr>(a).getValue());
  return axes;
}

int64_t ShardingAttr::getDimOuter(unsigned dim) const {
  ArrayRef<int64_t> outer = getOuter();
  return dim < outer.size() ? outer[dim] : 1;
}

bool ShardingAttr::isStrided() const {
  return llvm::any_of(getOuter(), [](int64_t o) { return o > 1; });
}

bool ShardingAttr::isReplicated() const {
  return llvm::all_of(
      getDims(), [](Attribute d) { return llvm::cast<ArrayAttr>(d).empty(); });
}

ShardingAttr ShardingAttr::get(MLIRContext *ctx,
                               ArrayRef<SmallVector<StringRef>> dims) {
  Builder b(ctx);
  SmallVector<Attribute> dimAttrs;
  for (const auto &axes : dims)
    dimAttrs.push_back(b.getStrArrayAttr(axes));
  return get(ctx, b.getArrayAttr(dimAttrs), ArrayRef<int64_t>());
}

ShardingAttr ShardingAttr::get(MLIRContext *ctx,
                               ArrayRef<SmallVector<StringRef>> dims,
                               ArrayRef<int64_t> outer) {
  Builder b(ctx);
  SmallVector<Attribute> dimAttrs;
  for (const auto &axes : dims)
    dimAttrs.push_back(b.getStrArrayAttr(axes));
  bool strided = llvm::any_of(outer, [](int64_t o) { return o > 1; });
  return get(ctx, b.getArrayAttr(dimAttrs),
             strided ? outer : ArrayRef<int64_t>());
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx, unsigned rank) {
  return get(ctx, SmallVector<SmallVector<StringRef>>(rank));
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

LogicalResult ShoalDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  if (name == kScopeAttr) {
    if (!llvm::isa<StringAttr>(value))
      return op->emitError()
             << "'" << kScopeAttr << "' must be a string naming a scope";
    return success();
  }
  if (name == kScopesAttr) {
    auto list = llvm::dyn_cast<ArrayAttr>(value);
    if (!list || !llvm::all_of(list, llvm::IsaPred<ScopeAttr>))
      return op->emitError()
             << "'" << kScopesAttr << "' must be a list of #shoal.scope";
    llvm::SmallSet<StringRef, 8> seen;
    for (auto scope : list.getAsRange<ScopeAttr>())
      if (!seen.insert(scope.getName().getValue()).second)
        return op->emitError() << "scope '" << scope.getName().getValue()
                               << "' is defined twice";
    return success();
  }
  if (name == kDefaultStrategyAttr) {
    if (auto s = llvm::dyn_cast<StringAttr>(value))
      if (symbolizeStrategy(s.getValue()))
        return success();
    return op->emitError() << "'" << kDefaultStrategyAttr
                           << "' must be \"replicate\" or \"split\"";
  }
  if (name == kShardingAttr) {
    auto list = llvm::dyn_cast<ArrayAttr>(value);
    if (llvm::isa<ShardingAttr>(value) ||
        (list && llvm::all_of(list, llvm::IsaPred<ShardingAttr>)))
      return success();
    return op->emitError() << "'" << kShardingAttr
                           << "' must be a #shoal.sharding or a list of them";
  }
  if (name == kFactorShardingAttr) {
    auto list = llvm::dyn_cast<ArrayAttr>(value);
    if (list && llvm::all_of(list, [](Attribute a) {
          auto axes = llvm::dyn_cast<ArrayAttr>(a);
          return axes && llvm::all_of(axes, llvm::IsaPred<StringAttr>);
        }))
      return success();
    return op->emitError() << "'" << kFactorShardingAttr
                           << "' must be a list of axis lists";
  }
  if (name == kPlacementAttr) {
    auto ints = llvm::dyn_cast<DenseI64ArrayAttr>(value);
    if (!ints || ints.size() != 2 || ints[0] < 0 || ints[1] < 0)
      return op->emitError() << "'" << kPlacementAttr
                             << "' must be array<i64: offset, stride> with "
                                "non-negative entries";
    return success();
  }
  return success();
}
