//===- Watchdog.h - Ends a job that makes no progress -----------*- C++ -*-===//
//
// A rank that stops (SIGSTOP, a debugger, a hung driver) or dies without its
// launcher noticing leaves every other rank blocked in a collective or a
// receive, for ever. The executor notes each op it starts and each phase it
// enters (noteOp, notePhase: two relaxed atomic stores and an increment); a
// Watchdog thread ends the job with an error naming this rank and what it
// waits in once nothing was noted for `--stall-timeout` seconds. Like
// PyTorch's NCCL timeout (10 minutes by default), the default is 600 s.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_RUNTIME_WATCHDOG_H
#define SHOAL_LIB_RUNTIME_WATCHDOG_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace shoal {
namespace rt {

struct OpInfo;

/// What this process is doing; written by the executor, read by the
/// watchdog.
struct Progress {
  std::atomic<std::uint64_t> beats{0};
  /// The op being run, or null in a phase.
  std::atomic<const OpInfo *> op{nullptr};
  /// A phase outside ops ("loading the weights"); a string literal.
  std::atomic<const char *> phase{"starting"};
  std::atomic<std::int64_t> step{-1};
};

Progress &progress();

inline void noteOp(const OpInfo &op) {
  Progress &p = progress();
  p.op.store(&op, std::memory_order_relaxed);
  p.beats.fetch_add(1, std::memory_order_relaxed);
}

/// `phase` must outlive the process (a string literal).
inline void notePhase(const char *phase) {
  Progress &p = progress();
  p.op.store(nullptr, std::memory_order_relaxed);
  p.phase.store(phase, std::memory_order_relaxed);
  p.beats.fetch_add(1, std::memory_order_relaxed);
}

inline void noteStep(std::int64_t step) {
  Progress &p = progress();
  p.step.store(step, std::memory_order_relaxed);
  p.beats.fetch_add(1, std::memory_order_relaxed);
}

/// While alive, a thread that ends the process (through MPI_Abort when
/// `mpi`, so that mpirun ends the others) after `seconds` without a note.
/// 0 seconds: no thread.
class Watchdog {
public:
  Watchdog(double seconds, int rank, bool mpi);
  ~Watchdog();
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

private:
  void watch();

  double seconds;
  int rank;
  bool mpi;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_LIB_RUNTIME_WATCHDOG_H
