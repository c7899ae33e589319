//===- Json.h - JSON text helpers -------------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A leaf header for the JSON the runtime writes (traces, checkpoint
// manifests, profiles); it includes nothing of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_JSON_H
#define SHOAL_RUNTIME_JSON_H

#include <string>

namespace shoal {
namespace rt {

/// `text` as a JSON string literal, quotes included.
std::string jsonString(const std::string &text);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_JSON_H
