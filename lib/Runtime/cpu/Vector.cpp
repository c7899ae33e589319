//===- Vector.cpp - Picks the vectorized loops for this CPU ------*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cpu/Vector.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace shoal {
namespace rt {
namespace cpu {
namespace baseline {
const VectorKernels *table();
}
#ifdef SHOAL_VECTOR_X86
namespace avx2 {
const VectorKernels *table();
}
namespace avx512 {
const VectorKernels *table();
}
#endif
} // namespace cpu
} // namespace rt
} // namespace shoal

using namespace shoal::rt;
using namespace shoal::rt::cpu;

const VectorKernels *shoal::rt::cpu::vectorKernelsFor(const char *isa) {
  std::string name = isa;
  if (name == "baseline")
    return baseline::table();
#ifdef SHOAL_VECTOR_X86
  __builtin_cpu_init();
  if (name == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
               ? avx2::table()
               : nullptr;
  if (name == "avx512")
    return __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("fma")
               ? avx512::table()
               : nullptr;
#endif
  return nullptr;
}

const VectorKernels &shoal::rt::cpu::vectorKernels() {
  static const VectorKernels *chosen = [] {
    if (const char *env = std::getenv("SHOAL_CPU_ISA"); env && *env) {
      if (std::strcmp(env, "baseline") && std::strcmp(env, "avx2") &&
          std::strcmp(env, "avx512"))
        throw Error(fmt::format("SHOAL_CPU_ISA={}: expected avx512, avx2 or "
                                "baseline",
                                env));
      if (const VectorKernels *k = vectorKernelsFor(env))
        return k;
      throw Error(fmt::format("SHOAL_CPU_ISA={}: this CPU or this build does "
                              "not have it",
                              env));
    }
    for (const char *isa : {"avx512", "avx2"})
      if (const VectorKernels *k = vectorKernelsFor(isa))
        return k;
    return baseline::table();
  }();
  return *chosen;
}
