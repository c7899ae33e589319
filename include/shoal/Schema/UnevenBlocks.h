//===- UnevenBlocks.h - Block sizes of uneven shards ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The rule that cuts a dimension into blocks of different sizes
// (proto/plan.proto, UnevenAxis), header-only so that the compiler's planner,
// shoal-sim and the runtime share it.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_UNEVENBLOCKS_H
#define SHOAL_SCHEMA_UNEVENBLOCKS_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

/// Block sizes of a dimension of `size` cut into weights.size() blocks in
/// proportion to `weights` (each > 0): whole units of `multiple` elements
/// when it divides `size` into at least one unit per block (else of 1), every
/// block at least one unit when there are enough, and the rest given so that
/// the largest units / weight is as small as it can be (ties to the lower
/// index). Two dimensions with the same number of units get the same split, so
/// that a dimension of heads and one of heads x head size agree. The compiler
/// and the runtime share this rule (proto/plan.proto, UnevenAxis).
inline std::vector<int64_t>
unevenBlockSizes(int64_t size, const std::vector<int64_t> &weights,
                 int64_t multiple) {
  int64_t n = static_cast<int64_t>(weights.size());
  std::vector<int64_t> units(n, 0);
  if (n == 0)
    return units;
  int64_t g = multiple > 0 && size % multiple == 0 && size / multiple >= n
                  ? multiple
                  : 1;
  int64_t total = size / g, weightSum = 0;
  for (int64_t w : weights)
    weightSum += w;
  int64_t least = total >= n ? 1 : 0, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    // In proportion, rounded down (as long double: no overflow).
    units[i] = std::max<int64_t>(
        least, static_cast<int64_t>(static_cast<long double>(total) *
                                    weights[i] / weightSum));
    sum += units[i];
  }
  // a / wa < b / wb without division.
  auto less = [&](int64_t a, int64_t i, int64_t b, int64_t j) {
    return static_cast<__int128>(a) * weights[j] <
           static_cast<__int128>(b) * weights[i];
  };
  while (sum > total) { // the minimums overshot: take from the slowest-paced
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (units[i] > least &&
          (best < 0 || less(units[best], best, units[i], i)))
        best = i;
    --units[best];
    --sum;
  }
  while (sum < total) { // each next unit where it ends soonest
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (less(units[i] + 1, i, units[best] + 1, best))
        best = i;
    ++units[best];
    ++sum;
  }
  for (int64_t &u : units)
    u *= g;
  return units;
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_UNEVENBLOCKS_H
