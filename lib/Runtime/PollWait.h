//===- PollWait.h - Waiting on asynchronous work that can fail --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A host wait on device work that may never finish: a collective whose peer
// died waits for ever in cudaEventSynchronize. pollUntilReady polls the work
// and the communicator's asynchronous error (ncclCommGetAsyncError) in
// turn, so that a broken communicator ends the wait with its error at once
// rather than at the stall watchdog's timeout (c10d's NCCL watchdog does
// the same). Header-only and free of CUDA so that the CPU tests check it
// with fakes (BackendTest.cpp) and the CUDA module needs no symbol of the
// host runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_RUNTIME_POLLWAIT_H
#define SHOAL_LIB_RUNTIME_POLLWAIT_H

#include "shoal/Runtime/Error.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace shoal {
namespace rt {

/// Returns once `ready()` is true. Between polls it asks `failure()`, which
/// returns an empty string while all is well, else what went wrong; then it
/// throws Error("<what>: <failure>"). The first polls only yield (a
/// collective usually completes within microseconds of the host asking);
/// then it sleeps, 1 us doubling up to `maxSleep`. Returns the number of
/// polls (for tests).
template <typename Ready, typename Failure>
long pollUntilReady(
    Ready &&ready, Failure &&failure, const std::string &what,
    std::chrono::microseconds maxSleep = std::chrono::microseconds(1000)) {
  constexpr long kSpins = 64;
  std::chrono::microseconds sleep(1);
  for (long polls = 1;; ++polls) {
    if (ready())
      return polls;
    if (std::string why = failure(); !why.empty())
      throw Error(what + ": " + why);
    if (polls < kSpins) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, maxSleep);
  }
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_LIB_RUNTIME_POLLWAIT_H
