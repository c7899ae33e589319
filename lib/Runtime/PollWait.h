//===- PollWait.h - Waiting on asynchronous work that can fail --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A host wait on device work that may never finish: a collective whose peer
// died waits for ever in cudaEventSynchronize. pollUntilReady polls the work
// (yielding between polls, as cudaEventSynchronize's spin does) and, every
// `checkEvery`, the communicator's asynchronous error
// (ncclCommGetAsyncError), so that a broken communicator ends the wait with
// its error rather than at the stall watchdog's timeout (c10d's NCCL
// watchdog polls the same error). Header-only and free of CUDA so that the
// CPU tests check it with fakes (BackendTest.cpp) and the CUDA module needs
// no symbol of the host runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_RUNTIME_POLLWAIT_H
#define SHOAL_LIB_RUNTIME_POLLWAIT_H

#include "shoal/Runtime/Error.h"

#include <chrono>
#include <string>
#include <thread>

namespace shoal {
namespace rt {

/// Returns once `ready()` is true, polling it without sleeping (a
/// collective is usually noticed within microseconds). Every `checkEvery`
/// it asks `failure()`, which returns an empty string while all is well,
/// else what went wrong; then it throws Error("<what>: <failure>").
/// Returns the number of polls (for tests).
template <typename Ready, typename Failure>
long pollUntilReady(
    Ready &&ready, Failure &&failure, const std::string &what,
    std::chrono::microseconds checkEvery = std::chrono::microseconds(1000)) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point nextCheck = Clock::now() + checkEvery;
  for (long polls = 1;; ++polls) {
    if (ready())
      return polls;
    if (Clock::now() >= nextCheck) {
      if (std::string why = failure(); !why.empty())
        throw Error(what + ": " + why);
      nextCheck = Clock::now() + checkEvery;
    }
    std::this_thread::yield();
  }
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_LIB_RUNTIME_POLLWAIT_H
