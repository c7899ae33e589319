// fuzz-annotation: bytes as an annotation spec (YAML) through shoal-annotate's
// parser and checks (lib/Transforms/AnnotationSpec.cpp).
#include "AnnotationSpec.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  shoal::AnnotationSpec spec;
  std::string error = shoal::parseAnnotationSpec(
      "fuzz.yaml", std::string(reinterpret_cast<const char *>(data), size),
      spec);
  // Every error names the file; a spec that parses has what the pass needs.
  if (!error.empty() ? error.rfind("fuzz.yaml", 0) != 0
                     : spec.numMicroBatch < 1 || spec.virtualStages < 1)
    std::abort();
  for (const shoal::SpecScope &s : spec.scopes)
    if (s.devices < 1 || s.name.empty() || s.patterns.empty())
      std::abort();
  return 0;
}
