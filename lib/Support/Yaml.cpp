//===- Yaml.cpp - Reading YAML files with file:line errors ------*- C++ -*-===//

#include "shoal/Support/Yaml.h"

#include <algorithm>

using namespace shoal;

int yaml::lineOf(const YAML::Node &n) {
  // A node that is not there (a missing key) has no mark either.
  return n.IsDefined() ? n.Mark().line : -1;
}

std::string yaml::where(const std::string &file, int line) {
  return line < 0 ? file : file + ":" + std::to_string(line + 1);
}

std::string yaml::where(const std::string &file, const YAML::Node &n) {
  return where(file, lineOf(n));
}

void yaml::fail(const std::string &file, const YAML::Node &n,
                const std::string &msg) {
  throw Error(where(file, n) + ": " + msg);
}

YAML::Node yaml::load(const std::string &file, const std::string &text,
                      const std::string &prefix) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception &e) {
    throw Error(where(file, e.mark.line) + ": " + prefix + e.msg);
  }
}

std::string yaml::describe(const YAML::Node &n) {
  if (n.IsScalar())
    return "'" + n.Scalar() + "'";
  if (n.IsSequence())
    return "a list";
  if (n.IsMap())
    return "a mapping";
  return "nothing";
}

std::optional<std::string> yaml::scalar(const YAML::Node &n) {
  if (!n.IsScalar())
    return std::nullopt;
  return n.Scalar();
}

std::optional<YAML::Node>
yaml::unknownKey(const YAML::Node &map, const std::vector<std::string> &known) {
  for (auto kv : map)
    if (!kv.first.IsScalar() ||
        std::find(known.begin(), known.end(), kv.first.Scalar()) == known.end())
      return kv.first;
  return std::nullopt;
}

void yaml::checkKeys(const std::string &file, const YAML::Node &map,
                     const std::string &what,
                     const std::vector<std::string> &known,
                     const std::string &expected) {
  std::optional<YAML::Node> key = unknownKey(map, known);
  if (!key)
    return;
  if (!key->IsScalar())
    fail(file, *key, "a key of " + what + " must be a name");
  fail(file, *key,
       "unknown key '" + key->Scalar() + "' in " + what + " (expected " +
           expected + ")");
}

std::string yaml::join(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}
