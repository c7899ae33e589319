//===- Elementwise.cpp - CPU kernels: element-wise ops ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the element-wise family of Ops.def (Kernels.h): the
// arithmetic with numpy broadcasting, the unary math, comparisons and
// logic, Cast, Where, Max/Min and Gelu, then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"
#include "cpu/Vector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

template <typename T, typename F>
void binaryLoop(const T *a, const Shape &aShape, const T *b,
                const Shape &bShape, T *out, const Shape &outShape, F f) {
  forEachRun2(aShape, bShape, outShape,
              [&](int64_t oa, int64_t ob, int64_t oo, int64_t n, int64_t sa,
                  int64_t sb) {
                const T *pa = a + oa;
                const T *pb = b + ob;
                T *po = out + oo;
                // Specialized so that the common cases vectorize.
                if (sa == 1 && sb == 1) {
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i], pb[i]);
                } else if (sa == 1 && sb == 0) {
                  T vb = *pb;
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i], vb);
                } else if (sa == 0 && sb == 1) {
                  T va = *pa;
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(va, pb[i]);
                } else {
                  for (int64_t i = 0; i < n; ++i)
                    po[i] = f(pa[i * sa], pb[i * sb]);
                }
              });
}

/// Integer division truncating toward zero, as numpy's for same-sign
/// operands and C's; the minimum over -1 wraps. Throws Error on a zero
/// divisor (undefined in ONNX; a crash in C++).
template <typename T> T intDiv(T x, T y) {
  if (y == 0)
    throw Error("Div: integer division by zero");
  if constexpr (std::is_signed<T>::value) {
    using U = std::make_unsigned_t<T>;
    if (y == T(-1))
      return T(U(0) - U(x));
  }
  return T(x / y);
}

/// The number of elements of `s` when, leading ones dropped, it is the
/// trailing part of `out` (a bias along the last dimensions); 0 otherwise.
int64_t trailingBlock(const Shape &s, const Shape &out) {
  std::size_t lead = 0;
  while (lead < s.size() && s[lead] == 1)
    ++lead;
  std::size_t k = s.size() - lead;
  if (k > out.size() || !std::equal(s.begin() + lead, s.end(), out.end() - k))
    return 0;
  return numElements(Shape(s.begin() + lead, s.end()));
}

/// binaryLoop, split over the kernel threads for float tensors whose
/// operands either have the output's shape or repeat a trailing block (a
/// bias): each thread takes whole rows of that block.
template <typename T, typename F>
void binaryParallel(const T *pa, const Shape &as, const T *pb, const Shape &bs,
                    T *po, const Shape &os, F f) {
  int64_t n = numElements(os);
  if constexpr (std::is_floating_point<T>::value) {
    bool aFull = as == os, bFull = bs == os;
    int64_t block = aFull && bFull ? 1
                    : aFull        ? trailingBlock(bs, os)
                    : bFull        ? trailingBlock(as, os)
                                   : 0;
    if (block > 0 && n >= (int64_t(1) << 15)) {
      int64_t rows = n / block;
      parallelFor(rows, block, [&](int64_t r0, int64_t r1) {
        Shape rowsShape{r1 - r0, block}, blockShape{block};
        binaryLoop(aFull ? pa + r0 * block : pa, aFull ? rowsShape : blockShape,
                   bFull ? pb + r0 * block : pb, bFull ? rowsShape : blockShape,
                   po + r0 * block, rowsShape, f);
      });
      return;
    }
  }
  binaryLoop(pa, as, pb, bs, po, os, f);
}

template <typename T>
void binaryTyped(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out) {
  const T *pa = static_cast<const T *>(a.rawData());
  const T *pb = static_cast<const T *>(b.rawData());
  T *po = static_cast<T *>(out.rawData());
  const Shape &as = a.shape(), &bs = b.shape(), &os = out.shape();
  // Integers wrap around (two's complement), through the unsigned type so
  // that the arithmetic is defined.
  using U = std::conditional_t<std::is_integral<T>::value,
                               std::make_unsigned<T>, std::common_type<T>>;
  using W = typename U::type;
  switch (op) {
  case BinaryOp::Add:
    binaryParallel(pa, as, pb, bs, po, os,
                   [](T x, T y) { return T(W(x) + W(y)); });
    return;
  case BinaryOp::Sub:
    binaryParallel(pa, as, pb, bs, po, os,
                   [](T x, T y) { return T(W(x) - W(y)); });
    return;
  case BinaryOp::Mul:
    binaryParallel(pa, as, pb, bs, po, os,
                   [](T x, T y) { return T(W(x) * W(y)); });
    return;
  case BinaryOp::Div:
    if constexpr (std::is_integral<T>::value)
      binaryLoop(pa, as, pb, bs, po, os, intDiv<T>);
    else
      binaryParallel(pa, as, pb, bs, po, os, [](T x, T y) { return T(x / y); });
    return;
  case BinaryOp::Pow:
    binaryLoop(pa, as, pb, bs, po, os,
               [](T x, T y) { return T(std::pow(x, y)); });
    return;
  }
}

/// out[i] = f(a[i], b[i]) with broadcasting; T is the input element type, R
/// the output's.
template <typename T, typename R, typename F>
void map2(const Tensor &a, const Tensor &b, Tensor &out, F f) {
  const T *pa = static_cast<const T *>(a.rawData());
  const T *pb = static_cast<const T *>(b.rawData());
  R *po = static_cast<R *>(out.rawData());
  forEachBroadcast<2>({&a.shape(), &b.shape()}, out.shape(),
                      [&](const std::array<int64_t, 2> &off, int64_t oo,
                          int64_t n, const std::array<int64_t, 2> &s) {
                        const T *x = pa + off[0];
                        const T *y = pb + off[1];
                        R *o = po + oo;
                        if (s[0] == 1 && s[1] == 1) {
                          for (int64_t i = 0; i < n; ++i)
                            o[i] = f(x[i], y[i]);
                        } else if (s[0] == 1 && s[1] == 0) {
                          T vy = *y;
                          for (int64_t i = 0; i < n; ++i)
                            o[i] = f(x[i], vy);
                        } else if (s[0] == 0 && s[1] == 1) {
                          T vx = *x;
                          for (int64_t i = 0; i < n; ++i)
                            o[i] = f(vx, y[i]);
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            o[i] = f(x[i * s[0]], y[i * s[1]]);
                        }
                      });
}

} // namespace

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::binary(BinaryOp op, const Tensor &a, const Tensor &b,
                            Tensor &out) {
  const char *name = binaryName(op);
  Shape shape = broadcastShape(a.shape(), b.shape());
  bool numericPow = op == BinaryOp::Pow && a.dtype() != DType::Bool &&
                    b.dtype() != DType::Bool;
  if (a.dtype() != b.dtype() && !numericPow)
    throw Error(fmt::format("{}: operands have different dtypes ({} and {})",
                            name, a.type().str(), b.type().str()));
  if (isHalfDType(a.dtype()) || isHalfDType(b.dtype())) {
    // In f32, rounded once to the result's type.
    checkOutput(out, a.dtype(), shape, name);
    Tensor sa = stage(a), r(sa.dtype(), shape);
    binary(op, sa, stage(b), r);
    return cast(r, out);
  }
  if (op == BinaryOp::Pow && a.dtype() == DType::F32 &&
      (b.dtype() == DType::I64 || b.dtype() == DType::I32)) {
    // ONNX allows an integer exponent; compute it as float.
    Tensor exponent(DType::F32, b.shape());
    float *e = exponent.data<float>();
    for (int64_t i = 0, n = b.numElements(); i < n; ++i)
      e[i] = b.dtype() == DType::I64 ? float(b.data<int64_t>()[i])
                                     : float(b.data<int32_t>()[i]);
    binary(op, a, exponent, out);
    return;
  }
  if (op == BinaryOp::Pow &&
      (a.dtype() != DType::F32 || b.dtype() != DType::F32)) {
    // Integer, f64 or mixed Pow: in double, rounded to the base's type
    // (integers to nearest).
    checkOutput(out, a.dtype(), shape, name);
    auto get = [&](const Tensor &t, int64_t i) -> double {
      return visitDType(t.dtype(), [&](auto tag) -> double {
        using T = typename decltype(tag)::type;
        return static_cast<double>(
            widen(static_cast<const T *>(t.rawData())[i]));
      });
    };
    int64_t rank = static_cast<int64_t>(shape.size());
    auto alignedStrides = [&](const Shape &s) {
      std::vector<int64_t> st(rank, 0);
      int64_t stride = 1;
      for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
        if (s[d] != 1)
          st[rank - static_cast<int64_t>(s.size()) + d] = stride;
        stride *= s[d];
      }
      return st;
    };
    std::vector<int64_t> sa = alignedStrides(a.shape()),
                         sb = alignedStrides(b.shape());
    visitDType(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *po = static_cast<T *>(out.rawData());
      for (int64_t i = 0, n = numElements(shape); i < n; ++i) {
        int64_t rem = i, ia = 0, ib = 0;
        for (int64_t d = rank - 1; d >= 0; --d) {
          int64_t idx = rem % shape[d];
          rem /= shape[d];
          ia += idx * sa[d];
          ib += idx * sb[d];
        }
        double r = std::pow(get(a, ia), get(b, ib));
        if constexpr (std::is_integral<T>::value)
          po[i] = narrow<T>(static_cast<int64_t>(std::llround(r)));
        else
          po[i] = narrow<T>(r);
      }
    });
    return;
  }
  checkOutput(out, a.dtype(), shape, name);
  switch (a.dtype()) {
  case DType::F32:
    return binaryTyped<float>(op, a, b, out);
  case DType::F64:
    return binaryTyped<double>(op, a, b, out);
  case DType::I64:
    return binaryTyped<int64_t>(op, a, b, out);
  case DType::I32:
    return binaryTyped<int32_t>(op, a, b, out);
  case DType::I8:
    return binaryTyped<int8_t>(op, a, b, out);
  case DType::U8:
    return binaryTyped<uint8_t>(op, a, b, out);
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
    break;
  }
  throw Error(fmt::format("{} is not supported on {} tensors", name,
                          dtypeName(a.dtype())));
}

namespace {
template <typename T, typename F>
void unaryLoop(const Tensor &x, Tensor &out, F f) {
  const T *px = x.data<T>();
  T *po = out.data<T>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    po[i] = f(px[i]);
}

template <typename T> void unaryInt(UnaryOp op, const Tensor &x, Tensor &out) {
  using U = std::make_unsigned_t<T>;
  if (op == UnaryOp::Neg)
    unaryLoop<T>(x, out, [](T v) { return T(U(0) - U(v)); });
  else
    unaryLoop<T>(x, out, [](T v) { return v < 0 ? T(0) : v; });
}

/// Erf, Tanh and Exp on f32 with the vectorized loops (Vector.h), split
/// over the kernel threads; false for the other ops.
bool unaryVector(UnaryOp op, const Tensor &x, Tensor &out) {
  const VectorKernels &vk = vectorKernels();
  void (*f)(const float *, float *, int64_t) = op == UnaryOp::Erf    ? vk.erf
                                               : op == UnaryOp::Tanh ? vk.tanh
                                               : op == UnaryOp::Exp  ? vk.exp
                                                                     : nullptr;
  if (!f)
    return false;
  const float *px = x.data<float>();
  float *po = out.data<float>();
  parallelFor(x.numElements(), 20,
              [&](int64_t b, int64_t e) { f(px + b, po + b, e - b); });
  return true;
}

template <typename T>
void unaryFloat(UnaryOp op, const Tensor &x, Tensor &out) {
  if constexpr (std::is_same<T, float>::value)
    if (unaryVector(op, x, out))
      return;
  switch (op) {
  case UnaryOp::Erf:
    return unaryLoop<T>(x, out, [](T v) { return std::erf(v); });
  case UnaryOp::Tanh:
    return unaryLoop<T>(x, out, [](T v) { return std::tanh(v); });
  case UnaryOp::Relu:
    return unaryLoop<T>(x, out, [](T v) { return v < T(0) ? T(0) : v; });
  case UnaryOp::Sqrt:
    return unaryLoop<T>(x, out, [](T v) { return std::sqrt(v); });
  case UnaryOp::Exp:
    return unaryLoop<T>(x, out, [](T v) { return std::exp(v); });
  case UnaryOp::Neg:
    return unaryLoop<T>(x, out, [](T v) { return -v; });
  case UnaryOp::Sigmoid:
    return unaryLoop<T>(x, out, [](T v) {
      if (v >= T(0))
        return T(1) / (T(1) + std::exp(-v));
      T e = std::exp(v);
      return e / (T(1) + e);
    });
  }
}
} // namespace

void shoal::rt::cpu::unary(UnaryOp op, const Tensor &x, Tensor &out) {
  checkOutput(out, x.dtype(), x.shape(), "unary op");
  bool intOk = op == UnaryOp::Neg || op == UnaryOp::Relu;
  switch (x.dtype()) {
  case DType::F32:
    return unaryFloat<float>(op, x, out);
  case DType::F64:
    return unaryFloat<double>(op, x, out);
  case DType::F16:
  case DType::BF16: {
    Tensor r(DType::F32, x.shape());
    unaryFloat<float>(op, toF32(x), r);
    return fromF32(r, out);
  }
  case DType::I64:
    if (intOk)
      return unaryInt<int64_t>(op, x, out);
    break;
  case DType::I32:
    if (intOk)
      return unaryInt<int32_t>(op, x, out);
    break;
  case DType::I8:
    if (intOk)
      return unaryInt<int8_t>(op, x, out);
    break;
  case DType::U8:
  case DType::Bool:
    break;
  }
  throw Error(fmt::format("element-wise op is not supported on {} tensors",
                          dtypeName(x.dtype())));
}

namespace {
template <typename T>
void hardSigmoidTyped(const Tensor &x, T alpha, T beta, bool swish,
                      Tensor &out) {
  auto hs = [=](T v) {
    T y = alpha * v + beta;
    // Comparisons are false for NaN, so NaN passes through.
    return y < T(0) ? T(0) : (y > T(1) ? T(1) : y);
  };
  if (swish)
    unaryLoop<T>(x, out, [=](T v) { return v * hs(v); });
  else
    unaryLoop<T>(x, out, hs);
}
} // namespace

void shoal::rt::cpu::hardSigmoid(const Tensor &x, float alpha, float beta,
                                 bool swish, Tensor &out) {
  const char *name = swish ? "HardSwish" : "HardSigmoid";
  checkOutput(out, x.dtype(), x.shape(), name);
  switch (x.dtype()) {
  case DType::F32:
    return hardSigmoidTyped<float>(x, alpha, beta, swish, out);
  case DType::F64:
    // HardSwish's alpha is 1/6 exactly in double.
    return hardSigmoidTyped<double>(x, swish ? 1.0 / 6.0 : double(alpha), beta,
                                    swish, out);
  case DType::F16:
  case DType::BF16: {
    Tensor r(DType::F32, x.shape());
    hardSigmoidTyped<float>(toF32(x), alpha, beta, swish, r);
    return fromF32(r, out);
  }
  default:
    break;
  }
  throw Error(fmt::format("{} is not supported on {} tensors", name,
                          dtypeName(x.dtype())));
}

namespace {
/// Integer Mod; the remainder of the minimum over -1 is 0 (no overflow).
template <typename T> T intMod(T x, T y, bool fmod) {
  if (y == 0)
    throw Error("Mod: integer division by zero");
  T r = 0;
  if constexpr (std::is_signed<T>::value) {
    if (y != T(-1))
      r = T(x % y);
    if (!fmod && r != 0 && ((r < 0) != (y < 0)))
      r = T(r + y);
  } else {
    (void)fmod;
    r = T(x % y);
  }
  return r;
}

template <typename T> T floatMod(T x, T y, bool fmod) {
  T r = std::fmod(x, y);
  if (!fmod && r != T(0) && ((r < T(0)) != (y < T(0))))
    r += y;
  return r;
}
} // namespace

void shoal::rt::cpu::mod(const Tensor &a, const Tensor &b, bool fmod,
                         Tensor &out) {
  if (a.dtype() != b.dtype())
    throw Error(fmt::format("Mod: operands have different dtypes ({} and {})",
                            a.type().str(), b.type().str()));
  Shape shape = broadcastShape(a.shape(), b.shape());
  checkOutput(out, a.dtype(), shape, "Mod");
  if (isHalfDType(a.dtype())) { // exact in f32, rounded once
    Tensor r(DType::F32, shape);
    mod(toF32(a), toF32(b), fmod, r);
    return fromF32(r, out);
  }
  byNumericType(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral<T>::value)
      map2<T, T>(a, b, out, [fmod](T x, T y) { return intMod<T>(x, y, fmod); });
    else
      map2<T, T>(a, b, out,
                 [fmod](T x, T y) { return floatMod<T>(x, y, fmod); });
  });
}

namespace {
/// GELU's argument z = x + bias as float rows of x's last dimension: `x`
/// itself with `bias` along the last dimension (a linear layer's, added in
/// the loops), or a temporary sum for any other broadcast.
struct GeluArgument {
  const float *x = nullptr, *bias = nullptr;
  int64_t n = 1, rows = 0;
  Tensor sum;

  GeluArgument(const Tensor &in, const Tensor *b, const char *what) {
    checkDType(in, DType::F32, what, "input");
    n = in.rank() ? in.shape().back() : 1;
    rows = n ? in.numElements() / n : 0;
    x = in.data<float>();
    if (!b)
      return;
    checkDType(*b, DType::F32, what, "bias");
    if (in.rank() >= 1 && b->rank() >= 1 && b->rank() <= in.rank() &&
        b->shape().back() == n && b->numElements() == n) {
      bias = b->data<float>();
    } else {
      sum = Tensor(in.type());
      binary(BinaryOp::Add, in, *b, sum);
      x = sum.data<float>();
    }
  }
};
} // namespace

void shoal::rt::cpu::gelu(const Tensor &x, const Tensor *bias, Tensor &out,
                          bool tanhForm) {
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    checkOutput(out, x.dtype(), x.shape(), "Gelu");
    Tensor r(DType::F32, x.shape()), b = bias ? stage(*bias) : Tensor();
    gelu(toF32(x), bias ? &b : nullptr, r, tanhForm);
    return fromF32(r, out);
  }
  checkOutput(out, DType::F32, x.shape(), "Gelu");
  GeluArgument z(x, bias, "Gelu");
  const VectorKernels &vk = vectorKernels();
  float *o = out.data<float>();
  parallelFor(z.rows, 30 * z.n, [&](int64_t r0, int64_t r1) {
    vk.gelu(z.x, z.bias, o, z.n, r0, r1, tanhForm);
  });
}

void shoal::rt::cpu::geluGrad(const Tensor &dy, const Tensor &x,
                              const Tensor *bias, Tensor &out, bool tanhForm) {
  if (dy.type() != x.type())
    throw Error(fmt::format("GeluGrad: dy and x have different types ({} and "
                            "{})",
                            dy.type().str(), x.type().str()));
  if (isHalfDType(x.dtype())) { // in f32, rounded once
    checkOutput(out, x.dtype(), x.shape(), "GeluGrad");
    Tensor r(DType::F32, x.shape()), b = bias ? stage(*bias) : Tensor();
    geluGrad(toF32(dy), toF32(x), bias ? &b : nullptr, r, tanhForm);
    return fromF32(r, out);
  }
  checkOutput(out, DType::F32, x.shape(), "GeluGrad");
  GeluArgument z(x, bias, "GeluGrad");
  const VectorKernels &vk = vectorKernels();
  const float *d = dy.data<float>();
  float *o = out.data<float>();
  parallelFor(z.rows, 40 * z.n, [&](int64_t r0, int64_t r1) {
    vk.geluGrad(d, z.x, z.bias, o, z.n, r0, r1, tanhForm);
  });
}

//===----------------------------------------------------------------------===//
// Cast, Where, comparisons, logic and math
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::cast(const Tensor &x, Tensor &out) {
  if (!out.defined() || out.shape() != x.shape())
    checkOutput(out, out.defined() ? out.dtype() : DType::F32, x.shape(),
                "Cast");
  int64_t n = x.numElements();
  visitDType(x.dtype(), [&](auto from) {
    using From = typename decltype(from)::type;
    const From *src = static_cast<const From *>(x.rawData());
    visitDType(out.dtype(), [&](auto to) {
      using To = typename decltype(to)::type;
      To *dst = static_cast<To *>(out.rawData());
      for (int64_t i = 0; i < n; ++i)
        dst[i] = convertElem<To>(src[i]);
    });
  });
}

void shoal::rt::cpu::where(const Tensor &cond, const Tensor &x, const Tensor &y,
                           Tensor &out) {
  checkDType(cond, DType::Bool, "Where", "condition");
  if (x.dtype() != y.dtype())
    throw Error(fmt::format("Where: X and Y have different dtypes ({} and {})",
                            x.type().str(), y.type().str()));
  Shape shape =
      broadcastShape(broadcastShape(cond.shape(), x.shape()), y.shape());
  checkOutput(out, x.dtype(), shape, "Where");
  const uint8_t *pc = cond.data<uint8_t>();
  byElementSize(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = static_cast<const T *>(x.rawData());
    const T *py = static_cast<const T *>(y.rawData());
    T *po = static_cast<T *>(out.rawData());
    forEachBroadcast<3>({&cond.shape(), &x.shape(), &y.shape()}, shape,
                        [&](const std::array<int64_t, 3> &off, int64_t oo,
                            int64_t n, const std::array<int64_t, 3> &s) {
                          for (int64_t i = 0; i < n; ++i)
                            po[oo + i] = pc[off[0] + i * s[0]]
                                             ? px[off[1] + i * s[1]]
                                             : py[off[2] + i * s[2]];
                        });
  });
}

namespace {
const char *compareName(CompareOp op) {
  switch (op) {
  case CompareOp::Equal:
    return "Equal";
  case CompareOp::Less:
    return "Less";
  case CompareOp::Greater:
    return "Greater";
  case CompareOp::LessOrEqual:
    return "LessOrEqual";
  case CompareOp::GreaterOrEqual:
    return "GreaterOrEqual";
  }
  return "?";
}

template <typename T>
void compareTyped(CompareOp op, const Tensor &a, const Tensor &b, Tensor &out) {
  switch (op) {
  case CompareOp::Equal:
    return map2<T, uint8_t>(a, b, out,
                            [](T x, T y) { return uint8_t(x == y); });
  case CompareOp::Less:
    return map2<T, uint8_t>(a, b, out, [](T x, T y) { return uint8_t(x < y); });
  case CompareOp::Greater:
    return map2<T, uint8_t>(a, b, out, [](T x, T y) { return uint8_t(x > y); });
  case CompareOp::LessOrEqual:
    return map2<T, uint8_t>(a, b, out,
                            [](T x, T y) { return uint8_t(x <= y); });
  case CompareOp::GreaterOrEqual:
    return map2<T, uint8_t>(a, b, out,
                            [](T x, T y) { return uint8_t(x >= y); });
  }
}
} // namespace

void shoal::rt::cpu::compare(CompareOp op, const Tensor &a, const Tensor &b,
                             Tensor &out) {
  const char *name = compareName(op);
  if (a.dtype() != b.dtype())
    throw Error(fmt::format("{}: operands have different dtypes ({} and {})",
                            name, a.type().str(), b.type().str()));
  checkOutput(out, DType::Bool, broadcastShape(a.shape(), b.shape()), name);
  if (a.dtype() == DType::Bool) {
    if (op != CompareOp::Equal)
      throw Error(fmt::format("{} is not supported on bool tensors", name));
    return compareTyped<uint8_t>(op, a, b, out);
  }
  if (isHalfDType(a.dtype())) // exact in f32
    return compareTyped<float>(op, toF32(a), toF32(b), out);
  byNumericType(a.dtype(), [&](auto tag) {
    compareTyped<typename decltype(tag)::type>(op, a, b, out);
  });
}

void shoal::rt::cpu::logical(LogicOp op, const Tensor &a, const Tensor &b,
                             Tensor &out) {
  const char *name = op == LogicOp::And  ? "And"
                     : op == LogicOp::Or ? "Or"
                                         : "Xor";
  checkDType(a, DType::Bool, name, "A");
  checkDType(b, DType::Bool, name, "B");
  checkOutput(out, DType::Bool, broadcastShape(a.shape(), b.shape()), name);
  switch (op) {
  case LogicOp::And:
    return map2<uint8_t, uint8_t>(
        a, b, out, [](uint8_t x, uint8_t y) { return uint8_t(x && y); });
  case LogicOp::Or:
    return map2<uint8_t, uint8_t>(
        a, b, out, [](uint8_t x, uint8_t y) { return uint8_t(x || y); });
  case LogicOp::Xor:
    return map2<uint8_t, uint8_t>(a, b, out, [](uint8_t x, uint8_t y) {
      return uint8_t((x != 0) != (y != 0));
    });
  }
}

void shoal::rt::cpu::logicalNot(const Tensor &x, Tensor &out) {
  checkDType(x, DType::Bool, "Not", "input");
  checkOutput(out, DType::Bool, x.shape(), "Not");
  const uint8_t *px = x.data<uint8_t>();
  uint8_t *po = out.data<uint8_t>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    po[i] = px[i] ? 0 : 1;
}

namespace {
const char *mathName(MathOp op) {
  switch (op) {
  case MathOp::Sin:
    return "Sin";
  case MathOp::Cos:
    return "Cos";
  case MathOp::Abs:
    return "Abs";
  case MathOp::Log:
    return "Log";
  case MathOp::Reciprocal:
    return "Reciprocal";
  case MathOp::Floor:
    return "Floor";
  case MathOp::Ceil:
    return "Ceil";
  }
  return "?";
}

template <typename T, typename F>
void mapUnary(const Tensor &x, Tensor &out, F f) {
  const T *px = static_cast<const T *>(x.rawData());
  T *po = static_cast<T *>(out.rawData());
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    po[i] = f(px[i]);
}

template <typename T> T absInt(T v) {
  // Through the unsigned type, so that the minimum wraps instead of
  // overflowing.
  using U = typename std::make_unsigned<T>::type;
  U u = static_cast<U>(v);
  return static_cast<T>(v < 0 ? U(U(0) - u) : u);
}
} // namespace

namespace {
template <typename T> void mathFloat(MathOp op, const Tensor &x, Tensor &out) {
  switch (op) {
  case MathOp::Sin:
    return mapUnary<T>(x, out, [](T v) { return std::sin(v); });
  case MathOp::Cos:
    return mapUnary<T>(x, out, [](T v) { return std::cos(v); });
  case MathOp::Abs:
    return mapUnary<T>(x, out, [](T v) { return std::fabs(v); });
  case MathOp::Log:
    return mapUnary<T>(x, out, [](T v) { return std::log(v); });
  case MathOp::Reciprocal:
    return mapUnary<T>(x, out, [](T v) { return T(1) / v; });
  case MathOp::Floor:
    return mapUnary<T>(x, out, [](T v) { return std::floor(v); });
  case MathOp::Ceil:
    return mapUnary<T>(x, out, [](T v) { return std::ceil(v); });
  }
}
} // namespace

void shoal::rt::cpu::math(MathOp op, const Tensor &x, Tensor &out) {
  const char *name = mathName(op);
  checkOutput(out, x.dtype(), x.shape(), name);
  switch (x.dtype()) {
  case DType::F32:
    return mathFloat<float>(op, x, out);
  case DType::F64:
    return mathFloat<double>(op, x, out);
  case DType::F16:
  case DType::BF16: {
    Tensor f = toF32(x), r(DType::F32, x.shape());
    mathFloat<float>(op, f, r);
    return fromF32(r, out);
  }
  case DType::I64:
  case DType::I32:
  case DType::I8:
  case DType::U8:
    if (op != MathOp::Abs)
      break;
    return byNumericType(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral<T>::value && std::is_signed<T>::value)
        mapUnary<T>(x, out, absInt<T>);
      else // u8 (the float types are handled above)
        mapUnary<T>(x, out, [](T v) { return v; });
    });
  case DType::Bool:
    break;
  }
  throw Error(fmt::format("{} is not supported on {} tensors", name,
                          dtypeName(x.dtype())));
}

void shoal::rt::cpu::minMax(MinMaxOp op,
                            const std::vector<const Tensor *> &inputs,
                            Tensor &out) {
  const char *name = op == MinMaxOp::Max ? "Max" : "Min";
  if (inputs.empty())
    throw Error(fmt::format("{} needs at least one input", name));
  DType dtype = inputs[0]->dtype();
  Shape shape = inputs[0]->shape();
  for (const Tensor *t : inputs) {
    if (t->dtype() != dtype)
      throw Error(fmt::format("{}: inputs have different dtypes ({} and {})",
                              name, inputs[0]->type().str(), t->type().str()));
    shape = broadcastShape(shape, t->shape());
  }
  if (isHalfDType(dtype)) { // exact in f32
    checkOutput(out, dtype, shape, name);
    std::vector<Tensor> wide;
    std::vector<const Tensor *> ptrs;
    for (const Tensor *t : inputs)
      wide.push_back(toF32(*t));
    for (const Tensor &t : wide)
      ptrs.push_back(&t);
    Tensor r(DType::F32, shape);
    minMax(op, ptrs, r);
    return fromF32(r, out);
  }
  if (!isNumeric(dtype))
    throw Error(fmt::format("{} is not supported on {} tensors", name,
                            dtypeName(dtype)));
  checkOutput(out, dtype, shape, name);
  if (inputs.size() == 1) {
    std::memcpy(out.rawData(), inputs[0]->rawData(), out.numBytes());
    return;
  }
  byNumericType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto f = [op](T a, T b) -> T {
      if constexpr (std::is_floating_point<T>::value) {
        if (std::isnan(a))
          return a;
        if (std::isnan(b))
          return b;
      }
      return op == MinMaxOp::Max ? (a < b ? b : a) : (b < a ? b : a);
    };
    // Fold left to right; intermediate results broadcast only as far as the
    // inputs so far do.
    Tensor acc = *inputs[0];
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      Shape s = broadcastShape(acc.shape(), inputs[i]->shape());
      Tensor next = i + 1 == inputs.size() ? out : Tensor(dtype, s);
      map2<T, T>(acc, *inputs[i], next, f);
      acc = next;
    }
  });
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

template <BinaryOp Op> SHOAL_CPU_KERNEL(binaryKernel) {
  binary(Op, input(in, 0), input(in, 1), out[0]);
}

template <UnaryOp Op> SHOAL_CPU_KERNEL(unaryKernel) {
  unary(Op, input(in, 0), out[0]);
}

template <MathOp Op> SHOAL_CPU_KERNEL(mathKernel) {
  math(Op, input(in, 0), out[0]);
}

template <MinMaxOp Op> SHOAL_CPU_KERNEL(minMaxKernel) {
  std::vector<const Tensor *> all;
  for (std::size_t i = 0; i < in.size(); ++i)
    all.push_back(&input(in, i));
  minMax(Op, all, out[0]);
}

template <CompareOp Op> SHOAL_CPU_KERNEL(compareKernel) {
  compare(Op, input(in, 0), input(in, 1), out[0]);
}

template <LogicOp Op> SHOAL_CPU_KERNEL(logicKernel) {
  logical(Op, input(in, 0), input(in, 1), out[0]);
}

SHOAL_CPU_KERNEL(notKernel) { logicalNot(input(in, 0), out[0]); }

SHOAL_CPU_KERNEL(whereKernel) {
  where(input(in, 0), input(in, 1), input(in, 2), out[0]);
}

SHOAL_CPU_KERNEL(castKernel) { cast(input(in, 0), out[0]); }

template <bool Swish> SHOAL_CPU_KERNEL(hardSigmoidKernel) {
  hardSigmoid(input(in, 0), op.attrs.alpha, op.attrs.beta, Swish, out[0]);
}

SHOAL_CPU_KERNEL(modKernel) {
  mod(input(in, 0), input(in, 1), op.attrs.fmod, out[0]);
}

SHOAL_CPU_KERNEL(geluKernel) {
  gelu(input(in, 0), optionalInput(in, 1), out[0], op.attrs.tanhGelu);
}

SHOAL_CPU_KERNEL(geluGradKernel) {
  geluGrad(input(in, 0), input(in, 1), optionalInput(in, 2), out[0],
           op.attrs.tanhGelu);
}

} // namespace

void shoal::rt::cpu::registerElementwiseKernels() {
  registerCpuKernel(OpKind::Add, binaryKernel<BinaryOp::Add>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Sub, binaryKernel<BinaryOp::Sub>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Mul, binaryKernel<BinaryOp::Mul>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Div, binaryKernel<BinaryOp::Div>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Pow, binaryKernel<BinaryOp::Pow>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Erf, unaryKernel<UnaryOp::Erf>, KernelWrites::All);
  registerCpuKernel(OpKind::Tanh, unaryKernel<UnaryOp::Tanh>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Relu, unaryKernel<UnaryOp::Relu>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Sqrt, unaryKernel<UnaryOp::Sqrt>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Exp, unaryKernel<UnaryOp::Exp>, KernelWrites::All);
  registerCpuKernel(OpKind::Neg, unaryKernel<UnaryOp::Neg>, KernelWrites::All);
  registerCpuKernel(OpKind::Sigmoid, unaryKernel<UnaryOp::Sigmoid>,
                    KernelWrites::All);
  registerCpuKernel(OpKind::Sin, mathKernel<MathOp::Sin>);
  registerCpuKernel(OpKind::Cos, mathKernel<MathOp::Cos>);
  registerCpuKernel(OpKind::Abs, mathKernel<MathOp::Abs>);
  registerCpuKernel(OpKind::Log, mathKernel<MathOp::Log>);
  registerCpuKernel(OpKind::Reciprocal, mathKernel<MathOp::Reciprocal>);
  registerCpuKernel(OpKind::Floor, mathKernel<MathOp::Floor>);
  registerCpuKernel(OpKind::Ceil, mathKernel<MathOp::Ceil>);
  registerCpuKernel(OpKind::Max, minMaxKernel<MinMaxOp::Max>);
  registerCpuKernel(OpKind::Min, minMaxKernel<MinMaxOp::Min>);
  registerCpuKernel(OpKind::Equal, compareKernel<CompareOp::Equal>);
  registerCpuKernel(OpKind::Less, compareKernel<CompareOp::Less>);
  registerCpuKernel(OpKind::Greater, compareKernel<CompareOp::Greater>);
  registerCpuKernel(OpKind::LessOrEqual, compareKernel<CompareOp::LessOrEqual>);
  registerCpuKernel(OpKind::GreaterOrEqual,
                    compareKernel<CompareOp::GreaterOrEqual>);
  registerCpuKernel(OpKind::And, logicKernel<LogicOp::And>);
  registerCpuKernel(OpKind::Or, logicKernel<LogicOp::Or>);
  registerCpuKernel(OpKind::Xor, logicKernel<LogicOp::Xor>);
  registerCpuKernel(OpKind::Not, notKernel);
  registerCpuKernel(OpKind::Where, whereKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Cast, castKernel, KernelWrites::All);
  registerCpuKernel(OpKind::HardSigmoid, hardSigmoidKernel<false>);
  registerCpuKernel(OpKind::HardSwish, hardSigmoidKernel<true>);
  registerCpuKernel(OpKind::Mod, modKernel);
  registerCpuKernel(OpKind::Gelu, geluKernel, KernelWrites::All);
  registerCpuKernel(OpKind::GeluGrad, geluGradKernel, KernelWrites::All);
}
