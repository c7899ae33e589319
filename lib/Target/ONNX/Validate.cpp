//===- Validate.cpp - Checks before ONNX's own code sees a model -*- C++
//-*-===//
//
// See Validate.h. Every message names the initializer, or the node and its
// attribute, and says what was expected.
//
//===----------------------------------------------------------------------===//

#include "Validate.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace shoal::onnx_import;
using onnx::TensorProto;

namespace {

/// Largest attribute value accepted for strides, dilations, kernel sizes and
/// block sizes: far beyond any real model, small enough that ONNX's shape
/// arithmetic on them cannot overflow int64.
constexpr int64_t kMaxWindowAttr = int64_t(1) << 31;

/// Bytes per element, 0 for types with no fixed size (STRING) and -1 for
/// values that are not a TensorProto data type.
int64_t elementBytes(int32_t type) {
  switch (type) {
  case TensorProto::BOOL:
  case TensorProto::UINT8:
  case TensorProto::INT8:
    return 1;
  case TensorProto::UINT16:
  case TensorProto::INT16:
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
    return 2;
  case TensorProto::FLOAT:
  case TensorProto::INT32:
  case TensorProto::UINT32:
    return 4;
  case TensorProto::INT64:
  case TensorProto::UINT64:
  case TensorProto::DOUBLE:
  case TensorProto::COMPLEX64:
    return 8;
  case TensorProto::COMPLEX128:
    return 16;
  case TensorProto::STRING:
    return 0;
  default:
    return -1;
  }
}

std::string formatDims(const TensorProto &t) {
  std::string s = "[";
  for (int i = 0; i < t.dims_size(); ++i)
    s += (i ? "," : "") + std::to_string(t.dims(i));
  return s + "]";
}

/// The number of entries of the typed field that `t`'s type stores its
/// elements in, and how many entries one element takes there.
std::pair<int64_t, int64_t> typedEntries(const TensorProto &t) {
  switch (t.data_type()) {
  case TensorProto::FLOAT:
    return {t.float_data_size(), 1};
  case TensorProto::COMPLEX64:
    return {t.float_data_size(), 2};
  case TensorProto::DOUBLE:
    return {t.double_data_size(), 1};
  case TensorProto::COMPLEX128:
    return {t.double_data_size(), 2};
  case TensorProto::INT64:
    return {t.int64_data_size(), 1};
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    return {t.uint64_data_size(), 1};
  case TensorProto::STRING:
    return {t.string_data_size(), 1};
  default: // the 8- and 16-bit types, INT32, BOOL
    return {t.int32_data_size(), 1};
  }
}

/// `what` names the tensor in messages ("initializer 'w'").
std::optional<std::string> checkTensor(const TensorProto &t,
                                       const std::string &what) {
  int64_t bytes = elementBytes(t.data_type());
  if (bytes < 0 || t.data_type() == TensorProto::UNDEFINED)
    return what + ": data_type " + std::to_string(t.data_type()) +
           " is not an ONNX tensor element type";
  int64_t limit = bytes > 0 ? (int64_t(1) << 62) / bytes : int64_t(1) << 40;
  std::optional<int64_t> n = checkedElementCount(t.dims(), limit);
  if (!n)
    return what + ": dims " + formatDims(t) +
           (std::any_of(t.dims().begin(), t.dims().end(),
                        [](int64_t d) { return d < 0; })
                ? " has a negative dimension"
                : " hold more elements than any file can");
  if (t.data_location() == TensorProto::EXTERNAL) {
    bool location = false;
    for (const auto &e : t.external_data())
      location |= e.key() == "location" && !e.value().empty();
    if (!location)
      return what + ": its data is external, but it names no location";
    return std::nullopt; // sizes are checked when the data is read
  }
  auto [entries, perElement] = typedEntries(t);
  if (t.has_raw_data()) {
    if (bytes == 0)
      return what + ": a STRING tensor cannot use raw_data";
    if (entries > 0)
      return what + ": it has both raw_data and typed data";
    if (static_cast<int64_t>(t.raw_data().size()) != *n * bytes)
      return what + ": raw_data holds " + std::to_string(t.raw_data().size()) +
             " bytes, but dims " + formatDims(t) + " of " +
             std::to_string(bytes) + "-byte elements need " +
             std::to_string(*n * bytes);
    return std::nullopt;
  }
  if (entries != *n * perElement)
    return what + ": it holds " + std::to_string(entries / perElement) +
           " elements, but dims " + formatDims(t) + " need " +
           std::to_string(*n);
  return std::nullopt;
}

bool isConvOrPool(const std::string &op) {
  static const std::set<std::string> ops = {
      "Conv",       "ConvTranspose", "ConvInteger", "QLinearConv",
      "MaxPool",    "AveragePool",   "LpPool",      "MaxUnpool",
      "DeformConv", "Col2Im",        "MaxRoiPool"};
  return ops.count(op) > 0;
}

class Validator {
public:
  std::optional<std::string> graph(const onnx::GraphProto &g,
                                   const std::set<std::string> &outer,
                                   const std::string &where);

private:
  std::optional<std::string> node(const onnx::NodeProto &n,
                                  const std::string &name,
                                  const std::set<std::string> &scope);
};

std::optional<std::string> Validator::graph(const onnx::GraphProto &g,
                                            const std::set<std::string> &outer,
                                            const std::string &where) {
  std::set<std::string> defined = outer;
  for (const auto &in : g.input())
    defined.insert(in.name());
  for (const TensorProto &t : g.initializer()) {
    if (auto e = checkTensor(t, where + "initializer '" + t.name() + "'"))
      return e;
    defined.insert(t.name());
  }
  for (const auto &s : g.sparse_initializer()) {
    const std::string what =
        where + "sparse initializer '" + s.values().name() + "'";
    if (auto e = checkTensor(s.values(), what + " values"))
      return e;
    if (auto e = checkTensor(s.indices(), what + " indices"))
      return e;
    defined.insert(s.values().name());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto &n = g.node(i);
    std::string name = where + "node '" +
                       (n.name().empty() ? "#" + std::to_string(i) : n.name()) +
                       "' (" + n.op_type() + ")";
    if (auto e = node(n, name, defined))
      return e;
    for (const std::string &out : n.output())
      defined.insert(out);
  }
  for (const auto &out : g.output()) {
    if (out.name().empty())
      return where + "a graph output has no name";
    if (!defined.count(out.name()))
      return where + "graph output '" + out.name() +
             "' is produced by no node, initializer or input";
  }
  return std::nullopt;
}

std::optional<std::string> Validator::node(const onnx::NodeProto &n,
                                           const std::string &name,
                                           const std::set<std::string> &scope) {
  bool defaultDomain = n.domain().empty() || n.domain() == "ai.onnx";
  for (const onnx::AttributeProto &a : n.attribute()) {
    const std::string what = name + " attribute '" + a.name() + "'";
    if (a.has_t())
      if (auto e = checkTensor(a.t(), what))
        return e;
    for (const TensorProto &t : a.tensors())
      if (auto e = checkTensor(t, what))
        return e;
    if (a.has_sparse_tensor()) {
      if (auto e = checkTensor(a.sparse_tensor().values(), what + " values"))
        return e;
      if (auto e = checkTensor(a.sparse_tensor().indices(), what + " indices"))
        return e;
    }
    // Subgraphs see the names defined around them.
    if (a.has_g())
      if (auto e = graph(a.g(), scope, what + ": "))
        return e;
    for (const onnx::GraphProto &g : a.graphs())
      if (auto e = graph(g, scope, what + ": "))
        return e;
    if (!defaultDomain)
      continue;
    // ONNX's shape inference divides by these.
    bool window = isConvOrPool(n.op_type()) &&
                  (a.name() == "strides" || a.name() == "dilations" ||
                   a.name() == "kernel_shape");
    bool block =
        (n.op_type() == "DepthToSpace" || n.op_type() == "SpaceToDepth") &&
        a.name() == "blocksize";
    bool group = isConvOrPool(n.op_type()) && a.name() == "group";
    if (window)
      for (int64_t v : a.ints())
        if (v < 1 || v > kMaxWindowAttr)
          return what + ": " + std::to_string(v) +
                 " is out of range (expected 1 to " +
                 std::to_string(kMaxWindowAttr) + ")";
    if ((block || group) && (a.i() < 1 || a.i() > kMaxWindowAttr))
      return what + ": " + std::to_string(a.i()) +
             " is out of range (expected 1 to " +
             std::to_string(kMaxWindowAttr) + ")";
  }
  return std::nullopt;
}

} // namespace

std::optional<int64_t> shoal::onnx_import::checkedElementCount(
    const google::protobuf::RepeatedField<int64_t> &dims, int64_t limit) {
  for (int64_t d : dims)
    if (d < 0)
      return std::nullopt;
  // A zero dim makes the count 0 however large the others are.
  if (std::find(dims.begin(), dims.end(), 0) != dims.end())
    return 0;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (n > limit / d)
      return std::nullopt;
    n *= d;
  }
  return n;
}

std::optional<std::string>
shoal::onnx_import::validateModel(const onnx::ModelProto &model) {
  return Validator().graph(model.graph(), {}, "");
}
