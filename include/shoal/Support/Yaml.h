//===- Yaml.h - Reading YAML files with file:line errors --------*- C++ -*-===//
//
// What the readers of shoal's YAML files (the annotation spec, the training
// config, the cluster spec and the calibration profile) share: parsing with
// yaml-cpp, positions as "FILE:LINE", what a node holds in words, typed
// scalars without yaml-cpp's exceptions, and the first key of a mapping that
// is not one of those expected. Each reader keeps its own messages; these
// helpers only find and place what is wrong.
//
// yaml-cpp and no LLVM: the planner's readers are plain C++. Built with the
// compiler only (ShoalSupportYaml), where yaml-cpp is found.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SUPPORT_YAML_H
#define SHOAL_SUPPORT_YAML_H

#include <yaml-cpp/yaml.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shoal {
namespace yaml {

/// An error in a YAML file, its message complete: "spec.yaml:7: ...". The
/// readers turn it into their own kind of error where they return.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The 0-based line of `n` (yaml-cpp's mark); -1 where it has none (an
/// empty document, a node made in code, a key that is not there).
int lineOf(const YAML::Node &n);

/// "FILE:LINE" for the 0-based `line`, printed 1-based; "FILE" for -1.
std::string where(const std::string &file, int line);
/// where() at `n`'s line.
std::string where(const std::string &file, const YAML::Node &n);

/// Throws Error("FILE:LINE: msg") at `n` (without the line where it has
/// none).
[[noreturn]] void fail(const std::string &file, const YAML::Node &n,
                       const std::string &msg);

/// Parses the document `text` read from `file`. Invalid YAML throws
/// Error("FILE:LINE: <prefix><yaml-cpp's message>"). An empty document is a
/// null node without a line.
YAML::Node load(const std::string &file, const std::string &text,
                const std::string &prefix = "");

/// What `n` holds, for messages: its text in quotes ('abc'), "a list", "a
/// mapping" or "nothing".
std::string describe(const YAML::Node &n);

/// The text of `n` where it is a scalar (not a null, a list or a mapping).
std::optional<std::string> scalar(const YAML::Node &n);

/// `n` converted to T as yaml-cpp's `as<T>()` converts it, or nothing where
/// it does not convert (yaml-cpp's exception would say only "bad
/// conversion"). Numbers must be scalars; a null reads as the string
/// "null" (use scalar() for a strict string).
template <typename T> std::optional<T> as(const YAML::Node &n) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception &) {
    return std::nullopt;
  }
}

/// The first key of the mapping `map` that is not a name (a scalar) or not
/// one of `known`, in the file's order; nothing when every key is known.
std::optional<YAML::Node> unknownKey(const YAML::Node &map,
                                     const std::vector<std::string> &known);

/// Fails at the first bad key of the mapping `map` (`what` names it) with
/// "a key of WHAT must be a name" or "unknown key 'K' in WHAT (expected
/// EXPECTED)".
void checkKeys(const std::string &file, const YAML::Node &map,
               const std::string &what, const std::vector<std::string> &known,
               const std::string &expected);

/// `names` joined with ", ", for "expected ..." lists.
std::string join(const std::vector<std::string> &names);

} // namespace yaml
} // namespace shoal

#endif // SHOAL_SUPPORT_YAML_H
