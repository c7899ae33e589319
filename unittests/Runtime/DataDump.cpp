//===- DataDump.cpp - What --data feeds at each step ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// shoal-data-dump, a test tool (not installed): opens --data as shoal-run
// does (openData) for a training plan whose token input and labels are
// integer [B, T], and prints the tensors it feeds at steps F .. F + N - 1
// (F = 0 by default):
//
//   shoal-data-dump --data SPEC --batch B --seq T --steps N [--from F]
//                   [--seed S] [--dtype i32|i64] [--flag --eval-data]
//
//   {"steps": [{"tokens": [[...], ...], "labels": [[...], ...],
//               "sources": [[dataset, own sample], ...]}, ...]}
//
// "sources" only for indexed data. test/e2e/check_indexed_data.py compares
// the output with its own implementation of docs/Data.md.
//
//===----------------------------------------------------------------------===//

#include "PlanLoader.h"
#include "tooling/IndexedData.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace shoal::rt;

namespace {

void printRows(const Tensor &t) {
  int64_t b = t.shape()[0], n = t.shape()[1];
  std::printf("[");
  for (int64_t i = 0; i < b; ++i) {
    std::printf("%s[", i ? ", " : "");
    for (int64_t j = 0; j < n; ++j) {
      int64_t v = t.dtype() == DType::I64 ? t.data<int64_t>()[i * n + j]
                                          : t.data<int32_t>()[i * n + j];
      std::printf("%s%lld", j ? ", " : "", static_cast<long long>(v));
    }
    std::printf("]");
  }
  std::printf("]");
}

int usage(const char *why) {
  std::fprintf(stderr,
               "shoal-data-dump: %s\nusage: shoal-data-dump --data SPEC "
               "--batch B --seq T --steps N [--from F] [--seed S] [--dtype "
               "i32|i64] [--flag FLAG]\n",
               why);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string spec, flag = "--data";
  int64_t batch = 0, seq = 0, steps = 0, from = 0;
  TrainingOptions options;
  DType dtype = DType::I64;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      return usage(("missing value for " + arg).c_str());
    std::string v = argv[++i];
    if (arg == "--data")
      spec = v;
    else if (arg == "--batch")
      batch = std::atoll(v.c_str());
    else if (arg == "--seq")
      seq = std::atoll(v.c_str());
    else if (arg == "--steps")
      steps = std::atoll(v.c_str());
    else if (arg == "--from")
      from = std::atoll(v.c_str());
    else if (arg == "--seed")
      options.dataSeed = std::atoll(v.c_str());
    else if (arg == "--dtype" && (v == "i32" || v == "i64"))
      dtype = v == "i32" ? DType::I32 : DType::I64;
    else if (arg == "--flag")
      flag = v;
    else
      return usage(("unknown option " + arg).c_str());
  }
  if (spec.empty() || batch < 1 || seq < 1 || steps < 0 || from < 0)
    return usage("needs --data, --batch >= 1, --seq >= 1, --steps and "
                 "--from >= 0");
  try {
    TrainingInfo training;
    training.otherInputs = {"tokens"};
    training.otherInputTypes = {TensorType{dtype, {batch, seq}}};
    training.labels = "labels";
    training.labelsType = TensorType{dtype, {batch, seq}};
    std::unique_ptr<StepData> data =
        openData(spec, training, options, flag.c_str());
    std::unique_ptr<IndexedData> indexed;
    if (IndexedData::matches(spec))
      indexed = std::make_unique<IndexedData>(spec, seq, options.dataSeed,
                                              flag.c_str());
    std::printf("{\"steps\": [");
    for (int64_t s = from; s < from + steps; ++s) {
      std::printf("%s{\"tokens\": ", s > from ? ",\n  " : "\n  ");
      printRows(data->make(s, "tokens"));
      std::printf(", \"labels\": ");
      printRows(data->make(s, "labels"));
      if (indexed) {
        std::printf(", \"sources\": [");
        for (int64_t i = 0; i < batch; ++i) {
          auto [d, own] = indexed->source(s * batch + i);
          std::printf("%s[%d, %lld]", i ? ", " : "", d,
                      static_cast<long long>(own));
        }
        std::printf("]");
      }
      std::printf("}");
    }
    std::printf("]}\n");
  } catch (const Error &e) {
    std::fprintf(stderr, "shoal-data-dump: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
