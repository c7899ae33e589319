//===- DeviceCatalog.h - Peak rates of known devices ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Datasheet figures of common accelerators, for the runtime's model FLOPs
// utilization (MFU) report. Dense (no sparsity) peak rates.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_DEVICECATALOG_H
#define SHOAL_SCHEMA_DEVICECATALOG_H

#include <string>

namespace shoal {
namespace rt {

/// The precision matrix products run in.
enum class Precision { FP32, TF32, BF16, FP16 };

/// Parses "fp32", "tf32", "bf16" or "fp16"; false otherwise.
bool parsePrecision(const std::string &text, Precision &out);
const char *precisionName(Precision p);

struct DeviceSpec {
  const char *name;
  /// Dense peak TFLOP/s for each Precision (0: not supported).
  double peakTflops[4];
  double memoryGiB;
  double bandwidthGBps;
};

/// The catalog entry whose name matches the device's reported name (e.g.
/// "NVIDIA H100 80GB HBM3" -> H100-SXM), or null.
const DeviceSpec *findDevice(const std::string &reportedName);

/// Peak TFLOP/s of `spec` at `p`.
inline double peakTflops(const DeviceSpec &spec, Precision p) {
  return spec.peakTflops[static_cast<int>(p)];
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_DEVICECATALOG_H
