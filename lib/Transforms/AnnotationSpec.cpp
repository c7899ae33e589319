//===- AnnotationSpec.cpp - Parsing the replicate/split spec ----*- C++ -*-===//
//
// The annotation spec's parser (AnnotationSpec.h): yaml-cpp and LLVM's
// Support library, no MLIR.
//
//===----------------------------------------------------------------------===//

#include "AnnotationSpec.h"

#include "shoal/Support/Files.h"
#include "shoal/Support/Yaml.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include <yaml-cpp/yaml.h>

#include <optional>

using namespace shoal;
using llvm::StringRef;

namespace {

/// Parses and checks the spec; errors name the file and line.
class SpecReader {
public:
  explicit SpecReader(std::string path) : path(std::move(path)) {}

  std::string read(const std::string &text, AnnotationSpec &out) {
    try {
      YAML::Node root = yaml::load(path, text, "invalid YAML: ");
      try {
        out = readRoot(root);
      } catch (const YAML::Exception &e) {
        fail(e.mark.line, "invalid spec: " + e.msg);
      }
    } catch (const yaml::Error &e) {
      return e.what();
    }
    return "";
  }

private:
  std::string path;

  /// An error at the 0-based `line` (-1: none).
  [[noreturn]] void fail(int line, const llvm::Twine &msg) const {
    throw yaml::Error(yaml::where(path, line) + ": " + msg.str());
  }

  static int lineOf(const YAML::Node &n) { return yaml::lineOf(n); }

  /// `n` as an integer, or an error at its line saying what was expected
  /// (yaml-cpp's own says only "bad conversion"); thrown as yaml-cpp's, so
  /// that read() reports it as an invalid spec.
  static int64_t asInt(const YAML::Node &n, const std::string &what) {
    std::optional<int64_t> v = yaml::as<int64_t>(n);
    if (!v)
      throw YAML::Exception(n.Mark(), what + " must be an integer, got " +
                                          yaml::describe(n));
    return *v;
  }
  static std::string asString(const YAML::Node &n, const std::string &what) {
    std::optional<std::string> s = yaml::scalar(n);
    if (!s)
      throw YAML::Exception(n.Mark(), what + " must be a string, got " +
                                          yaml::describe(n));
    return *s;
  }

  /// Fails at the first key of `map` that is not among `known`: a key that
  /// is not a string as asString does, another with `message(key)`.
  template <typename Message>
  void checkKeys(const YAML::Node &map, const std::vector<std::string> &known,
                 Message message) const {
    if (std::optional<YAML::Node> key = yaml::unknownKey(map, known))
      fail(lineOf(*key), message(asString(*key, "a key")));
  }

  AnnotationSpec readRoot(const YAML::Node &root) {
    AnnotationSpec spec;
    if (!root.IsMap())
      fail(root.IsDefined() ? lineOf(root) : -1,
           "expected a mapping with 'version' and 'scopes'");
    checkKeys(root, {"version", "default", "scopes", "pipeline", "inputs"},
              [](const std::string &key) {
                return "unknown key '" + key +
                       "' (expected version, default, pipeline, inputs, "
                       "scopes)";
              });
    if (!root["version"] || asString(root["version"], "version") != "1")
      fail(root["version"] ? lineOf(root["version"]) : 0,
           "expected 'version: 1'");
    if (auto def = root["default"]) {
      std::string s = asString(def, "default");
      if (s != "replicate" && s != "split")
        fail(lineOf(def),
             "default strategy must be 'replicate' or 'split', got '" + s +
                 "'");
      spec.defaultSplit = s == "split";
    }
    if (auto pipe = root["pipeline"]) {
      if (!pipe.IsMap())
        fail(lineOf(pipe), "'pipeline' must be a mapping");
      if (auto m = pipe["num_micro_batch"]) {
        spec.numMicroBatch = asInt(m, "pipeline.num_micro_batch");
        spec.numMicroBatchLine = lineOf(m);
        if (spec.numMicroBatch < 1)
          fail(lineOf(m), "num_micro_batch must be at least 1");
      }
      checkKeys(pipe, {"num_micro_batch", "schedule", "virtual_stages"},
                [](const std::string &key) {
                  return "unknown pipeline key '" + key +
                         "' (expected num_micro_batch, schedule, "
                         "virtual_stages)";
                });
      if (auto sc = pipe["schedule"]) {
        spec.schedule = asString(sc, "pipeline.schedule");
        if (spec.schedule != "gpipe" && spec.schedule != "1f1b" &&
            spec.schedule != "interleaved")
          fail(lineOf(sc), "schedule must be gpipe, 1f1b or "
                           "interleaved, got '" +
                               spec.schedule + "'");
      }
      if (auto v = pipe["virtual_stages"]) {
        spec.virtualStages = asInt(v, "pipeline.virtual_stages");
        if (spec.virtualStages < 1)
          fail(lineOf(v), "virtual_stages must be at least 1");
      }
      if (spec.virtualStages > 1 && spec.schedule != "interleaved")
        fail(lineOf(pipe), "virtual_stages needs schedule: "
                           "interleaved");
      if (spec.schedule == "interleaved" && spec.virtualStages < 2)
        fail(lineOf(pipe), "schedule: interleaved needs "
                           "virtual_stages of at least 2");
    }
    if (auto ins = root["inputs"]) {
      if (!ins.IsMap())
        fail(lineOf(ins), "'inputs' must be a mapping from graph "
                          "input names to settings, e.g. "
                          "{src: {batch_dim: 1}}");
      for (auto kv : ins) {
        SpecInput in;
        in.name = asString(kv.first, "a key");
        in.line = lineOf(kv.first);
        if (!kv.second.IsMap())
          fail(lineOf(kv.second), "input '" + in.name +
                                      "': expected a mapping such as "
                                      "{batch_dim: 1}");
        checkKeys(kv.second, {"batch_dim"}, [&](const std::string &key) {
          return "unknown key '" + key + "' of input '" + in.name +
                 "' (expected batch_dim)";
        });
        if (auto bd = kv.second["batch_dim"]) {
          in.batchDim = asInt(bd, "batch_dim");
          in.batchDimLine = lineOf(bd);
          if (in.batchDim < 0)
            fail(in.batchDimLine, "batch_dim of input '" + in.name +
                                      "' must be non-negative, got " +
                                      std::to_string(in.batchDim));
        }
        spec.inputs.push_back(std::move(in));
      }
    }
    auto scopes = root["scopes"];
    if (!scopes)
      return spec;
    if (!scopes.IsSequence())
      fail(lineOf(scopes), "'scopes' must be a list");
    llvm::StringMap<int> names;
    for (const YAML::Node &s : scopes) {
      SpecScope scope = readScope(s);
      auto [it, inserted] = names.try_emplace(scope.name, scope.line);
      if (!inserted)
        fail(scope.line, "scope '" + scope.name +
                             "' is already defined on line " +
                             std::to_string(it->second + 1));
      spec.scopes.push_back(std::move(scope));
    }
    return spec;
  }

  std::vector<SpecPattern> readPatterns(const YAML::Node &list) {
    std::vector<SpecPattern> out;
    for (const YAML::Node &n : list) {
      SpecPattern p;
      p.storage = std::make_unique<std::string>(asString(n, "a node pattern"));
      p.text = *p.storage;
      p.line = lineOf(n);
      auto glob = llvm::GlobPattern::create(p.text);
      if (!glob) {
        std::string msg = llvm::toString(glob.takeError());
        fail(p.line, "bad pattern '" + p.text.str() + "': " + msg);
      }
      p.glob = std::move(*glob);
      out.push_back(std::move(p));
    }
    return out;
  }

  SpecScope readScope(const YAML::Node &s) {
    SpecScope scope;
    scope.line = lineOf(s);
    if (!s.IsMap())
      fail(scope.line, "a scope must be a mapping like "
                       "{split: 2, name: x, nodes: [...]}");
    int strategies = 0;
    for (auto kv : s) {
      std::string key = asString(kv.first, "a key");
      if (key == "replicate" || key == "split") {
        ++strategies;
        scope.split = key == "split";
        scope.devices = asInt(kv.second, key.c_str());
        if (scope.devices < 1)
          fail(lineOf(kv.second),
               key + " needs a device count of at least 1, got " +
                   std::to_string(scope.devices));
      } else if (key == "name") {
        scope.name = asString(kv.second, "name");
      } else if (key == "recompute") {
        scope.recompute = yaml::scalar(kv.second).value_or("");
        if (scope.recompute != "none" && scope.recompute != "full" &&
            scope.recompute != "selective")
          fail(lineOf(kv.second),
               "recompute must be none, full or selective, got '" +
                   scope.recompute + "'");
      } else if (key == "sequence_parallel") {
        scope.sequenceParallelLine = lineOf(kv.second);
        std::string v = yaml::scalar(kv.second).value_or("");
        if (v == "true")
          scope.sequenceParallel = true;
        else if (v != "false")
          fail(lineOf(kv.second),
               "sequence_parallel must be true or false, got '" + v + "'");
      } else if (key != "nodes" && key != "exclude") {
        fail(lineOf(kv.first), "unknown scope key '" + key +
                                   "' (expected replicate, split, name, nodes, "
                                   "exclude, recompute, sequence_parallel)");
      }
    }
    if (strategies != 1)
      fail(scope.line,
           "a scope needs exactly one of 'replicate: n' or 'split: n'");
    if (scope.name.empty())
      fail(scope.line, "a scope needs a 'name'");
    if (scope.sequenceParallel && !scope.split)
      fail(scope.sequenceParallelLine,
           "sequence_parallel needs a split scope: it splits the "
           "sequence over the devices a split scope splits its "
           "weights over (scope '" +
               scope.name + "' is replicate)");
    auto nodes = s["nodes"];
    if (!nodes || !nodes.IsSequence() || nodes.size() == 0)
      fail(scope.line, "scope '" + scope.name +
                           "' needs 'nodes': a list of node name "
                           "patterns");
    scope.patterns = readPatterns(nodes);
    if (auto exclude = s["exclude"]) {
      if (!exclude.IsSequence() || exclude.size() == 0)
        fail(lineOf(exclude), "scope '" + scope.name +
                                  "': 'exclude' needs a list of node name "
                                  "patterns");
      scope.excludes = readPatterns(exclude);
    }
    return scope;
  }
};

} // namespace

std::string shoal::parseAnnotationSpec(const std::string &path,
                                       const std::string &text,
                                       AnnotationSpec &out) {
  return SpecReader(path).read(text, out);
}

std::string shoal::readAnnotationSpec(const std::string &path,
                                      AnnotationSpec &out) {
  std::string text;
  if (std::string e = readRegularFile(path, text, kMaxSpecBytes); !e.empty())
    return path + ": cannot read the annotation spec: " + e;
  return parseAnnotationSpec(path, text, out);
}
