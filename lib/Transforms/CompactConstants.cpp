//===- CompactConstants.cpp - One buffer per distinct constant --*- C++ -*-===//
//
// A plan holds each shoal.constant in a buffer of its own for the whole run
// (lib/Runtime/MemoryPlan.h: constants are persistent). Exporters and the
// passes before this one repeat constants: a Hugging Face model exports its
// causal mask and rotary tables once per layer, shoal-autodiff gives the
// backward its own copies, and the low-precision rewrite makes one per
// block. An attention mask is also exported at the scores' full batch shape
// ([B, 1, T, S], torch's `expand`, a view in PyTorch), where the kernels
// read it broadcast.
//
// This pass, on each rank's local program:
// - stores a constant that only attentions (and attention_grads) read as
//   their mask at its smallest broadcastable shape: every dimension along
//   which its slices are all equal becomes 1;
// - keeps one constant per value, type and block: later equal constants
//   of a block are replaced by the first.
// Constants with attributes other than their phase and scope (the loss
// scale, which the runtime updates) are left as they are.
//
//===----------------------------------------------------------------------===//

#include "shoal/Transforms/Passes.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <cstring>

namespace shoal {
#define GEN_PASS_DEF_COMPACTCONSTANTSPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// Whether `c` carries nothing but its value, phase and scope.
bool isPlain(ConstantOp c) {
  return llvm::all_of(c->getDiscardableAttrs(), [](NamedAttribute a) {
    return a.getName() == ShoalDialect::kPhaseAttr ||
           a.getName() == ShoalDialect::kScopeAttr;
  });
}

/// `dense` with every dimension along which its slices are all equal made
/// 1, or null when there is none.
DenseElementsAttr broadcastCore(DenseElementsAttr dense) {
  auto type = cast<RankedTensorType>(dense.getType());
  if (!type.hasStaticShape() || type.getNumElements() <= 1)
    return {};
  SmallVector<int64_t> shape(type.getShape());
  if (dense.isSplat()) {
    for (int64_t &d : shape)
      d = 1;
    return DenseElementsAttr::get(type.clone(shape),
                                  dense.getSplatValue<Attribute>());
  }
  unsigned bits = type.getElementTypeBitWidth();
  if (bits % 8 != 0)
    return {};
  std::size_t width = bits / 8;
  std::vector<char> data(dense.getRawData().begin(), dense.getRawData().end());
  bool changed = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    // The data as [outer, shape[d], inner]: equal slices along d when every
    // [outer, k, inner] block equals [outer, 0, inner].
    int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < d; ++i)
      outer *= shape[i];
    for (std::size_t i = d + 1; i < shape.size(); ++i)
      inner *= shape[i];
    std::size_t block = inner * width, row = block * shape[d];
    bool uniform = true;
    for (int64_t o = 0; o < outer && uniform; ++o)
      for (int64_t k = 1; k < shape[d] && uniform; ++k)
        uniform =
            !std::memcmp(&data[o * row], &data[o * row + k * block], block);
    if (!uniform)
      continue;
    std::vector<char> kept(outer * block);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(&kept[o * block], &data[o * row], block);
    data = std::move(kept);
    shape[d] = 1;
    changed = true;
  }
  if (!changed)
    return {};
  return DenseElementsAttr::getFromRawBuffer(type.clone(shape), data);
}

struct CompactConstantsPass
    : public ::shoal::impl::CompactConstantsPassBase<CompactConstantsPass> {
  void runOnOperation() final {
    shrinkMasks();
    unify();
  }

  void shrinkMasks() {
    SmallVector<ConstantOp> masks;
    getOperation().walk([&](ConstantOp c) {
      if (isPlain(c) && !c->use_empty() &&
          llvm::all_of(c->getUses(), isMaskOperand))
        masks.push_back(c);
    });
    for (ConstantOp c : masks) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      DenseElementsAttr core = dense ? broadcastCore(dense) : nullptr;
      if (!core)
        continue;
      c.setValueAttr(core);
      c.getResult().setType(cast<RankedTensorType>(core.getType()));
    }
  }

  /// Whether `use` is an attention's or attention_grad's mask (which the
  /// kernels read broadcast to the scores).
  static bool isMaskOperand(OpOperand &use) {
    Operation *op = use.getOwner();
    if (auto a = dyn_cast<AttentionOp>(op))
      return a.getMask() && &a.getMaskMutable()[0] == &use;
    if (auto g = dyn_cast<AttentionGradOp>(op))
      return g.getMask() && &g.getMaskMutable()[0] == &use;
    return false;
  }

  void unify() {
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks) {
      llvm::DenseMap<std::pair<Attribute, Type>, ConstantOp> first;
      for (Operation &op : llvm::make_early_inc_range(*block)) {
        auto c = dyn_cast<ConstantOp>(op);
        if (!c || !isPlain(c))
          continue;
        auto [it, inserted] = first.try_emplace({c.getValue(), c.getType()}, c);
        if (inserted)
          continue;
        c.getResult().replaceAllUsesWith(it->second.getResult());
        c->erase();
      }
    }
  }
};

} // namespace
