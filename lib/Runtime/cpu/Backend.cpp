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

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

// OpenBLAS's thread control, if the BLAS in use is OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));

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
  // Under an address-space limit (ulimit -v, a batch system's vmem limit)
  // Debian's OpenMP OpenBLAS needs about 384 MiB of address space per
  // thread that calls or runs a product (256 MiB reserved when it loads,
  // 128 MiB more at a thread's first product, read from /proc/PID/maps),
  // and when the second part fails it retries for ever inside the product:
  // the run hangs. The kernel threads (which call it) and its own are
  // capped so that their buffers take at most half of the limit.
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    constexpr uint64_t kPerThread = 384ull << 20;
    int cap = static_cast<int>(std::clamp<uint64_t>(
        static_cast<uint64_t>(as.rlim_cur) / 2 / kPerThread, 1, 4096));
    // The kernel threads, and OpenBLAS's own when OPENBLAS_NUM_THREADS
    // asks for more.
    int wanted = cpu::cpuThreads();
    if (openblas_get_num_threads)
      wanted = std::max(wanted, openblas_get_num_threads());
    if (wanted > cap) {
      std::fprintf(stderr,
                   "shoal-run: note: the address space is limited to %llu "
                   "MiB (ulimit -v): %d thread%s, not %d (each takes about "
                   "384 MiB of it in OpenBLAS)\n",
                   static_cast<unsigned long long>(as.rlim_cur >> 20), cap,
                   cap == 1 ? "" : "s", wanted);
      cpu::capCpuThreads(cap);
      if (openblas_set_num_threads)
        openblas_set_num_threads(cap);
      return;
    }
  }
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
