//===- MixedPrecision.cpp - bf16/fp16 training ------------------*- C++ -*-===//
//
// Mixed-precision training on the local programs, after shoal-partition.
// By default the whole model in the low type (LowPrecision.cpp). With
// `autocast` (the training config's bf16-autocast/fp16-autocast), this
// file: every matrix product (MatMul, Gemm, Conv, ConvTranspose; PyTorch
// autocast's lower-precision list), forward and backward, reads its float32
// operands through casts to bf16 or fp16, and its result is cast back to
// float32. The weights, the gradients they receive, the optimizer state and
// every other op stay in float32 (master weights). Rounding each product's
// operands and result is what autocast does to the forward products and,
// through the casts' gradients, to the backward ones. After partitioning,
// the casts do not stand between a weight and the product that decides its
// layout. See the pass description in Passes.td and docs/Training.md
// "Mixed precision".
//
//===----------------------------------------------------------------------===//

#include "MixedPrecision.h"
#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <tuple>

namespace shoal {
#define GEN_PASS_DEF_MIXEDPRECISIONPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

bool isF32Tensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// A matrix product that runs in the low precision.
bool isLowPrecisionOp(Operation *op) {
  if (isa<MatMulOp, GemmOp>(op))
    return true;
  auto onnx = dyn_cast<OnnxOp>(op);
  return onnx &&
         (onnx.getOpType() == "Conv" || onnx.getOpType() == "ConvTranspose");
}

struct MixedPrecisionPass
    : public ::shoal::impl::MixedPrecisionPassBase<MixedPrecisionPass> {
  using MixedPrecisionPassBase::MixedPrecisionPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (precision != "fp32" && precision != "bf16" && precision != "fp16") {
      module.emitError() << "shoal-mixed-precision: precision must be fp32, "
                            "bf16 or fp16, got '"
                         << precision << "'";
      return signalPassFailure();
    }
    if (lossScale && precision != "fp16") {
      module.emitError() << "shoal-mixed-precision: loss scaling is for fp16 "
                            "(bf16 has float32's exponent range), but the "
                            "precision is "
                         << precision;
      return signalPassFailure();
    }
    if (lossScale && failed(checkScaler(module)))
      return signalPassFailure();
    if (precision == "fp32")
      return;
    Builder b(module.getContext());
    Type low =
        precision == "bf16" ? Type(b.getBF16Type()) : Type(b.getF16Type());
    if (autocast)
      lower(module, low);
    else
      lowerToLowPrecision(module, low);
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr("precision", b.getStringAttr(precision)),
        b.getNamedAttr("precision_mode",
                       b.getStringAttr(autocast ? "autocast" : "model"))};
    if (lossScale)
      attrs.push_back(b.getNamedAttr(
          "loss_scale",
          b.getDictionaryAttr(
              {b.getNamedAttr("initial", b.getF64FloatAttr(initialScale)),
               b.getNamedAttr("growth_interval",
                              b.getI64IntegerAttr(growthInterval)),
               b.getNamedAttr("growth_factor", b.getF64FloatAttr(growthFactor)),
               b.getNamedAttr("backoff_factor",
                              b.getF64FloatAttr(backoffFactor)),
               b.getNamedAttr("min", b.getF64FloatAttr(minScale))})));
    // A training plan records them with its loss and optimizer.
    auto training =
        module->getAttrOfType<DictionaryAttr>(ShoalDialect::kTrainingAttr);
    if (!training) {
      module->setAttr(ShoalDialect::kMixedPrecisionAttr,
                      b.getDictionaryAttr(attrs));
      return;
    }
    NamedAttrList merged(training);
    for (NamedAttribute a : attrs)
      merged.set(a.getName(), a.getValue());
    module->setAttr(ShoalDialect::kTrainingAttr,
                    merged.getDictionary(module.getContext()));
  }

  LogicalResult checkScaler(ModuleOp module) {
    MixedPrecisionPassOptions o;
    o.autocast = autocast;
    o.initialScale = initialScale;
    o.growthInterval = growthInterval;
    o.growthFactor = growthFactor;
    o.backoffFactor = backoffFactor;
    o.minScale = minScale;
    auto [key, what] = checkLossScale(o);
    if (!key)
      return success();
    return module.emitError() << "shoal-mixed-precision: loss_scale." << key
                              << " must be " << what;
  }

  void lower(ModuleOp module, Type low) {
    SmallVector<Operation *> products;
    module.walk([&](Operation *op) {
      if (!isLowPrecisionOp(op) || op->getNumResults() != 1 ||
          !isF32Tensor(op->getResult(0)))
        return;
      // Every float operand float32 (a float64 model stays as it is).
      for (Value v : op->getOperands())
        if (auto t = dyn_cast<RankedTensorType>(v.getType());
            t && isa<FloatType>(t.getElementType()) && !isF32Tensor(v))
          return;
      products.push_back(op);
    });
    Builder attrs(module.getContext());
    // Casts made so far, by value, block and phase: a weight or an
    // activation read by several products of a phase (q, k and v
    // projections) is cast once; the backward casts its own copy, so that
    // no low-precision copy stays alive from the forward to the backward.
    using Key = std::tuple<Value, Block *, Attribute>;
    llvm::DenseMap<Key, Value> casts;
    // The float32 results of the products (casts back from the low type):
    // a product reading one reads the low value itself.
    llvm::DenseMap<Value, Value> lowOf;
    for (Operation *op : products) {
      OpBuilder b(op);
      Attribute phase = op->getAttr(ShoalDialect::kPhaseAttr);
      auto tag = [&](Operation *made, Value like) {
        for (StringRef name :
             {ShoalDialect::kPhaseAttr.data(), ShoalDialect::kScopeAttr.data()})
          if (Attribute a = op->getAttr(name))
            made->setAttr(name, a);
        // The layout of the value it converts (for later passes and the
        // report), and a mark the report looks through.
        made->setAttr(ShoalDialect::kShardingAttr,
                      attrs.getArrayAttr({getValueSharding(like)}));
        made->setAttr(kPrecisionCastAttr, attrs.getUnitAttr());
      };
      for (OpOperand &use : op->getOpOperands()) {
        Value v = use.get();
        if (!isF32Tensor(v))
          continue;
        if (Value l = lowOf.lookup(v)) {
          use.set(l);
          continue;
        }
        Value &c = casts[{v, op->getBlock(), phase}];
        if (!c) {
          auto type = cast<RankedTensorType>(v.getType()).clone(low);
          auto made = b.create<CastOp>(op->getLoc(), type, v);
          tag(made, v);
          copyUnevenLayout(v, made);
          c = made;
        }
        use.set(c);
      }
      Value r = op->getResult(0);
      auto f32Type = r.getType();
      r.setType(cast<RankedTensorType>(f32Type).clone(low));
      b.setInsertionPointAfter(op);
      auto back = b.create<CastOp>(op->getLoc(), f32Type, r);
      tag(back, r);
      copyUnevenLayout(r, back);
      r.replaceAllUsesExcept(back, back);
      lowOf[back] = r;
    }
  }
};

} // namespace
