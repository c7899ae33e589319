//===- Error.h - The runtime's errors ---------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A leaf header: every layer of the runtime throws these, so it includes
// nothing of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_ERROR_H
#define SHOAL_RUNTIME_ERROR_H

#include <stdexcept>

namespace shoal {
namespace rt {

/// Every error the runtime reports: bad plans, bad input files, failed
/// kernels. The message is complete and names the file, op or value at fault;
/// it does not start with "error:".
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// An error that every rank of the run throws, with the same message, at the
/// same point (found before the first collective and agreed on by all ranks).
/// Report it once (rank 0) and exit normally; there is no need to abort.
class AgreedError : public Error {
public:
  using Error::Error;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_ERROR_H
