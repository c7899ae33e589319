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
