//===- FusedWeightViews.cpp - View fused projections' weights ---*- C++ -*-===//
//
// A fused projection computes several outputs with one weight and cuts the
// result in equal pieces: GPT-2's c_attn (x @ W[E, 3E] + b, then Split into
// q, k, v), nn.MultiheadAttention's in_proj (three Slices) and swin's qkv
// (a reshape to [.., 3, H, d]). Tensor
// parallelism must give every rank its heads of each piece (Megatron-LM's
// layout), which is not a block of W's columns but a block of each third.
// This pass views such a weight with the cut dimension made two, [.., n,
// N / n] (the same bytes, row-major), followed by a reshape back to
// [.., N]: a block split of the view's last part is then exactly a rank's
// heads of every piece, and the reshape turns it into a strided split
// (docs/Design.md) that the cut passes on to each piece as a plain split.
//
// The view does not depend on the layout, so every plan of a model (and its
// checkpoints) sees the same weight shape. `shoal.source_shape` keeps the
// initializer's own shape for the plan.
//
//===----------------------------------------------------------------------===//

#include "shoal/Transforms/Passes.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace shoal {
#define GEN_PASS_DEF_FUSEDWEIGHTVIEWSPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// Whether every use of `v` (through transposes) takes dimension `dim`
/// apart into single elements: a Gather along it with a scalar index, a
/// Slice of one element along it, or a Split of it into ones.
bool takenOneByOne(Value v, int64_t dim) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    if (auto t = dyn_cast<TransposeOp>(user)) {
      auto it = llvm::find(t.getPerm(), dim);
      if (it == t.getPerm().end() ||
          !takenOneByOne(t.getResult(), it - t.getPerm().begin()))
        return false;
      continue;
    }
    if (auto g = dyn_cast<GatherOp>(user)) {
      auto indices = cast<RankedTensorType>(g.getIndices().getType());
      if (g.getData() != v || g.getAxis() != dim || indices.getRank() != 0)
        return false;
      continue;
    }
    auto onnx = dyn_cast<OnnxOp>(user);
    if (!onnx || onnx->getNumOperands() != 1)
      return false;
    int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
    auto one = [&](Value r) {
      return cast<RankedTensorType>(r.getType()).getDimSize(dim) == 1;
    };
    if (onnx.getOpType() == "Split" && getOnnxAxis(onnx, rank, 0) == dim &&
        llvm::all_of(onnx->getResults(), one))
      continue;
    auto axes = onnx.getOnnxAttrs().getAs<DenseI64ArrayAttr>("axes");
    if (onnx.getOpType() == "Slice" && axes && axes.size() == 1 &&
        (axes[0] < 0 ? axes[0] + rank : axes[0]) == dim &&
        one(onnx->getResult(0)))
      continue;
    return false;
  }
  return true;
}

/// The number of equal pieces all users of `v` cut its last dimension
/// into (one Split into equal parts, or Slices each taking one piece), or 0.
int64_t equalCut(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  if (rank == 0 || v.use_empty())
    return 0;
  int64_t size = type.getDimSize(rank - 1);
  int64_t pieces = 0, piece = 0;
  // A reshape of the last dimension into [n, heads, head size] whose n
  // pieces are then taken one by one (swin's and timm's qkv: [.., 3, H, d],
  // indexed after a permute): n pieces. Where another part is taken apart
  // (BLOOM's [.., H, 3, d]: q, k, v inside each head), the heads are the
  // major part already and nothing needs viewing.
  if (v.hasOneUse())
    if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin())) {
      ArrayRef<int64_t> out = reshape.getType().getShape();
      if (static_cast<int64_t>(out.size()) == rank + 2 &&
          out.take_front(rank - 1) == type.getShape().take_front(rank - 1) &&
          out[rank - 1] >= 2 &&
          out[rank - 1] * out[rank] * out[rank + 1] == size &&
          takenOneByOne(reshape.getResult(), rank - 1))
        return out[rank - 1];
    }
  for (Operation *user : v.getUsers()) {
    auto onnx = dyn_cast<OnnxOp>(user);
    if (!onnx || onnx->getNumOperands() != 1)
      return 0;
    if (onnx.getOpType() == "Split") {
      if (getOnnxAxis(onnx, rank, 0) != rank - 1 || onnx->getNumResults() < 2)
        return 0;
      int64_t p = cast<RankedTensorType>(onnx->getResult(0).getType())
                      .getDimSize(rank - 1);
      for (Value r : onnx->getResults())
        if (cast<RankedTensorType>(r.getType()).getDimSize(rank - 1) != p)
          return 0;
      if ((piece && piece != p) || p * onnx->getNumResults() != size)
        return 0;
      piece = p;
      pieces = onnx->getNumResults();
      continue;
    }
    if (onnx.getOpType() != "Slice")
      return 0;
    DictionaryAttr attrs = onnx.getOnnxAttrs();
    auto starts = attrs.getAs<DenseI64ArrayAttr>("starts");
    auto ends = attrs.getAs<DenseI64ArrayAttr>("ends");
    auto axes = attrs.getAs<DenseI64ArrayAttr>("axes");
    auto steps = attrs.getAs<DenseI64ArrayAttr>("steps");
    if (!starts || !ends || !axes || starts.size() != 1 || ends.size() != 1 ||
        axes.size() != 1 || (steps && (steps.size() != 1 || steps[0] != 1)))
      return 0;
    int64_t axis = axes[0] < 0 ? axes[0] + rank : axes[0];
    int64_t s = starts[0] < 0 ? starts[0] + size : starts[0];
    int64_t e = ends[0] < 0 ? ends[0] + size : std::min(ends[0], size);
    int64_t p = e - s;
    if (axis != rank - 1 || s < 0 || p <= 0 || s % p != 0 || size % p != 0 ||
        (piece && piece != p))
      return 0;
    piece = p;
    pieces = size / p;
  }
  return pieces >= 2 ? pieces : 0;
}

/// Replaces weight `w` by a view with dimension `dim` made [n, size / n]
/// and a reshape back to its type.
void viewWeight(WeightOp w, unsigned dim, int64_t n) {
  auto type = w.getType();
  if (w->hasAttr(ShoalDialect::kSourceShapeAttr) ||
      type.getDimSize(dim) % n != 0)
    return;
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= n;
  shape.insert(shape.begin() + dim, n);
  OpBuilder b(w);
  auto view = b.create<WeightOp>(
      w.getLoc(), RankedTensorType::get(shape, type.getElementType()),
      w.getName());
  view->setAttrs(w->getAttrs());
  view->setAttr(ShoalDialect::kSourceShapeAttr,
                b.getDenseI64ArrayAttr(type.getShape()));
  auto back = b.create<ReshapeOp>(w.getLoc(), type, view.getResult());
  // The reshape has no scope: shoal-form-taskgraphs clones a weight's view
  // into every TaskGraph that uses it, like the weight.
  w.getResult().replaceAllUsesWith(back.getResult());
  w.erase();
}

struct FusedWeightViewsPass
    : public ::shoal::impl::FusedWeightViewsPassBase<FusedWeightViewsPass> {
  void runOnOperation() final {
    SmallVector<Operation *> projections;
    getOperation().walk([&](Operation *op) {
      if (isa<MatMulOp, GemmOp>(op))
        projections.push_back(op);
    });
    for (Operation *op : projections) {
      Value out = op->getResult(0);
      auto outType = cast<RankedTensorType>(out.getType());
      int64_t rank = outType.getRank();
      if (rank == 0)
        continue;
      // A bias added after the product is cut with it.
      WeightOp bias;
      Value cut = out;
      if (out.hasOneUse())
        if (auto add = dyn_cast<AddOp>(*out.getUsers().begin())) {
          Value other =
              add.getOperand(0) == out ? add.getOperand(1) : add.getOperand(0);
          auto otherType = cast<RankedTensorType>(other.getType());
          if (add.getType() == outType && otherType.getRank() >= 1 &&
              otherType.getDimSize(otherType.getRank() - 1) ==
                  outType.getDimSize(rank - 1) &&
              llvm::all_of(otherType.getShape().drop_back(),
                           [](int64_t d) { return d == 1; })) {
            bias = other.getDefiningOp<WeightOp>();
            cut = add.getResult();
          }
        }
      if (auto gemm = dyn_cast<GemmOp>(op))
        if (Value c = gemm.getC())
          bias = c.getDefiningOp<WeightOp>();
      // Reshapes that keep the last dimension (Hugging Face's Conv1D
      // flattens the batch for its Gemm and restores it before the Split).
      while (cut.hasOneUse())
        if (auto reshape = dyn_cast<ReshapeOp>(*cut.getUsers().begin());
            reshape && reshape.getType().getRank() >= 1 &&
            reshape.getType().getDimSize(reshape.getType().getRank() - 1) ==
                outType.getDimSize(rank - 1))
          cut = reshape.getResult();
        else
          break;
      int64_t n = equalCut(cut);
      if (n == 0)
        continue;
      // The weight dimension that is the result's last (its own factor).
      auto iface = cast<ShardingRuleOpInterface>(op);
      ShardingRule rule = iface.getShardingRule();
      const DimFactors &last = rule.results[0][rank - 1];
      if (last.size() != 1)
        continue;
      for (auto [k, v] : llvm::enumerate(op->getOperands())) {
        auto w = v.getDefiningOp<WeightOp>();
        if (!w || w == bias)
          continue;
        for (auto [d, df] : llvm::enumerate(rule.operands[k]))
          if (df.size() == 1 && df[0] == last[0]) {
            viewWeight(w, d, n);
            break;
          }
      }
      if (bias)
        viewWeight(bias, bias.getType().getRank() - 1, n);
    }
  }
};

} // namespace
