// fuzz-plan: bytes as a plan (shoal.plan.Plan) through the runtime's plan
// validation (lib/Runtime/PlanLoader.cpp), as shoal-run and shoal-sim run it
// on every rank. The plan is taken to lie in test/fuzz/corpus/plan-data, so
// that the seeds' weight sources (model.onnx) are found. Its content
// fingerprint is cleared first: a mutated plan would otherwise only ever
// reach the fingerprint check.
#include "PlanLoader.h"
#include "Tensor.h"
#include "shoal/Runtime/Runtime.h"

#include "plan.pb.h"
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#ifndef SHOAL_FUZZ_PLAN_DIR
#error "SHOAL_FUZZ_PLAN_DIR: the folder of the seeds' weight sources"
#endif

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Mutated strings are often not UTF-8; protobuf logs each one it parses.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  shoal::plan::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  plan.clear_content_sha256();
  // The world the plan was compiled for (its mesh), bounded.
  int64_t world = 1;
  for (const auto &axis : plan.mesh().axes())
    world = std::clamp<int64_t>(world * std::clamp<int64_t>(axis.size(), 1, 64),
                                1, 64);
  const std::string path = std::string(SHOAL_FUZZ_PLAN_DIR) + "/fuzz.plan";
  for (int64_t rank : {int64_t(0), world - 1})
    for (bool predictOnly : {false, true}) {
      try {
        shoal::rt::checkPlan(plan, path, world, rank, predictOnly);
      } catch (const shoal::rt::Error &) {
      }
      if (world == 1)
        break;
    }
  return 0;
}
