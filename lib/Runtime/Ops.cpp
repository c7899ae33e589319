//===- Ops.cpp - Op kinds, attributes and type rules ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Ops.h"

#include "cpu/Kernels.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

using namespace shoal;
using namespace shoal::rt;

namespace {

const std::vector<std::pair<const char *, OpKind>> &kindTable() {
  static const std::vector<std::pair<const char *, OpKind>> table = {
      {"MatMul", OpKind::MatMul},
      {"Gemm", OpKind::Gemm},
      {"Add", OpKind::Add},
      {"Sub", OpKind::Sub},
      {"Mul", OpKind::Mul},
      {"Div", OpKind::Div},
      {"Pow", OpKind::Pow},
      {"Erf", OpKind::Erf},
      {"Tanh", OpKind::Tanh},
      {"Relu", OpKind::Relu},
      {"Sqrt", OpKind::Sqrt},
      {"Exp", OpKind::Exp},
      {"Neg", OpKind::Neg},
      {"Sigmoid", OpKind::Sigmoid},
      {"Softmax", OpKind::Softmax},
      {"LayerNormalization", OpKind::LayerNormalization},
      {"Gather", OpKind::Gather},
      {"Reshape", OpKind::Reshape},
      {"Transpose", OpKind::Transpose},
      {"ReduceMean", OpKind::ReduceMean},
      {"ReduceSum", OpKind::ReduceSum},
      {"AllReduce", OpKind::AllReduce},
      {"AllGather", OpKind::AllGather},
      {"AllToAll", OpKind::AllToAll},
      {"LocalSlice", OpKind::LocalSlice},
      {"Gelu", OpKind::Gelu},
      {"AddLayerNorm", OpKind::AddLayerNorm},
      {"Attention", OpKind::Attention},
      {"Cast", OpKind::Cast},
      {"Where", OpKind::Where},
      {"Equal", OpKind::Equal},
      {"Less", OpKind::Less},
      {"Greater", OpKind::Greater},
      {"LessOrEqual", OpKind::LessOrEqual},
      {"GreaterOrEqual", OpKind::GreaterOrEqual},
      {"And", OpKind::And},
      {"Or", OpKind::Or},
      {"Xor", OpKind::Xor},
      {"Not", OpKind::Not},
      {"Sin", OpKind::Sin},
      {"Cos", OpKind::Cos},
      {"Abs", OpKind::Abs},
      {"Log", OpKind::Log},
      {"Reciprocal", OpKind::Reciprocal},
      {"Floor", OpKind::Floor},
      {"Ceil", OpKind::Ceil},
      {"Max", OpKind::Max},
      {"Min", OpKind::Min},
      {"Concat", OpKind::Concat},
      {"Split", OpKind::Split},
      {"Slice", OpKind::Slice},
      {"Expand", OpKind::Expand},
      {"Pad", OpKind::Pad},
      {"Conv", OpKind::Conv},
      {"BatchNormalization", OpKind::BatchNormalization},
      {"MaxPool", OpKind::MaxPool},
      {"AveragePool", OpKind::AveragePool},
      {"GlobalAveragePool", OpKind::GlobalAveragePool},
      {"GlobalMaxPool", OpKind::GlobalMaxPool},
      {"GatherElements", OpKind::GatherElements},
      {"ScatterElements", OpKind::ScatterElements},
      {"TopK", OpKind::TopK},
      {"Trilu", OpKind::Trilu},
      {"SoftmaxCrossEntropy", OpKind::SoftmaxCrossEntropy},
      {"SoftmaxCrossEntropyGrad", OpKind::SoftmaxCrossEntropyGrad},
      {"SoftmaxGrad", OpKind::SoftmaxGrad},
      {"LayerNormalizationGrad", OpKind::LayerNormalizationGrad},
      {"LayerNormalizationScaleGrad", OpKind::LayerNormalizationScaleGrad},
      {"GatherGrad", OpKind::GatherGrad},
      {"AdamW", OpKind::AdamW},
      {"SGD", OpKind::SGD},
      {"Send", OpKind::Send},
      {"Recv", OpKind::Recv},
  };
  return table;
}

enum class AttrType { Int, Float, String, Ints, Strings };

const char *attrTypeName(AttrType t) {
  switch (t) {
  case AttrType::Int:
    return "an integer (i)";
  case AttrType::Float:
    return "a float (f or i)";
  case AttrType::String:
    return "a string (s)";
  case AttrType::Ints:
    return "a list of integers (ints)";
  case AttrType::Strings:
    return "a list of strings (strings)";
  }
  return "?";
}

/// Typed access to an op's attribute map that rejects unknown names and
/// wrong types.
class AttrReader {
public:
  AttrReader(const plan::Op &op, std::map<std::string, AttrType> allowed)
      : op(op), allowed(std::move(allowed)) {
    for (const auto &kv : op.attrs())
      if (!this->allowed.count(kv.first)) {
        std::vector<std::string> names;
        for (const auto &a : this->allowed)
          names.push_back(a.first);
        throw Error(fmt::format(
            "unknown attribute '{}' ({})", kv.first,
            names.empty()
                ? std::string("this op takes no attributes")
                : fmt::format("expected one of: {}", fmt::join(names, ", "))));
      }
  }

  bool has(const std::string &name) const { return op.attrs().count(name); }

  int64_t getInt(const std::string &name, int64_t dflt) const {
    const plan::Attribute *a = find(name);
    if (!a)
      return dflt;
    if (a->value_case() != plan::Attribute::kI)
      wrongType(name);
    return a->i();
  }
  bool getBool(const std::string &name, bool dflt) const {
    int64_t v = getInt(name, dflt ? 1 : 0);
    if (v != 0 && v != 1)
      throw Error(
          fmt::format("attribute '{}' must be 0 or 1, got {}", name, v));
    return v != 0;
  }
  float getFloat(const std::string &name, float dflt) const {
    return static_cast<float>(getDouble(name, dflt));
  }
  double getDouble(const std::string &name, double dflt) const {
    const plan::Attribute *a = find(name);
    if (!a)
      return dflt;
    if (a->value_case() == plan::Attribute::kF)
      return a->f();
    if (a->value_case() == plan::Attribute::kI)
      return static_cast<double>(a->i());
    wrongType(name);
  }
  std::string getString(const std::string &name,
                        const std::string &dflt) const {
    const plan::Attribute *a = find(name);
    if (!a)
      return dflt;
    if (a->value_case() != plan::Attribute::kS)
      wrongType(name);
    return a->s();
  }
  std::vector<int64_t> getInts(const std::string &name) const {
    const plan::Attribute *a = find(name);
    if (!a)
      return {};
    if (a->value_case() != plan::Attribute::kInts)
      wrongType(name);
    return {a->ints().values().begin(), a->ints().values().end()};
  }
  std::vector<std::string> getStrings(const std::string &name) const {
    const plan::Attribute *a = find(name);
    if (!a)
      return {};
    if (a->value_case() != plan::Attribute::kStrings)
      wrongType(name);
    return {a->strings().values().begin(), a->strings().values().end()};
  }
  void require(const std::string &name) const {
    if (!has(name))
      throw Error(fmt::format("missing required attribute '{}' ({})", name,
                              attrTypeName(allowed.at(name))));
  }

private:
  const plan::Attribute *find(const std::string &name) const {
    auto it = op.attrs().find(name);
    return it == op.attrs().end() ? nullptr : &it->second;
  }
  [[noreturn]] void wrongType(const std::string &name) const {
    throw Error(fmt::format("attribute '{}' must be {}", name,
                            attrTypeName(allowed.at(name))));
  }

  const plan::Op &op;
  std::map<std::string, AttrType> allowed;
};

/// Normalizes `axis` into [0, rank) (ONNX allows [-rank, rank)).
int64_t normalizeAxis(int64_t axis, int64_t rank, const char *what) {
  if (axis < -rank || axis >= rank)
    throw Error(
        fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + rank : axis;
}

/// Reads and checks a collective's mesh axes. Only LocalSlice (no
/// communication: it keeps this micro-batch's block) and AllReduce
/// (accumulation over the step's micro-batches) may name the micro-batch
/// axis.
void readMeshAxes(const AttrReader &attrs, const Mesh &mesh, OpAttrs &out,
                  bool allowMicroBatch = false) {
  attrs.require("axes");
  std::set<int> seen;
  for (const std::string &name : attrs.getStrings("axes")) {
    int a = mesh.findAxis(name);
    if (a < 0)
      throw Error(fmt::format("mesh axis '{}' is not in the mesh ({})", name,
                              mesh.str()));
    if (!seen.insert(a).second)
      throw Error(fmt::format("mesh axis '{}' is listed twice", name));
    if (a == mesh.microBatchAxis() && !allowMicroBatch)
      throw Error(fmt::format("runs over the micro-batch axis '{}'; "
                              "collectives never run over micro-batches",
                              name));
    out.meshAxes.push_back(a);
  }
  out.groupSize = mesh.numBlocks(out.meshAxes);
}

bool isNumeric(DType d) { return d != DType::Bool; }

/// The float dtypes; the CPU kernels compute f16 and bf16 in f32.
bool isFloat(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 ||
         d == DType::BF16;
}

/// ONNX TensorProto.DataType names, for messages.
std::string onnxDataTypeName(int64_t t) {
  static const char *names[] = {
      "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
      "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
      "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < static_cast<int64_t>(sizeof(names) / sizeof(names[0])))
    return fmt::format("{} ({})", t, names[t]);
  return fmt::format("{}", t);
}

/// Reads a list attribute of `n` entries, each >= `min`; absent or empty
/// gives `n` times `dflt`.
std::vector<int64_t> readList(const AttrReader &attrs, const char *name,
                              std::size_t n, int64_t dflt, int64_t min,
                              const char *what) {
  std::vector<int64_t> v = attrs.getInts(name);
  if (v.empty())
    v.assign(n, dflt);
  if (v.size() != n)
    throw Error(fmt::format("attribute '{}' {} has {} entries, expected {} "
                            "({})",
                            name, formatShape(v), v.size(), n, what));
  for (int64_t x : v)
    if (x < min)
      throw Error(fmt::format("attribute '{}' {} has an entry below {}", name,
                              formatShape(v), min));
  return v;
}

/// Reads the sliding-window attributes of Conv and the pools for `sr`
/// spatial dimensions and the given kernel.
cpu::WindowParams readWindow(const AttrReader &attrs, std::size_t sr,
                             std::vector<int64_t> kernel, bool hasDilations,
                             bool hasCeilMode) {
  std::string autoPad = attrs.getString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET")
    throw Error(fmt::format("auto_pad '{}' is not supported: the compiler "
                            "must resolve it into 'pads' and set auto_pad to "
                            "NOTSET",
                            autoPad));
  cpu::WindowParams w;
  w.kernel = std::move(kernel);
  w.strides = readList(attrs, "strides", sr, 1, 1, "one per spatial dimension");
  w.pads = readList(attrs, "pads", 2 * sr, 0, 0,
                    "the begin of every spatial dimension, then the ends");
  w.dilations = hasDilations ? readList(attrs, "dilations", sr, 1, 1,
                                        "one per spatial dimension")
                             : std::vector<int64_t>(sr, 1);
  w.ceilMode = hasCeilMode && attrs.getBool("ceil_mode", false);
  return w;
}

} // namespace

bool shoal::rt::parseOpKind(const std::string &name, OpKind &kind) {
  for (const auto &entry : kindTable())
    if (name == entry.first) {
      kind = entry.second;
      return true;
    }
  return false;
}

std::string shoal::rt::knownOpKinds() {
  std::vector<std::string> names;
  for (const auto &entry : kindTable())
    names.push_back(entry.first);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string OpInfo::describe() const {
  if (name.empty())
    return fmt::format("op #{} ({})", index, kindName);
  return fmt::format("op #{} '{}' ({})", index, name, kindName);
}

OpInfo shoal::rt::checkOp(const plan::Op &op, int index,
                          const std::vector<TensorType> &types,
                          const Mesh &mesh) {
  OpInfo info;
  info.index = index;
  info.kindName = op.kind();
  info.name = op.name();
  info.flops = static_cast<double>(op.flops());
  info.bytes = static_cast<double>(op.bytes());
  if (!parseOpKind(op.kind(), info.kind))
    throw Error(fmt::format("unknown op kind '{}' (known: {})", op.kind(),
                            knownOpKinds()));
  OpKind kind = info.kind;

  // Arity: [minIn, maxIn] inputs and [minOut, maxOut] outputs, of which
  // the first reqIn / reqOut may not be absent (-1); kMany: no limit.
  const int kMany = 1 << 30;
  int minIn = 1, maxIn = 1, minOut = 1, maxOut = 1, reqIn = -1, reqOut = -1;
  std::map<std::string, AttrType> allowed;
  switch (kind) {
  case OpKind::MatMul:
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow:
    minIn = maxIn = 2;
    break;
  case OpKind::Gemm:
    minIn = 2;
    maxIn = 3;
    allowed = {{"alpha", AttrType::Float},
               {"beta", AttrType::Float},
               {"transA", AttrType::Int},
               {"transB", AttrType::Int}};
    break;
  case OpKind::Erf:
  case OpKind::Tanh:
  case OpKind::Relu:
  case OpKind::Sqrt:
  case OpKind::Exp:
  case OpKind::Neg:
  case OpKind::Sigmoid:
    break;
  case OpKind::Softmax:
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::LayerNormalization:
    minIn = 2;
    maxIn = 3;
    maxOut = 3;
    allowed = {{"axis", AttrType::Int},
               {"epsilon", AttrType::Float},
               {"stash_type", AttrType::Int}};
    break;
  case OpKind::Gather:
    minIn = maxIn = 2;
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::Reshape:
    allowed = {{"shape", AttrType::Ints}, {"allowzero", AttrType::Int}};
    break;
  case OpKind::Transpose:
    allowed = {{"perm", AttrType::Ints}};
    break;
  case OpKind::ReduceMean:
  case OpKind::ReduceSum:
    allowed = {{"axes", AttrType::Ints},
               {"keepdims", AttrType::Int},
               {"noop_with_empty_axes", AttrType::Int}};
    break;
  case OpKind::AllReduce:
    allowed = {{"axes", AttrType::Strings}};
    break;
  case OpKind::AllGather:
  case OpKind::LocalSlice:
    allowed = {{"dim", AttrType::Int}, {"axes", AttrType::Strings}};
    break;
  case OpKind::AllToAll:
    allowed = {{"split_dim", AttrType::Int},
               {"concat_dim", AttrType::Int},
               {"axes", AttrType::Strings}};
    break;
  case OpKind::Gelu:
    maxIn = 2;
    break;
  case OpKind::AddLayerNorm:
    minIn = 3;
    maxIn = 4;
    minOut = maxOut = 2;
    allowed = {{"axis", AttrType::Int}, {"epsilon", AttrType::Float}};
    break;
  case OpKind::Attention:
    minIn = 3;
    maxIn = 4;
    allowed = {{"scale", AttrType::Float}};
    break;
  case OpKind::Cast:
    allowed = {{"to", AttrType::Int}};
    break;
  case OpKind::Where:
    minIn = maxIn = 3;
    break;
  case OpKind::Equal:
  case OpKind::Less:
  case OpKind::Greater:
  case OpKind::LessOrEqual:
  case OpKind::GreaterOrEqual:
  case OpKind::And:
  case OpKind::Or:
  case OpKind::Xor:
    minIn = maxIn = 2;
    break;
  case OpKind::Not:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Abs:
  case OpKind::Log:
  case OpKind::Reciprocal:
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool:
    break;
  case OpKind::Max:
  case OpKind::Min:
    maxIn = reqIn = kMany;
    break;
  case OpKind::Concat:
    maxIn = reqIn = kMany;
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::Split:
    maxOut = kMany;
    allowed = {{"axis", AttrType::Int}, {"split", AttrType::Ints}};
    break;
  case OpKind::Slice:
    allowed = {{"starts", AttrType::Ints},
               {"ends", AttrType::Ints},
               {"axes", AttrType::Ints},
               {"steps", AttrType::Ints}};
    break;
  case OpKind::Expand:
    allowed = {{"shape", AttrType::Ints}};
    break;
  case OpKind::Pad:
    allowed = {{"pads", AttrType::Ints},
               {"mode", AttrType::String},
               {"constant_value", AttrType::Float},
               {"axes", AttrType::Ints}};
    break;
  case OpKind::Conv:
    minIn = 2;
    maxIn = 3;
    allowed = {{"auto_pad", AttrType::String}, {"kernel_shape", AttrType::Ints},
               {"strides", AttrType::Ints},    {"pads", AttrType::Ints},
               {"dilations", AttrType::Ints},  {"group", AttrType::Int}};
    break;
  case OpKind::BatchNormalization:
    minIn = maxIn = 5;
    maxOut = 3;
    allowed = {{"epsilon", AttrType::Float},
               {"momentum", AttrType::Float},
               {"training_mode", AttrType::Int}};
    break;
  case OpKind::MaxPool:
    maxOut = 2;
    allowed = {
        {"auto_pad", AttrType::String},  {"kernel_shape", AttrType::Ints},
        {"strides", AttrType::Ints},     {"pads", AttrType::Ints},
        {"dilations", AttrType::Ints},   {"ceil_mode", AttrType::Int},
        {"storage_order", AttrType::Int}};
    break;
  case OpKind::AveragePool:
    allowed = {
        {"auto_pad", AttrType::String}, {"kernel_shape", AttrType::Ints},
        {"strides", AttrType::Ints},    {"pads", AttrType::Ints},
        {"ceil_mode", AttrType::Int},   {"count_include_pad", AttrType::Int}};
    break;
  case OpKind::GatherElements:
    minIn = maxIn = 2;
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::ScatterElements:
    minIn = maxIn = 3;
    allowed = {{"axis", AttrType::Int}, {"reduction", AttrType::String}};
    break;
  case OpKind::TopK:
    maxOut = 2;
    allowed = {{"axis", AttrType::Int},
               {"largest", AttrType::Int},
               {"sorted", AttrType::Int},
               {"k", AttrType::Int}};
    break;
  case OpKind::Trilu:
    allowed = {{"upper", AttrType::Int}, {"k", AttrType::Int}};
    break;
  case OpKind::SoftmaxCrossEntropy:
    minIn = maxIn = 2;
    allowed = {{"ignore_index", AttrType::Int}};
    break;
  case OpKind::SoftmaxCrossEntropyGrad:
    minIn = maxIn = 3;
    allowed = {{"ignore_index", AttrType::Int}};
    break;
  case OpKind::SoftmaxGrad:
    minIn = maxIn = 2;
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::LayerNormalizationGrad:
    minIn = maxIn = 3;
    allowed = {{"axis", AttrType::Int}, {"epsilon", AttrType::Float}};
    break;
  case OpKind::LayerNormalizationScaleGrad:
    minIn = maxIn = 2;
    allowed = {{"axis", AttrType::Int}, {"epsilon", AttrType::Float}};
    break;
  case OpKind::GatherGrad:
    minIn = maxIn = 2;
    allowed = {{"axis", AttrType::Int}};
    break;
  case OpKind::AdamW:
    minIn = maxIn = 4;
    minOut = maxOut = 0;
    allowed = {
        {"lr", AttrType::Float},           {"beta1", AttrType::Float},
        {"beta2", AttrType::Float},        {"eps", AttrType::Float},
        {"weight_decay", AttrType::Float}, {"clip_norm", AttrType::Float},
        {"warmup_steps", AttrType::Int},   {"total_steps", AttrType::Int},
        {"min_lr", AttrType::Float}};
    break;
  case OpKind::SGD:
    // The momentum buffer may be absent (-1, or left out) without momentum.
    minIn = 2;
    maxIn = 3;
    minOut = maxOut = 0;
    allowed = {
        {"lr", AttrType::Float},           {"momentum", AttrType::Float},
        {"weight_decay", AttrType::Float}, {"clip_norm", AttrType::Float},
        {"warmup_steps", AttrType::Int},   {"total_steps", AttrType::Int},
        {"min_lr", AttrType::Float}};
    break;
  case OpKind::Send:
    minOut = maxOut = 0;
    break;
  case OpKind::Recv:
    minIn = maxIn = 0;
    break;
  }
  if (reqIn < 0)
    reqIn = minIn;
  if (reqOut < 0)
    reqOut = minOut;

  auto arity = [&](int lo, int hi) {
    if (hi == kMany)
      return fmt::format("at least {}", lo);
    return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (op.inputs_size() < minIn || op.inputs_size() > maxIn)
    throw Error(fmt::format("expects {} inputs, got {}", arity(minIn, maxIn),
                            op.inputs_size()));
  if (op.outputs_size() < minOut || op.outputs_size() > maxOut)
    throw Error(fmt::format("expects {} outputs, got {}", arity(minOut, maxOut),
                            op.outputs_size()));
  int numValues = static_cast<int>(types.size());
  auto checkId = [&](int id, int pos, int required, const char *what,
                     std::vector<int> &dst) {
    if (id == -1 && pos >= required) {
      dst.push_back(-1); // absent optional operand
      return;
    }
    if (id < 0 || id >= numValues)
      throw Error(fmt::format("{} #{} is value id {}, out of range (the "
                              "program has {} values)",
                              what, pos, id, numValues));
    dst.push_back(id);
  };
  for (int i = 0; i < op.inputs_size(); ++i)
    checkId(op.inputs(i), i, reqIn, "input", info.inputs);
  for (int i = 0; i < op.outputs_size(); ++i)
    checkId(op.outputs(i), i, reqOut, "output", info.outputs);
  {
    std::set<int> outs;
    for (int v : info.outputs)
      if (v >= 0 && !outs.insert(v).second)
        throw Error(fmt::format("value {} is written twice", v));
  }

  AttrReader attrs(op, allowed);
  if (kind == OpKind::Send || kind == OpKind::Recv) {
    if (!op.has_transfer())
      throw Error(fmt::format("a {} needs a transfer (Op.transfer) saying "
                              "how the value is laid out on both sides",
                              op.kind()));
    return info;
  }
  if (op.has_transfer())
    throw Error("only Send and Recv carry a transfer");
  OpAttrs &a = info.attrs;
  auto in = [&](int i) -> const TensorType * {
    if (i >= static_cast<int>(info.inputs.size()) || info.inputs[i] < 0)
      return nullptr;
    return &types[info.inputs[i]];
  };
  auto typesStr = [&]() {
    std::vector<std::string> parts;
    for (int v : info.inputs)
      parts.push_back(v < 0 ? std::string("none") : types[v].str());
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  auto requireDType = [&](const TensorType &t, DType dtype, const char *what) {
    if (t.dtype != dtype)
      throw Error(fmt::format("{} must be {}, got {}", what, dtypeName(dtype),
                              t.str()));
  };
  // Ops computed in f32: f32, or f16/bf16 staged through f32 (and, with
  // `f64`, f64 computed in double).
  auto requireFloat = [&](const TensorType &t, const char *what,
                          bool f64 = false) {
    if (!isFloat(t.dtype) || (t.dtype == DType::F64 && !f64))
      throw Error(fmt::format("{} must be f32, {}f16 or bf16, got {}", what,
                              f64 ? "f64, " : "", t.str()));
  };
  // Expected output types, filled below.
  std::vector<TensorType> expected;
  const TensorType &x = *in(0);

  switch (kind) {
  case OpKind::MatMul: {
    requireFloat(x, "input A", /*f64=*/true);
    requireDType(*in(1), x.dtype, "input B");
    expected.push_back({x.dtype, cpu::matmulShape(x.shape, in(1)->shape)});
    break;
  }
  case OpKind::Gemm: {
    a.alpha = attrs.getFloat("alpha", 1.f);
    a.beta = attrs.getFloat("beta", 1.f);
    a.transA = attrs.getBool("transA", false);
    a.transB = attrs.getBool("transB", false);
    requireFloat(x, "input A", /*f64=*/true);
    requireDType(*in(1), x.dtype, "input B");
    Shape shape = cpu::gemmShape(x.shape, in(1)->shape, a.transA, a.transB);
    if (const TensorType *c = in(2)) {
      requireDType(*c, x.dtype, "input C");
      if (!cpu::broadcastsTo(c->shape, shape))
        throw Error(fmt::format("input C of shape {} does not broadcast to "
                                "the result shape {}",
                                formatShape(c->shape), formatShape(shape)));
    }
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow: {
    const TensorType &y = *in(1);
    // ONNX's Pow takes any numeric base and exponent; the result has the
    // base's type.
    bool mixedPow =
        kind == OpKind::Pow && isNumeric(x.dtype) && isNumeric(y.dtype);
    if (x.dtype != y.dtype && !mixedPow)
      throw Error(fmt::format("inputs have different dtypes ({})", typesStr()));
    if (!isNumeric(x.dtype))
      throw Error(fmt::format("{} is not supported on {} tensors", op.kind(),
                              dtypeName(x.dtype)));
    expected.push_back({x.dtype, cpu::broadcastShape(x.shape, y.shape)});
    break;
  }
  case OpKind::Erf:
  case OpKind::Tanh:
  case OpKind::Relu:
  case OpKind::Sqrt:
  case OpKind::Exp:
  case OpKind::Neg:
  case OpKind::Sigmoid: {
    bool intOk = kind == OpKind::Neg || kind == OpKind::Relu;
    bool signedInt =
        x.dtype == DType::I64 || x.dtype == DType::I32 || x.dtype == DType::I8;
    if (!isFloat(x.dtype) && !(intOk && signedInt))
      throw Error(fmt::format("{} is not supported on {} tensors", op.kind(),
                              dtypeName(x.dtype)));
    expected.push_back(x);
    break;
  }
  case OpKind::Softmax: {
    requireFloat(x, "input");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    a.axis =
        rank == 0 ? 0 : normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    expected.push_back(x);
    break;
  }
  case OpKind::LayerNormalization: {
    requireFloat(x, "input X");
    requireDType(*in(1), x.dtype, "input Scale");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("input X must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    a.epsilon = attrs.getFloat("epsilon", 1e-5f);
    if (!(a.epsilon >= 0))
      throw Error(fmt::format("epsilon must be >= 0, got {}", a.epsilon));
    int64_t stash = attrs.getInt("stash_type", 1);
    if (stash != 1)
      throw Error(fmt::format("stash_type {} is not supported (only 1, "
                              "float)",
                              stash));
    Shape norm(x.shape.begin() + a.axis, x.shape.end());
    if (!cpu::broadcastsTo(in(1)->shape, norm))
      throw Error(fmt::format("Scale of shape {} does not broadcast to the "
                              "normalized shape {}",
                              formatShape(in(1)->shape), formatShape(norm)));
    if (const TensorType *b = in(2)) {
      requireDType(*b, x.dtype, "input B");
      if (!cpu::broadcastsTo(b->shape, norm))
        throw Error(fmt::format("B of shape {} does not broadcast to the "
                                "normalized shape {}",
                                formatShape(b->shape), formatShape(norm)));
    }
    Shape stat(x.shape.begin(), x.shape.begin() + a.axis);
    stat.resize(x.shape.size(), 1);
    expected = {x, {DType::F32, stat}, {DType::F32, stat}};
    break;
  }
  case OpKind::Gelu: {
    requireFloat(x, "input");
    if (const TensorType *b = in(1)) {
      requireDType(*b, x.dtype, "bias");
      if (!cpu::broadcastsTo(b->shape, x.shape))
        throw Error(fmt::format("bias of shape {} does not broadcast to {}",
                                formatShape(b->shape), formatShape(x.shape)));
    }
    expected.push_back(x);
    break;
  }
  case OpKind::AddLayerNorm: {
    requireFloat(x, "input A");
    if (*in(1) != x)
      throw Error(fmt::format("inputs A and B must have the same type, got "
                              "{}",
                              typesStr()));
    requireDType(*in(2), x.dtype, "input Scale");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("input A must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    a.epsilon = attrs.getFloat("epsilon", 1e-5f);
    if (!(a.epsilon >= 0))
      throw Error(fmt::format("epsilon must be >= 0, got {}", a.epsilon));
    Shape norm(x.shape.begin() + a.axis, x.shape.end());
    for (int i : {2, 3})
      if (const TensorType *t = in(i)) {
        requireDType(*t, x.dtype, i == 2 ? "input Scale" : "input B");
        if (!cpu::broadcastsTo(t->shape, norm))
          throw Error(fmt::format("{} of shape {} does not broadcast to the "
                                  "normalized shape {}",
                                  i == 2 ? "Scale" : "B", formatShape(t->shape),
                                  formatShape(norm)));
      }
    expected = {x, x};
    break;
  }
  case OpKind::Attention: {
    const TensorType &kt = *in(1), &v = *in(2);
    requireFloat(x, "q");
    for (const TensorType *t : {&kt, &v})
      requireDType(*t, x.dtype, "kt and v");
    std::size_t r = x.shape.size();
    if (r < 2 || kt.shape.size() != r || v.shape.size() != r ||
        !std::equal(x.shape.begin(), x.shape.end() - 2, kt.shape.begin()) ||
        !std::equal(x.shape.begin(), x.shape.end() - 2, v.shape.begin()) ||
        x.shape[r - 1] != kt.shape[r - 2] || kt.shape[r - 1] != v.shape[r - 2])
      throw Error(fmt::format("q [.., T, D], kt [.., D, S] and v [.., S, E] "
                              "do not fit: {}",
                              typesStr()));
    Shape scores(x.shape.begin(), x.shape.end() - 1);
    scores.push_back(kt.shape[r - 1]);
    if (const TensorType *m = in(3)) {
      requireDType(*m, x.dtype, "mask");
      if (!cpu::broadcastsTo(m->shape, scores))
        throw Error(fmt::format("mask of shape {} does not broadcast to the "
                                "scores {}",
                                formatShape(m->shape), formatShape(scores)));
    }
    a.scale = attrs.getFloat("scale", 1.f);
    Shape out(x.shape.begin(), x.shape.end() - 1);
    out.push_back(v.shape[r - 1]);
    expected.push_back({x.dtype, out});
    break;
  }
  case OpKind::Gather: {
    const TensorType &idx = *in(1);
    if (idx.dtype != DType::I64 && idx.dtype != DType::I32)
      throw Error(fmt::format("indices must be i64 or i32, got {}", idx.str()));
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("data must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", 0), rank, "axis");
    expected.push_back({x.dtype, cpu::gatherShape(x.shape, idx.shape, a.axis)});
    break;
  }
  case OpKind::Reshape: {
    attrs.require("shape");
    a.shape = attrs.getInts("shape");
    for (int64_t d : a.shape)
      if (d < -1)
        throw Error(fmt::format("attribute 'shape' {} has a negative "
                                "dimension",
                                formatShape(a.shape)));
    // The output value's declared (local) type is authoritative; the
    // attribute must agree with it in rank.
    int outId = info.outputs[0];
    const TensorType &out = types[outId];
    if (a.shape.size() != out.shape.size())
      throw Error(fmt::format("attribute 'shape' {} has rank {}, but output "
                              "value {} is {}",
                              formatShape(a.shape), a.shape.size(), outId,
                              out.str()));
    if (out.dtype != x.dtype || out.numElements() != x.numElements())
      throw Error(fmt::format("cannot reshape {} into output value {} of "
                              "type {}",
                              x.str(), outId, out.str()));
    expected.push_back(out);
    break;
  }
  case OpKind::Transpose: {
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (attrs.has("perm")) {
      a.perm = attrs.getInts("perm");
      std::vector<bool> seen(rank, false);
      bool ok = static_cast<int64_t>(a.perm.size()) == rank;
      for (int64_t p : a.perm) {
        if (!ok)
          break;
        if (p < 0 || p >= rank || seen[p])
          ok = false;
        else
          seen[p] = true;
      }
      if (!ok)
        throw Error(fmt::format("perm {} is not a permutation of the {} "
                                "dimensions of the input",
                                formatShape(a.perm), rank));
    } else {
      for (int64_t d = rank - 1; d >= 0; --d)
        a.perm.push_back(d);
    }
    expected.push_back({x.dtype, cpu::transposeShape(x.shape, a.perm)});
    break;
  }
  case OpKind::ReduceMean:
  case OpKind::ReduceSum: {
    requireFloat(x, "input");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    a.keepdims = attrs.getBool("keepdims", true);
    bool noop = attrs.getBool("noop_with_empty_axes", false);
    std::set<int64_t> axes;
    for (int64_t ax : attrs.getInts("axes"))
      if (!axes.insert(normalizeAxis(ax, rank, "reduction axis")).second)
        throw Error(fmt::format("reduction axis {} is listed twice", ax));
    if (axes.empty() && noop) {
      a.reduceIsIdentity = true;
      expected.push_back(x);
      break;
    }
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d)
        axes.insert(d);
    a.axes.assign(axes.begin(), axes.end());
    expected.push_back(
        {x.dtype, cpu::reduceShape(x.shape, a.axes, a.keepdims)});
    break;
  }
  case OpKind::AllReduce: {
    // Over "mb": gradient accumulation (the executor sums the micro-batches
    // of a step, then reduces over the other axes; docs/Training.md).
    readMeshAxes(attrs, mesh, a, /*allowMicroBatch=*/true);
    // No 16-bit float sum in MPI yet (Comm::allReduce).
    if (!isNumeric(x.dtype) || x.dtype == DType::F16 || x.dtype == DType::BF16)
      throw Error(fmt::format("AllReduce is not supported on {} tensors",
                              dtypeName(x.dtype)));
    expected.push_back(x);
    break;
  }
  case OpKind::AllGather:
  case OpKind::LocalSlice: {
    attrs.require("dim");
    readMeshAxes(attrs, mesh, a, kind == OpKind::LocalSlice);
    int64_t rank = static_cast<int64_t>(x.shape.size());
    a.dim = normalizeAxis(attrs.getInt("dim", 0), rank, "dim");
    Shape shape = x.shape;
    if (kind == OpKind::AllGather) {
      shape[a.dim] *= a.groupSize;
    } else {
      // Uneven: ceil-sized blocks, the last ones zero-padded.
      shape[a.dim] = (shape[a.dim] + a.groupSize - 1) / a.groupSize;
    }
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::AllToAll: {
    attrs.require("split_dim");
    attrs.require("concat_dim");
    readMeshAxes(attrs, mesh, a);
    int64_t rank = static_cast<int64_t>(x.shape.size());
    a.dim = normalizeAxis(attrs.getInt("split_dim", 0), rank, "split_dim");
    a.concatDim =
        normalizeAxis(attrs.getInt("concat_dim", 0), rank, "concat_dim");
    if (a.dim == a.concatDim)
      throw Error(fmt::format("split_dim and concat_dim are both {}", a.dim));
    Shape shape = x.shape;
    if (shape[a.dim] % a.groupSize != 0)
      throw Error(fmt::format("dimension {} of size {} does not split into {} "
                              "blocks",
                              a.dim, shape[a.dim], a.groupSize));
    shape[a.dim] /= a.groupSize;
    shape[a.concatDim] *= a.groupSize;
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::Cast: {
    attrs.require("to");
    int64_t to = attrs.getInt("to", 0);
    switch (to) {
    case 1:
      a.to = DType::F32;
      break;
    case 6:
      a.to = DType::I32;
      break;
    case 7:
      a.to = DType::I64;
      break;
    case 9:
      a.to = DType::Bool;
      break;
    case 2:
      a.to = DType::U8;
      break;
    case 3:
      a.to = DType::I8;
      break;
    case 10:
      a.to = DType::F16;
      break;
    case 11:
      a.to = DType::F64;
      break;
    case 16:
      a.to = DType::BF16;
      break;
    default:
      throw Error(fmt::format("attribute 'to' is {}; only FLOAT (1), UINT8 "
                              "(2), INT8 (3), INT32 (6), INT64 (7), BOOL (9), "
                              "FLOAT16 (10), DOUBLE (11) and BFLOAT16 (16) "
                              "are supported",
                              onnxDataTypeName(to)));
    }
    expected.push_back({a.to, x.shape});
    break;
  }
  case OpKind::Where: {
    requireDType(x, DType::Bool, "input condition");
    const TensorType &tx = *in(1), &ty = *in(2);
    if (tx.dtype != ty.dtype)
      throw Error(
          fmt::format("inputs X and Y have different dtypes ({})", typesStr()));
    expected.push_back(
        {tx.dtype, cpu::broadcastShape(cpu::broadcastShape(x.shape, tx.shape),
                                       ty.shape)});
    break;
  }
  case OpKind::Equal:
  case OpKind::Less:
  case OpKind::Greater:
  case OpKind::LessOrEqual:
  case OpKind::GreaterOrEqual: {
    const TensorType &y = *in(1);
    if (x.dtype != y.dtype)
      throw Error(fmt::format("inputs have different dtypes ({})", typesStr()));
    if (!isNumeric(x.dtype) &&
        !(kind == OpKind::Equal && x.dtype == DType::Bool))
      throw Error(fmt::format("{} is not supported on {} tensors", op.kind(),
                              dtypeName(x.dtype)));
    expected.push_back({DType::Bool, cpu::broadcastShape(x.shape, y.shape)});
    break;
  }
  case OpKind::And:
  case OpKind::Or:
  case OpKind::Xor:
    requireDType(x, DType::Bool, "input A");
    requireDType(*in(1), DType::Bool, "input B");
    expected.push_back(
        {DType::Bool, cpu::broadcastShape(x.shape, in(1)->shape)});
    break;
  case OpKind::Not:
    requireDType(x, DType::Bool, "input");
    expected.push_back(x);
    break;
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Abs:
  case OpKind::Log:
  case OpKind::Reciprocal:
  case OpKind::Floor:
  case OpKind::Ceil:
    if (!isFloat(x.dtype) && !(kind == OpKind::Abs && isNumeric(x.dtype)))
      throw Error(fmt::format("{} is not supported on {} tensors", op.kind(),
                              dtypeName(x.dtype)));
    expected.push_back(x);
    break;
  case OpKind::Max:
  case OpKind::Min: {
    if (!isNumeric(x.dtype))
      throw Error(fmt::format("{} is not supported on {} tensors", op.kind(),
                              dtypeName(x.dtype)));
    Shape shape = x.shape;
    for (std::size_t i = 1; i < info.inputs.size(); ++i) {
      if (in(i)->dtype != x.dtype)
        throw Error(
            fmt::format("inputs have different dtypes ({})", typesStr()));
      shape = cpu::broadcastShape(shape, in(i)->shape);
    }
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::Concat: {
    attrs.require("axis");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("inputs must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", 0), rank, "axis");
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < info.inputs.size(); ++i) {
      if (in(i)->dtype != x.dtype)
        throw Error(
            fmt::format("inputs have different dtypes ({})", typesStr()));
      shapes.push_back(in(i)->shape);
    }
    expected.push_back({x.dtype, cpu::concatShape(shapes, a.axis)});
    break;
  }
  case OpKind::Split: {
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("input must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", 0), rank, "axis");
    int64_t dim = x.shape[a.axis];
    int64_t n = static_cast<int64_t>(info.outputs.size());
    if (attrs.has("split")) {
      a.split = attrs.getInts("split");
      if (static_cast<int64_t>(a.split.size()) != n)
        throw Error(fmt::format("attribute 'split' {} has {} entries for {} "
                                "outputs",
                                formatShape(a.split), a.split.size(), n));
      int64_t total = 0;
      for (int64_t v : a.split) {
        if (v < 0)
          throw Error(fmt::format("attribute 'split' {} has a negative size",
                                  formatShape(a.split)));
        total += v;
      }
      if (total != dim)
        throw Error(fmt::format("attribute 'split' {} adds up to {}, but axis "
                                "{} of the input {} has size {}",
                                formatShape(a.split), total, a.axis, x.str(),
                                dim));
    } else {
      if (dim % n != 0)
        throw Error(fmt::format("axis {} of the input {} (size {}) does not "
                                "split into {} equal parts; give 'split'",
                                a.axis, x.str(), dim, n));
      a.split.assign(n, dim / n);
    }
    for (int64_t v : a.split) {
      Shape shape = x.shape;
      shape[a.axis] = v;
      expected.push_back({x.dtype, shape});
    }
    break;
  }
  case OpKind::Slice: {
    attrs.require("starts");
    attrs.require("ends");
    Shape shape = cpu::sliceShape(x.shape, attrs.getInts("starts"),
                                  attrs.getInts("ends"), attrs.getInts("axes"),
                                  attrs.getInts("steps"), a.starts, a.steps);
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::Expand: {
    if (attrs.has("shape")) {
      a.shape = attrs.getInts("shape");
      for (int64_t d : a.shape)
        if (d < 0)
          throw Error(fmt::format("attribute 'shape' {} has a negative "
                                  "dimension",
                                  formatShape(a.shape)));
      Shape shape;
      try {
        shape = cpu::broadcastShape(x.shape, a.shape);
      } catch (const Error &) {
        throw Error(fmt::format("input {} does not broadcast to attribute "
                                "'shape' {}",
                                x.str(), formatShape(a.shape)));
      }
      expected.push_back({x.dtype, shape});
      break;
    }
    // Without the attribute the output value's declared type gives the
    // shape.
    const TensorType &out = types[info.outputs[0]];
    if (!cpu::broadcastsTo(x.shape, out.shape))
      throw Error(fmt::format("input {} does not broadcast to output value {} "
                              "of type {}",
                              x.str(), info.outputs[0], out.str()));
    expected.push_back({x.dtype, out.shape});
    break;
  }
  case OpKind::Pad: {
    attrs.require("pads");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    std::string mode = attrs.getString("mode", "constant");
    if (mode == "constant")
      a.padMode = cpu::PadMode::Constant;
    else if (mode == "reflect")
      a.padMode = cpu::PadMode::Reflect;
    else if (mode == "edge")
      a.padMode = cpu::PadMode::Edge;
    else
      throw Error(fmt::format("mode '{}' is not supported (constant, reflect "
                              "or edge)",
                              mode));
    a.padValue = attrs.getFloat("constant_value", 0.f);
    std::vector<int64_t> axes;
    if (attrs.has("axes")) {
      std::set<int64_t> seen;
      for (int64_t ax : attrs.getInts("axes")) {
        int64_t n = normalizeAxis(ax, rank, "pad axis");
        if (!seen.insert(n).second)
          throw Error(fmt::format("pad axis {} is listed twice", ax));
        axes.push_back(n);
      }
    } else {
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
    }
    std::vector<int64_t> pads = attrs.getInts("pads");
    if (pads.size() != 2 * axes.size())
      throw Error(fmt::format("attribute 'pads' {} has {} entries, expected {} "
                              "(the begin of every padded axis, then the "
                              "ends)",
                              formatShape(pads), pads.size(), 2 * axes.size()));
    a.pads.assign(2 * rank, 0);
    for (std::size_t i = 0; i < axes.size(); ++i) {
      a.pads[axes[i]] = pads[i];
      a.pads[axes[i] + rank] = pads[i + axes.size()];
    }
    Shape shape = x.shape;
    for (int64_t d = 0; d < rank; ++d) {
      shape[d] += a.pads[d] + a.pads[d + rank];
      if (shape[d] < 0)
        throw Error(fmt::format("pads {} and {} crop more than dimension {} "
                                "of the input {}",
                                a.pads[d], a.pads[d + rank], d, x.str()));
      if (a.padMode != cpu::PadMode::Constant && x.shape[d] == 0 &&
          shape[d] > 0)
        throw Error(fmt::format("cannot pad the empty dimension {} of the "
                                "input {} in {} mode",
                                d, x.str(), mode));
    }
    expected.push_back({x.dtype, shape});
    break;
  }
  case OpKind::Conv: {
    const TensorType &w = *in(1);
    requireDType(x, DType::F32, "input X");
    requireDType(w, DType::F32, "input W");
    std::size_t rank = x.shape.size();
    if (rank < 3)
      throw Error(fmt::format("input X must be [N, C, spatial...] with at "
                              "least one spatial dimension, got {}",
                              x.str()));
    if (w.shape.size() != rank)
      throw Error(fmt::format("input W must have the rank of X ({}), got {}",
                              rank, w.str()));
    a.group = attrs.getInt("group", 1);
    if (a.group < 1)
      throw Error(fmt::format("group must be >= 1, got {}", a.group));
    if (w.shape[1] * a.group != x.shape[1])
      throw Error(fmt::format("X has {} channels, but W {} with group {} "
                              "takes {}",
                              x.shape[1], w.str(), a.group,
                              w.shape[1] * a.group));
    int64_t m = w.shape[0];
    if (m % a.group != 0)
      throw Error(fmt::format("W has {} output channels, not a multiple of "
                              "group {}",
                              m, a.group));
    std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
    std::vector<int64_t> ks = attrs.getInts("kernel_shape");
    if (!ks.empty() && ks != kernel)
      throw Error(fmt::format("attribute 'kernel_shape' {} does not match W "
                              "{}",
                              formatShape(ks), w.str()));
    for (int64_t k : kernel)
      if (k < 1)
        throw Error(fmt::format("W {} has an empty kernel", w.str()));
    a.window = readWindow(attrs, rank - 2, kernel, true, false);
    if (const TensorType *b = in(2)) {
      requireDType(*b, DType::F32, "input B");
      if (b->shape != Shape{m})
        throw Error(
            fmt::format("input B must be f32[{}], got {}", m, b->str()));
    }
    expected.push_back(
        {DType::F32, cpu::windowOutputShape(x.shape, m, a.window)});
    break;
  }
  case OpKind::BatchNormalization: {
    requireDType(x, DType::F32, "input X");
    if (x.shape.size() < 2)
      throw Error(fmt::format("input X must be [N, C, ...], got {}", x.str()));
    const char *names[] = {"scale", "B", "input_mean", "input_var"};
    for (int i = 1; i <= 4; ++i)
      if (in(i)->dtype != DType::F32 || in(i)->shape != Shape{x.shape[1]})
        throw Error(fmt::format("input {} must be f32[{}] (one per channel), "
                                "got {}",
                                names[i - 1], x.shape[1], in(i)->str()));
    a.epsilon = attrs.getFloat("epsilon", 1e-5f);
    if (!(a.epsilon >= 0))
      throw Error(fmt::format("epsilon must be >= 0, got {}", a.epsilon));
    attrs.getFloat("momentum", 0.9f); // training only
    int64_t training = attrs.getInt("training_mode", 0);
    if (training != 0)
      throw Error(fmt::format("training_mode {} is not supported (inference "
                              "only: 0)",
                              training));
    for (std::size_t i = 1; i < info.outputs.size(); ++i)
      if (info.outputs[i] >= 0)
        throw Error("outputs running_mean and running_var (training mode) "
                    "are not supported");
    expected.assign(info.outputs.size(), x);
    break;
  }
  case OpKind::MaxPool:
  case OpKind::AveragePool: {
    // MaxPool also on 8-bit integers (their max is exact in f32).
    if (!(kind == OpKind::MaxPool &&
          (x.dtype == DType::U8 || x.dtype == DType::I8)))
      requireFloat(x, "input X");
    std::size_t rank = x.shape.size();
    if (rank < 3)
      throw Error(fmt::format("input X must be [N, C, spatial...] with at "
                              "least one spatial dimension, got {}",
                              x.str()));
    attrs.require("kernel_shape");
    std::vector<int64_t> kernel = readList(attrs, "kernel_shape", rank - 2, 1,
                                           1, "one per spatial dimension of X");
    bool isMax = kind == OpKind::MaxPool;
    a.window = readWindow(attrs, rank - 2, kernel, isMax, true);
    if (isMax) {
      int64_t order = attrs.getInt("storage_order", 0);
      if (order != 0)
        throw Error(fmt::format("storage_order {} is not supported (only 0, "
                                "row major)",
                                order));
      if (info.outputs.size() > 1 && info.outputs[1] >= 0)
        throw Error("the Indices output (#1) is not supported");
    } else {
      a.countIncludePad = attrs.getBool("count_include_pad", false);
    }
    TensorType out{x.dtype,
                   cpu::windowOutputShape(x.shape, x.shape[1], a.window)};
    expected.assign(info.outputs.size(), out);
    break;
  }
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool: {
    requireDType(x, DType::F32, "input X");
    if (x.shape.size() < 2)
      throw Error(fmt::format("input X must be [N, C, ...], got {}", x.str()));
    Shape shape = x.shape;
    std::fill(shape.begin() + 2, shape.end(), 1);
    expected.push_back({DType::F32, shape});
    break;
  }
  case OpKind::GatherElements:
  case OpKind::ScatterElements: {
    const TensorType &idx = *in(1);
    if (idx.dtype != DType::I64 && idx.dtype != DType::I32)
      throw Error(fmt::format("indices must be i64 or i32, got {}", idx.str()));
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("data must have rank >= 1");
    if (static_cast<int64_t>(idx.shape.size()) != rank)
      throw Error(fmt::format("indices {} must have the rank of data {}",
                              idx.str(), x.str()));
    a.axis = normalizeAxis(attrs.getInt("axis", 0), rank, "axis");
    for (int64_t d = 0; d < rank; ++d)
      if (d != a.axis && idx.shape[d] > x.shape[d])
        throw Error(fmt::format("indices {} are larger than data {} along "
                                "dimension {}",
                                idx.str(), x.str(), d));
    if (kind == OpKind::GatherElements) {
      expected.push_back({x.dtype, idx.shape});
      break;
    }
    const TensorType &upd = *in(2);
    if (upd.dtype != x.dtype || upd.shape != idx.shape)
      throw Error(fmt::format("updates must be {} (data's dtype, the "
                              "indices' shape), got {}",
                              TensorType{x.dtype, idx.shape}.str(), upd.str()));
    std::string red = attrs.getString("reduction", "none");
    if (red == "none")
      a.reduction = cpu::ScatterReduction::None;
    else if (red == "add")
      a.reduction = cpu::ScatterReduction::Add;
    else if (red == "mul")
      a.reduction = cpu::ScatterReduction::Mul;
    else if (red == "max")
      a.reduction = cpu::ScatterReduction::Max;
    else if (red == "min")
      a.reduction = cpu::ScatterReduction::Min;
    else
      throw Error(fmt::format("reduction '{}' is not one of none, add, mul, "
                              "max, min",
                              red));
    if (a.reduction != cpu::ScatterReduction::None && !isNumeric(x.dtype))
      throw Error(fmt::format("reduction '{}' is not supported on {} data", red,
                              dtypeName(x.dtype)));
    expected.push_back(x);
    break;
  }
  case OpKind::TopK: {
    if (!isNumeric(x.dtype))
      throw Error(fmt::format("TopK is not supported on {} tensors",
                              dtypeName(x.dtype)));
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("input must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    attrs.require("k");
    a.k = attrs.getInt("k", 0);
    if (a.k < 0 || a.k > x.shape[a.axis])
      throw Error(fmt::format("k = {} is out of range for axis {} of the "
                              "input {}",
                              a.k, a.axis, x.str()));
    a.largest = attrs.getBool("largest", true);
    a.sorted = attrs.getBool("sorted", true);
    Shape shape = x.shape;
    shape[a.axis] = a.k;
    expected = {{x.dtype, shape}, {DType::I64, shape}};
    expected.resize(info.outputs.size());
    break;
  }
  case OpKind::Trilu: {
    if (x.shape.size() < 2)
      throw Error(fmt::format("input must have rank >= 2, got {}", x.str()));
    a.upper = attrs.getBool("upper", true);
    a.k = attrs.getInt("k", 0);
    expected.push_back(x);
    break;
  }
  case OpKind::SoftmaxCrossEntropy:
  case OpKind::SoftmaxCrossEntropyGrad: {
    requireDType(x, DType::F32, "input logits");
    const TensorType &labels = *in(1);
    requireDType(labels, DType::I64, "input labels");
    if (x.shape.empty())
      throw Error(fmt::format("input logits must be [..., V] with rank >= 1, "
                              "got {}",
                              x.str()));
    Shape rows(x.shape.begin(), x.shape.end() - 1);
    if (labels.shape != rows)
      throw Error(fmt::format("input labels must have the shape of the logits "
                              "without the last dimension, {}, got {}",
                              formatShape(rows), labels.str()));
    a.ignoreIndex = attrs.getInt("ignore_index", -100);
    if (kind == OpKind::SoftmaxCrossEntropy) {
      expected.push_back({DType::F32, rows});
      break;
    }
    const TensorType &dloss = *in(2);
    if (dloss != TensorType{DType::F32, rows})
      throw Error(fmt::format("input dloss must be {} (one per label), got {}",
                              TensorType{DType::F32, rows}.str(), dloss.str()));
    expected.push_back(x);
    break;
  }
  case OpKind::SoftmaxGrad: {
    requireDType(x, DType::F32, "input y");
    if (*in(1) != x)
      throw Error(fmt::format("inputs y and dy must have the same type, got {}",
                              typesStr()));
    int64_t rank = static_cast<int64_t>(x.shape.size());
    a.axis =
        rank == 0 ? 0 : normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    expected.push_back(x);
    break;
  }
  case OpKind::LayerNormalizationGrad:
  case OpKind::LayerNormalizationScaleGrad: {
    requireDType(x, DType::F32, "input x");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0)
      throw Error("input x must have rank >= 1");
    a.axis = normalizeAxis(attrs.getInt("axis", -1), rank, "axis");
    a.epsilon = attrs.getFloat("epsilon", 1e-5f);
    if (!(a.epsilon >= 0))
      throw Error(fmt::format("epsilon must be >= 0, got {}", a.epsilon));
    Shape norm(x.shape.begin() + a.axis, x.shape.end());
    bool isScale = kind == OpKind::LayerNormalizationScaleGrad;
    const TensorType &dy = *in(isScale ? 1 : 2);
    if (dy != x)
      throw Error(fmt::format("input dy must have the type of x, {}, got {}",
                              x.str(), dy.str()));
    if (isScale) {
      expected.push_back({DType::F32, norm});
      break;
    }
    const TensorType &scale = *in(1);
    requireDType(scale, DType::F32, "input scale");
    if (!cpu::broadcastsTo(scale.shape, norm))
      throw Error(fmt::format("scale of shape {} does not broadcast to the "
                              "normalized shape {}",
                              formatShape(scale.shape), formatShape(norm)));
    expected.push_back(x);
    break;
  }
  case OpKind::GatherGrad: {
    // x is the indices; the output's declared type gives the row count.
    if (x.dtype != DType::I64 && x.dtype != DType::I32)
      throw Error(fmt::format("indices must be i64 or i32, got {}", x.str()));
    int64_t axis = attrs.getInt("axis", 0);
    if (axis != 0)
      throw Error(fmt::format("axis {} is not supported (only 0)", axis));
    a.axis = 0;
    const TensorType &dy = *in(1);
    requireDType(dy, DType::F32, "input dy");
    const TensorType &out = types[info.outputs[0]];
    if (out.dtype != DType::F32 || out.shape.empty())
      throw Error(fmt::format("output value {} must be f32 [rows, ...], got "
                              "{}",
                              info.outputs[0], out.str()));
    Shape want = x.shape;
    want.insert(want.end(), out.shape.begin() + 1, out.shape.end());
    if (dy.shape != want)
      throw Error(fmt::format("input dy must be the indices' shape followed "
                              "by the output's row shape, {}, got {}",
                              formatShape(want), dy.str()));
    expected.push_back(out);
    break;
  }
  case OpKind::AdamW:
  case OpKind::SGD: {
    bool adam = kind == OpKind::AdamW;
    const char *names[] = {"w", "g", adam ? "m" : "buf", "v"};
    requireDType(x, DType::F32, "input w");
    for (std::size_t i = 1; i < info.inputs.size(); ++i)
      if (const TensorType *t = in(static_cast<int>(i)))
        if (*t != x)
          throw Error(fmt::format("input {} must have the type of w, {}, "
                                  "got {}",
                                  names[i], x.str(), t->str()));
    cpu::OptimizerParams &p = a.optimizer;
    p.kind = adam ? cpu::OptimizerParams::AdamW : cpu::OptimizerParams::SGD;
    attrs.require("lr");
    p.lr = attrs.getDouble("lr", 0);
    p.weightDecay = attrs.getDouble("weight_decay", adam ? 1e-2 : 0.0);
    p.clipNorm = attrs.getDouble("clip_norm", 0);
    p.minLr = attrs.getDouble("min_lr", 0);
    p.warmupSteps = attrs.getInt("warmup_steps", 0);
    p.totalSteps = attrs.getInt("total_steps", 0);
    auto nonNegative = [](const char *name, double v) {
      if (!(v >= 0)) // also NaN
        throw Error(
            fmt::format("attribute '{}' must be >= 0, got {}", name, v));
    };
    nonNegative("lr", p.lr);
    nonNegative("weight_decay", p.weightDecay);
    nonNegative("clip_norm", p.clipNorm);
    nonNegative("min_lr", p.minLr);
    nonNegative("warmup_steps", static_cast<double>(p.warmupSteps));
    nonNegative("total_steps", static_cast<double>(p.totalSteps));
    if (adam) {
      p.beta1 = attrs.getDouble("beta1", 0.9);
      p.beta2 = attrs.getDouble("beta2", 0.999);
      p.eps = attrs.getDouble("eps", 1e-8);
      for (auto [name, beta] :
           {std::pair<const char *, double>{"beta1", p.beta1},
            {"beta2", p.beta2}})
        if (!(beta >= 0 && beta < 1))
          throw Error(fmt::format("attribute '{}' must be in [0, 1), got {}",
                                  name, beta));
      nonNegative("eps", p.eps);
    } else {
      p.momentum = attrs.getDouble("momentum", 0);
      nonNegative("momentum", p.momentum);
      if (p.momentum != 0 && !in(2))
        throw Error(
            fmt::format("momentum {} needs the input buf (#2)", p.momentum));
    }
    break; // No outputs.
  }
  case OpKind::Send:
  case OpKind::Recv:
    break; // Returned above.
  }

  for (std::size_t i = 0; i < info.outputs.size(); ++i) {
    int v = info.outputs[i];
    if (v < 0)
      continue;
    if (types[v] != expected[i])
      throw Error(fmt::format("output #{} (value {}) is declared {}, but the "
                              "inputs ({}) give {}",
                              i, v, types[v].str(), typesStr(),
                              expected[i].str()));
  }
  return info;
}
