//===- Half.h - bf16 and f16 conversions to and from f32 --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The runtime stores bf16 and f16 elements as their 16-bit patterns and
// computes with them in f32. These are the conversions, header-only and
// usable from host C++ and from CUDA device code:
//
// - f32 -> bf16 and f32 -> f16 round to nearest, ties to even (IEEE 754's
//   default, numpy's and PyTorch's). NaN stays NaN (quiet, sign kept), an
//   infinity stays infinite; f32 values beyond the largest finite f16
//   (65504, after rounding) become infinities, as a cast does in numpy and
//   PyTorch. Results below f16's normal range become f16 subnormals
//   (correctly rounded) or zero.
// - bf16 -> f32 and f16 -> f32 are exact.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_HALF_H
#define SHOAL_RUNTIME_HALF_H

#include "HostDevice.h"

#include <cstdint>
#include <cstring>

namespace shoal {
namespace rt {

namespace half_detail {
SHOAL_HOST_DEVICE inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
SHOAL_HOST_DEVICE inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
} // namespace half_detail

/// The bf16 nearest to `f` (ties to even); NaN stays a quiet NaN.
SHOAL_HOST_DEVICE inline uint16_t floatToBF16(float f) {
  uint32_t u = half_detail::floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign, force quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry
  // into the exponent is right (it rounds up to the next binade or to inf).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The f32 value of bf16 bits `h` (exact).
SHOAL_HOST_DEVICE inline float bf16ToFloat(uint16_t h) {
  return half_detail::bitsFloat(static_cast<uint32_t>(h) << 16);
}

/// The f16 nearest to `f` (ties to even); overflow gives inf, NaN stays a
/// quiet NaN, small values become subnormals or zero.
SHOAL_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  uint32_t u = half_detail::floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: keep the top mantissa bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) // >= 65520 rounds to inf (and inf stays inf)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) { // normal f16 (|f| >= 2^-14)
    // Rebias the exponent (127 -> 15), then round away 13 mantissa bits
    // to nearest even; a carry moves into the exponent correctly.
    uint32_t r = a - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) // < 2^-25: rounds to zero (2^-25 itself ties to 0)
    return sign;
  // Subnormal f16: value = m * 2^-24 with m = a's significand shifted.
  uint32_t exp = a >> 23;                      // 102 .. 112
  uint32_t mant = (a & 0x7fffffu) | 0x800000u; // with the implicit bit
  uint32_t shift = 126 - exp;                  // 14 .. 24
  uint32_t m = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (m & 1u)))
    ++m; // may become 0x400, the smallest normal: still right
  return static_cast<uint16_t>(sign | m);
}

/// The f32 value of f16 bits `h` (exact).
SHOAL_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) // inf or NaN
    return half_detail::bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp != 0)
    return half_detail::bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return half_detail::bitsFloat(sign);
  // Subnormal: mant * 2^-24, exact in f32.
  float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

/// bf16 <-> f16 via f32 (f32 holds both exactly, so this rounds once).
SHOAL_HOST_DEVICE inline uint16_t bf16ToHalf(uint16_t h) {
  return floatToHalf(bf16ToFloat(h));
}
SHOAL_HOST_DEVICE inline uint16_t halfToBF16(uint16_t h) {
  return floatToBF16(halfToFloat(h));
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_HALF_H
