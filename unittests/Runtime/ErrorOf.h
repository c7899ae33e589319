//===- ErrorOf.h - The message of a thrown Error, for tests -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_UNITTESTS_RUNTIME_ERROROF_H
#define SHOAL_UNITTESTS_RUNTIME_ERROROF_H

#include "shoal/Runtime/Error.h"

#include <functional>
#include <string>

namespace shoal {
namespace rt {
namespace test {

/// The message of the Error `f` throws, or "" when it throws none.
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

} // namespace test
} // namespace rt
} // namespace shoal

#endif // SHOAL_UNITTESTS_RUNTIME_ERROROF_H
