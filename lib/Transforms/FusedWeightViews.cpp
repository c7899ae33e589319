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

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace shoal {
#define GEN_PASS_DEF_FUSEDWEIGHTVIEWSPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// A Slice along one axis with step 1: the axis (normalized into [0,
/// rank)) and the range [start, end) it takes of that axis (clamped as
/// ONNX clamps it).
struct OneAxisSlice {
  int64_t axis, start, end;
};
std::optional<OneAxisSlice> oneAxisSlice(OnnxOp onnx, ArrayRef<int64_t> shape) {
  if (onnx.getOpType() != "Slice")
    return std::nullopt;
  DictionaryAttr attrs = onnx.getOnnxAttrs();
  auto starts = attrs.getAs<DenseI64ArrayAttr>("starts");
  auto ends = attrs.getAs<DenseI64ArrayAttr>("ends");
  auto axes = attrs.getAs<DenseI64ArrayAttr>("axes");
  auto steps = attrs.getAs<DenseI64ArrayAttr>("steps");
  if (!starts || !ends || !axes || starts.size() != 1 || ends.size() != 1 ||
      axes.size() != 1 || (steps && (steps.size() != 1 || steps[0] != 1)))
    return std::nullopt;
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = axes[0] < 0 ? axes[0] + rank : axes[0];
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  int64_t n = shape[axis];
  auto clamp = [&](int64_t i) {
    return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n);
  };
  return OneAxisSlice{axis, clamp(starts[0]), clamp(ends[0])};
}

/// Whether every use of `v` (through transposes) takes dimension `dim`
/// apart into single elements: a Gather along it with a scalar index, a
/// Slice of one element along it, or a Split of it into ones.
bool takenOneByOne(Value v, int64_t dim) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    // A reshape that only inserts or drops dimensions of size 1 (torch's
    // unsqueeze and squeeze): `dim` is where its elements land.
    if (auto r = dyn_cast<ReshapeOp>(user)) {
      ArrayRef<int64_t> in = cast<RankedTensorType>(v.getType()).getShape();
      ArrayRef<int64_t> out = r.getType().getShape();
      SmallVector<int64_t> inBig, outBig, outPos;
      for (int64_t d : in)
        if (d != 1)
          inBig.push_back(d);
      for (auto [i, d] : llvm::enumerate(out))
        if (d != 1) {
          outBig.push_back(d);
          outPos.push_back(static_cast<int64_t>(i));
        }
      if (inBig != outBig || in[dim] == 1)
        return false;
      int64_t k =
          llvm::count_if(in.take_front(dim), [](int64_t d) { return d != 1; });
      if (!takenOneByOne(r.getResult(), outPos[k]))
        return false;
      continue;
    }
    if (auto t = dyn_cast<TransposeOp>(user)) {
      auto it = llvm::find(t.getPerm(), dim);
      if (it == t.getPerm().end() ||
          !takenOneByOne(t.getResult(), it - t.getPerm().begin()))
        return false;
      continue;
    }
    if (auto g = dyn_cast<GatherOp>(user)) {
      auto indices = cast<RankedTensorType>(g.getIndices().getType());
      if (g.getData() != v || static_cast<int64_t>(g.getAxis()) != dim ||
          indices.getRank() != 0)
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
  // indexed after a permute), or into [n, N / n] (torch 2's
  // nn.MultiheadAttention: unflatten(-1, (3, E)), then unsqueeze,
  // transpose, squeeze and an index each): n pieces. Where another part is
  // taken apart (BLOOM's [.., H, 3, d]: q, k, v inside each head), the
  // heads are the major part already and nothing needs viewing.
  if (v.hasOneUse())
    if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin())) {
      ArrayRef<int64_t> out = reshape.getType().getShape();
      int64_t outRank = static_cast<int64_t>(out.size());
      bool sameFront =
          outRank > rank &&
          out.take_front(rank - 1) == type.getShape().take_front(rank - 1) &&
          out[rank - 1] >= 2;
      bool headsApart = sameFront && outRank == rank + 2 &&
                        out[rank - 1] * out[rank] * out[rank + 1] == size;
      bool piecesOnly =
          sameFront && outRank == rank + 1 && out[rank - 1] * out[rank] == size;
      if ((headsApart || piecesOnly) &&
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
    std::optional<OneAxisSlice> slice = oneAxisSlice(onnx, type.getShape());
    if (!slice)
      return 0;
    int64_t s = slice->start, p = slice->end - slice->start;
    if (slice->axis != rank - 1 || p <= 0 || s % p != 0 || size % p != 0 ||
        (piece && piece != p))
      return 0;
    piece = p;
    pieces = size / p;
  }
  return pieces >= 2 ? pieces : 0;
}

/// One piece a user takes of a fused product's last dimension: `value`
/// holds its columns [start, end).
struct Take {
  Value value;
  int64_t start, end;
};

/// The pieces the users of `v` take of its last dimension (of size `size`),
/// `unit` columns per element of the cut dimension `dim`: Splits and
/// Slices (step 1) along `dim`, and Gathers of one element along it.
/// False when some user does anything else.
bool takesAlong(Value v, int64_t dim, int64_t unit,
                SmallVectorImpl<Take> &takes) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank(), n = type.getDimSize(dim);
  for (Operation *user : v.getUsers()) {
    if (auto g = dyn_cast<GatherOp>(user)) {
      auto c = g.getIndices().getDefiningOp<ConstantOp>();
      auto dense = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : nullptr;
      if (g.getData() != v || static_cast<int64_t>(g.getAxis()) != dim ||
          !dense || dense.getNumElements() != 1)
        return false;
      int64_t k = (*dense.getValues<APInt>().begin()).getSExtValue();
      if (k < 0)
        k += n;
      if (k < 0 || k >= n)
        return false;
      takes.push_back({g.getResult(), k * unit, (k + 1) * unit});
      continue;
    }
    auto onnx = dyn_cast<OnnxOp>(user);
    if (!onnx || onnx->getNumOperands() != 1)
      return false;
    if (onnx.getOpType() == "Split") {
      if (getOnnxAxis(onnx, rank, 0) != dim)
        return false;
      int64_t at = 0;
      for (Value r : onnx->getResults()) {
        int64_t p = cast<RankedTensorType>(r.getType()).getDimSize(dim);
        takes.push_back({r, at * unit, (at + p) * unit});
        at += p;
      }
      if (at != n)
        return false;
      continue;
    }
    std::optional<OneAxisSlice> slice = oneAxisSlice(onnx, type.getShape());
    if (!slice || slice->axis != dim || slice->end <= slice->start)
      return false;
    takes.push_back(
        {onnx->getResult(0), slice->start * unit, slice->end * unit});
  }
  return !takes.empty();
}

/// The pieces of unequal sizes all users of `v` cut its last dimension
/// into: GPTBigCode's multi-query c_attn (a Split into q [.., H d] and the
/// one key/value head [.., 2 d]) or Falcon's query_key_value (a reshape to
/// [.., H + 2, d], then a Slice of the H query heads and a Gather of each
/// of the last two). Every take must be one of the pieces, which do not
/// overlap and cover the dimension. Empty when `v` is not cut so.
SmallVector<std::pair<int64_t, int64_t>>
unequalCut(Value v, SmallVectorImpl<Take> &takes) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  if (rank == 0 || v.use_empty())
    return {};
  int64_t size = type.getDimSize(rank - 1);
  bool ok = false;
  if (v.hasOneUse())
    if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin())) {
      ArrayRef<int64_t> out = reshape.getType().getShape();
      if (static_cast<int64_t>(out.size()) == rank + 1 &&
          out.take_front(rank - 1) == type.getShape().take_front(rank - 1) &&
          out[rank - 1] * out[rank] == size)
        ok = takesAlong(reshape.getResult(), rank - 1, out[rank], takes);
    }
  if (!ok) {
    takes.clear();
    if (!takesAlong(v, rank - 1, 1, takes))
      return {};
  }
  SmallVector<std::pair<int64_t, int64_t>> pieces;
  for (const Take &t : takes)
    pieces.push_back({t.start, t.end});
  llvm::sort(pieces);
  pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
  int64_t at = 0;
  for (auto [s, e] : pieces) {
    if (s != at)
      return {};
    at = e;
  }
  if (at != size || pieces.size() < 2 || llvm::all_of(pieces, [&](auto p) {
        return p.second - p.first == pieces[0].second - pieces[0].first;
      }))
    return {};
  return pieces;
}

/// `type` with dimension `dim` of size `size`.
RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, type.getElementType());
}

/// The block [start, end) along `dim` of weight `w` as a weight of its own,
/// named after the block ("c_attn.weight[:, 0:64]").
Value weightBlock(OpBuilder &b, WeightOp w, int64_t dim, int64_t start,
                  int64_t end) {
  std::string name = w.getName().str() + "[";
  for (int64_t d = 0; d < dim; ++d)
    name += ":, ";
  name += std::to_string(start) + ":" + std::to_string(end) + "]";
  auto block = b.create<WeightOp>(w.getLoc(),
                                  withDim(w.getType(), dim, end - start), name);
  block->setAttrs(w->getAttrs());
  block->setAttr("name", b.getStringAttr(name));
  block->setAttr(ShoalDialect::kSourceRangeAttr,
                 b.getDictionaryAttr(
                     {b.getNamedAttr("initializer", w.getNameAttr()),
                      b.getNamedAttr("shape", b.getDenseI64ArrayAttr(
                                                  w.getType().getShape())),
                      b.getNamedAttr("axis", b.getI64IntegerAttr(dim)),
                      b.getNamedAttr("start", b.getI64IntegerAttr(start))}));
  return block.getResult();
}

/// `op` (a node) renamed with `suffix`, so that the report tells pieces
/// apart.
Location suffixed(Location loc, StringRef suffix) {
  if (auto named = dyn_cast<NameLoc>(loc))
    return NameLoc::get(
        StringAttr::get(loc.getContext(), named.getName().str() + suffix.str()),
        named.getChildLoc());
  return loc;
}

/// A new op standing for `from`: its shoal attributes (scope, stage) too.
void copyShoalAttrs(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getAttrs())
    if (a.getName().getValue().starts_with("shoal."))
      to->setAttr(a.getName(), a.getValue());
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

/// How many weight ops of each function name each initializer (more than
/// one: a weight the model uses twice, tied).
using WeightUses = llvm::DenseMap<std::pair<func::FuncOp, StringAttr>, int>;

/// Computes `op` (a product whose result dimension `cutDim` is cut in
/// `pieces`; `chain`: its bias Add and the reshapes after it, whose
/// results have the cut dimension last, in order) piece by piece, each
/// with its block of the weight and the bias, and gives every take its
/// piece. A stack of matrices the product reads through a lookup by ids
/// (getGatheredWeight) is cut in blocks too, each looked up by the same ids.
/// False (nothing changed) when a weight is shared, viewed already or not
/// an initializer.
bool computeByPieces(Operation *op, int64_t cutDim, WeightOp bias,
                     ArrayRef<Operation *> chain,
                     ArrayRef<std::pair<int64_t, int64_t>> pieces,
                     ArrayRef<Take> takes, const WeightUses &names) {
  auto outType = cast<RankedTensorType>(op->getResult(0).getType());
  auto iface = cast<ShardingRuleOpInterface>(op);
  ShardingRule rule = iface.getShardingRule();
  const DimFactors &last = rule.results[0][cutDim];
  if (last.size() != 1)
    return false;
  // (operand, weight, dimension of the weight, lookup or null, dimension of
  // the lookup's result) of every weight cut with the result.
  SmallVector<std::tuple<unsigned, WeightOp, int64_t, GatherOp, int64_t>> cuts;
  auto usable = [&](WeightOp w) {
    return w && w->hasOneUse() &&
           names.lookup(
               {w->getParentOfType<func::FuncOp>(), w.getNameAttr()}) == 1 &&
           !w->hasAttr(ShoalDialect::kSourceShapeAttr) &&
           !w->hasAttr(ShoalDialect::kSourceRangeAttr);
  };
  for (auto [k, v] : llvm::enumerate(op->getOperands())) {
    auto w = v.getDefiningOp<WeightOp>();
    if (w && w == bias)
      continue;
    GatherOp g = getGatheredWeight(v.getDefiningOp());
    for (auto [d, df] : llvm::enumerate(rule.operands[k]))
      if (df.size() == 1 && df[0] == last[0]) {
        if (g) {
          // Result dimensions: the ids', then the matrices'.
          int64_t ids =
              cast<RankedTensorType>(g.getIndices().getType()).getRank();
          auto gw = g.getData().getDefiningOp<WeightOp>();
          if (!g->hasOneUse() || !usable(gw) || (int64_t)d < ids)
            return false;
          cuts.push_back({static_cast<unsigned>(k), gw,
                          static_cast<int64_t>(d) - ids + 1, g,
                          static_cast<int64_t>(d)});
          break;
        }
        if (!usable(w))
          return false;
        cuts.push_back({static_cast<unsigned>(k), w, static_cast<int64_t>(d),
                        GatherOp(), 0});
        break;
      }
  }
  if (cuts.empty() || (bias && !usable(bias)))
    return false;
  // The chain's Add adds `bias` (and nothing else) to the product.
  for (Operation *c : chain)
    if (isa<AddOp>(c) &&
        (!bias || !llvm::is_contained(c->getOperands(), bias.getResult()) ||
         c->getOperand(0) == c->getOperand(1)))
      return false;
  OpBuilder b(op);
  SmallVector<Value> pieceValues;
  for (auto [s, e] : pieces) {
    std::string suffix =
        "[" + std::to_string(s) + ":" + std::to_string(e) + "]";
    SmallVector<Value> blocks;
    for (auto [k, w, d, g, gd] : cuts) {
      Value block = weightBlock(b, w, d, s, e);
      if (g) {
        Operation *lookup = b.clone(*g);
        lookup->setLoc(suffixed(g->getLoc(), suffix));
        lookup->setOperand(0, block);
        lookup->getResult(0).setType(
            withDim(cast<RankedTensorType>(g.getType()), gd, e - s));
        block = lookup->getResult(0);
      }
      blocks.push_back(block);
    }
    Value biasBlock;
    if (bias)
      biasBlock = weightBlock(b, bias, bias.getType().getRank() - 1, s, e);
    Operation *p = b.clone(*op);
    p->setLoc(suffixed(op->getLoc(), suffix));
    for (auto [i, c] : llvm::enumerate(cuts))
      p->setOperand(std::get<0>(c), blocks[i]);
    p->getResult(0).setType(withDim(outType, cutDim, e - s));
    Value cur = p->getResult(0);
    Value whole = op->getResult(0);
    for (Operation *c : chain) {
      auto type = cast<RankedTensorType>(c->getResult(0).getType());
      if (isa<ReshapeOp>(c)) {
        auto r =
            b.create<ReshapeOp>(suffixed(c->getLoc(), suffix),
                                withDim(type, type.getRank() - 1, e - s), cur);
        copyShoalAttrs(c, r);
        cur = r.getResult();
        whole = c->getResult(0);
        continue;
      }
      // The bias Add: the chain's value becomes the piece, the bias its
      // block.
      Operation *a = b.clone(*c);
      a->setLoc(suffixed(c->getLoc(), suffix));
      for (OpOperand &o : a->getOpOperands())
        o.set(o.get() == whole ? cur : biasBlock);
      a->getResult(0).setType(withDim(type, type.getRank() - 1, e - s));
      cur = a->getResult(0);
      whole = c->getResult(0);
    }
    pieceValues.push_back(cur);
  }
  SetVector<Operation *> users;
  for (const Take &t : takes) {
    auto it = llvm::find(pieces, std::make_pair(t.start, t.end));
    Value piece = pieceValues[it - pieces.begin()];
    Operation *user = t.value.getDefiningOp();
    users.insert(user);
    if (piece.getType() != t.value.getType()) {
      OpBuilder ub(user);
      auto r = ub.create<ReshapeOp>(user->getLoc(), t.value.getType(), piece);
      copyShoalAttrs(user, r);
      piece = r.getResult();
    }
    Value(t.value).replaceAllUsesWith(piece);
  }
  // What computed the whole product, from its users up: the users, the
  // constants they read (Gather indices), the reshape to [.., n, d] before
  // them, the chain, the product and its weights.
  SmallVector<Operation *> dead(users.begin(), users.end());
  for (Operation *user : users)
    for (Value v : user->getOperands())
      if (auto c = v.getDefiningOp<ConstantOp>();
          c && !llvm::is_contained(dead, c.getOperation()))
        dead.push_back(c);
  Value whole = chain.empty() ? op->getResult(0) : chain.back()->getResult(0);
  for (Operation *user : whole.getUsers())
    if (isa<ReshapeOp>(user) && !users.contains(user))
      dead.push_back(user);
  for (Operation *c : llvm::reverse(chain))
    dead.push_back(c);
  dead.push_back(op);
  for (auto [k, w, d, g, gd] : cuts) {
    if (g)
      dead.push_back(g);
    dead.push_back(w);
  }
  if (bias)
    dead.push_back(bias);
  for (Operation *d : dead)
    if (d->use_empty())
      d->erase();
  return true;
}

struct FusedWeightViewsPass
    : public ::shoal::impl::FusedWeightViewsPassBase<FusedWeightViewsPass> {
  void runOnOperation() final {
    SmallVector<Operation *> projections;
    WeightUses names;
    getOperation().walk([&](Operation *op) {
      if (isa<MatMulOp, GemmOp>(op))
        projections.push_back(op);
      if (auto w = dyn_cast<WeightOp>(op))
        ++names[{w->getParentOfType<func::FuncOp>(), w.getNameAttr()}];
    });
    for (Operation *op : projections) {
      Value out = op->getResult(0);
      auto outType = cast<RankedTensorType>(out.getType());
      int64_t rank = outType.getRank();
      if (rank == 0)
        continue;
      // The result dimension that the users cut: the last, or the last
      // above 1 of a product of matrices with vectors (the batched_mm
      // experts' [tokens, 2 * inner, 1], squeezed before the Split).
      int64_t cutDim = rank - 1;
      // A bias added after the product is cut with it.
      WeightOp bias;
      Value cut = out;
      SmallVector<Operation *> chain;
      if (out.hasOneUse() && outType.getDimSize(rank - 1) > 1)
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
            chain.push_back(add);
          }
        }
      // (A Gemm's own C is one of its operands, cut by its sharding rule.)
      // A squeeze of the trailing ones.
      if (outType.getDimSize(rank - 1) == 1 && out.hasOneUse())
        if (auto squeeze = dyn_cast<ReshapeOp>(*out.getUsers().begin())) {
          ArrayRef<int64_t> in = outType.getShape();
          ArrayRef<int64_t> to = squeeze.getType().getShape();
          if (!to.empty() && to.size() < in.size() &&
              in.take_front(to.size()) == to && to.back() > 1 &&
              llvm::all_of(in.drop_front(to.size()),
                           [](int64_t d) { return d == 1; })) {
            cutDim = static_cast<int64_t>(to.size()) - 1;
            cut = squeeze.getResult();
            chain.push_back(squeeze);
          }
        }
      // Reshapes that keep the last dimension (Hugging Face's Conv1D
      // flattens the batch for its Gemm and restores it before the Split).
      while (cut.hasOneUse())
        if (auto reshape = dyn_cast<ReshapeOp>(*cut.getUsers().begin());
            reshape && reshape.getType().getRank() >= 1 &&
            reshape.getType().getDimSize(reshape.getType().getRank() - 1) ==
                outType.getDimSize(cutDim)) {
          cut = reshape.getResult();
          chain.push_back(reshape);
        } else {
          break;
        }
      int64_t n = equalCut(cut);
      // Matrices looked up by ids are not viewed (the lookup would read
      // the view); the product is computed by pieces, each a lookup of
      // its block.
      bool gathered = llvm::any_of(op->getOperands(), [](Value v) {
        return static_cast<bool>(getGatheredWeight(v.getDefiningOp()));
      });
      if (n == 0 || gathered) {
        SmallVector<Take> takes;
        SmallVector<std::pair<int64_t, int64_t>> pieces;
        if (n == 0) {
          pieces = unequalCut(cut, takes);
        } else if (takesAlong(
                       cut, cast<RankedTensorType>(cut.getType()).getRank() - 1,
                       1, takes)) {
          // The takes must be the n pieces, each taken.
          int64_t size = outType.getDimSize(cutDim);
          for (const Take &t : takes)
            pieces.push_back({t.start, t.end});
          llvm::sort(pieces);
          pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
          bool equal = static_cast<int64_t>(pieces.size()) == n;
          for (int64_t i = 0; equal && i < n; ++i)
            equal =
                pieces[i] == std::make_pair(i * size / n, (i + 1) * size / n);
          if (!equal)
            pieces.clear();
        }
        if (!pieces.empty())
          computeByPieces(op, cutDim, bias, chain, pieces, takes, names);
        continue;
      }
      if (cutDim != rank - 1)
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
