//===- DTypes.h - Element types for the CPU kernels -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Dispatch from a DType to a C++ element type, element conversions with
// ONNX Cast semantics, and the f32 staging that the kernels use for f16 and
// bf16 (computed in f32, rounded once to the 16-bit type at the end).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CPU_DTYPES_H
#define SHOAL_RUNTIME_CPU_DTYPES_H

#include "Half.h"
#include "Tensor.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace shoal {
namespace rt {
namespace cpu {

/// Storage types for the dtypes that share a C++ type with another: one
/// byte 0/1 (bool, vs. uint8_t for u8) and the 16-bit patterns of f16 and
/// bf16. Same size and layout as the stored element.
struct BoolElem {
  uint8_t v;
};
struct F16Elem {
  uint16_t v;
};
struct BF16Elem {
  uint16_t v;
};

template <typename T> struct Tag { using type = T; };

/// Calls f(Tag<T>) with the element type of `dtype`: float, double,
/// int64_t, int32_t, int8_t, uint8_t, BoolElem, F16Elem or BF16Elem.
template <typename F> decltype(auto) visitDType(DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    return f(Tag<float>{});
  case DType::F64:
    return f(Tag<double>{});
  case DType::I64:
    return f(Tag<int64_t>{});
  case DType::I32:
    return f(Tag<int32_t>{});
  case DType::I8:
    return f(Tag<int8_t>{});
  case DType::U8:
    return f(Tag<uint8_t>{});
  case DType::Bool:
    return f(Tag<BoolElem>{});
  case DType::F16:
    return f(Tag<F16Elem>{});
  case DType::BF16:
    break;
  }
  return f(Tag<BF16Elem>{});
}

inline bool isHalfDType(DType d) { return d == DType::F16 || d == DType::BF16; }
inline bool isFloatDType(DType d) {
  return d == DType::F32 || d == DType::F64 || isHalfDType(d);
}
inline bool isIntegerDType(DType d) {
  return d == DType::I64 || d == DType::I32 || d == DType::I8 || d == DType::U8;
}

/// `d` rounded to f32 with round-to-odd (the low bit set when inexact):
/// rounding that to any format of at most 22 significand bits (f16, bf16)
/// then gives the correctly rounded result of `d` (no double rounding).
inline float roundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(f) || static_cast<double>(f) == d)
    return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) // truncate toward 0
    f = std::nextafter(f, 0.f);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u |= 1u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// An element read into the type that holds its value exactly: float for
// f32/f16/bf16, double for f64, int64_t for the integers and bool.
inline float widen(float v) { return v; }
inline double widen(double v) { return v; }
inline float widen(F16Elem v) { return halfToFloat(v.v); }
inline float widen(BF16Elem v) { return bf16ToFloat(v.v); }
inline int64_t widen(BoolElem v) { return v.v != 0; }
template <typename T>
inline std::enable_if_t<std::is_integral<T>::value, int64_t> widen(T v) {
  return static_cast<int64_t>(v);
}

/// A float converted to an integer type: truncated toward zero, NaN gives
/// 0 and values out of range saturate (ONNX leaves them undefined).
template <typename To, typename From> To floatToInt(From v) {
  // The bounds are powers of two (or 0), exact in every float type.
  const From hi = From(std::numeric_limits<To>::max()) + From(1);
  const From lo = From(std::numeric_limits<To>::min());
  if (std::isnan(v))
    return 0;
  if (v >= hi)
    return std::numeric_limits<To>::max();
  if (v < lo)
    return std::numeric_limits<To>::min();
  return static_cast<To>(v);
}

/// A widened value (float, double or int64_t) converted to element type To
/// with ONNX Cast semantics: floats round to nearest even (exactly once),
/// to bool is v != 0 (NaN is true), float to integer as floatToInt, integer
/// to a narrower integer wraps (two's complement, as numpy's astype).
template <typename To, typename W> To narrow(W v) {
  constexpr bool fromFloat = std::is_floating_point<W>::value;
  if constexpr (std::is_same<To, BoolElem>::value) {
    return BoolElem{static_cast<uint8_t>(v != W(0))};
  } else if constexpr (std::is_same<To, F16Elem>::value) {
    if constexpr (std::is_same<W, float>::value)
      return F16Elem{floatToHalf(v)};
    else
      return F16Elem{floatToHalf(roundToOddFloat(static_cast<double>(v)))};
  } else if constexpr (std::is_same<To, BF16Elem>::value) {
    if constexpr (std::is_same<W, float>::value)
      return BF16Elem{floatToBF16(v)};
    else
      return BF16Elem{floatToBF16(roundToOddFloat(static_cast<double>(v)))};
  } else if constexpr (std::is_floating_point<To>::value) {
    return static_cast<To>(v);
  } else if constexpr (fromFloat) {
    return floatToInt<To>(v);
  } else {
    return static_cast<To>(static_cast<std::make_unsigned_t<To>>(v));
  }
}

/// One element of type From converted to type To (ONNX Cast).
template <typename To, typename From> To convertElem(From v) {
  return narrow<To>(widen(v));
}

/// `t` as f32 (exact for f16, bf16, i8, u8 and bool; f64 and wide
/// integers round); `t` itself when it is f32.
Tensor toF32(const Tensor &t);
/// Rounds f32 `f` into `out` (same shape, any dtype) element by element
/// with convertElem.
void fromF32(const Tensor &f, Tensor &out);

} // namespace cpu
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CPU_DTYPES_H
