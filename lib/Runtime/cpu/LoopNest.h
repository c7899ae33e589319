//===- LoopNest.h - Broadcast iteration spaces of the CPU kernels -*- C++ -*-//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_LOOPNEST_H
#define SHOAL_RUNTIME_CPU_LOOPNEST_H

#include "Tensor.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {
namespace cpu {

/// Row-major element strides of `shape`, right-aligned to `rank` dimensions;
/// broadcast (size-1 or missing) dimensions get stride 0.
inline std::vector<int64_t> broadcastStrides(const Shape &shape,
                                             std::size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t acc = 1;
  std::size_t lead = rank - shape.size();
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[lead + i] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return strides;
}

/// An iteration space of several operands over a common output shape, with
/// adjacent dimensions merged where every operand allows it so that the
/// innermost loop is as long as possible.
struct LoopNest {
  Shape dims;
  std::vector<std::vector<int64_t>> strides; // per operand

  LoopNest(const Shape &outShape,
           std::vector<std::vector<int64_t>> strideSets) {
    std::size_t rank = outShape.size();
    std::size_t ops = strideSets.size();
    strides.assign(ops, {});
    for (std::size_t d = 0; d < rank; ++d) {
      if (outShape[d] == 1)
        continue;
      if (!dims.empty()) {
        bool merge = true;
        for (std::size_t o = 0; o < ops; ++o)
          if (strides[o].back() != strideSets[o][d] * outShape[d])
            merge = false;
        if (merge) {
          dims.back() *= outShape[d];
          for (std::size_t o = 0; o < ops; ++o)
            strides[o].back() = strideSets[o][d];
          continue;
        }
      }
      dims.push_back(outShape[d]);
      for (std::size_t o = 0; o < ops; ++o)
        strides[o].push_back(strideSets[o][d]);
    }
    if (dims.empty()) {
      dims.push_back(1);
      for (std::size_t o = 0; o < ops; ++o)
        strides[o].push_back(0);
    }
  }
};

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_LOOPNEST_H
