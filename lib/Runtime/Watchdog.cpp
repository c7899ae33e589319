//===- Watchdog.cpp - Ends a job that makes no progress ---------*- C++ -*-===//

#include "Watchdog.h"

#include "Communicator.h"
#include "PlanLoader.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace shoal::rt;

Progress &shoal::rt::progress() {
  static Progress p;
  return p;
}

Watchdog::Watchdog(double seconds, int rank, bool mpi)
    : seconds(seconds), rank(rank), mpi(mpi) {
  if (seconds > 0)
    thread = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread.joinable())
    return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  thread.join();
}

void Watchdog::watch() {
  using Clock = std::chrono::steady_clock;
  Progress &p = progress();
  std::uint64_t last = p.beats.load(std::memory_order_relaxed);
  Clock::time_point since = Clock::now();
  // Checked a few times per timeout, at most once a second.
  auto period = std::chrono::duration<double>(std::min(1.0, seconds / 4));
  std::unique_lock<std::mutex> lock(mutex);
  while (!wake.wait_for(lock, period, [this] { return stopping; })) {
    std::uint64_t beats = p.beats.load(std::memory_order_relaxed);
    if (beats != last) {
      last = beats;
      since = Clock::now();
      continue;
    }
    double idle = std::chrono::duration<double>(Clock::now() - since).count();
    if (idle < seconds)
      continue;
    std::string where;
    if (const OpInfo *op = p.op.load(std::memory_order_relaxed))
      where = op->describe();
    else
      where = p.phase.load(std::memory_order_relaxed);
    std::int64_t step = p.step.load(std::memory_order_relaxed);
    std::fprintf(stderr,
                 "shoal-run: error: rank %d made no progress for %.0f s "
                 "(--stall-timeout %g): it waits in %s%s. Another rank has "
                 "stopped, died or is far slower than this one; ending the "
                 "job\n",
                 rank, idle, seconds, where.c_str(),
                 step >= 0 ? fmt::format(" (step {})", step + 1).c_str() : "");
    std::fflush(stderr);
    std::fflush(stdout);
    if (mpi)
      mpiAbort(1);
    std::_Exit(1);
  }
}
