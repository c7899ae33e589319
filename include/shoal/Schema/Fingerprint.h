//===- Fingerprint.h - A plan's fingerprint of its own contents -*- C++ -*-===//
//
// shoal-compile records Plan.content_sha256; shoal-run and shoal-sim refuse
// a plan whose contents no longer match it (edited or damaged after it was
// compiled). Weights have their own fingerprints (tensorDigest,
// WeightLoader.h).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_FINGERPRINT_H
#define SHOAL_SCHEMA_FINGERPRINT_H

#include <string>

namespace shoal {
namespace plan {
class Plan;
} // namespace plan
namespace rt {

/// SHA-256 (32 raw bytes) of `plan` serialized deterministically with
/// content_sha256 cleared.
std::string planContentSha256(const plan::Plan &plan);

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_FINGERPRINT_H
