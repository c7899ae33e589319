//===- ImportEinsum.cpp - ONNX Einsum as shoal graph ops --------*- C++ -*-===//
//
// Einsum is written with ops that have sharding rules and gradients
// already (Transpose, Reshape, MatMul, ReduceSum), so that a model using it
// is partitioned and trained like any other. The operands are contracted
// left to right, two at a time: labels of one operand that nothing later
// needs are summed out first; then the pair becomes one batched MatMul
// `[batch..., M, K] x [batch..., K, N]` whose batch labels are those both
// share and something later needs, K the shared ones nothing needs, M and N
// the others. A final Transpose puts the labels in the output's order.
//
// Labels repeated within one operand (a trace or a diagonal) are refused.
//
//===----------------------------------------------------------------------===//

#include "GraphBuilder.h"
#include "Importer.h"

#include <map>
#include <set>

using namespace mlir;
using namespace shoal;
using namespace shoal::onnx_import;

namespace {

/// An operand during the contraction: a value and one label per dimension.
struct Term {
  Value value;
  SmallVector<int> labels;
};

/// Label ids: letters are their character, the ellipsis's k-th dimension
/// from the right is 256 + k (so they sort after the letters, and the
/// ellipsis dimensions keep their order when sorted by descending k).
constexpr int kEllipsisBase = 256;

/// Parses one term (`ij`, `...ij`, `b...`) of an operand of rank `rank`
/// (or of the output, rank -1: the ellipsis then stands for `ellipsisRank`
/// dimensions). Returns false with `why` set on bad input.
bool parseTerm(StringRef term, int64_t rank, int64_t ellipsisRank,
               SmallVectorImpl<int> &labels, int64_t &ellipsisDims,
               std::string &why) {
  size_t dots = term.find("...");
  if (dots != StringRef::npos &&
      term.find("...", dots + 3) != StringRef::npos) {
    why = "term '" + term.str() + "' has more than one ellipsis";
    return false;
  }
  std::string letters;
  for (char c : term)
    if (c != '.')
      letters.push_back(c);
  for (char c : letters)
    if (!std::isalpha(static_cast<unsigned char>(c))) {
      why = "term '" + term.str() + "' has the character '" +
            std::string(1, c) + "' (letters and '...' only)";
      return false;
    }
  int64_t letterCount = letters.size();
  ellipsisDims = 0;
  if (dots != StringRef::npos) {
    ellipsisDims = rank >= 0 ? rank - letterCount : ellipsisRank;
    if (ellipsisDims < 0) {
      why = "term '" + term.str() + "' has more labels than its operand's " +
            std::to_string(rank) + " dimensions";
      return false;
    }
  } else if (rank >= 0 && letterCount != rank) {
    why = "term '" + term.str() + "' has " + std::to_string(letterCount) +
          " labels for an operand of rank " + std::to_string(rank);
    return false;
  }
  for (size_t i = 0; i < term.size();) {
    if (term[i] == '.') {
      for (int64_t k = ellipsisDims - 1; k >= 0; --k)
        labels.push_back(kEllipsisBase + k);
      i += 3;
      continue;
    }
    labels.push_back(static_cast<unsigned char>(term[i]));
    ++i;
  }
  return true;
}

/// A label as equations write it ('...' for an ellipsis dimension).
std::string labelName(int label) {
  return label >= kEllipsisBase ? std::string("...")
                                : std::string(1, static_cast<char>(label));
}

int64_t indexOf(ArrayRef<int> labels, int label) {
  auto it = llvm::find(labels, label);
  return it == labels.end() ? -1 : it - labels.begin();
}

} // namespace

LogicalResult onnx_import::convertEinsum(Importer &im,
                                         const onnx::NodeProto &node) {
  const onnx::AttributeProto *eqAttr = findAttr(node, "equation");
  if (!eqAttr)
    return im.nodeError() << "Einsum needs the attribute 'equation'";
  std::string equation;
  for (char c : eqAttr->s())
    if (c != ' ')
      equation.push_back(c);
  auto fail = [&](const Twine &why) {
    return im.nodeError() << "Einsum '" << eqAttr->s() << "': " << why;
  };
  auto resultType = im.getResultType(node, 0);
  if (failed(resultType))
    return failure();

  SmallVector<Term> terms;
  StringRef eq(equation);
  auto [lhs, rhs] = eq.split("->");
  bool explicitOutput = eq.contains("->");
  SmallVector<StringRef> inTerms;
  lhs.split(inTerms, ',');
  if (static_cast<int>(inTerms.size()) != node.input_size())
    return fail(Twine(inTerms.size()) + " operand terms for " +
                Twine(node.input_size()) + " inputs");
  int64_t ellipsisRank = 0;
  std::map<int, int64_t> sizes;
  for (auto [i, text] : llvm::enumerate(inTerms)) {
    auto v = im.getInput(node, i);
    if (failed(v))
      return failure();
    Term t{*v, {}};
    ArrayRef<int64_t> shape = GraphBuilder::shapeOf(*v);
    int64_t dims = 0;
    std::string why;
    if (!parseTerm(text, shape.size(), 0, t.labels, dims, why))
      return fail(why);
    ellipsisRank = std::max(ellipsisRank, dims);
    std::set<int> seen;
    for (auto [d, label] : llvm::enumerate(t.labels)) {
      if (!seen.insert(label).second)
        return fail("label '" + labelName(label) +
                    "' appears twice in operand " + Twine(i) +
                    " (a trace or a diagonal), which shoal does not support");
      int64_t &size = sizes[label];
      if (size > 1 && shape[d] != 1 && shape[d] != size)
        return fail("label '" + labelName(label) + "' has size " + Twine(size) +
                    " in one operand and " + Twine(shape[d]) + " in operand " +
                    Twine(i));
      size = std::max(size, shape[d]);
    }
    terms.push_back(std::move(t));
  }

  // The output's labels: as written, or (implicit form) the ellipsis then
  // the letters used once, in alphabetical order.
  SmallVector<int> outLabels;
  if (explicitOutput) {
    int64_t dims;
    std::string why;
    if (!parseTerm(rhs, -1, ellipsisRank, outLabels, dims, why))
      return fail(why);
    std::set<int> seen;
    for (int label : outLabels) {
      if (!seen.insert(label).second)
        return fail("label '" + labelName(label) +
                    "' appears twice in the output");
      if (!sizes.count(label))
        return fail("output label '" + labelName(label) + "' is in no operand");
    }
  } else {
    for (int64_t k = ellipsisRank - 1; k >= 0; --k)
      outLabels.push_back(kEllipsisBase + k);
    std::map<int, int> uses;
    for (const Term &t : terms)
      for (int label : t.labels)
        if (label < kEllipsisBase)
          ++uses[label];
    for (auto [label, n] : uses)
      if (n == 1)
        outLabels.push_back(label);
  }

  GraphBuilder gb{im.builder(), im.loc()};
  // Labels read after operand `i`: by the output or by a later operand.
  auto neededAfter = [&](size_t i) {
    std::set<int> needed(outLabels.begin(), outLabels.end());
    for (size_t j = i + 1; j < terms.size(); ++j)
      needed.insert(terms[j].labels.begin(), terms[j].labels.end());
    return needed;
  };
  // Sums out the labels of `t` that are not in `keep`.
  auto sumOut = [&](Term &t, const std::set<int> &keep) {
    SmallVector<int64_t> axes;
    SmallVector<int> kept;
    for (auto [d, label] : llvm::enumerate(t.labels)) {
      if (keep.count(label))
        kept.push_back(label);
      else
        axes.push_back(d);
    }
    t.value = gb.reduceSum(t.value, axes, /*keepdims=*/false);
    t.labels = kept;
  };

  Term acc = terms[0];
  {
    std::set<int> keep = neededAfter(0);
    sumOut(acc, keep);
  }
  for (size_t i = 1; i < terms.size(); ++i) {
    Term rhsTerm = terms[i];
    std::set<int> later = neededAfter(i);
    // Labels of this operand that neither the accumulated one nor anything
    // later reads are summed out now.
    std::set<int> keepR = later;
    keepR.insert(acc.labels.begin(), acc.labels.end());
    sumOut(rhsTerm, keepR);
    std::set<int> keepL = later;
    keepL.insert(rhsTerm.labels.begin(), rhsTerm.labels.end());
    sumOut(acc, keepL);

    SmallVector<int> batch, contracted, mOnly, nOnly;
    for (int label : acc.labels) {
      if (indexOf(rhsTerm.labels, label) < 0)
        mOnly.push_back(label);
      else if (later.count(label))
        batch.push_back(label);
      else
        contracted.push_back(label);
    }
    for (int label : rhsTerm.labels)
      if (indexOf(acc.labels, label) < 0)
        nOnly.push_back(label);
    // A contracted label that one side broadcasts (size 1) is summed on
    // the other side first: sum_k a[0] b[k] = a[0] sum_k b[k].
    for (int label : SmallVector<int>(contracted)) {
      int64_t da = indexOf(acc.labels, label),
              db = indexOf(rhsTerm.labels, label);
      int64_t sa = GraphBuilder::shapeOf(acc.value)[da],
              sb = GraphBuilder::shapeOf(rhsTerm.value)[db];
      if (sa == sb)
        continue;
      Term &big = sa > sb ? acc : rhsTerm;
      int64_t d = sa > sb ? da : db;
      SmallVector<int64_t> shape(GraphBuilder::shapeOf(big.value));
      shape[d] = 1;
      big.value = gb.reshape(gb.reduceSum(big.value, {d}, false), shape);
    }
    auto sizeIn = [](const Term &t, int label) {
      return GraphBuilder::shapeOf(t.value)[indexOf(t.labels, label)];
    };
    // acc as [batch..., M, K], rhs as [batch..., K, N].
    SmallVector<int64_t> permA, permB, shapeA, shapeB, outShape;
    int64_t m = 1, k = 1, n = 1;
    for (int label : batch) {
      permA.push_back(indexOf(acc.labels, label));
      permB.push_back(indexOf(rhsTerm.labels, label));
      shapeA.push_back(sizeIn(acc, label));
      shapeB.push_back(sizeIn(rhsTerm, label));
      outShape.push_back(std::max(shapeA.back(), shapeB.back()));
    }
    for (int label : mOnly) {
      permA.push_back(indexOf(acc.labels, label));
      m *= sizeIn(acc, label);
      outShape.push_back(sizeIn(acc, label));
    }
    for (int label : contracted) {
      permA.push_back(indexOf(acc.labels, label));
      permB.push_back(indexOf(rhsTerm.labels, label));
      k *= sizeIn(acc, label);
    }
    for (int label : nOnly) {
      permB.push_back(indexOf(rhsTerm.labels, label));
      n *= sizeIn(rhsTerm, label);
      outShape.push_back(sizeIn(rhsTerm, label));
    }
    shapeA.push_back(m);
    shapeA.push_back(k);
    shapeB.push_back(k);
    shapeB.push_back(n);
    Value a = gb.reshape(gb.transpose(acc.value, permA), shapeA);
    Value bv = gb.reshape(gb.transpose(rhsTerm.value, permB), shapeB);
    Value product = gb.reshape(gb.matmul(a, bv), outShape);
    SmallVector<int> labels(batch);
    labels.append(mOnly);
    labels.append(nOnly);
    acc = Term{product, labels};
  }

  // Output order; labels the output has but no operand kept (not possible
  // after the checks above) would be a bug.
  std::set<int> outSet(outLabels.begin(), outLabels.end());
  sumOut(acc, outSet);
  SmallVector<int64_t> perm;
  for (int label : outLabels) {
    int64_t d = indexOf(acc.labels, label);
    if (d < 0)
      return fail("output label '" + labelName(label) +
                  "' was lost (an internal error)");
    perm.push_back(d);
  }
  Value result = gb.transpose(acc.value, perm);
  ArrayRef<int64_t> want = resultType->getShape();
  SmallVector<int64_t> got(GraphBuilder::shapeOf(result));
  if (got != want) {
    // Only size-1 dimensions that broadcast may differ.
    if (got.size() != want.size())
      return fail("result has rank " + Twine(got.size()) +
                  ", shape inference says " + Twine(want.size()));
    result = gb.onnx("Expand", *resultType, {}, {result});
  }
  if (result.getType() != *resultType)
    return fail("result element type differs from shape inference's");
  im.setResult(node, 0, result);
  return success();
}
