//===- Common.cpp - Helpers shared by the CPU kernels -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The out-of-line helpers of Common.h, and the f32 staging of DTypes.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace shoal::rt;
using namespace shoal::rt::cpu;

void shoal::rt::cpu::checkOutput(const Tensor &out, DType dtype,
                                 const Shape &shape, const char *what) {
  if (!out.defined() || out.dtype() != dtype || out.shape() != shape)
    throw Error(fmt::format("{}: output is {} but the inputs give {}", what,
                            out.defined() ? out.type().str() : "undefined",
                            TensorType{dtype, shape}.str()));
}

void shoal::rt::cpu::checkDType(const Tensor &t, DType dtype, const char *what,
                                const char *operand) {
  if (t.dtype() != dtype)
    throw Error(fmt::format("{}: {} must be {}, got {}", what, operand,
                            dtypeName(dtype), t.type().str()));
}

void shoal::rt::cpu::throwNotNumeric(DType dtype) {
  throw Error(fmt::format("internal error: {} passed to a numeric kernel",
                          dtypeName(dtype)));
}

Tensor shoal::rt::cpu::toF32(const Tensor &t) {
  if (t.dtype() == DType::F32)
    return t;
  Tensor f(DType::F32, t.shape());
  cast(t, f);
  return f;
}

void shoal::rt::cpu::fromF32(const Tensor &f, Tensor &out) { cast(f, out); }

namespace {
std::atomic<int> configuredThreads{0};
std::atomic<int> threadCap{0};

/// SHOAL_NUM_THREADS (an Error unless it is a count from 1 to 4096), else
/// the first count of OMP_NUM_THREADS (libgomp's to judge otherwise), else 0.
int envThreads() {
  auto parse = [](const char *v, char stop) {
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    return end != v && (*end == '\0' || *end == stop) && n >= 1 && n <= 4096
               ? static_cast<int>(n)
               : 0;
  };
  if (const char *v = std::getenv("SHOAL_NUM_THREADS"); v && *v) {
    if (int n = parse(v, '\0'))
      return n;
    throw Error(fmt::format("SHOAL_NUM_THREADS={}: expected a number of "
                            "threads from 1 to 4096",
                            v));
  }
  if (const char *v = std::getenv("OMP_NUM_THREADS"); v && *v)
    return parse(v, ',');
  return 0;
}
} // namespace

int shoal::rt::cpu::cpuThreads() {
  static const int fromEnv = envThreads();
  static const int cores = usableCores();
  int n = fromEnv;
  if (!n)
    n = configuredThreads.load(std::memory_order_relaxed);
  if (!n)
    n = cores;
  if (int cap = threadCap.load(std::memory_order_relaxed))
    n = std::min(n, cap);
  return n;
}

void shoal::rt::cpu::capCpuThreads(int n) {
  threadCap.store(std::max(0, n), std::memory_order_relaxed);
}

int shoal::rt::cpu::usableCores() {
  int machine =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#ifdef __linux__
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0)
    return std::min(machine, CPU_COUNT(&mask));
#endif
  return machine;
}

void shoal::rt::cpu::setCpuThreads(int n) {
  configuredThreads.store(std::max(0, n), std::memory_order_relaxed);
}

void shoal::rt::cpu::parallelFor(
    int64_t n, int64_t costPerItem,
    const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  const int64_t minWork = 32 * 1024;
  int64_t work = n * std::max<int64_t>(costPerItem, 1);
  int64_t threads = std::min<int64_t>({cpuThreads(), n, work / minWork});
#ifdef _OPENMP
  // Not nested: a kernel called from a parallel region runs serially.
  if (threads <= 1 || omp_in_parallel()) {
    body(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex errorMutex;
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    try {
      if (begin < end)
        body(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(errorMutex);
      if (!error)
        error = std::current_exception();
    }
  }
  if (error)
    std::rethrow_exception(error);
#else
  (void)threads;
  body(0, n);
#endif
}
