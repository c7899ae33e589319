//===- NodeNames.cpp - Location names of imported nodes ---------*- C++ -*-===//
//
// Annotation specs select ops by name patterns over module paths
// ("/layers.0/self_attn/*"). PyTorch's TorchScript exporter writes the path
// into node names; its dynamo exporter (torch.onnx.export(..., dynamo=True))
// names nodes `node_MatMul_3` and keeps the path in node metadata instead:
//
//   metadata_props { key: "pkg.torch.onnx.name_scopes"
//                    value: "['', 'layers.0', 'layers.0.self_attn',
//                    'matmul_3']" }
//
// (the repr() of a Python list: the module stack, root first, each entry the
// module's full dotted path, then the FX node's own name). The importer names
// such a node the way the TorchScript exporter would have:
// `/layers.0/self_attn/MatMul`.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include "google/protobuf/unknown_field_set.h"

using namespace shoal;
using namespace shoal::onnx_import;

/// NodeProto.metadata_props (onnx.proto, IR version 10).
static constexpr int kNodeMetadataField = 9;

std::optional<std::string>
onnx_import::getNodeMetadata(const onnx::NodeProto &node, llvm::StringRef key) {
  const google::protobuf::UnknownFieldSet &fields = node.unknown_fields();
  std::optional<std::string> value;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField &field = fields.field(i);
    if (field.number() != kNodeMetadataField ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(field.length_delimited()) && entry.key() == key)
      value = entry.value();
  }
  return value;
}

/// The strings of a Python list literal of strings (`['', 'a.b']`, either
/// quote, backslash escapes); nullopt if it is not one.
static std::optional<std::vector<std::string>>
parsePythonStringList(llvm::StringRef text) {
  text = text.trim();
  if (!text.consume_front("[") || !text.consume_back("]"))
    return std::nullopt;
  std::vector<std::string> items;
  size_t i = 0;
  auto skipSpace = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t'))
      ++i;
  };
  skipSpace();
  while (i < text.size()) {
    char quote = text[i];
    if (quote != '\'' && quote != '"')
      return std::nullopt;
    std::string item;
    for (++i; i < text.size() && text[i] != quote; ++i) {
      if (text[i] == '\\' && i + 1 < text.size())
        ++i;
      item += text[i];
    }
    if (i >= text.size())
      return std::nullopt;
    ++i; // closing quote
    items.push_back(std::move(item));
    skipSpace();
    if (i < text.size() && text[i] == ',')
      ++i;
    skipSpace();
  }
  return items;
}

/// The name the TorchScript exporter gives a module whose path relative to
/// the module before it in the stack is `relative`, that one being named
/// `parentName`: attribute names as they are, but an index (a child of
/// nn.Sequential or nn.ModuleList) joined to the name before it, so that
/// `features` -> `features.0` -> `features.0.0` are named `features`,
/// `features.0`, `features.0.0`, and `h.0` under `transformer` (the
/// ModuleList `h` is never called, so not in the stack) is `h.0`.
static std::string torchScriptName(llvm::StringRef relative,
                                   llvm::StringRef parentName) {
  std::string name = parentName.str();
  llvm::SmallVector<llvm::StringRef> parts;
  relative.split(parts, '.');
  for (llvm::StringRef part : parts) {
    bool index = !part.empty() && llvm::all_of(part, llvm::isDigit);
    name = index && !name.empty() ? name + "." + part.str() : part.str();
  }
  return name;
}

/// `/layers.0/self_attn/` from the module stack of `name_scopes` (all but
/// the last entry, the FX node's name): each module named by its path
/// relative to the module before it (torchScriptName). Empty if there is
/// no usable metadata.
static std::string moduleScope(const onnx::NodeProto &node) {
  auto metadata = getNodeMetadata(node, "pkg.torch.onnx.name_scopes");
  if (!metadata)
    return "";
  auto scopes = parsePythonStringList(*metadata);
  if (!scopes || scopes->empty())
    return "";
  std::string path = "/", parent, parentName;
  for (size_t k = 0; k + 1 < scopes->size(); ++k) {
    llvm::StringRef scope = (*scopes)[k];
    if (scope.empty())
      continue;
    llvm::StringRef relative = scope;
    if (!parent.empty() && scope.starts_with(parent + "."))
      relative = scope.drop_front(parent.size() + 1);
    parentName = torchScriptName(relative, parentName);
    path += parentName + "/";
    parent = scope.str();
  }
  return path;
}

std::vector<std::string>
onnx_import::getNodeNames(const onnx::GraphProto &graph) {
  std::vector<std::string> names(graph.node_size());
  llvm::StringSet<> taken;
  std::vector<int> derived;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &node = graph.node(i);
    if (!llvm::StringRef(node.name()).starts_with("/")) {
      std::string scope = moduleScope(node);
      if (!scope.empty()) {
        names[i] = scope + node.op_type();
        derived.push_back(i);
        continue;
      }
    }
    names[i] = getNodeName(node, i);
    taken.insert(names[i]);
  }
  // Repeated names get `_1`, `_2`, ... in graph order, as the TorchScript
  // exporter numbers them.
  llvm::StringMap<int> next;
  for (int i : derived) {
    const std::string base = names[i];
    int &k = next[base];
    std::string name = k == 0 ? base : base + "_" + std::to_string(k);
    while (taken.contains(name))
      name = base + "_" + std::to_string(++k);
    ++k;
    taken.insert(name);
    names[i] = name;
  }
  return names;
}
