//===- Json.h - JSON text helpers -------------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A leaf header for the JSON the runtime writes (traces, checkpoint
// manifests, profiles) and reads (checkpoint manifests, safetensors
// headers and indexes); it includes nothing of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_JSON_H
#define SHOAL_RUNTIME_JSON_H

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shoal {
namespace rt {

/// `text` as a JSON string literal, quotes included.
std::string jsonString(const std::string &text);

/// A parsed JSON value. Numbers keep their text, so that integers convert
/// exactly; objects keep their members in order (duplicates included).
struct JsonValue {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  /// A string's value, a number's text.
  std::string text;
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;

  /// The first member named `key`, or null.
  const JsonValue *find(const std::string &key) const;
};

/// Parses the `size` bytes at `data` as one JSON value (nesting at most 64
/// deep); throws Error("<what>: <why> at byte <offset>") on bad text.
JsonValue parseJson(const char *data, std::size_t size,
                    const std::string &what);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_JSON_H
