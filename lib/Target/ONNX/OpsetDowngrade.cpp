//===- OpsetDowngrade.cpp - Opsets 18-21 rewritten to opset 17 --*- C++ -*-===//
//
// ONNX's C++ library here (1.12) knows opsets up to 17: its checker refuses
// newer models and its shape inference does not know the new signatures.
// PyTorch 2.x exports at opset 18 and above, so the importer rewrites such a
// model into opset 17 before ONNX sees it: every op whose signature changed
// in opsets 18 to 21 is written in its opset-17 form (ReduceMean's axes
// input back to an attribute, Split's num_outputs to sizes, Pad's axes to
// full pads, ...), the new ops shoal handles are expanded into opset-17 ops
// (Gelu, GroupNormalization), and anything whose new meaning has no opset-17
// form is an error that names the node, the op and the opset.
//
// It also undoes two habits of PyTorch 2.x's dynamo exporter, whose models
// are at these opsets: it writes every initializer, however small, into the
// external data file (shape and axes constants included: they are read back
// here, as shoal needs them at compile time), and it writes advanced
// indexing (`mask[batch_idx, kv_idx]` in transformers' attention masks) as
// GatherND with constant indices (a Reshape and a Gather here).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"
#include "Validate.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <cmath>
#include <deque>
#include <unordered_map>
#include <unordered_set>

using namespace shoal;
using namespace shoal::onnx_import;

namespace {

/// What opsets 18 to 21 changed about an op, and so what the downgrade does.
enum class Change {
  /// Only new element types or attributes that keep their opset-17 meaning
  /// at their default: nothing to rewrite (new types are refused later).
  None,
  /// Reduce*: axes moved from an attribute to an input (opset 18).
  ReduceAxes,
  /// Split: num_outputs (opset 18).
  Split,
  /// Pad: axes input (18), mode 'wrap' (19).
  Pad,
  /// Resize: antialias, axes, keep_aspect_ratio_policy (18),
  /// half_pixel_symmetric (19).
  Resize,
  /// ScatterElements, ScatterND: reduction max and min (18).
  Scatter,
  /// AveragePool: dilations (19).
  AveragePool,
  /// Cast, CastLike: saturate (19), only meaningful for float8.
  Cast,
  /// GatherND with constant indices (the dynamo exporter's advanced
  /// indexing): a Gather on the indexed dimensions flattened into one.
  GatherND,
  /// New ops shoal expands into opset-17 ops.
  Gelu,
  GroupNormalization,
};

/// What opsets 18 to 21 changed about `opType`.
Change changeOf(llvm::StringRef opType) {
  return llvm::StringSwitch<Change>(opType)
      .Cases("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
             "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
             Change::ReduceAxes)
      .Case("ReduceSumSquare", Change::ReduceAxes)
      .Case("Split", Change::Split)
      .Case("Pad", Change::Pad)
      .Case("Resize", Change::Resize)
      .Cases("ScatterElements", "ScatterND", Change::Scatter)
      .Case("AveragePool", Change::AveragePool)
      .Cases("Cast", "CastLike", Change::Cast)
      .Case("GatherND", Change::GatherND)
      .Case("Gelu", Change::Gelu)
      .Case("GroupNormalization", Change::GroupNormalization)
      .Default(Change::None);
}

bool isDefaultDomain(const onnx::NodeProto &node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

void eraseAttr(onnx::NodeProto &node, llvm::StringRef name) {
  auto *attrs = node.mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i)
    if (attrs->Get(i).name() == name)
      attrs->DeleteSubrange(i, 1);
}

void setIntsAttr(onnx::NodeProto &node, llvm::StringRef name,
                 llvm::ArrayRef<int64_t> values) {
  eraseAttr(node, name);
  onnx::AttributeProto *a = node.add_attribute();
  a->set_name(name.str());
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values)
    a->add_ints(v);
}

/// The error of a failed downgrade.
struct Failure {
  std::string message;
};

class Downgrader {
public:
  Downgrader(onnx::ModelProto &model, int64_t opset, llvm::StringRef modelDir)
      : model(model), graph(*model.mutable_graph()), opset(opset),
        modelDir(modelDir.str()) {}

  std::optional<std::string> run();

private:
  /// Rewrites one node into `out` (phase 1: what needs no shapes).
  void rewrite(const onnx::NodeProto &node, int index);
  /// Rewrites the nodes that need a rank or size that only shape inference
  /// knows (Pad with axes, uneven Split); returns how many it rewrote.
  int resolvePending(
      const std::unordered_map<std::string, onnx::TypeProto> &types);

  [[noreturn]] void fail(const onnx::NodeProto &node, int index,
                         const llvm::Twine &message) {
    throw Failure{"node '" + getNodeName(node, index) + "': " + node.op_type() +
                  " (opset " + std::to_string(opset) + "): " + message.str()};
  }

  /// The int64 values of `name` when it is an initializer or the output of
  /// a Constant node seen so far.
  std::optional<std::vector<int64_t>> constantInts(const std::string &name);
  /// A fresh value name derived from `base`.
  std::string freshName(const std::string &base);
  /// Appends a node made from `proto`'s name and metadata.
  onnx::NodeProto &addNode(const onnx::NodeProto &from, llvm::StringRef opType,
                           std::vector<std::string> inputs,
                           std::vector<std::string> outputs);
  /// A float scalar constant of the element type of `like` (a CastLike of
  /// a float Constant; constant folding turns it into one constant).
  std::string scalarLike(const onnx::NodeProto &from, float value,
                         const std::string &like);
  std::string int64Constant(const onnx::NodeProto &from,
                            llvm::ArrayRef<int64_t> values);

  /// Reads the small integer initializers kept in external data into the
  /// model (raw_data).
  void inlineSmallExternalInts();
  void resolveGatherND(onnx::NodeProto &reshape, onnx::NodeProto &gather,
                       onnx::NodeProto &indicesNode, int index,
                       llvm::ArrayRef<int64_t> dataShape);

  void resolveRuntimeGatherND(onnx::NodeProto &squeeze, onnx::NodeProto &gather,
                              int index, llvm::ArrayRef<int64_t> indicesShape);

  void expandGelu(const onnx::NodeProto &node, int index);
  void expandGroupNorm(const onnx::NodeProto &node, int index);

  onnx::ModelProto &model;
  onnx::GraphProto &graph;
  int64_t opset;
  std::string modelDir;
  /// The rewritten nodes; a deque so that pointers into it stay valid.
  std::deque<onnx::NodeProto> out;
  std::unordered_map<std::string, const onnx::TensorProto *> constants;
  std::deque<onnx::TensorProto> ownedTensors;
  std::unordered_set<std::string> names;
  /// Nodes of `out` waiting for shapes: (node, original index, num_outputs
  /// for a Split or 0 for a Pad or a GatherND, the GatherND node after the
  /// Identity `node` that becomes the Reshape of its data).
  struct Pending {
    onnx::NodeProto *node;
    int index;
    int64_t numOutputs;
    onnx::NodeProto *gatherND = nullptr;
    /// The Constant before `node` that becomes the Gather's indices.
    onnx::NodeProto *indices = nullptr;
    /// A GatherND whose indices are computed at run time: `node` is the
    /// Identity of its indices that becomes their Squeeze.
    bool runtimeIndices = false;
  };
  std::vector<Pending> pending;
};

std::optional<std::vector<int64_t>>
Downgrader::constantInts(const std::string &name) {
  auto it = constants.find(name);
  if (it == constants.end())
    return std::nullopt;
  const onnx::TensorProto &t = *it->second;
  if (t.data_type() != onnx::TensorProto::INT64 ||
      t.data_location() == onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  std::vector<int64_t> values;
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    for (size_t k = 0; k + 8 <= raw.size(); k += 8) {
      uint64_t v = 0;
      for (int byte = 0; byte < 8; ++byte)
        v |= uint64_t(static_cast<uint8_t>(raw[k + byte])) << (8 * byte);
      values.push_back(static_cast<int64_t>(v));
    }
  } else {
    values.assign(t.int64_data().begin(), t.int64_data().end());
  }
  return values;
}

std::string Downgrader::freshName(const std::string &base) {
  std::string name = base;
  for (int k = 1; names.count(name); ++k)
    name = base + "_" + std::to_string(k);
  names.insert(name);
  return name;
}

onnx::NodeProto &Downgrader::addNode(const onnx::NodeProto &from,
                                     llvm::StringRef opType,
                                     std::vector<std::string> inputs,
                                     std::vector<std::string> outputs) {
  onnx::NodeProto &n = out.emplace_back();
  n.set_op_type(opType.str());
  if (!from.name().empty())
    n.set_name(from.name() + "/" + opType.str());
  // Node metadata (pkg.torch.onnx.name_scopes) is a field ONNX 1.12 does not
  // know; it travels as an unknown field.
  n.mutable_unknown_fields()->MergeFrom(from.unknown_fields());
  for (auto &i : inputs)
    n.add_input(i);
  for (auto &o : outputs)
    n.add_output(o);
  return n;
}

std::string Downgrader::scalarLike(const onnx::NodeProto &from, float value,
                                   const std::string &like) {
  std::string base = (from.output(0).empty() ? "v" : from.output(0)) + "_c";
  std::string f = freshName(base);
  onnx::NodeProto &c = addNode(from, "Constant", {}, {f});
  onnx::AttributeProto *a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_float_data(value);
  std::string cast = freshName(base);
  addNode(from, "CastLike", {f, like}, {cast});
  return cast;
}

std::string Downgrader::int64Constant(const onnx::NodeProto &from,
                                      llvm::ArrayRef<int64_t> values) {
  // An initializer: it needs no place among the nodes.
  std::string name =
      freshName((from.output(0).empty() ? "v" : from.output(0)) + "_i");
  onnx::TensorProto *t = graph.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values)
    t->add_int64_data(v);
  constants[name] = t;
  return name;
}

/// Gelu (opset 20) as PyTorch's TorchScript exporter writes nn.GELU:
/// x * 0.5 * (1 + erf(x / sqrt(2))), or with approximate = "tanh"
/// x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
void Downgrader::expandGelu(const onnx::NodeProto &node, int index) {
  std::string approximate = "none";
  if (const onnx::AttributeProto *a = findAttr(node, "approximate"))
    approximate = a->s();
  if (approximate != "none" && approximate != "tanh")
    fail(node, index, "unknown approximate '" + approximate + "'");
  const std::string &x = node.input(0);
  auto tmp = [&] { return freshName(node.output(0) + "_t"); };
  std::string inner;
  if (approximate == "none") {
    std::string div = tmp();
    addNode(node, "Div",
            {x, scalarLike(node, static_cast<float>(std::sqrt(2.0)), x)},
            {div});
    inner = tmp();
    addNode(node, "Erf", {div}, {inner});
  } else {
    std::string cube = tmp(), scaled = tmp(), sum = tmp(), arg = tmp();
    addNode(node, "Pow", {x, scalarLike(node, 3.0f, x)}, {cube});
    addNode(node, "Mul", {cube, scalarLike(node, 0.044715f, x)}, {scaled});
    addNode(node, "Add", {x, scaled}, {sum});
    addNode(
        node, "Mul",
        {sum, scalarLike(node, static_cast<float>(std::sqrt(2.0 / M_PI)), x)},
        {arg});
    inner = tmp();
    addNode(node, "Tanh", {arg}, {inner});
  }
  std::string plus = tmp(), prod = tmp();
  addNode(node, "Add", {inner, scalarLike(node, 1.0f, x)}, {plus});
  addNode(node, "Mul", {x, plus}, {prod});
  addNode(node, "Mul", {prod, scalarLike(node, 0.5f, x)}, {node.output(0)});
}

/// GroupNormalization (opset 18, 21) with the ops of opset 17: X [N, C, ...]
/// seen as [N, G, C/G * ...], normalized over its last dimension, then
/// scaled and shifted per group (opset 18: scale and bias have G entries)
/// or per channel (opset 21: C entries) and given X's shape back.
void Downgrader::expandGroupNorm(const onnx::NodeProto &node, int index) {
  if (node.input_size() < 3 || node.input(1).empty() || node.input(2).empty())
    fail(node, index, "needs inputs X, scale and bias");
  const onnx::AttributeProto *groups = findAttr(node, "num_groups");
  if (!groups)
    fail(node, index, "needs the num_groups attribute");
  float epsilon = getFloatAttr(node, "epsilon", 1e-5f);
  const std::string &x = node.input(0);
  auto tmp = [&] { return freshName(node.output(0) + "_t"); };
  auto reduceMean = [&](const std::string &v) {
    std::string r = tmp();
    onnx::NodeProto &n = addNode(node, "ReduceMean", {v}, {r});
    setIntsAttr(n, "axes", {2});
    return r;
  };
  std::string grouped = tmp(), mean, centered = tmp(), square = tmp(), var,
              shifted = tmp(), stddev = tmp(), normalized = tmp();
  addNode(node, "Reshape", {x, int64Constant(node, {0, groups->i(), -1})},
          {grouped});
  mean = reduceMean(grouped);
  addNode(node, "Sub", {grouped, mean}, {centered});
  addNode(node, "Mul", {centered, centered}, {square});
  var = reduceMean(square);
  addNode(node, "Add", {var, scalarLike(node, epsilon, x)}, {shifted});
  addNode(node, "Sqrt", {shifted}, {stddev});
  addNode(node, "Div", {centered, stddev}, {normalized});
  // Scale and bias broadcast over [N, K, M] as [K, 1]: K is G (opset 18)
  // or C (opset 21).
  std::string layout = normalized;
  if (opset >= 21) {
    std::string nc = tmp(), target = tmp();
    layout = tmp();
    onnx::NodeProto &shape = addNode(node, "Shape", {x}, {nc});
    onnx::AttributeProto *end = shape.add_attribute();
    end->set_name("end");
    end->set_type(onnx::AttributeProto::INT);
    end->set_i(2);
    onnx::NodeProto &concat =
        addNode(node, "Concat", {nc, int64Constant(node, {-1})}, {target});
    onnx::AttributeProto *axis = concat.add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(0);
    addNode(node, "Reshape", {normalized, target}, {layout});
  }
  std::string column = int64Constant(node, {1});
  std::string scale = tmp(), bias = tmp(), scaled = tmp(), result = tmp(),
              shape = tmp();
  addNode(node, "Unsqueeze", {node.input(1), column}, {scale});
  addNode(node, "Unsqueeze", {node.input(2), column}, {bias});
  addNode(node, "Mul", {layout, scale}, {scaled});
  addNode(node, "Add", {scaled, bias}, {result});
  addNode(node, "Shape", {x}, {shape});
  addNode(node, "Reshape", {result, shape}, {node.output(0)});
}

void Downgrader::rewrite(const onnx::NodeProto &original, int index) {
  Change change =
      isDefaultDomain(original) ? changeOf(original.op_type()) : Change::None;
  if (change == Change::Gelu)
    return expandGelu(original, index);
  if (change == Change::GroupNormalization)
    return expandGroupNorm(original, index);

  onnx::NodeProto &node = out.emplace_back(original);
  // Constants are read from the copy: the original graph is replaced.
  if (isDefaultDomain(node) && node.op_type() == "Constant" &&
      node.attribute_size() == 1) {
    const onnx::AttributeProto &a = node.attribute(0);
    if (a.name() == "value") {
      constants[node.output(0)] = &a.t();
    } else if (a.name() == "value_ints" || a.name() == "value_int") {
      onnx::TensorProto &t = ownedTensors.emplace_back();
      t.set_data_type(onnx::TensorProto::INT64);
      if (a.name() == "value_ints") {
        t.add_dims(a.ints_size());
        *t.mutable_int64_data() = a.ints();
      } else {
        t.add_int64_data(a.i());
      }
      constants[node.output(0)] = &t;
    }
  }
  switch (change) {
  case Change::None:
  case Change::Gelu:
  case Change::GroupNormalization:
    return;
  case Change::ReduceAxes: {
    std::optional<std::vector<int64_t>> axes;
    if (Importer::hasInput(node, 1)) {
      axes = constantInts(node.input(1));
      if (!axes)
        fail(node, index,
             "axes '" + node.input(1) +
                 "' must be an int64 Constant or initializer: shoal needs it "
                 "at compile time");
      node.mutable_input()->DeleteSubrange(1, node.input_size() - 1);
    }
    bool noop = getIntAttr(node, "noop_with_empty_axes", 0) != 0;
    eraseAttr(node, "noop_with_empty_axes");
    if ((!axes || axes->empty()) && noop) {
      // Nothing to reduce: the identity.
      node.clear_attribute();
      node.set_op_type("Identity");
      return;
    }
    if (axes && !axes->empty())
      setIntsAttr(node, "axes", *axes);
    return;
  }
  case Change::Split: {
    const onnx::AttributeProto *n = findAttr(node, "num_outputs");
    if (!n)
      return;
    int64_t numOutputs = n->i();
    eraseAttr(node, "num_outputs");
    if (Importer::hasInput(node, 1))
      fail(node, index, "has both a split input and num_outputs");
    if (numOutputs != node.output_size())
      fail(node, index,
           "num_outputs is " + std::to_string(numOutputs) + " but it has " +
               std::to_string(node.output_size()) + " outputs");
    // An even split is Split-13 without sizes; an uneven one (the last part
    // smaller) needs the size of the split dimension.
    pending.push_back({&node, index, numOutputs});
    return;
  }
  case Change::Pad: {
    std::string mode = "constant";
    if (const onnx::AttributeProto *m = findAttr(node, "mode"))
      mode = m->s();
    if (mode == "wrap")
      fail(node, index,
           "mode 'wrap' (opset 19) is not supported (constant, reflect or "
           "edge)");
    if (Importer::hasInput(node, 3))
      pending.push_back({&node, index, 0});
    return;
  }
  case Change::Resize: {
    if (getIntAttr(node, "antialias", 0) != 0)
      fail(node, index, "antialias = 1 is not supported");
    if (findAttr(node, "axes"))
      fail(node, index, "the axes attribute is not supported");
    if (const onnx::AttributeProto *p =
            findAttr(node, "keep_aspect_ratio_policy");
        p && p->s() != "stretch")
      fail(node, index,
           "keep_aspect_ratio_policy '" + p->s() +
               "' is not supported (only 'stretch')");
    if (const onnx::AttributeProto *m =
            findAttr(node, "coordinate_transformation_mode");
        m && m->s() == "half_pixel_symmetric")
      fail(node, index,
           "coordinate_transformation_mode 'half_pixel_symmetric' is not "
           "supported");
    eraseAttr(node, "antialias");
    eraseAttr(node, "keep_aspect_ratio_policy");
    return;
  }
  case Change::Scatter:
    if (const onnx::AttributeProto *r = findAttr(node, "reduction");
        r && (r->s() == "max" || r->s() == "min"))
      fail(node, index,
           "reduction '" + r->s() + "' is not supported (none, add or mul)");
    return;
  case Change::AveragePool:
    if (auto d = getIntsAttr(node, "dilations")) {
      if (llvm::any_of(*d, [](int64_t v) { return v != 1; }))
        fail(node, index, "dilations other than 1 are not supported");
      eraseAttr(node, "dilations");
    }
    return;
  case Change::Cast:
    // saturate only applies to float8 targets, which shoal does not have.
    eraseAttr(node, "saturate");
    return;
  case Change::GatherND: {
    if (getIntAttr(node, "batch_dims", 0) != 0)
      fail(node, index,
           "batch_dims = " + std::to_string(getIntAttr(node, "batch_dims", 0)) +
               " is not supported (only 0)");
    if (node.input_size() < 2)
      fail(node, index, "needs data and indices");
    if (!constantInts(node.input(1))) {
      // Indices computed at run time (`weight[expert_ids]`): an Identity of
      // the indices that becomes a Squeeze of their last dimension once
      // shape inference says it is 1; the GatherND then becomes a Gather
      // along dimension 0.
      onnx::NodeProto gatherND = node;
      out.pop_back();
      std::string rows = freshName(gatherND.output(0) + "_rows");
      onnx::NodeProto &identity =
          addNode(gatherND, "Identity", {gatherND.input(1)}, {rows});
      gatherND.set_input(1, rows);
      onnx::NodeProto &gather = out.emplace_back(std::move(gatherND));
      pending.push_back({&identity, index, 0, &gather, nullptr,
                         /*runtimeIndices=*/true});
      return;
    }
    // Before the node, a Constant that becomes the Gather's indices (a
    // value the runtime reads, so not an initializer: those come from the
    // model file) and an Identity of the data that becomes the Reshape
    // flattening the indexed dimensions, once shape inference gives the
    // data's shape; the GatherND then becomes a Gather. Until then they
    // keep the GatherND's shapes.
    onnx::NodeProto gatherND = node;
    out.pop_back();
    std::string flat = freshName(gatherND.output(0) + "_flat");
    std::string indices = freshName(gatherND.output(0) + "_indices");
    onnx::NodeProto &constant = addNode(gatherND, "Constant", {}, {indices});
    onnx::AttributeProto *value = constant.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = *constants.at(gatherND.input(1));
    value->mutable_t()->clear_name();
    onnx::NodeProto &identity =
        addNode(gatherND, "Identity", {gatherND.input(0)}, {flat});
    gatherND.set_input(0, flat);
    onnx::NodeProto &gather = out.emplace_back(std::move(gatherND));
    pending.push_back({&identity, index, 0, &gather, &constant});
    return;
  }
  }
}

void Downgrader::resolveGatherND(onnx::NodeProto &reshape,
                                 onnx::NodeProto &gather,
                                 onnx::NodeProto &indicesNode, int index,
                                 llvm::ArrayRef<int64_t> dataShape) {
  const onnx::TensorProto *indicesTensor = constants.at(gather.input(1));
  std::vector<int64_t> indices = *constantInts(gather.input(1));
  if (indicesTensor->dims_size() == 0)
    fail(gather, index, "indices must have rank 1 or more");
  int64_t k = indicesTensor->dims(indicesTensor->dims_size() - 1);
  int64_t rank = static_cast<int64_t>(dataShape.size());
  if (k < 1 || k > rank)
    fail(gather, index,
         "indices' last dimension is " + std::to_string(k) +
             " for data of rank " + std::to_string(rank));
  if (llvm::any_of(dataShape, [](int64_t d) { return d < 0; })) {
    std::string dims;
    for (int64_t d : dataShape)
      dims += (dims.empty() ? "" : ", ") + (d < 0 ? "?" : std::to_string(d));
    fail(gather, index,
         "the shape of data '" + reshape.input(0) +
             "' must be static (shape inference found [" + dims + "])");
  }
  auto normalized = [&](size_t p, int64_t j) {
    int64_t i = indices[p + j], d = dataShape[j];
    return i < 0 ? i + d : i;
  };
  for (size_t p = 0; p + k <= indices.size(); p += k)
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = indices[p + j], d = dataShape[j];
      if (i < -d || i >= d)
        fail(gather, index,
             "index " + std::to_string(i) + " out of range for dimension " +
                 std::to_string(j) + " of size " + std::to_string(d));
    }
  // Indices that pick, for every sample b of the leading dimension, the
  // same positions of sample b (`mask[arange(B)[:, None], kv_idx]`, the
  // dynamo exporter's attention masks): a Gather along dimension 1 of the
  // data with dimensions 1 .. k-1 seen as one, which keeps the samples
  // apart (data parallelism and micro-batches split them), rather than a
  // Gather over all k dimensions, which mixes them.
  int64_t batch = indicesTensor->dims(0);
  bool perSample = k >= 2 && indicesTensor->dims_size() >= 2 &&
                   batch == dataShape[0] && batch > 0;
  size_t perBlock = perSample ? indices.size() / static_cast<size_t>(batch) : 0;
  for (size_t p = 0; perSample && p + k <= indices.size(); p += k) {
    int64_t b = static_cast<int64_t>(p / perBlock);
    size_t q = p % perBlock; // the same position in sample 0's block
    if (normalized(p, 0) != b)
      perSample = false;
    for (int64_t j = 1; perSample && j < k; ++j)
      if (normalized(p, j) != normalized(q, j))
        perSample = false;
  }
  // The dimensions of the data kept in front (the samples' when
  // perSample), then the indexed ones seen as one, row-major.
  int64_t first = perSample ? 1 : 0;
  size_t positions = perSample ? perBlock : indices.size();
  std::vector<int64_t> offsets;
  int64_t merged = 1;
  for (int64_t j = first; j < k; ++j)
    merged *= dataShape[j];
  for (size_t p = 0; p + k <= positions; p += k) {
    int64_t offset = 0;
    for (int64_t j = first; j < k; ++j)
      offset = offset * dataShape[j] + normalized(p, j);
    offsets.push_back(offset);
  }
  std::vector<int64_t> viewShape(dataShape.begin(), dataShape.begin() + first);
  viewShape.push_back(merged);
  viewShape.insert(viewShape.end(), dataShape.begin() + k, dataShape.end());
  reshape.set_op_type("Reshape");
  reshape.add_input(int64Constant(reshape, viewShape));
  // The Gather's indices: the GatherND's without their last dimension (and
  // without the samples' when perSample: those of sample 0).
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  for (int j = static_cast<int>(first); j + 1 < indicesTensor->dims_size(); ++j)
    t.add_dims(indicesTensor->dims(j));
  for (int64_t v : offsets)
    t.add_int64_data(v);
  *indicesNode.mutable_attribute(0)->mutable_t() = std::move(t);
  gather.set_op_type("Gather");
  gather.clear_attribute();
  gather.set_input(1, indicesNode.output(0));
  onnx::AttributeProto *axis = gather.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(first);
}

void Downgrader::resolveRuntimeGatherND(onnx::NodeProto &squeeze,
                                        onnx::NodeProto &gather, int index,
                                        llvm::ArrayRef<int64_t> indicesShape) {
  if (indicesShape.empty())
    fail(gather, index, "indices must have rank 1 or more");
  int64_t k = indicesShape.back();
  if (k != 1)
    fail(gather, index,
         "indices '" + squeeze.input(0) +
             "' are computed at run time and their last dimension is " +
             (k < 0 ? std::string("unknown") : std::to_string(k)) +
             "; shoal supports run-time indices into the first dimension "
             "of the data only (last dimension 1, `weight[ids]`: a Gather), "
             "and any indices known at compile time");
  // GatherND(data, i[..., 1]) = Gather(data, i[..., 0], axis 0).
  squeeze.set_op_type("Squeeze");
  squeeze.add_input(
      int64Constant(squeeze, {static_cast<int64_t>(indicesShape.size()) - 1}));
  gather.set_op_type("Gather");
  gather.clear_attribute();
  onnx::AttributeProto *axis = gather.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
}

void Downgrader::inlineSmallExternalInts() {
  for (onnx::TensorProto &t : *graph.mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    auto type = t.data_type();
    if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32 &&
        type != onnx::TensorProto::BOOL)
      continue;
    std::optional<int64_t> n = checkedElementCount(t.dims(), 4096);
    if (!n)
      continue;
    int64_t bytes = *n * (type == onnx::TensorProto::INT64   ? 8
                          : type == onnx::TensorProto::INT32 ? 4
                                                             : 1);
    // The data stays external (ONNX's checker, the runtime) if it cannot
    // be read here; those who need the values then say so.
    std::optional<std::string> raw = readExternalData(t, modelDir, bytes);
    if (!raw)
      continue;
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::move(*raw));
  }
}

int Downgrader::resolvePending(
    const std::unordered_map<std::string, onnx::TypeProto> &types) {
  auto shapeOf =
      [&](const std::string &name) -> std::optional<std::vector<int64_t>> {
    auto it = types.find(name);
    if (it == types.end() || !it->second.has_tensor_type() ||
        !it->second.tensor_type().has_shape())
      return std::nullopt;
    std::vector<int64_t> dims;
    for (const auto &d : it->second.tensor_type().shape().dim())
      dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return dims;
  };
  int resolved = 0;
  for (auto it = pending.begin(); it != pending.end();) {
    onnx::NodeProto &node = *it->node;
    auto shape = shapeOf(node.input(0));
    if (!shape) {
      ++it;
      continue;
    }
    int64_t rank = static_cast<int64_t>(shape->size());
    if (it->gatherND && it->runtimeIndices) {
      resolveRuntimeGatherND(node, *it->gatherND, it->index, *shape);
    } else if (it->gatherND) {
      resolveGatherND(node, *it->gatherND, *it->indices, it->index, *shape);
    } else if (it->numOutputs > 0) {
      // Split: sizes of ceil(d / n), the last part what is left.
      int64_t axis = getIntAttr(node, "axis", 0);
      if (axis < 0)
        axis += rank;
      if (axis < 0 || axis >= rank)
        fail(node, it->index, "axis out of range");
      int64_t d = (*shape)[axis], n = it->numOutputs;
      if (d >= 0 && d % n != 0) {
        int64_t chunk = (d + n - 1) / n;
        std::vector<int64_t> sizes(n, chunk);
        sizes.back() = d - chunk * (n - 1);
        if (sizes.back() < 0)
          fail(node, it->index,
               "cannot split a dimension of size " + std::to_string(d) +
                   " into " + std::to_string(n) + " parts");
        node.add_input(int64Constant(node, sizes));
      }
    } else {
      // Pad with axes: pads for every dimension.
      auto pads = constantInts(node.input(1));
      auto axes = constantInts(node.input(3));
      if (!pads)
        fail(node, it->index,
             "pads '" + node.input(1) +
                 "' must be an int64 Constant or initializer when axes is "
                 "given");
      if (!axes)
        fail(node, it->index,
             "axes '" + node.input(3) +
                 "' must be an int64 Constant or initializer");
      if (pads->size() != 2 * axes->size())
        fail(node, it->index,
             "pads has " + std::to_string(pads->size()) + " entries for " +
                 std::to_string(axes->size()) + " axes");
      std::vector<int64_t> full(2 * rank, 0);
      for (size_t k = 0; k < axes->size(); ++k) {
        int64_t a = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
        if (a < 0 || a >= rank)
          fail(node, it->index,
               "axis " + std::to_string((*axes)[k]) +
                   " out of range for rank " + std::to_string(rank));
        full[a] = (*pads)[k];
        full[rank + a] = (*pads)[axes->size() + k];
      }
      node.set_input(1, int64Constant(node, full));
      node.mutable_input()->DeleteSubrange(3, 1);
      // An absent constant_value left last.
      if (node.input_size() == 3 && node.input(2).empty())
        node.mutable_input()->DeleteSubrange(2, 1);
    }
    it = pending.erase(it);
    ++resolved;
  }
  return resolved;
}

/// Types that ONNX 1.12's shape inference finds for the values of `model`
/// (non-strict: nodes it cannot infer are skipped).
std::unordered_map<std::string, onnx::TypeProto>
probeTypes(const onnx::ModelProto &model) {
  onnx::ModelProto copy = model;
  try {
    onnx::ShapeInferenceOptions options(/*check_type_val=*/false,
                                        /*strict_mode_val=*/0,
                                        /*data_prop_val=*/true);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(),
                                       options);
  } catch (const std::exception &) {
  }
  std::unordered_map<std::string, onnx::TypeProto> types;
  for (const auto &v : copy.graph().input())
    types[v.name()] = v.type();
  for (const auto &v : copy.graph().value_info())
    types[v.name()] = v.type();
  for (const auto &v : copy.graph().output())
    types[v.name()] = v.type();
  for (const auto &t : copy.graph().initializer()) {
    onnx::TypeProto type;
    type.mutable_tensor_type()->set_elem_type(t.data_type());
    auto *shape = type.mutable_tensor_type()->mutable_shape();
    for (int64_t d : t.dims())
      shape->add_dim()->set_dim_value(d);
    types[t.name()] = type;
  }
  return types;
}

std::optional<std::string> Downgrader::run() {
  inlineSmallExternalInts();
  for (const auto &t : graph.initializer()) {
    constants[t.name()] = &t;
    names.insert(t.name());
  }
  for (const auto &v : graph.input())
    names.insert(v.name());
  for (const auto &n : graph.node())
    for (const auto &o : n.output())
      names.insert(o);
  try {
    for (int i = 0; i < graph.node_size(); ++i)
      rewrite(graph.node(i), i);
  } catch (const Failure &f) {
    return f.message;
  }
  auto commit = [&] {
    graph.clear_node();
    for (onnx::NodeProto &n : out)
      *graph.add_node() = n;
  };
  for (auto &import : *model.mutable_opset_import())
    if (import.domain().empty() || import.domain() == "ai.onnx")
      import.set_version(17);
  // Model-local functions no node calls (exporters leave some behind) would
  // be checked at the new opset: drop them. A called one is a custom-domain
  // op, which the importer refuses anyway.
  std::unordered_set<std::string> called;
  for (const auto &n : graph.node())
    called.insert(n.domain() + "::" + n.op_type());
  auto *functions = model.mutable_functions();
  for (int i = functions->size() - 1; i >= 0; --i)
    if (!called.count(functions->Get(i).domain() +
                      "::" + functions->Get(i).name()))
      functions->DeleteSubrange(i, 1);
  // ONNX 1.12's checker knows IR versions up to 8 (float8, int4 and node
  // metadata came later; shoal has none of the new types).
  if (model.ir_version() > 8)
    model.set_ir_version(8);
  commit();
  try {
    // Each round of shape inference may reach further past the nodes that
    // were waiting.
    while (!pending.empty()) {
      int resolved = resolvePending(probeTypes(model));
      commit();
      if (resolved > 0)
        continue;
      // A Split whose input shape is unknown splits evenly (ONNX's shape
      // inference refuses it later if the dimension does not divide).
      llvm::erase_if(pending, [](const Pending &p) { return p.numOutputs; });
      if (!pending.empty()) {
        const Pending &p = pending.front();
        if (p.gatherND)
          fail(*p.gatherND, p.index,
               std::string(p.runtimeIndices ? "the shape of indices '"
                                            : "the shape of data '") +
                   p.node->input(0) +
                   "', which shape inference did not find, is needed");
        fail(*p.node, p.index,
             "the axes input needs the rank of input '" + p.node->input(0) +
                 "', which shape inference did not find");
      }
    }
  } catch (const Failure &f) {
    return f.message;
  }
  return std::nullopt;
}

} // namespace

std::optional<std::string>
onnx_import::downgradeToOpset17(onnx::ModelProto &model, int64_t opset,
                                llvm::StringRef modelDir) {
  return Downgrader(model, opset, modelDir).run();
}
