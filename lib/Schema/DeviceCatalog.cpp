//===- DeviceCatalog.cpp - Peak rates of known devices ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Schema/DeviceCatalog.h"

#include <algorithm>
#include <cctype>
#include <iterator>

using namespace shoal::rt;

namespace {
// {name, {fp32, tf32, bf16, fp16} dense TFLOP/s, memory GiB, bandwidth GB/s}
// from the vendors' datasheets. Matched by substrings of the CUDA device
// name, most specific first.
const DeviceSpec kDevices[] = {
    {"H200", {67, 494.7, 989.4, 989.4}, 141, 4800},
    {"H100 PCIe", {51, 378, 756, 756}, 80, 2000},
    {"H100", {67, 494.7, 989.4, 989.4}, 80, 3350},
    {"A800", {19.5, 156, 312, 312}, 80, 2039},
    {"A100-SXM4-40GB", {19.5, 156, 312, 312}, 40, 1555},
    {"A100", {19.5, 156, 312, 312}, 80, 2039},
    {"A10", {31.2, 62.5, 125, 125}, 24, 600},
    {"L4", {30.3, 60, 121, 121}, 24, 300},
    {"T4", {8.1, 0, 0, 65}, 16, 320},
    {"V100", {15.7, 0, 0, 125}, 32, 900},
    {"P100", {9.3, 0, 0, 18.7}, 16, 732},
};
} // namespace

bool shoal::rt::parsePrecision(const std::string &text, Precision &out) {
  static const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
  for (int i = 0; i < 4; ++i)
    if (text == names[i]) {
      out = static_cast<Precision>(i);
      return true;
    }
  return false;
}

const char *shoal::rt::precisionName(Precision p) {
  static const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
  return names[static_cast<int>(p)];
}

const DeviceSpec *shoal::rt::findDevice(const std::string &reportedName) {
  for (const DeviceSpec &d : kDevices)
    if (reportedName.find(d.name) != std::string::npos)
      return &d;
  return nullptr;
}
