// fuzz-train: bytes as a training config (train.yaml) through shoal-compile's
// parser and checks (lib/Transforms/TrainConfig.cpp).
#include "shoal/Transforms/Passes.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  shoal::TrainConfig config;
  std::string error = shoal::parseTrainConfigText(
      "fuzz.yaml", std::string(reinterpret_cast<const char *>(data), size),
      config);
  // Every error names the file; a config that parses is one the passes take.
  if (!error.empty() ? error.rfind("fuzz.yaml", 0) != 0
                     : config.zero < 0 || config.zero > 3 ||
                           !(config.optimizer.gradBucketMb >= 0))
    std::abort();
  return 0;
}
