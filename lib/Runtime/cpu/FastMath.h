//===- FastMath.h - Vectorizable float exp, erf and tanh --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// exp, erf and tanh on float written without branches or calls, so that a
// loop over them vectorizes (VectorImpl.cpp compiles them for SSE2, AVX2 and
// AVX-512). Their accuracy, checked over a dense sweep by the unit test
// FastMath.* (test/runtime/KernelsTest.cpp):
//   fastExp   Cephes' expf: range reduction by ln 2 in two parts and a
//             degree-6 polynomial; within 2 ulp of exp where exp is a
//             normal float, 0 below ln(FLT_MIN) = -87.34 (where exp is
//             subnormal: an absolute error below 1.2e-38), +inf above
//             ln(FLT_MAX), NaN in, NaN out.
//   fastErf   odd Taylor series to x^17 for |x| < 0.8 (within 3 ulp), and
//             Abramowitz & Stegun 7.1.26 with fastExp above (absolute error
//             below 3e-7, the formula PyTorch's vectorized erf uses).
//   fastTanh  odd Taylor series to x^11 for |x| < 0.25, 1 - 2/(exp(2x)+1)
//             above; relative error below 5e-7.
// The approximations are PyTorch's and Eigen's choices too: GELU and
// softmax in float do not need libm's correctly rounded results.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_FASTMATH_H
#define SHOAL_RUNTIME_CPU_FASTMATH_H

#include <cstdint>
#include <cstring>

namespace shoal {
namespace rt {
namespace cpu {

// The functions are static (internal linkage), Half.h's floatBits and
// bitsFloat not reused: VectorImpl.cpp compiles this header once per
// instruction set, and an out-of-line copy with external linkage compiled
// for AVX-512 could be the one the linker keeps for the baseline code.
namespace fastmath {
static inline float fromBits(int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
static inline int32_t toBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
} // namespace fastmath

/// exp(x) in float (see the file comment for its accuracy).
static inline float fastExp(float x) {
  using namespace fastmath;
  const float hi = 88.7228391f, lo = -87.3365447f; // ln(FLT_MAX), ln(FLT_MIN)
  float xc = x < lo ? lo : (x > hi ? hi : x);
  // n = round(x / ln 2), by the 1.5 * 2^23 trick (no rounding instruction).
  const float magic = 12582912.f;
  float t = xc * 1.44269504088896341f + magic;
  float n = t - magic;
  // r = x - n ln 2, with ln 2 split in an exact and a small part.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  // 2^n: n + 127 in the exponent field; n is in [-126, 128] (a NaN x gives
  // garbage here, replaced below; the shift is unsigned so that it is
  // defined for any bits).
  int32_t ni = toBits(t) - toBits(magic);
  float scale =
      fromBits(static_cast<int32_t>(static_cast<uint32_t>(ni + 127) << 23));
  // n = 128 (x near ln FLT_MAX) overflows the exponent field: scale by 2^127
  // and once more by 2.
  float y = ni > 127 ? p * fromBits(254 << 23) * 2.f : p * scale;
  y = x > hi ? __builtin_inff() : y;
  y = x < lo ? 0.f : y;
  return x != x ? x : y;
}

/// erf(x) in float (see the file comment for its accuracy).
static inline float fastErf(float x) {
  float ax = x < 0 ? -x : x;
  // Small |x|: 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1)), k <= 8.
  float x2 = x * x;
  float s = 1.f / 685440.f;
  s = s * x2 - 1.f / 75600.f;
  s = s * x2 + 1.f / 9360.f;
  s = s * x2 - 1.f / 1320.f;
  s = s * x2 + 1.f / 216.f;
  s = s * x2 - 1.f / 42.f;
  s = s * x2 + 1.f / 10.f;
  s = s * x2 - 1.f / 3.f;
  s = s * x2 + 1.f;
  float small = 1.12837916709551257f * x * s;
  // Larger |x|: 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p |x|).
  float t = 1.f / (1.f + 0.3275911f * ax);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  float large = 1.f - q * t * fastExp(-x2);
  large = x < 0 ? -large : large;
  float y = ax < 0.8f ? small : large;
  return x != x ? x : y;
}

/// tanh(x) in float (see the file comment for its accuracy).
static inline float fastTanh(float x) {
  float ax = x < 0 ? -x : x;
  // Small |x|: x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 -
  // 1382x^11/155925.
  float x2 = x * x;
  float s = -1382.f / 155925.f;
  s = s * x2 + 62.f / 2835.f;
  s = s * x2 - 17.f / 315.f;
  s = s * x2 + 2.f / 15.f;
  s = s * x2 - 1.f / 3.f;
  float small = x * (1.f + x2 * s);
  // 1 - 2 / (exp(2|x|) + 1); exp overflows to inf above 44 and gives 1.
  float large = 1.f - 2.f / (fastExp(2.f * ax) + 1.f);
  large = x < 0 ? -large : large;
  float y = ax < 0.25f ? small : large;
  return x != x ? x : y;
}

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_FASTMATH_H
