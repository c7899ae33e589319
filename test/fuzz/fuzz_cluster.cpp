// fuzz-cluster: bytes as a cluster spec (YAML) through the planner's parser
// (lib/Planner/Cluster.cpp).
#include "shoal/Planner/Cluster.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    shoal::planner::parseClusterSpecText(
        std::string(reinterpret_cast<const char *>(data), size), "fuzz.yaml");
  } catch (const std::exception &) {
  }
  return 0;
}
