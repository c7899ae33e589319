//===- shoal-run.cpp - Run a shoal plan under MPI ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// `shoal-run PLAN --inputs DIR --outputs DIR [--verbose]`; see
// docs/Runtime.md. All the work is in the ShoalRuntime library.
//
//===----------------------------------------------------------------------===//

#include "shoal/Runtime/Runtime.h"

int main(int argc, char **argv) {
  shoal::rt::registerAllBackends();
  return shoal::rt::runPlanMain(argc, argv);
}
