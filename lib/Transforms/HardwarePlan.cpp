//===- HardwarePlan.cpp - shoal-plan: hardware-aware planning ---*- C++ -*-===//
//
// Between shoal-annotate and shoal-form-taskgraphs. Reads the graph's cost
// (the CostOpInterface), what tensor parallelism would do to each op and
// where a pipeline stage may end, and hands that to the planner library
// (lib/Planner/Search): Whale's balancing of an annotated layout, or the
// search of one when there is no annotation. The decisions become scope
// labels and the module attribute `shoal.plan`, which shoal-form-taskgraphs
// reads.
//
//===----------------------------------------------------------------------===//

#include "Fuse.h"
#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Planner/Search.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>

namespace shoal {
#define GEN_PASS_DEF_PLANPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;
namespace pl = shoal::planner;

namespace {

bool isSource(Operation *op) { return isa<WeightOp, ConstantOp>(op); }

double bytesOf(Type t) {
  return static_cast<double>(getTensorBytes(TypeRange{t}));
}

/// Timed at the rate of matrix products (the runtime's kMatMulClass).
bool isProduct(Operation *op) {
  return isa<MatMulOp, GemmOp, AttentionOp, AttentionGradOp>(op);
}

/// What the planner times of `op`: its cost (CostOpInterface), the rows of
/// a matrix product, and the elements mixed precision casts around one.
/// Weights, constants and the values in `weightLike` (weight gradients)
/// are bytes that do not shrink with the batch. `split`: the values split
/// under tensor parallelism (null: all of them).
pl::OpPiece pieceOf(Operation *op, const DenseSet<Value> &weightLike,
                    const DenseSet<Value> *split) {
  pl::OpPiece p;
  if (auto cost = dyn_cast<CostOpInterface>(op)) {
    p.flops = cost.getFlops();
    p.bytes = cost.getBytes();
  } else {
    p.bytes = getTensorBytes(op->getOperandTypes()) +
              getTensorBytes(op->getResultTypes());
  }
  auto isWeight = [&](Value v) {
    Operation *def = v.getDefiningOp();
    return (def && isSource(def)) || weightLike.contains(v);
  };
  auto isWhole = [&](Value v) {
    return split && !isWeight(v) && !split->contains(v);
  };
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  if (split)
    p.hasSplit =
        llvm::any_of(values, [&](Value v) { return split->contains(v); });
  for (Value v : values) {
    if (isWeight(v))
      p.weightBytes += bytesOf(v.getType());
    else if (isWhole(v))
      p.wholeBytes += bytesOf(v.getType());
  }
  p.weightBytes = std::min(p.weightBytes, p.bytes);
  p.wholeBytes = std::min(p.wholeBytes, p.bytes - p.weightBytes);
  // The runtime's Reshape is a view of its input (no copy), as shoal-sim
  // times it.
  if (isa<ReshapeOp>(op))
    p.flops = p.bytes = p.weightBytes = p.wholeBytes = 0;
  if (isProduct(op))
    p.rows = resultRows(op);
  // Mixed precision casts a matrix product's float32 operands and result.
  if (p.rows > 0 && isa<MatMulOp, GemmOp>(op))
    for (Value x : values)
      if (auto t = dyn_cast<RankedTensorType>(x.getType());
          t && t.hasStaticShape() && t.getElementType().isF32()) {
        p.castElements += t.getNumElements();
        if (isWeight(x))
          p.castWeightElements += t.getNumElements();
        else if (isWhole(x))
          p.castWholeElements += t.getNumElements();
      }
  return p;
}

/// The ops `op`'s gradient rule builds (what shoal-autodiff makes of it),
/// each as the planner times it; empty when it has no rule. They are built
/// in a scratch block, off the module, and erased. As shoal-autodiff, only
/// the gradients of activations and weights count (not of constants or
/// graph inputs). `split`: `op`'s operands and results split under tensor
/// parallelism (a gradient is split as its value is; a product of one
/// split operand and one whole is split, of two is a partial sum, whole,
/// unless both are batched activations, split over heads).
std::vector<pl::OpPiece> backwardOf(Operation *op, const DenseSet<Value> &split,
                                    pl::OpCost &cost) {
  std::vector<pl::OpPiece> pieces;
  auto rule = dyn_cast<GradientOpInterface>(op);
  if (!rule || op->getNumResults() == 0)
    return pieces;
  // A rule that fails says so; the planner only asks.
  ScopedDiagnosticHandler quiet(op->getContext(),
                                [](Diagnostic &) { return success(); });
  Block scratch;
  SmallVector<Value> resultGrads, operandGrads;
  DenseSet<Value> splitHere = split;
  for (Value r : op->getResults()) {
    resultGrads.push_back(scratch.addArgument(r.getType(), op->getLoc()));
    if (split.contains(r))
      splitHere.insert(resultGrads.back());
  }
  OpBuilder b(op->getContext());
  b.setInsertionPointToEnd(&scratch);
  if (succeeded(rule.buildGradient(b, resultGrads, operandGrads))) {
    for (Operation &x : scratch) {
      bool out;
      if (isa<MatMulOp, GemmOp>(&x) && x.getNumOperands() >= 2) {
        bool a = splitHere.contains(x.getOperand(0)),
             c = splitHere.contains(x.getOperand(1));
        auto rank = [](Value v) {
          auto t = dyn_cast<RankedTensorType>(v.getType());
          return t ? t.getRank() : 0;
        };
        bool batched = isa<MatMulOp>(&x) && rank(x.getOperand(0)) >= 3 &&
                       rank(x.getOperand(1)) >= 3;
        out = batched ? a || c : a != c;
      } else {
        out = llvm::any_of(x.getOperands(),
                           [&](Value v) { return splitHere.contains(v); });
      }
      if (out)
        for (Value r : x.getResults())
          splitHere.insert(r);
    }
    DenseSet<Value> needed;
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      Operation *def = operand.getDefiningOp();
      if (grad && def && !isa<ConstantOp>(def))
        needed.insert(grad);
    }
    // Back from the needed gradients: the ops they depend on.
    SmallVector<Operation *> live;
    for (Operation &x : llvm::reverse(scratch)) {
      if (llvm::none_of(x.getResults(),
                        [&](Value r) { return needed.contains(r); }))
        continue;
      live.push_back(&x);
      for (Value in : x.getOperands())
        needed.insert(in);
    }
    // Weight gradients, back through the views that make them.
    DenseSet<Value> weightLike;
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (Operation *def = operand.getDefiningOp();
          grad && def && isa<WeightOp>(def))
        weightLike.insert(grad);
    for (Operation *x : live)
      if (isa<ReshapeOp, TransposeOp>(x) &&
          weightLike.contains(x->getResult(0)))
        weightLike.insert(x->getOperand(0));
    for (Operation *x : llvm::reverse(live))
      if (!isSource(x))
        pieces.push_back(pieceOf(x, weightLike, &splitHere));
    // The weights it reads again (each read gathered under ZeRO-3).
    for (Operation *x : live)
      for (Value v : x->getOperands())
        if (Operation *def = v.getDefiningOp();
            def && isa<WeightOp>(def) &&
            llvm::is_contained(op->getOperands(), v))
          if (auto t = dyn_cast<RankedTensorType>(v.getType());
              t && t.hasStaticShape()) {
            ++cost.backwardWeightReads;
            cost.backwardWeightReadParams += t.getNumElements();
          }
  }
  while (!scratch.empty())
    scratch.back().erase();
  return pieces;
}

/// A matrix product with a weight as its right operand, or null.
bool isWeightProduct(Operation *op) {
  if (!isa<MatMulOp, GemmOp>(op) || op->getNumOperands() < 2)
    return false;
  Operation *def = op->getOperand(1).getDefiningOp();
  return def && isa<WeightOp>(def);
}

/// The planner's view of `body`: every op but weights and constants, in
/// order. Tensor parallelism follows Megatron-LM: a weight product whose
/// input is whole is column-parallel (its output is split), one whose input
/// is split is row-parallel (all-reduce after it); ops on split values are
/// split; an embedding lookup is vocabulary-parallel (all-reduce after it).
pl::ModelProfile buildProfile(Block &body, SmallVectorImpl<Operation *> &ops,
                              bool training) {
  pl::ModelProfile profile;
  profile.hasBackward = training;
  for (Operation &op : body.without_terminator())
    if (!isSource(&op))
      ops.push_back(&op);
  const int n = ops.size();
  profile.ops.resize(n);
  DenseMap<Operation *, int> index;
  for (int i = 0; i < n; ++i)
    index[ops[i]] = i;

  DenseSet<Value> split;
  DenseMap<Value, double> splitSizeOf; // a split value's OpCost::splitSize
  // Values whose gradient the backward computes: those a weight reaches;
  // and those whose gradient it all-reduces over tp.
  DenseSet<Value> needsGradient, reducedInBackward;
  DenseSet<Operation *> seenWeights;
  // Distinct constants (value and type), by index.
  DenseMap<std::pair<Attribute, Type>, int> constantIds;
  for (int i = 0; i < n; ++i) {
    Operation *op = ops[i];
    pl::OpCost &c = profile.ops[i];
    for (Value r : op->getResults())
      c.outBytes += bytesOf(r.getType());
    for (Value v : op->getOperands())
      if (auto cst = v.getDefiningOp<ConstantOp>()) {
        auto [it, fresh] = constantIds.try_emplace(
            {cst.getValue(), v.getType()}, profile.constantBytes.size());
        if (fresh) {
          profile.constantBytes.push_back(bytesOf(v.getType()));
          profile.constantIsFloat.push_back(
              isa<FloatType>(getElementTypeOrSelf(v.getType())));
        }
        if (!llvm::is_contained(c.constants, it->second))
          c.constants.push_back(it->second);
      }
    bool readsSplit = false;
    bool readsTrained = false;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      readsTrained |= needsGradient.contains(v) || (def && isa<WeightOp>(def));
      if (def && isa<WeightOp>(def))
        if (auto t = dyn_cast<RankedTensorType>(v.getType());
            t && t.hasStaticShape()) {
          ++c.weightReads;
          c.weightReadParams += t.getNumElements();
          if (seenWeights.insert(def).second) {
            ++c.weights;
            c.params += t.getNumElements();
          }
        }
      readsSplit |= split.contains(v);
    }
    bool outSplit = readsSplit;
    bool shardsWeights = false;
    auto lastDim = [](Value v) -> double {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      return t && t.hasStaticShape() && t.getRank() ? t.getShape().back() : 0;
    };
    for (Value v : op->getOperands())
      if (auto it = splitSizeOf.find(v); it != splitSizeOf.end())
        c.splitSize = std::max(c.splitSize, it->second);
    if (isWeightProduct(op)) {
      c.tpSharded = shardsWeights = true;
      if (readsSplit) {
        c.tpAllReduceBytes = c.outBytes; // row-parallel
        c.splitSize = lastDim(op->getOperand(0));
        outSplit = false;
      } else {
        outSplit = true; // column-parallel
        c.splitSize = lastDim(op->getResult(0));
        // Its input's gradient is summed over the group (Megatron's f),
        // once per input: the gradients of the products reading the same
        // value (q, k and v) are added first.
        if (training && needsGradient.contains(op->getOperand(0)) &&
            reducedInBackward.insert(op->getOperand(0)).second)
          c.tpBackwardAllReduceBytes = bytesOf(op->getOperand(0).getType());
      }
    } else if (isa<GatherOp>(op) && op->getOperand(0).getDefiningOp() &&
               isa<WeightOp>(op->getOperand(0).getDefiningOp())) {
      c.tpSharded = shardsWeights = true;
      c.tpAllReduceBytes = c.outBytes;
      outSplit = false;
    } else {
      c.tpSharded = readsSplit;
    }
    // Its values split under tensor parallelism (its sharded weights too).
    DenseSet<Value> splitHere;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (split.contains(v) || (shardsWeights && def && isa<WeightOp>(def)))
        splitHere.insert(v);
    }
    if (outSplit)
      for (Value r : op->getResults())
        splitHere.insert(r);
    static_cast<pl::OpPiece &>(c) = pieceOf(op, DenseSet<Value>(), &splitHere);
    if (training) {
      c.backward = backwardOf(op, splitHere, c);
      // The loss reads what the graph returns (a cross-entropy over the
      // logits: once forward, twice for its gradient).
      for (Value r : op->getResults())
        if (llvm::is_contained(body.getTerminator()->getOperands(), r)) {
          pl::OpPiece loss;
          loss.bytes = 3 * bytesOf(r.getType());
          loss.hasSplit = outSplit;
          loss.wholeBytes = outSplit ? 0 : loss.bytes;
          c.backward.push_back(loss);
          // On split logits the loss is vocabulary-parallel: per row, the
          // maximum, then the sum and the target's logit, all-reduced
          // (f32) in the forward and again in the backward.
          auto t = dyn_cast<RankedTensorType>(r.getType());
          if (outSplit && t && t.hasStaticShape() && t.getRank() > 0 &&
              t.getShape().back() > 0) {
            double rows = t.getNumElements() / t.getShape().back();
            c.tpLossAllReduceBytes = {4 * rows, 8 * rows};
          }
        }
    }
    c.outSplit = outSplit;
    if (readsTrained)
      for (Value r : op->getResults())
        needsGradient.insert(r);
    if (outSplit)
      for (Value r : op->getResults()) {
        split.insert(r);
        splitSizeOf[r] = c.splitSize;
        if (llvm::is_contained(body.getTerminator()->getOperands(), r))
          c.tpGatherBytes += bytesOf(r.getType());
      }
  }

  // shoal-fuse's chains run as one op each. In a training step only
  // add+LayerNorm fuses here: the backward reads the attention's
  // intermediate values, which then have more than one use. (GELU was
  // fused before this pass, shoal.gelu with its own gradient rule.)
  for (const FusionGroup &g : predictFusions(body.getParentOp())) {
    if (training && g.fused != AddLayerNormOp::getOperationName())
      continue;
    int root = -1;
    for (Operation *op : g.ops)
      if (auto it = index.find(op); it != index.end())
        root = std::max(root, it->second);
    if (root < 0)
      continue;
    double weightBytes = 0, wholeBytes = 0;
    bool hasSplit = false;
    for (Operation *op : g.ops)
      if (auto it = index.find(op); it != index.end()) {
        weightBytes += profile.ops[it->second].weightBytes;
        wholeBytes += profile.ops[it->second].wholeBytes;
        hasSplit |= profile.ops[it->second].hasSplit;
        static_cast<pl::OpPiece &>(profile.ops[it->second]) = pl::OpPiece();
      }
    pl::OpCost &c = profile.ops[root];
    c.flops = g.flops;
    c.bytes = g.bytes;
    c.weightBytes = std::min(weightBytes, c.bytes);
    c.wholeBytes = std::min(wholeBytes, c.bytes - c.weightBytes);
    c.hasSplit = hasSplit;
    c.rows = g.fused == AttentionOp::getOperationName() ? g.rows : 0;
  }

  // What a training step keeps for the backward: results a consumer's
  // gradient reads (a product's operands, a LayerNorm's input, a
  // nonlinearity's input), results of ops whose gradient reads their own
  // output (softmax, exp, sqrt), and the outputs (the loss reads them).
  auto isConstant = [](Value v) {
    return v.getDefiningOp() && isa<ConstantOp>(v.getDefiningOp());
  };
  auto gradientReads = [&](Operation *user, Value v) {
    if (isa<AddOp, SubOp, ReshapeOp, TransposeOp, NegOp, CastOp, ExpandOp,
            ReduceSumOp, ReduceMeanOp, SoftmaxOp, ExpOp, SqrtOp>(user))
      return false;
    // A product's (or a quotient's numerator's) gradient reads the other
    // operand: scaling by a constant (GELU's 0.5, attention's 1/sqrt(d))
    // keeps nothing.
    if (isa<MulOp>(user) || (isa<DivOp>(user) && user->getOperand(0) == v)) {
      for (Value other : user->getOperands())
        if (other != v && !isConstant(other))
          return true;
      return user->getOperand(0) == user->getOperand(1);
    }
    if (auto g = dyn_cast<GatherOp>(user))
      return v == g.getIndices();
    if (auto onnx = dyn_cast<OnnxOp>(user))
      return !llvm::is_contained({"Concat", "Split", "Slice", "Unsqueeze",
                                  "Squeeze", "Flatten", "Identity", "Pad"},
                                 onnx.getOpType());
    return true;
  };
  // What selective recomputation runs again: each attention core but its
  // product with v, whose result the segment keeps.
  for (int i = 0; i < n; ++i)
    if (isa<SoftmaxOp>(ops[i])) {
      SmallVector<Operation *> segment = attentionCore(ops[i]);
      if (!segment.empty())
        segment.pop_back();
      for (Operation *op : segment)
        if (auto it = index.find(op); it != index.end())
          profile.ops[it->second].selectiveRecompute = true;
    }
  // The attention cores (selective recomputation's): each softmax's result
  // and the scores before it, back to the product that makes them.
  DenseSet<Value> core;
  for (Operation *op : ops) {
    auto sm = dyn_cast<SoftmaxOp>(op);
    if (!sm)
      continue;
    core.insert(sm.getResult());
    Value v = sm->getOperand(0);
    for (int hops = 0; hops < 8 && v.getDefiningOp(); ++hops) {
      Operation *def = v.getDefiningOp();
      if (!isa<MatMulOp, MulOp, DivOp, AddOp, SubOp, WhereOp>(def))
        break;
      core.insert(v);
      if (isa<MatMulOp>(def))
        break;
      // Follow the activation operand (the other is a scale or a mask).
      Value next;
      for (Value operand : def->getOperands())
        if (auto t = dyn_cast<RankedTensorType>(operand.getType());
            t && t.getShape() == cast<RankedTensorType>(v.getType()).getShape())
          next = operand;
      if (!next)
        break;
      v = next;
    }
  }
  auto hasGradient = [&](Value v) {
    return needsGradient.contains(v) && isa<FloatType>(getElementTypeOrSelf(v));
  };
  for (int i = 0; i < n; ++i) {
    Operation *op = ops[i];
    bool ownOutput = isa<SoftmaxOp, ExpOp, SqrtOp>(op);
    for (Value r : op->getResults()) {
      bool saved = ownOutput;
      int until = ownOutput ? i : n;
      for (Operation *user : r.getUsers()) {
        if (user == body.getTerminator()) {
          saved = true;
          until = i;
        } else if (gradientReads(user, r)) {
          saved = true;
          if (auto it = index.find(user); it != index.end())
            until = std::min(until, it->second);
        }
      }
      if (!saved)
        continue;
      double b = bytesOf(r.getType());
      if (until < n && until != i)
        if (auto mul = dyn_cast<MulOp>(ops[until]);
            mul && mul->getOperand(1) == r && mul->getOperand(0) != r &&
            mul->getOperand(0).getType() == r.getType() &&
            mul.getResult().getType() == r.getType() &&
            hasGradient(mul->getOperand(0)) && hasGradient(r)) {
          profile.ops[until].reusedBytes = b;
          profile.ops[until].reusedFrom = i;
        }
      profile.ops[i].savedBytes += b;
      // A reader outside the ops (or none found): held to the segment's
      // end.
      profile.ops[i].savedUntil.push_back({until < n ? until : i, b});
      if (core.contains(r))
        profile.ops[i].coreBytes += b;
    }
  }

  {
    llvm::StringMap<int> layers;
    for (int i = 0; i < n; ++i)
      if (std::string key = getLayerKey(onnxNodeName(ops[i])); !key.empty())
        profile.ops[i].layer =
            layers.try_emplace(key, static_cast<int>(layers.size()))
                .first->second;
    profile.layers = layers.size();
  }

  // Values crossing the point after each op: defined at or before it, used
  // after it (graph inputs count from the start, outputs to the end).
  std::vector<int> count(n + 1, 0);
  std::vector<double> bytes(n + 1, 0);
  auto addSpan = [&](int def, int last, double b) {
    // Crosses the points after ops def .. last-1.
    int from = std::max(def, 0);
    if (last <= from)
      return;
    count[from] += 1;
    count[last] -= 1;
    bytes[from] += b;
    bytes[last] -= b;
  };
  auto lastUse = [&](Value v) {
    int last = -1;
    for (Operation *user : v.getUsers()) {
      if (user == body.getTerminator())
        return n;
      if (auto it = index.find(user); it != index.end())
        last = std::max(last, it->second);
    }
    return last;
  };
  for (BlockArgument a : body.getArguments())
    addSpan(0, lastUse(a), bytesOf(a.getType()));
  for (int i = 0; i < n; ++i)
    for (Value r : ops[i]->getResults())
      addSpan(i, lastUse(r), bytesOf(r.getType()));
  int running = 0;
  double live = 0;
  for (int i = 0; i < n; ++i) {
    running += count[i];
    live += bytes[i];
    profile.ops[i].liveBytes = live;
    if (i + 1 < n && running == 1) {
      profile.ops[i].cutAfter = true;
      profile.ops[i].cutBytes = live;
    }
  }

  if (body.getNumArguments() > 0)
    if (auto t = dyn_cast<RankedTensorType>(body.getArgument(0).getType());
        t && t.hasStaticShape() && t.getRank() >= 1) {
      profile.batch = t.getDimSize(0);
      if (t.getRank() == 2 && t.getElementType().isInteger(64))
        profile.tokens = t.getDimSize(1);
    }
  return profile;
}

struct PlanPass : public ::shoal::impl::PlanPassBase<PlanPass> {
  using PlanPassBase::PlanPassBase;

  void runOnOperation() final {
    if (clusterPath.empty())
      return;
    ModuleOp module = getOperation();
    pl::Cluster cluster;
    try {
      cluster = pl::parseClusterSpec(clusterPath);
    } catch (const pl::SpecError &e) {
      module.emitError() << e.what();
      return signalPassFailure();
    }
    int64_t world = worldSize ? worldSize : cluster.numDevices();
    if (world != cluster.numDevices()) {
      module.emitError() << "the cluster spec '" << clusterPath << "' has "
                         << cluster.numDevices()
                         << " devices but the world size is " << world;
      return signalPassFailure();
    }
    pl::PlanOptions options;
    if (step == "forward")
      options.step = pl::StepKind::Forward;
    else if (step == "train")
      options.step = pl::StepKind::Train;
    else if (step == "train-recompute")
      options.step = pl::StepKind::TrainRecompute;
    else if (step == "train-selective")
      options.step = pl::StepKind::TrainSelective;
    else {
      module.emitError() << "shoal-plan: step must be forward, train, "
                            "train-recompute or train-selective, got '"
                         << step << "'";
      return signalPassFailure();
    }
    if (zero < 0 || zero > 3) {
      module.emitError() << "shoal-plan: zero must be 0, 1, 2 or 3, got "
                         << static_cast<int64_t>(zero);
      return signalPassFailure();
    }
    options.zeroStage = static_cast<int>(zero);
    options.shardMultiple = shardMultiple;
    const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
    // Not given (or empty, as shoal-parallelize passes it): the products run
    // at the precision of their element type (a graph in f16 or bf16), as
    // shoal-sim times the compiled plan.
    const bool byElementType = !precision.hasValue() || precision.empty();
    auto *it = byElementType ? std::begin(names) : llvm::find(names, precision);
    if (it == std::end(names)) {
      module.emitError() << "shoal-plan: precision must be fp32, tf32, bf16 "
                            "or fp16, got '"
                         << precision << "'";
      return signalPassFailure();
    }
    options.precision = static_cast<pl::Precision>(it - std::begin(names));
    if (byElementType)
      module.walk([&](Operation *op) {
        if (!isa<MatMulOp, GemmOp>(op))
          return WalkResult::advance();
        Type e = getElementTypeOrSelf(op->getResult(0).getType());
        if (e.isF16())
          options.precision = pl::Precision::FP16;
        else if (e.isBF16())
          options.precision = pl::Precision::BF16;
        return WalkResult::interrupt();
      });
    options.fp32Weights = fp32Weights;
    options.lowActivations = lowActivations;
    options.balance = balance;
    options.dp = dp;
    options.tp = tp;
    options.pp = pp;
    options.microBatches = microBatches;
    options.schedule = schedule;
    options.virtualStages = virtualStages;
    options.microBatchSize = microBatchSize;
    if (matmulEfficiency <= 0 || matmulEfficiency > 1 ||
        memoryEfficiency <= 0 || memoryEfficiency > 1 || linkEfficiency <= 0 ||
        linkEfficiency > 1) {
      module.emitError() << "shoal-plan: efficiencies must be in (0, 1]";
      return signalPassFailure();
    }
    pl::Efficiency efficiency;
    efficiency.matmul = matmulEfficiency;
    efficiency.memory = memoryEfficiency;
    efficiency.link = linkEfficiency;
    pl::CostModel cost(cluster, options.precision, efficiency);

    func::FuncOp func;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal()) {
        func = f;
        break;
      }
    if (!func || !func.getBody().hasOneBlock())
      return;
    Block &body = func.getBody().front();
    SmallVector<Operation *> ops;
    pl::ModelProfile profile =
        buildProfile(body, ops, options.step != pl::StepKind::Forward);
    if (globalBatch > 0)
      profile.batchScale = double(globalBatch) / profile.batch;
    if (ops.empty())
      return;

    module->setAttr(
        "shoal.world_size",
        IntegerAttr::get(IntegerType::get(&getContext(), 64), world));
    LogicalResult r =
        module->hasAttr(ShoalDialect::kScopesAttr)
            ? planAnnotated(module, ops, profile, cluster, cost, options)
            : searchLayout(module, ops, profile, cluster, cost, options);
    if (failed(r))
      signalPassFailure();
  }

  /// The `shoal.plan` attribute and, for stages, their placements.
  /// The stages whose incoming activations go as Megatron's
  /// scatter/gather on this cluster (pl::Layout::scatterGather, decided by
  /// the evaluation), for shoal-pipeline: `scatter_gather_stages` in
  /// `shoal.plan`.
  static NamedAttribute scatterGatherAttr(Builder &b, const pl::Layout &l) {
    SmallVector<int64_t> stages;
    for (auto [k, yes] : llvm::enumerate(l.scatterGather))
      if (yes)
        stages.push_back(static_cast<int64_t>(k));
    return b.getNamedAttr("scatter_gather_stages",
                          b.getDenseI64ArrayAttr(stages));
  }

  void record(ModuleOp module, const pl::Layout &l,
              ArrayRef<std::string> stageNames, bool staged,
              ArrayRef<NamedAttribute> extra) {
    MLIRContext *ctx = module.getContext();
    Builder b(ctx);
    SmallVector<NamedAttribute> attrs;
    attrs.push_back(b.getNamedAttr("cluster", b.getStringAttr(clusterPath)));
    attrs.push_back(b.getNamedAttr("layout", b.getStringAttr(l.describe())));
    attrs.push_back(
        b.getNamedAttr("step_ms", b.getF64FloatAttr(l.stepSeconds * 1e3)));
    SmallVector<Attribute> devices, placements, names;
    SmallVector<int64_t> opsPerStage, memory, capacity;
    // The estimate's parts in bytes per stage (shoal-run --report-memory
    // reports the same parts; bench/memory_model.py compares them).
    SmallVector<int64_t> weights, gradients, optimizer, activations;
    for (auto [k, s] : llvm::enumerate(l.stages)) {
      weights.push_back(static_cast<int64_t>(s.memory.weights));
      gradients.push_back(static_cast<int64_t>(s.memory.gradients));
      optimizer.push_back(static_cast<int64_t>(s.memory.optimizer));
      activations.push_back(static_cast<int64_t>(s.memory.activations));
    }
    for (auto [k, s] : llvm::enumerate(l.stages)) {
      devices.push_back(b.getStringAttr(s.device));
      names.push_back(b.getStringAttr(stageNames[k]));
      placements.push_back(b.getDenseI64ArrayAttr({s.offset, s.stride}));
      opsPerStage.push_back(s.end - s.begin);
      memory.push_back(static_cast<int64_t>(s.memoryBytes / (1 << 20)));
      capacity.push_back(static_cast<int64_t>(s.capacityBytes / (1 << 20)));
    }
    attrs.push_back(b.getNamedAttr("stages", b.getArrayAttr(names)));
    attrs.push_back(b.getNamedAttr("stage_devices", b.getArrayAttr(devices)));
    attrs.push_back(
        b.getNamedAttr("stage_ops", b.getDenseI64ArrayAttr(opsPerStage)));
    attrs.push_back(
        b.getNamedAttr("stage_memory_MiB", b.getDenseI64ArrayAttr(memory)));
    attrs.push_back(
        b.getNamedAttr("stage_capacity_MiB", b.getDenseI64ArrayAttr(capacity)));
    attrs.push_back(
        b.getNamedAttr("stage_weights_bytes", b.getDenseI64ArrayAttr(weights)));
    attrs.push_back(b.getNamedAttr("stage_gradients_bytes",
                                   b.getDenseI64ArrayAttr(gradients)));
    attrs.push_back(b.getNamedAttr("stage_optimizer_bytes",
                                   b.getDenseI64ArrayAttr(optimizer)));
    attrs.push_back(b.getNamedAttr("stage_activations_bytes",
                                   b.getDenseI64ArrayAttr(activations)));
    if (staged)
      attrs.push_back(b.getNamedAttr("placements", b.getArrayAttr(placements)));
    if (!l.batchShares.empty())
      attrs.push_back(b.getNamedAttr(
          "batch_shares", b.getDenseI64ArrayAttr(SmallVector<int64_t>(
                              l.batchShares.begin(), l.batchShares.end()))));
    attrs.append(extra.begin(), extra.end());
    module->setAttr("shoal.plan", b.getDictionaryAttr(attrs));
    // Compiled batch shares (one stage): the compiler builds one replica's
    // program, gradient accumulation over all the micro-batches of the step
    // (its scope on one device), and the plan's export deals the
    // micro-batches out to the replicas (Program.micro_batch_shares).
    if (!l.replicaMicroBatches.empty()) {
      module->setAttr(ShoalDialect::kNumMicroBatchAttr,
                      b.getI64IntegerAttr(l.microBatches));
      module->setAttr(ShoalDialect::kScheduleKindAttr,
                      b.getStringAttr(l.schedule));
      module->setAttr(
          kMicroBatchSharesAttr,
          b.getDenseI64ArrayAttr(SmallVector<int64_t>(
              l.replicaMicroBatches.begin(), l.replicaMicroBatches.end())));
      SmallVector<Attribute> scopes;
      for (auto s : module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr)
                        .getAsRange<ScopeAttr>())
        scopes.push_back(ScopeAttr::get(ctx, s.getName(), s.getStrategy(), 1));
      module->setAttr(ShoalDialect::kScopesAttr, b.getArrayAttr(scopes));
    }
  }

  /// Shards by speed the planner predicted as compiled (the stage's
  /// shardWeights): the split scopes get them (kUnevenShardsAttr), with
  /// the multiple blocks are rounded to; shoal-partition builds them.
  bool compileShards(ModuleOp module, const pl::Layout &l,
                     ArrayRef<ScopeAttr> scopes) {
    if (l.stages.size() != 1 || l.stages.front().shardWeights.empty())
      return false;
    Builder b(module.getContext());
    SmallVector<NamedAttribute> shards;
    for (ScopeAttr scope : scopes)
      if (scope.getStrategy() == Strategy::split)
        shards.push_back(b.getNamedAttr(
            scope.getName(),
            b.getDenseI64ArrayAttr(l.stages.front().shardWeights)));
    if (shards.empty())
      return false;
    module->setAttr(kUnevenShardsAttr, b.getDictionaryAttr(shards));
    module->setAttr(kShardMultipleAttr, b.getI64IntegerAttr(shardMultiple));
    return true;
  }

  /// Unequal batch shares and shards are not compiled yet.
  static void warnPredictionOnly(ModuleOp module, const pl::Layout &l,
                                 bool shards) {
    // The layout is predicted as compiled (equal parts); say what is lost.
    if (!l.uncompiledShares.empty())
      module.emitWarning() << llvm::formatv(
          "shoal-plan: batch shares by speed ({0}) would take {1:F4} ms per "
          "step, but are not compiled ({2}); the plan, {3:F4} ms per step, "
          "gives every replica an equal part",
          pl::formatShares(l.uncompiledShares), l.uncompiledStepSeconds * 1e3,
          pl::sharesNotCompiled(l), l.stepSeconds * 1e3);
    if (shards)
      module.emitWarning()
          << "shoal-plan: the shards by speed in 'shoal.plan' "
             "(shard_per_mille) are not compiled; the plan gives every shard "
             "an equal part, and is predicted that way";
  }

  /// The refusal: every stage's estimate against its capacity.
  LogicalResult refuse(ModuleOp module, const pl::Layout &l,
                       ArrayRef<std::string> names) {
    auto diag = module.emitError()
                << "the plan does not fit in memory on '" << clusterPath
                << "' (" << l.describe() << "):";
    for (auto [k, s] : llvm::enumerate(l.stages)) {
      const pl::MemoryEstimate &m = s.memory;
      diag << "\n  stage " << k << " '" << names[k] << "' on " << s.device
           << ": needs " << pl::formatBytes(s.memoryBytes) << " of "
           << pl::formatBytes(s.capacityBytes) << " (weights "
           << pl::formatBytes(m.weights) << ", gradients "
           << pl::formatBytes(m.gradients) << ", optimizer "
           << pl::formatBytes(m.optimizer) << ", activations "
           << pl::formatBytes(m.activations) << " for " << s.inFlight
           << " micro-batch" << (s.inFlight == 1 ? "" : "es")
           << " in flight, workspace " << pl::formatBytes(m.workspace) << ")"
           << (s.memoryBytes > s.capacityBytes ? "  DOES NOT FIT" : "");
    }
    return failure();
  }

  /// Whale's balancing of the annotated layout.
  LogicalResult planAnnotated(ModuleOp module, ArrayRef<Operation *> ops,
                              const pl::ModelProfile &profile,
                              const pl::Cluster &cluster,
                              const pl::CostModel &cost,
                              const pl::PlanOptions &options) {
    MLIRContext *ctx = module.getContext();
    auto spScopes =
        module->getAttrOfType<ArrayAttr>(kScopeSequenceParallelAttr);
    auto isSequenceParallel = [&](ScopeAttr s) {
      return s.getStrategy() == Strategy::split && spScopes &&
             llvm::is_contained(spScopes.getValue(), s.getName());
    };
    SmallVector<ScopeAttr> scopes;
    llvm::StringMap<int> scopeIndex;
    for (auto s : module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr)
                      .getAsRange<ScopeAttr>()) {
      scopeIndex[s.getName().getValue()] = scopes.size();
      scopes.push_back(s);
    }
    int64_t m = 1, v = 1;
    if (auto a = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kNumMicroBatchAttr))
      m = a.getInt();
    if (auto a = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kVirtualStagesAttr))
      v = a.getInt();
    std::string schedule = "1f1b";
    if (auto a =
            module->getAttrOfType<StringAttr>(ShoalDialect::kScheduleKindAttr))
      schedule = a.getValue().str();
    Strategy defaultStrategy = Strategy::replicate;
    if (auto d = module->getAttrOfType<StringAttr>(
            ShoalDialect::kDefaultStrategyAttr))
      defaultStrategy = *symbolizeStrategy(d.getValue());
    if (scopes.empty())
      return success();
    bool countsDiffer = llvm::any_of(scopes, [&](ScopeAttr s) {
      return s.getDevices() != scopes.front().getDevices();
    });
    bool staged = m > 1 || countsDiffer;

    // Each op's stage (as shoal-form-taskgraphs will place it): its scope,
    // or in a pipeline the stage it reads from.
    const int n = ops.size();
    std::vector<int> stageOf(n, 0);
    DenseMap<Operation *, int> index;
    for (int i = 0; i < n; ++i)
      index[ops[i]] = i;
    bool ordered = true;
    for (int i = 0; i < n; ++i) {
      int from = -1;
      for (Value x : ops[i]->getOperands())
        if (auto it = index.find(x.getDefiningOp()); it != index.end())
          from = std::max(from, stageOf[it->second]);
      if (auto name =
              ops[i]->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr)) {
        auto it = scopeIndex.find(name.getValue());
        if (it == scopeIndex.end())
          return ops[i]->emitError()
                 << "scope '" << name.getValue() << "' is not declared in '"
                 << ShoalDialect::kScopesAttr << "'";
        stageOf[i] = it->second;
      } else {
        stageOf[i] = staged ? std::max(from, 0) : -1;
      }
      if (staged && i > 0 && stageOf[i] < stageOf[i - 1])
        ordered = false;
    }

    pl::Layout l;
    l.microBatches = m;
    l.schedule = schedule;
    l.virtualStages = v;
    std::vector<std::string> names;
    // Interleaved: p * v chunk scopes in model order, chunk c on stage
    // c % p (shoal-form-taskgraphs). Priced as the search prices its own
    // interleaved layouts (each stage v consecutive chunks' ops, which is
    // the same work when the chunks are alike) and kept as annotated: not
    // balanced, but predicted and refused when it does not fit.
    bool interleaved = false;
    if (staged && v > 1) {
      interleaved =
          ordered && scopes.size() % v == 0 &&
          llvm::all_of(scopes, [&](ScopeAttr s) {
            return s.getDevices() == scopes.front().getDevices() &&
                   s.getStrategy() == scopes.front().getStrategy() &&
                   isSequenceParallel(s) == isSequenceParallel(scopes.front());
          });
      // The prediction gives each stage v consecutive chunks' ops; the
      // compiled plan puts chunk c on stage c % p. The two agree when every
      // scope has ops and the two assignments give each stage the same
      // FLOPs and parameters (alike chunks) within 5%.
      if (interleaved) {
        const int64_t p = scopes.size() / v;
        // Per stage: FLOPs and parameters, consecutive and compiled.
        std::vector<std::array<double, 4>> work(p, {0, 0, 0, 0});
        std::vector<char> hasOps(scopes.size(), 0);
        for (int i = 0; i < n; ++i)
          if (stageOf[i] >= 0) {
            hasOps[stageOf[i]] = 1;
            for (int q : {0, 1}) {
              double x = q ? profile.ops[i].params : profile.ops[i].flops;
              work[stageOf[i] / v][q] += x;
              work[stageOf[i] % p][2 + q] += x;
            }
          }
        for (const auto &w : work)
          for (int q : {0, 1})
            interleaved &=
                std::abs(w[q] - w[2 + q]) <= 0.05 * std::max(w[q], w[2 + q]);
        interleaved &= llvm::all_of(hasOps, [](char c) { return c != 0; });
      }
      module.emitRemark() << "shoal-plan: interleaved stages are kept as "
                             "annotated"
                          << (interleaved
                                  ? " (predicted, not balanced)"
                                  : " (not predicted: its chunks are not "
                                    "alike)");
      if (!interleaved)
        return success();
    }
    if (staged) {
      const int64_t chunksPerStage = interleaved ? v : 1;
      const int64_t numStages = scopes.size() / chunksPerStage;
      int64_t perPipeline = 0;
      for (int64_t k = 0; k < numStages; ++k)
        perPipeline += scopes[k].getDevices();
      if (world() % perPipeline != 0 || !ordered) {
        // shoal-form-taskgraphs reports a bad world size; scopes out of
        // order are not balanced here.
        if (!ordered)
          module.emitRemark()
              << "shoal-plan: scopes out of model order are kept as annotated";
        return success();
      }
      l.dp = world() / perPipeline;
      for (int64_t k = 0; k < numStages; ++k) {
        ScopeAttr s = scopes[k * chunksPerStage];
        pl::StagePlan st;
        st.devices = s.getDevices();
        int firstScope = k * chunksPerStage,
            lastScope = (k + 1) * chunksPerStage - 1;
        auto first = llvm::find(stageOf, firstScope);
        auto last = std::find(stageOf.rbegin(), stageOf.rend(), lastScope);
        if (first == stageOf.end() || last == stageOf.rend())
          return module.emitError()
                     << "shoal-plan: scope '"
                     << scopes[first == stageOf.end() ? firstScope : lastScope]
                            .getName()
                            .getValue()
                     << "' has no ops",
                 failure();
        st.begin = first - stageOf.begin();
        st.end = n - (last - stageOf.rbegin());
        st.split.assign(st.end - st.begin, s.getStrategy() == Strategy::split);
        st.sequenceParallel = isSequenceParallel(s);
        l.stages.push_back(std::move(st));
        names.push_back(interleaved ? llvm::formatv("stage{0}", k).str()
                                    : s.getName().getValue().str());
      }
    } else {
      int64_t c = scopes.front().getDevices();
      if (world() % c != 0)
        return success(); // shoal-form-taskgraphs reports it
      l.dp = world() / c;
      pl::StagePlan st;
      st.devices = c;
      st.begin = 0;
      st.end = n;
      // Sequence-parallel when every split scope is.
      bool anySplit = false;
      st.sequenceParallel = true;
      for (int i = 0; i < n; ++i) {
        Strategy s =
            stageOf[i] < 0 ? defaultStrategy : scopes[stageOf[i]].getStrategy();
        st.split.push_back(s == Strategy::split);
        if (s == Strategy::split) {
          anySplit = true;
          st.sequenceParallel &=
              stageOf[i] >= 0 && isSequenceParallel(scopes[stageOf[i]]);
        }
      }
      st.sequenceParallel &= anySplit;
      // One replicate scope: every device is a data-parallel replica
      // (Whale's rule lays the scope over the world), each may get its own
      // batch share, compiled as its own number of micro-batches.
      if (!anySplit && scopes.size() == 1) {
        l.dp = world();
        st.devices = 1;
      }
      l.stages.push_back(std::move(st));
      names.push_back("all");
    }

    // As annotated (even shares, pipeline-major ranks) and balanced.
    pl::Layout asIs = l;
    pl::placeRanks(asIs);
    pl::evaluate(asIs, profile, cluster, cost, options);
    pl::Layout chosen = asIs;
    if (options.balance && !interleaved) {
      chosen = l;
      // A split stage may take ops of a replicate one and the reverse: each
      // stage keeps its strategy.
      // One replicate scope: its TaskGraph can take batch blocks.
      pl::PlanOptions opts = options;
      opts.batchBlocks = batchBlocks && !staged && scopes.size() == 1 &&
                         scopes.front().getStrategy() == Strategy::replicate;
      pl::balance(chosen, profile, cluster, cost, opts, staged);
    }
    if (explain)
      llvm::errs() << llvm::formatv(
          "shoal-plan: as annotated ({0}): {1:F4} ms per step\n"
          "shoal-plan: hardware-aware ({2}): {3:F4} ms per step, {4:F2}x\n",
          asIs.describe(), asIs.stepSeconds * 1e3, chosen.describe(),
          chosen.stepSeconds * 1e3, asIs.stepSeconds / chosen.stepSeconds);
    // Its parts, as shoal-sim --breakdown shows those of the compiled plan.
    if (explain)
      llvm::errs() << llvm::formatv(
          "  its step: compute {0:F3} ms, tensor-parallel all-reduces {1:F3} "
          "ms, stage-to-stage transfers {2:F3} ms, pipeline bubble {3:F3} ms, "
          "gradient all-reduce {4:F3} ms, optimizer {5:F3} ms\n",
          (chosen.computeSeconds - chosen.tpSeconds) * 1e3,
          chosen.tpSeconds * 1e3, chosen.p2pSeconds * 1e3,
          chosen.bubbleSeconds * 1e3, chosen.dpSeconds * 1e3,
          chosen.optimizerSeconds * 1e3);
    if (explain)
      for (const std::string &line :
           pl::explainChanges(asIs, chosen, cluster, names))
        llvm::errs() << "  " << line << "\n";
    if (!chosen.fits)
      return refuse(module, chosen, names);

    // Stage boundaries that moved become new scope labels.
    if (staged && !interleaved)
      for (auto [k, s] : llvm::enumerate(chosen.stages))
        for (int i = s.begin; i < s.end; ++i)
          ops[i]->setAttr(ShoalDialect::kScopeAttr,
                          StringAttr::get(ctx, names[k]));

    Builder b(ctx);
    SmallVector<NamedAttribute> extra;
    extra.push_back(b.getNamedAttr("as_annotated_ms",
                                   b.getF64FloatAttr(asIs.stepSeconds * 1e3)));
    // A split stage whose devices differ gets shards by speed (per mille
    // of the split dimension).
    SmallVector<NamedAttribute> shards;
    for (auto [k, s] : llvm::enumerate(chosen.stages)) {
      if (!llvm::is_contained(s.split, 1) || s.devices <= 1)
        continue;
      SmallVector<double> speed;
      for (int t = 0; t < s.devices; ++t)
        speed.push_back(
            cluster.groupOf(s.offset + t).device.peakFlops(options.precision));
      if (llvm::all_equal(speed))
        continue;
      double total = 0;
      for (double x : speed)
        total += x;
      // The compiled shards (shardForWholeWork's), else by speed alone.
      SmallVector<int64_t> perMille(s.shardWeights.begin(),
                                    s.shardWeights.end());
      if (perMille.empty())
        for (double x : speed)
          perMille.push_back(std::llround(1000 * x / total));
      // Keyed by the split scopes that run there.
      for (ScopeAttr scope : scopes)
        if (scope.getStrategy() == Strategy::split &&
            (!staged || scope.getName().getValue() == names[k]))
          shards.push_back(b.getNamedAttr(scope.getName(),
                                          b.getDenseI64ArrayAttr(perMille)));
    }
    if (!shards.empty())
      extra.push_back(
          b.getNamedAttr("shard_per_mille", b.getDictionaryAttr(shards)));
    extra.push_back(scatterGatherAttr(b, chosen));
    // (Interleaved stages keep the default pipeline-major placement.)
    record(module, chosen, names, staged && !interleaved, extra);
    // Batch blocks: the scope's replicas are the world's ranks (one "tp"
    // axis over them, whose blocks of the batch differ).
    if (chosen.batchBlocks) {
      module->setAttr(
          kBatchBlocksAttr,
          b.getDictionaryAttr(b.getNamedAttr(
              scopes.front().getName(),
              b.getDenseI64ArrayAttr(SmallVector<int64_t>(
                  chosen.batchShares.begin(), chosen.batchShares.end())))));
      ScopeAttr s = scopes.front();
      module->setAttr(ShoalDialect::kScopesAttr,
                      b.getArrayAttr(ScopeAttr::get(
                          ctx, s.getName(), s.getStrategy(), chosen.dp)));
    }
    bool compiled = compileShards(module, chosen, scopes);
    warnPredictionOnly(module, chosen, !shards.empty() && !compiled);
    return success();
  }

  /// No annotation: search, then annotate the module with the winner.
  LogicalResult searchLayout(ModuleOp module, ArrayRef<Operation *> ops,
                             const pl::ModelProfile &profile,
                             const pl::Cluster &cluster,
                             const pl::CostModel &cost,
                             const pl::PlanOptions &options) {
    std::vector<pl::Layout> ranked =
        pl::search(profile, cluster, cost, options);
    std::string text = pl::explain(ranked, cluster, top);
    if (explain)
      llvm::errs() << text;
    if (ranked.empty())
      return module.emitError()
             << "shoal-plan: no layout of the model suits the "
             << cluster.numDevices() << " devices of '" << clusterPath
             << "' (the batch of " << profile.stepBatch()
             << " must divide over the data-parallel replicas)";
    if (!ranked.front().fits)
      return module.emitError() << "shoal-plan: no layout fits in memory:\n"
                                << text;
    pl::Layout best = ranked.front();
    MLIRContext *ctx = module.getContext();
    Builder b(ctx);
    int p = best.pp(),
        v = best.schedule == "interleaved" ? best.virtualStages : 1;
    // Interleaved: p * v chunks in model order, chunk c on stage c % p.
    pl::Layout chunks = best;
    if (v > 1) {
      chunks.stages.assign(p * v, best.stages.front());
      if (!pl::cutEvenly(chunks, profile))
        return module.emitError() << "shoal-plan: too few stage boundaries "
                                     "for "
                                  << p * v << " chunks";
    }
    SmallVector<Attribute> scopes;
    std::vector<std::string> names;
    for (auto [k, s] : llvm::enumerate(chunks.stages)) {
      std::string name = llvm::formatv("stage{0}", k).str();
      names.push_back(name);
      scopes.push_back(ScopeAttr::get(
          ctx, b.getStringAttr(name),
          best.tp() > 1 ? Strategy::split : Strategy::replicate, best.tp()));
      for (int i = s.begin; i < s.end; ++i)
        ops[i]->setAttr(ShoalDialect::kScopeAttr, b.getStringAttr(name));
    }
    module->setAttr(ShoalDialect::kScopesAttr, b.getArrayAttr(scopes));
    module->setAttr(ShoalDialect::kDefaultStrategyAttr,
                    b.getStringAttr("replicate"));
    module->setAttr(ShoalDialect::kNumMicroBatchAttr,
                    b.getI64IntegerAttr(best.microBatches));
    module->setAttr(ShoalDialect::kScheduleKindAttr,
                    b.getStringAttr(best.schedule));
    module->setAttr(ShoalDialect::kVirtualStagesAttr, b.getI64IntegerAttr(v));
    // Stages of the same size with one micro-batch are still a pipeline
    // (Whale's rule alone would lay every scope over all the devices).
    if (p > 1)
      module->setAttr(kPipelinedAttr, b.getUnitAttr());
    std::vector<std::string> stageNames(names.begin(), names.begin() + p);
    bool staged = best.microBatches > 1 || p > 1;
    record(module, best, stageNames, staged && v == 1,
           {scatterGatherAttr(b, best)});
    SmallVector<ScopeAttr> scopeAttrs;
    for (Attribute a : scopes)
      scopeAttrs.push_back(cast<ScopeAttr>(a));
    compileShards(module, best, scopeAttrs);
    warnPredictionOnly(module, best, false);
    return success();
  }

  int64_t world() {
    return getOperation()
        ->getAttrOfType<IntegerAttr>("shoal.world_size")
        .getInt();
  }
};

} // namespace
