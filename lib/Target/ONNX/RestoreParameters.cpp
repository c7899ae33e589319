//===- RestoreParameters.cpp - Undo an export's parameter merges -*- C++
//-*-===//
//
// `torch.onnx.export` in eval mode with constant folding (its defaults)
// writes a model that computes what the PyTorch model computes but no longer
// holds its parameters one by one: initializers of equal value are merged
// into one, the others read it through `Identity` nodes named after the
// parameters, and a weight used transposed (a tied LM head) is folded into a
// copy with a generated name. Trained as it is, every merged group would be
// one tensor and a tie two. Before a training import, this file turns the
// model back into one initializer per parameter (docs/Importer.md,
// "Training imports").
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "shoal/Support/Files.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <functional>
#include <map>
#include <set>

using namespace shoal;
using namespace shoal::onnx_import;
using llvm::StringRef;

namespace {

bool isFloatType(int32_t t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE ||
         t == onnx::TensorProto::FLOAT16 || t == onnx::TensorProto::BFLOAT16;
}

int64_t elementBytes(int32_t t) {
  switch (t) {
  case onnx::TensorProto::DOUBLE:
    return 8;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return 2;
  default:
    return 4;
  }
}

int64_t numElements(const onnx::TensorProto &t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  return n;
}

std::string formatDims(const onnx::TensorProto &t) {
  std::string s = "[";
  for (int i = 0; i < t.dims_size(); ++i)
    s += (i ? ", " : "") + std::to_string(t.dims(i));
  return s + "]";
}

/// The little-endian bytes of a float initializer, wherever they are stored
/// (raw_data, the typed fields, an external file next to the model);
/// nullopt when they cannot be read.
std::optional<std::string> readBytes(const onnx::TensorProto &t,
                                     StringRef modelDir) {
  int64_t n = numElements(t), size = elementBytes(t.data_type());
  std::string out;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::optional<std::string> bytes = readExternalData(t, modelDir, n * size);
    if (!bytes)
      return std::nullopt;
    out = std::move(*bytes);
  } else if (t.has_raw_data()) {
    out = t.raw_data();
  } else if (t.data_type() == onnx::TensorProto::FLOAT) {
    out.resize(t.float_data_size() * 4);
    std::memcpy(out.data(), t.float_data().data(), out.size());
  } else if (t.data_type() == onnx::TensorProto::DOUBLE) {
    out.resize(t.double_data_size() * 8);
    std::memcpy(out.data(), t.double_data().data(), out.size());
  } else {
    // FLOAT16 and BFLOAT16 keep one value in the low 16 bits of an int32.
    for (int32_t v : t.int32_data()) {
      out.push_back(static_cast<char>(v & 0xff));
      out.push_back(static_cast<char>((v >> 8) & 0xff));
    }
  }
  if (static_cast<int64_t>(out.size()) != n * size)
    return std::nullopt;
  return out;
}

/// The bytes of a [rows, cols] matrix transposed.
std::string transposeBytes(StringRef bytes, int64_t rows, int64_t cols,
                           int64_t size) {
  std::string out(bytes.size(), '\0');
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[(c * rows + r) * size],
                  bytes.data() + (r * cols + c) * size, size);
  return out;
}

bool isConstantValued(StringRef bytes, int64_t size) {
  for (size_t i = size; i < bytes.size(); i += size)
    if (bytes.substr(i, size) != bytes.substr(0, size))
      return false;
  return true;
}

/// Makes `location` (relative to `fromDir`) readable at the same relative
/// path under `toDir`: a hard link, else a copy. Returns an error message.
std::string linkExternalFile(StringRef fromDir, StringRef toDir,
                             const std::string &location) {
  llvm::SmallString<256> from(fromDir), to(toDir);
  llvm::sys::path::append(from, location);
  llvm::sys::path::append(to, location);
  if (llvm::sys::fs::equivalent(from, to))
    return "";
  llvm::sys::fs::create_directories(llvm::sys::path::parent_path(to));
  llvm::sys::fs::remove(to);
  if (!llvm::sys::fs::create_hard_link(from, to))
    return "";
  if (std::error_code ec = llvm::sys::fs::copy_file(from, to))
    return "cannot link or copy the external data file " + from.str().str() +
           " to " + to.str().str() + ": " + ec.message();
  return "";
}

} // namespace

RestoredParameters
shoal::onnx_import::restoreParameters(onnx::ModelProto &model,
                                      StringRef modelDir) {
  RestoredParameters result;
  onnx::GraphProto &graph = *model.mutable_graph();
  llvm::StringMap<int> initIndex;
  auto reindex = [&] {
    initIndex.clear();
    for (int i = 0; i < graph.initializer_size(); ++i)
      initIndex[graph.initializer(i).name()] = i;
  };
  reindex();
  llvm::StringSet<> graphNames;
  for (const auto &vi : graph.input())
    graphNames.insert(vi.name());
  for (const auto &vi : graph.output())
    graphNames.insert(vi.name());

  // (1) Identity(initializer) -> a parameter's name: the exporter merged the
  // parameter into another of equal value. It becomes its own initializer,
  // a copy of the value (external data: the same bytes of the same file).
  for (bool again = true; again;) {
    again = false;
    auto *nodes = graph.mutable_node();
    for (int i = 0; i < nodes->size(); ++i) {
      const onnx::NodeProto &node = nodes->Get(i);
      if (node.op_type() != "Identity" ||
          !(node.domain().empty() || node.domain() == "ai.onnx") ||
          node.input_size() != 1 || node.output_size() != 1)
        continue;
      const std::string &in = node.input(0), &out = node.output(0);
      auto it = initIndex.find(in);
      if (it == initIndex.end() || isGeneratedName(out) ||
          initIndex.count(out) || graphNames.contains(out) ||
          !isFloatType(graph.initializer(it->second).data_type()))
        continue;
      onnx::TensorProto copy = graph.initializer(it->second);
      copy.set_name(out);
      *graph.add_initializer() = std::move(copy);
      initIndex[out] = graph.initializer_size() - 1;
      result.copies.push_back({out, in});
      nodes->DeleteSubrange(i, 1);
      --i;
      again = true;
    }
  }

  // (2) A generated-name float initializer whose value is another's, or its
  // transpose, bit for bit: a constant-folded copy of a tied weight.
  // Hashes first (each candidate read once), then a full comparison.
  struct Candidate {
    int index;
    size_t hash;
  };
  std::map<std::pair<int32_t, std::vector<int64_t>>, std::vector<Candidate>>
      byShape;
  auto dimsOf = [](const onnx::TensorProto &t) {
    return std::vector<int64_t>(t.dims().begin(), t.dims().end());
  };
  bool anyGenerated = false;
  for (const auto &t : graph.initializer())
    anyGenerated |= isGeneratedName(t.name()) && isFloatType(t.data_type()) &&
                    numElements(t) > 1;
  std::set<std::vector<std::string>> warned;
  llvm::StringMap<RestoredParameters::Tie> ties;
  if (anyGenerated) {
    std::hash<std::string_view> hasher;
    for (int i = 0; i < graph.initializer_size(); ++i) {
      const auto &t = graph.initializer(i);
      if (!isFloatType(t.data_type()) || numElements(t) <= 1)
        continue;
      if (auto bytes = readBytes(t, modelDir))
        byShape[{t.data_type(), dimsOf(t)}].push_back({i, hasher(*bytes)});
    }
    for (int i = 0; i < graph.initializer_size(); ++i) {
      const auto &g = graph.initializer(i);
      if (!isGeneratedName(g.name()) || !isFloatType(g.data_type()) ||
          numElements(g) <= 1)
        continue;
      std::optional<std::string> bytes = readBytes(g, modelDir);
      if (!bytes)
        continue;
      int64_t size = elementBytes(g.data_type());
      // (name, transposed) of every initializer holding the same values.
      std::vector<std::pair<std::string, bool>> same;
      auto match = [&](const std::vector<int64_t> &dims, StringRef want,
                       bool transposed) {
        auto it = byShape.find({g.data_type(), dims});
        if (it == byShape.end())
          return;
        size_t h = hasher(want);
        for (const Candidate &c : it->second) {
          const auto &p = graph.initializer(c.index);
          if (c.index == i || c.hash != h ||
              llvm::any_of(same, [&](auto &s) { return s.first == p.name(); }))
            continue;
          if (auto other = readBytes(p, modelDir); other && *other == want)
            same.push_back({p.name(), transposed});
        }
      };
      std::vector<int64_t> dims = dimsOf(g);
      match(dims, *bytes, false);
      if (dims.size() == 2) {
        std::string t = transposeBytes(*bytes, dims[0], dims[1], size);
        match({dims[1], dims[0]}, t, true);
      }
      if (same.empty())
        continue;
      int named = llvm::count_if(
          same, [](auto &s) { return !isGeneratedName(s.first); });
      bool constant = isConstantValued(*bytes, size);
      if (named == 1 && !constant) {
        auto p = llvm::find_if(
            same, [](auto &s) { return !isGeneratedName(s.first); });
        ties[g.name()] = {g.name(), p->first, p->second};
        continue;
      }
      std::vector<std::string> group{g.name()};
      for (auto &s : same)
        group.push_back(s.first);
      std::sort(group.begin(), group.end());
      if (!warned.insert(group).second)
        continue;
      std::string text = "initializer '" + g.name() + "' " + formatDims(g) +
                         " holds the same values as ";
      for (size_t k = 0; k < same.size(); ++k)
        text += std::string(k ? (k + 1 == same.size() ? " and " : ", ") : "") +
                "'" + same[k].first + "'" +
                (same[k].second ? " (transposed)" : "");
      text += constant ? " (every element equal)" : "";
      text += ": shoal cannot tell a folded copy of one tied parameter from "
              "parameters that start equal, and trains them as separate "
              "tensors; if they are one parameter, export the model with "
              "training=torch.onnx.TrainingMode.TRAINING, "
              "do_constant_folding=False";
      result.warnings.push_back(std::move(text));
    }
  }

  // Every use of a tied copy reads the parameter (through a Transpose).
  if (!ties.empty()) {
    std::set<std::string> nodeNames;
    for (const auto &node : graph.node())
      nodeNames.insert(node.name());
    std::vector<onnx::NodeProto> added;
    for (const auto &t : graph.initializer()) {
      auto it = ties.find(t.name());
      if (it == ties.end())
        continue;
      const RestoredParameters::Tie &tie = it->second;
      result.ties.push_back(tie);
      onnx::NodeProto node;
      node.set_op_type(tie.transposed ? "Transpose" : "Identity");
      node.add_input(tie.parameter);
      node.add_output(tie.copy);
      if (tie.transposed) {
        onnx::AttributeProto *perm = node.add_attribute();
        perm->set_name("perm");
        perm->set_type(onnx::AttributeProto::INTS);
        perm->add_ints(1);
        perm->add_ints(0);
        // Named into its first reader's module (/lm_head/Transpose), so that
        // the annotation's patterns put it with that reader.
        for (const auto &reader : graph.node()) {
          if (llvm::find(reader.input(), tie.copy) == reader.input().end())
            continue;
          StringRef name = reader.name();
          if (name.starts_with("/") && name.rfind('/') > 0) {
            std::string base =
                (name.take_front(name.rfind('/')) + "/Transpose").str();
            std::string unique = base;
            for (int k = 1; nodeNames.count(unique); ++k)
              unique = base + "_" + std::to_string(k);
            nodeNames.insert(unique);
            node.set_name(unique);
          }
          break;
        }
      }
      added.push_back(std::move(node));
    }
    auto *inits = graph.mutable_initializer();
    for (int i = inits->size() - 1; i >= 0; --i)
      if (ties.count(inits->Get(i).name()))
        inits->DeleteSubrange(i, 1);
    auto *inputs = graph.mutable_input();
    for (int i = inputs->size() - 1; i >= 0; --i)
      if (ties.count(inputs->Get(i).name()))
        inputs->DeleteSubrange(i, 1);
    // In front: the parameters are there from the start (topological order).
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (onnx::NodeProto &n : added)
      *nodes.Add() = std::move(n);
    for (onnx::NodeProto &n : *graph.mutable_node())
      *nodes.Add() = std::move(n);
    graph.mutable_node()->Swap(&nodes);
  }
  return result;
}

bool shoal::onnx_import::isGeneratedName(StringRef name) {
  return name.empty() || name.starts_with("onnx::") || name.starts_with("/");
}

std::string
shoal::onnx_import::writeRestoredModel(const onnx::ModelProto &model,
                                       StringRef modelDir, StringRef path) {
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return "cannot create the folder " + dir.str().str() + ": " + ec.message();
  std::set<std::string> locations;
  for (const auto &t : model.graph().initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      for (const auto &e : t.external_data())
        if (e.key() == "location")
          locations.insert(e.value());
  llvm::SmallString<256> absDir(dir);
  llvm::sys::fs::make_absolute(absDir);
  for (const std::string &loc : locations) {
    // Linking it next to the restored model would write outside that
    // folder (and remove what is there).
    if (!isInsideModelFolder(loc))
      return "the external data location '" + loc +
             "' is not a relative path inside the model's folder";
    if (std::string err = linkExternalFile(modelDir, absDir, loc); !err.empty())
      return err;
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return "cannot write " + path.str() + ": its protobuf would exceed 2 GiB";
  return writeFileAtomically(path.str(), bytes);
}
