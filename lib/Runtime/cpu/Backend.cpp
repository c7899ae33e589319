//===- Backend.cpp - The CPU backend's registration -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Backend.h"

#include "BackendRegistry.h"
#include "Device.h"
#include "cpu/Common.h"
#include "cpu/Vector.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

// OpenBLAS's thread control, if the BLAS in use is OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

using namespace shoal::rt;

void shoal::rt::configureCpuProcess(int ranksHere) {
  cpu::cpuThreads();
  cpu::vectorKernels();
  fillUninitialized();
  // The node's cores shared by its ranks, but no more than this rank may
  // run on: a rank pinned to one core (taskset, mpirun --bind-to core) runs
  // one thread, not threads that take turns on that core.
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int share =
      std::max(1, std::min(cpu::usableCores(), cores / std::max(1, ranksHere)));
  cpu::setCpuThreads(share);
  if (!openblas_set_num_threads || std::getenv("OPENBLAS_NUM_THREADS"))
    return;
  if (ranksHere > 1 || share < cores || std::getenv("SHOAL_NUM_THREADS"))
    openblas_set_num_threads(cpu::cpuThreads());
}

void shoal::rt::registerCpuBackend() {
  registerCpuKernels();
  BackendInfo info;
  info.kind = BackendKind::CPU;
  info.name = "cpu";
  info.makeDevice = [](int, Precision) { return makeCpuDevice(); };
  info.registerKernels = registerCpuKernels;
  info.configureProcess = configureCpuProcess;
  registerBackend(info);
}
