//===- WeightDigest.h - Fingerprints of a model's weights -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// shoal-compile records, for each weight a plan reads from an ONNX file, a
// fingerprint of the initializer (plan Weight.digest); shoal-run refuses to
// load a weight whose data no longer matches it. The fingerprint is part of
// the plan contract; the ONNX reader that computes it is the runtime's
// weights library (ShoalWeights, lib/Runtime/WeightLoader.cpp), which both
// sides link.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_WEIGHTDIGEST_H
#define SHOAL_SCHEMA_WEIGHTDIGEST_H

#include <cstdint>
#include <memory>
#include <string>

namespace shoal {
namespace rt {

/// The fingerprints of the initializers of one ONNX model file, opened on
/// first use.
class OnnxWeightDigests {
public:
  explicit OnnxWeightDigests(std::string path);
  ~OnnxWeightDigests();
  OnnxWeightDigests(const OnnxWeightDigests &) = delete;
  OnnxWeightDigests &operator=(const OnnxWeightDigests &) = delete;

  /// The fingerprint of initializer `name` (SHA-256 of its type, dims and
  /// sampled data; plan Weight.digest). Throws std::runtime_error when the
  /// file or the initializer cannot be read.
  uint64_t digest(const std::string &name);

private:
  struct Impl;
  std::string path;
  std::unique_ptr<Impl> impl;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_WEIGHTDIGEST_H
