//===- Kernels2.cpp - More CPU kernels of the runtime -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Cast, Where, comparisons and logic, more element-wise math, Max/Min,
// Concat, Split, Slice, Expand, Pad, Conv, BatchNormalization, the pools,
// GatherElements, ScatterElements and TopK, with ONNX semantics.
//
//===----------------------------------------------------------------------===//

#include "cpu/DTypes.h"
#include "cpu/Kernels.h"
#include "cpu/LoopNest.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

void checkOut(const Tensor &out, DType dtype, const Shape &shape,
              const char *what) {
  if (!out.defined() || out.dtype() != dtype || out.shape() != shape)
    throw Error(fmt::format("{}: output is {} but the inputs give {}", what,
                            out.defined() ? out.type().str() : "undefined",
                            TensorType{dtype, shape}.str()));
}

void checkIn(const Tensor &t, DType dtype, const char *what,
             const char *operand) {
  if (t.dtype() != dtype)
    throw Error(fmt::format("{}: {} must be {}, got {}", what, operand,
                            dtypeName(dtype), t.type().str()));
}

/// The dtypes that the numeric kernels compute with in their own type (f16
/// and bf16 are staged through f32 by the callers).
bool isNumeric(DType d) {
  return d == DType::F32 || d == DType::F64 || isIntegerDType(d);
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Calls body(offsets, outOffset, n, strides) for every innermost run of a
/// broadcast of K inputs to the dense row-major `out` shape; adjacent
/// dimensions are merged where every input allows it.
template <std::size_t K, typename Body>
void forEachBroadcast(const std::array<const Shape *, K> &in, const Shape &out,
                      Body body) {
  if (numElements(out) == 0)
    return;
  std::size_t rank = out.size();
  std::vector<std::vector<int64_t>> full;
  for (std::size_t k = 0; k < K; ++k)
    full.push_back(broadcastStrides(*in[k], rank));
  // The output is dense, so only the inputs limit which dimensions merge.
  LoopNest nest(out, full);
  const Shape &dims = nest.dims;
  const std::vector<std::vector<int64_t>> &st = nest.strides;
  std::size_t inner = dims.size() - 1;
  int64_t n = dims[inner];
  std::array<int64_t, K> off{}, sInner{};
  for (std::size_t k = 0; k < K; ++k)
    sInner[k] = st[k][inner];
  std::vector<int64_t> idx(inner, 0);
  int64_t oo = 0;
  while (true) {
    body(off, oo, n, sInner);
    oo += n;
    std::size_t d = inner;
    while (d-- > 0) {
      ++idx[d];
      for (std::size_t k = 0; k < K; ++k)
        off[k] += st[k][d];
      if (idx[d] < dims[d])
        break;
      for (std::size_t k = 0; k < K; ++k)
        off[k] -= st[k][d] * dims[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
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

/// Calls f(Tag<U>) with an unsigned type U of the dtype's element size, for
/// kernels that only move elements.
template <typename F> void byElementSize(DType dtype, F &&f) {
  switch (dtypeSize(dtype)) {
  case 1:
    f(Tag<uint8_t>{});
    return;
  case 2:
    f(Tag<uint16_t>{});
    return;
  case 4:
    f(Tag<uint32_t>{});
    return;
  default:
    f(Tag<uint64_t>{});
    return;
  }
}

/// Calls f(Tag<T>) with the C++ element type of a dtype for which
/// isNumeric holds.
template <typename F> void byNumericType(DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    f(Tag<float>{});
    return;
  case DType::F64:
    f(Tag<double>{});
    return;
  case DType::I64:
    f(Tag<int64_t>{});
    return;
  case DType::I32:
    f(Tag<int32_t>{});
    return;
  case DType::I8:
    f(Tag<int8_t>{});
    return;
  case DType::U8:
    f(Tag<uint8_t>{});
    return;
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
    break;
  }
  throw Error(fmt::format("internal error: {} passed to a numeric kernel",
                          dtypeName(dtype)));
}

/// Reads index `i` of an i64 or i32 tensor.
int64_t indexAt(const Tensor &t, int64_t i) {
  return t.dtype() == DType::I64 ? t.data<int64_t>()[i]
                                 : int64_t(t.data<int32_t>()[i]);
}

void sgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
           const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
           const char *what) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX)
      throw Error(
          fmt::format("{}: dimension {} is too large for BLAS", what, v));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k),
              1.f, a, int(std::max<int64_t>(lda, 1)), b,
              int(std::max<int64_t>(ldb, 1)), beta, c,
              int(std::max<int64_t>(ldc, 1)));
}

} // namespace

//===----------------------------------------------------------------------===//
// Cast, Where, comparisons, logic and math
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::cast(const Tensor &x, Tensor &out) {
  if (!out.defined() || out.shape() != x.shape())
    checkOut(out, out.defined() ? out.dtype() : DType::F32, x.shape(), "Cast");
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

Tensor shoal::rt::cpu::toF32(const Tensor &t) {
  if (t.dtype() == DType::F32)
    return t;
  Tensor f(DType::F32, t.shape());
  cast(t, f);
  return f;
}

void shoal::rt::cpu::fromF32(const Tensor &f, Tensor &out) { cast(f, out); }

void shoal::rt::cpu::where(const Tensor &cond, const Tensor &x, const Tensor &y,
                           Tensor &out) {
  checkIn(cond, DType::Bool, "Where", "condition");
  if (x.dtype() != y.dtype())
    throw Error(fmt::format("Where: X and Y have different dtypes ({} and {})",
                            x.type().str(), y.type().str()));
  Shape shape =
      broadcastShape(broadcastShape(cond.shape(), x.shape()), y.shape());
  checkOut(out, x.dtype(), shape, "Where");
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
  checkOut(out, DType::Bool, broadcastShape(a.shape(), b.shape()), name);
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
  checkIn(a, DType::Bool, name, "A");
  checkIn(b, DType::Bool, name, "B");
  checkOut(out, DType::Bool, broadcastShape(a.shape(), b.shape()), name);
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
  checkIn(x, DType::Bool, "Not", "input");
  checkOut(out, DType::Bool, x.shape(), "Not");
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
  checkOut(out, x.dtype(), x.shape(), name);
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
    checkOut(out, dtype, shape, name);
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
  checkOut(out, dtype, shape, name);
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
// Data movement
//===----------------------------------------------------------------------===//

void shoal::rt::cpu::concat(const std::vector<const Tensor *> &inputs,
                            int64_t axis, Tensor &out) {
  if (inputs.empty())
    throw Error("Concat needs at least one input");
  std::vector<Shape> shapes;
  for (const Tensor *t : inputs) {
    if (t->dtype() != inputs[0]->dtype())
      throw Error(fmt::format("Concat: inputs have different dtypes ({} and "
                              "{})",
                              inputs[0]->type().str(), t->type().str()));
    shapes.push_back(t->shape());
  }
  Shape shape = concatShape(shapes, axis);
  checkOut(out, inputs[0]->dtype(), shape, "Concat");
  std::size_t esz = dtypeSize(out.dtype());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  std::vector<std::size_t> chunk;
  for (const Shape &s : shapes)
    chunk.push_back(static_cast<std::size_t>(
                        numElements(Shape(s.begin() + axis, s.end()))) *
                    esz);
  uint8_t *dst = out.bytes();
  for (int64_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (chunk[i])
        std::memcpy(dst, inputs[i]->bytes() + o * chunk[i], chunk[i]);
      dst += chunk[i];
    }
}

void shoal::rt::cpu::split(const Tensor &x, int64_t axis,
                           const std::vector<int64_t> &sizes,
                           const std::vector<Tensor *> &outs) {
  const Shape &s = x.shape();
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("Split: axis {} is out of range for {}", axis,
                            x.type().str()));
  if (sizes.size() != outs.size())
    throw Error(fmt::format("Split: {} sizes for {} outputs", sizes.size(),
                            outs.size()));
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0)
      throw Error(fmt::format("Split: negative size {}", v));
    total += v;
  }
  if (total != s[axis])
    throw Error(fmt::format("Split: sizes add up to {}, but axis {} of {} has "
                            "{}",
                            total, axis, x.type().str(), s[axis]));
  std::size_t esz = dtypeSize(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::size_t rowBytes = static_cast<std::size_t>(s[axis] * inner) * esz;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    std::size_t chunk = static_cast<std::size_t>(sizes[i] * inner) * esz;
    if (outs[i]) {
      Shape os = s;
      os[axis] = sizes[i];
      checkOut(*outs[i], x.dtype(), os, "Split");
      uint8_t *dst = outs[i]->bytes();
      for (int64_t o = 0; o < outer && chunk; ++o)
        std::memcpy(dst + o * chunk, x.bytes() + o * rowBytes + offset, chunk);
    }
    offset += chunk;
  }
}

void shoal::rt::cpu::slice(const Tensor &x, const std::vector<int64_t> &first,
                           const std::vector<int64_t> &step, Tensor &out) {
  const Shape &in = x.shape();
  const Shape &os = out.shape();
  std::size_t rank = in.size();
  if (first.size() != rank || step.size() != rank || out.dtype() != x.dtype() ||
      os.size() != rank)
    throw Error(fmt::format("Slice: output {} does not fit input {}",
                            out.type().str(), x.type().str()));
  // Every element read must lie inside the input.
  for (std::size_t d = 0; d < rank; ++d) {
    if (os[d] == 0)
      continue;
    int64_t last = first[d] + (os[d] - 1) * step[d];
    if (first[d] < 0 || first[d] >= in[d] || last < 0 || last >= in[d])
      throw Error(fmt::format("Slice: {} elements from {} by {} do not fit "
                              "dimension {} of size {}",
                              os[d], first[d], step[d], d, in[d]));
  }
  if (out.numElements() == 0)
    return;
  std::vector<int64_t> is = rowMajorStrides(in);
  int64_t base = 0;
  std::vector<int64_t> st(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    base += first[d] * is[d];
    st[d] = step[d] * is[d];
  }
  byElementSize(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(x.rawData());
    T *dst = static_cast<T *>(out.rawData());
    if (rank == 0) {
      dst[0] = src[0];
      return;
    }
    std::size_t inner = rank - 1;
    int64_t n = os[inner], sInner = st[inner];
    std::vector<int64_t> idx(inner, 0);
    int64_t off = base;
    while (true) {
      if (sInner == 1)
        std::memcpy(dst, src + off, n * sizeof(T));
      else
        for (int64_t i = 0; i < n; ++i)
          dst[i] = src[off + i * sInner];
      dst += n;
      std::size_t d = inner;
      while (d-- > 0) {
        ++idx[d];
        off += st[d];
        if (idx[d] < os[d])
          break;
        off -= st[d] * os[d];
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  });
}

void shoal::rt::cpu::expand(const Tensor &x, Tensor &out) {
  if (out.dtype() != x.dtype() || !broadcastsTo(x.shape(), out.shape()))
    throw Error(fmt::format("Expand: input {} does not broadcast to the "
                            "output {}",
                            x.type().str(), out.type().str()));
  byElementSize(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(x.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachBroadcast<1>({&x.shape()}, out.shape(),
                        [&](const std::array<int64_t, 1> &off, int64_t oo,
                            int64_t n, const std::array<int64_t, 1> &s) {
                          if (s[0] == 1)
                            std::memcpy(dst + oo, src + off[0], n * sizeof(T));
                          else
                            for (int64_t i = 0; i < n; ++i)
                              dst[oo + i] = src[off[0] + i * s[0]];
                        });
  });
}

void shoal::rt::cpu::pad(const Tensor &x, const std::vector<int64_t> &pads,
                         PadMode mode, double value, Tensor &out) {
  const Shape &in = x.shape();
  std::size_t rank = in.size();
  if (pads.size() != 2 * rank)
    throw Error(
        fmt::format("Pad: {} pads for a rank-{} input", pads.size(), rank));
  Shape shape(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    shape[d] = in[d] + pads[d] + pads[d + rank];
    if (shape[d] < 0)
      throw Error(fmt::format("Pad: pads {} and {} crop more than dimension "
                              "{} of size {}",
                              pads[d], pads[d + rank], d, in[d]));
    if (mode != PadMode::Constant && in[d] == 0 && shape[d] > 0)
      throw Error(fmt::format("Pad: cannot pad the empty dimension {} in "
                              "{} mode",
                              d, mode == PadMode::Edge ? "edge" : "reflect"));
  }
  checkOut(out, x.dtype(), shape, "Pad");
  if (out.numElements() == 0)
    return;
  // Source index of every output index along every dimension; -1 is the
  // constant.
  std::vector<std::vector<int64_t>> src(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    src[d].resize(shape[d]);
    for (int64_t o = 0; o < shape[d]; ++o) {
      int64_t i = o - pads[d], n = in[d];
      if (i < 0 || i >= n) {
        if (mode == PadMode::Constant) {
          i = -1;
        } else if (mode == PadMode::Edge) {
          i = i < 0 ? 0 : n - 1;
        } else if (n == 1) {
          i = 0;
        } else {
          int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          if (i >= n)
            i = period - i;
        }
      }
      src[d][o] = i;
    }
  }
  std::vector<int64_t> is = rowMajorStrides(in);
  auto fill = [&](auto tag) {
    using T = typename decltype(tag)::type;
    T c = narrow<T>(value);
    const T *px = static_cast<const T *>(x.rawData());
    T *po = static_cast<T *>(out.rawData());
    if (rank == 0) {
      po[0] = px[0];
      return;
    }
    std::size_t inner = rank - 1;
    int64_t n = shape[inner];
    const std::vector<int64_t> &srcInner = src[inner];
    std::vector<int64_t> idx(inner, 0);
    while (true) {
      bool constant = false;
      int64_t base = 0;
      for (std::size_t d = 0; d < inner; ++d) {
        int64_t i = src[d][idx[d]];
        if (i < 0)
          constant = true;
        base += i * is[d];
      }
      for (int64_t j = 0; j < n; ++j) {
        int64_t i = srcInner[j];
        po[j] = constant || i < 0 ? c : px[base + i];
      }
      po += n;
      std::size_t d = inner;
      while (d-- > 0) {
        if (++idx[d] < shape[d])
          break;
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  };
  visitDType(x.dtype(), fill);
}

namespace {
/// Checks GatherElements/ScatterElements operands: indices of data's rank,
/// no larger than data outside `axis`.
void checkElementsIndices(const Tensor &data, const Tensor &indices,
                          int64_t axis, const char *what) {
  if (indices.dtype() != DType::I64 && indices.dtype() != DType::I32)
    throw Error(fmt::format("{}: indices must be i64 or i32, got {}", what,
                            indices.type().str()));
  if (axis < 0 || axis >= data.rank() || indices.rank() != data.rank())
    throw Error(fmt::format("{}: indices {} do not fit data {} along axis {}",
                            what, indices.type().str(), data.type().str(),
                            axis));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape()[d] > data.shape()[d])
      throw Error(fmt::format("{}: indices {} are larger than data {} along "
                              "dimension {}",
                              what, indices.type().str(), data.type().str(),
                              d));
}

/// Calls f(i, dataOffset) for every position i of `indices` (row-major),
/// dataOffset being the flat offset in data of that position with the
/// coordinate along `axis` replaced by the (checked, wrapped) index.
template <typename F>
void forEachElementIndex(const Tensor &data, const Tensor &indices,
                         int64_t axis, const char *what, F f) {
  const Shape &is = indices.shape();
  int64_t total = indices.numElements();
  if (total == 0)
    return;
  std::vector<int64_t> ds = rowMajorStrides(data.shape());
  int64_t axisLen = data.shape()[axis];
  std::size_t rank = is.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t base = 0; // offset of idx in data, without the axis coordinate
  for (int64_t i = 0; i < total; ++i) {
    int64_t v = indexAt(indices, i);
    int64_t w = v < 0 ? v + axisLen : v;
    if (w < 0 || w >= axisLen)
      throw Error(fmt::format("{}: index {} (at position {} of the indices) "
                              "is out of range for axis {} of size {}",
                              what, v, i, axis, axisLen));
    f(i, base + w * ds[axis]);
    for (std::size_t d = rank; d-- > 0;) {
      ++idx[d];
      if (int64_t(d) != axis)
        base += ds[d];
      if (idx[d] < is[d])
        break;
      if (int64_t(d) != axis)
        base -= ds[d] * is[d];
      idx[d] = 0;
    }
  }
}
} // namespace

void shoal::rt::cpu::gatherElements(const Tensor &data, const Tensor &indices,
                                    int64_t axis, Tensor &out) {
  checkElementsIndices(data, indices, axis, "GatherElements");
  checkOut(out, data.dtype(), indices.shape(), "GatherElements");
  byElementSize(data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(data.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachElementIndex(data, indices, axis, "GatherElements",
                        [&](int64_t i, int64_t off) { dst[i] = src[off]; });
  });
}

void shoal::rt::cpu::scatterElements(const Tensor &data, const Tensor &indices,
                                     const Tensor &updates, int64_t axis,
                                     ScatterReduction reduction, Tensor &out) {
  const char *what = "ScatterElements";
  checkElementsIndices(data, indices, axis, what);
  if (updates.dtype() != data.dtype() || updates.shape() != indices.shape())
    throw Error(fmt::format("{}: updates {} must have data's dtype ({}) and "
                            "the indices' shape {}",
                            what, updates.type().str(), dtypeName(data.dtype()),
                            formatShape(indices.shape())));
  checkOut(out, data.dtype(), data.shape(), what);
  std::memcpy(out.rawData(), data.rawData(), data.numBytes());
  if (reduction == ScatterReduction::None) {
    byElementSize(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *up = static_cast<const T *>(updates.rawData());
      T *dst = static_cast<T *>(out.rawData());
      forEachElementIndex(data, indices, axis, what,
                          [&](int64_t i, int64_t off) { dst[off] = up[i]; });
    });
    return;
  }
  if (!isNumeric(data.dtype()))
    throw Error(fmt::format("{}: reductions are not supported on {} tensors",
                            what, dtypeName(data.dtype())));
  byNumericType(data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *up = static_cast<const T *>(updates.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachElementIndex(data, indices, axis, what, [&](int64_t i, int64_t off) {
      T &d = dst[off];
      T u = up[i];
      switch (reduction) {
      case ScatterReduction::None:
        d = u;
        break;
      case ScatterReduction::Add:
        d = T(d + u);
        break;
      case ScatterReduction::Mul:
        d = T(d * u);
        break;
      case ScatterReduction::Max:
        d = d < u ? u : d;
        break;
      case ScatterReduction::Min:
        d = u < d ? u : d;
        break;
      }
    });
  });
}

void shoal::rt::cpu::topK(const Tensor &x, int64_t k, int64_t axis,
                          bool largest, Tensor &values, Tensor *indices) {
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("TopK: axis {} is out of range for {}", axis,
                            x.type().str()));
  const Shape &s = x.shape();
  if (k < 0 || k > s[axis])
    throw Error(fmt::format("TopK: k = {} is out of range for axis {} of size "
                            "{}",
                            k, axis, s[axis]));
  if (isHalfDType(x.dtype())) { // exact in f32
    Shape os = s;
    os[axis] = k;
    checkOut(values, x.dtype(), os, "TopK");
    Tensor v(DType::F32, os);
    topK(toF32(x), k, axis, largest, v, indices);
    return fromF32(v, values);
  }
  if (!isNumeric(x.dtype()))
    throw Error(fmt::format("TopK is not supported on {} tensors",
                            dtypeName(x.dtype())));
  Shape os = s;
  os[axis] = k;
  checkOut(values, x.dtype(), os, "TopK");
  if (indices)
    checkOut(*indices, DType::I64, os, "TopK indices");
  int64_t outer = 1, n = s[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  if (k == 0 || outer * inner == 0)
    return;
  byNumericType(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // A total order in which NaN is larger than every number.
    auto greater = [](T a, T b) {
      if constexpr (std::is_floating_point<T>::value) {
        if (std::isnan(a))
          return !std::isnan(b);
        if (std::isnan(b))
          return false;
      }
      return a > b;
    };
    using Entry = std::pair<T, int64_t>;
    auto before = [&](const Entry &p, const Entry &q) {
      if (largest ? greater(p.first, q.first) : greater(q.first, p.first))
        return true;
      if (largest ? greater(q.first, p.first) : greater(p.first, q.first))
        return false;
      return p.second < q.second;
    };
    const T *px = x.data<T>();
    T *pv = values.data<T>();
    int64_t *pi = indices ? indices->data<int64_t>() : nullptr;
    std::vector<Entry> row(static_cast<std::size_t>(n));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T *src = px + o * n * inner + i;
        for (int64_t j = 0; j < n; ++j)
          row[j] = {src[j * inner], j};
        std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
        int64_t base = o * k * inner + i;
        for (int64_t j = 0; j < k; ++j) {
          pv[base + j * inner] = row[j].first;
          if (pi)
            pi[base + j * inner] = row[j].second;
        }
      }
  });
}

//===----------------------------------------------------------------------===//
// Convolution, normalization and pooling
//===----------------------------------------------------------------------===//

namespace {

/// Lays out the windows of `channels` planes of `x` (spatial shape `in`) as
/// a [channels * prod(kernel), prod(outSp)] matrix, zeros where a window
/// reads padding.
void im2col(const float *x, int64_t channels, const Shape &in,
            const Shape &outSp, const WindowParams &w, float *col) {
  std::size_t sr = in.size();
  int64_t kn = numElements(w.kernel), p = numElements(outSp);
  int64_t inPlane = numElements(in);
  if (p == 0)
    return;
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t last = sr - 1;
  int64_t outL = outSp[last], inL = in[last], sL = w.strides[last];
  int64_t outer = p / outL;
  Shape outerShape(outSp.begin(), outSp.end() - 1);
  std::vector<int64_t> kc(sr), oc(last);
  for (int64_t c = 0; c < channels; ++c) {
    const float *src = x + c * inPlane;
    for (int64_t kf = 0; kf < kn; ++kf) {
      int64_t r = kf;
      for (std::size_t d = sr; d-- > 0;) {
        kc[d] = r % w.kernel[d];
        r /= w.kernel[d];
      }
      float *dst = col + (c * kn + kf) * p;
      // Output positions along the last dimension that read inside the
      // input: ol * sL + shift in [0, inL).
      int64_t shift = kc[last] * w.dilations[last] - w.pads[last];
      int64_t lo = shift >= 0 ? 0 : ceilDiv(-shift, sL);
      int64_t hi = inL - shift > 0 ? ceilDiv(inL - shift, sL) : 0;
      lo = std::min(lo, outL);
      hi = std::max(lo, std::min(hi, outL));
      std::fill(oc.begin(), oc.end(), 0);
      for (int64_t o = 0; o < outer; ++o, dst += outL) {
        bool inside = true;
        int64_t base = 0;
        for (std::size_t d = 0; d < last; ++d) {
          int64_t i = oc[d] * w.strides[d] - w.pads[d] + kc[d] * w.dilations[d];
          if (i < 0 || i >= in[d])
            inside = false;
          base += i * is[d];
        }
        if (!inside) {
          std::fill(dst, dst + outL, 0.f);
        } else {
          std::fill(dst, dst + lo, 0.f);
          const float *row = src + base;
          if (sL == 1 && hi > lo)
            std::memcpy(dst + lo, row + (lo + shift),
                        (hi - lo) * sizeof(float));
          else if (sL != 1)
            for (int64_t ol = lo; ol < hi; ++ol)
              dst[ol] = row[ol * sL + shift];
          std::fill(dst + hi, dst + outL, 0.f);
        }
        for (std::size_t d = last; d-- > 0;) {
          if (++oc[d] < outerShape[d])
            break;
          oc[d] = 0;
        }
      }
    }
  }
}

} // namespace

void shoal::rt::cpu::conv(const Tensor &x, const Tensor &w, const Tensor *bias,
                          const WindowParams &window, int64_t group,
                          Tensor &out) {
  checkIn(x, DType::F32, "Conv", "X");
  checkIn(w, DType::F32, "Conv", "W");
  const Shape &xs = x.shape(), &ws = w.shape();
  if (xs.size() < 3 || ws.size() != xs.size() || group < 1 ||
      ws[1] * group != xs[1] || ws[0] % group != 0)
    throw Error(fmt::format("Conv: X {} and W {} do not fit with group {}",
                            x.type().str(), w.type().str(), group));
  if (!std::equal(ws.begin() + 2, ws.end(), window.kernel.begin(),
                  window.kernel.end()))
    throw Error(fmt::format("Conv: kernel {} does not match W {}",
                            formatShape(window.kernel), w.type().str()));
  int64_t m = ws[0];
  if (bias) {
    checkIn(*bias, DType::F32, "Conv", "B");
    if (bias->shape() != Shape{m})
      throw Error(fmt::format("Conv: B must be f32[{}], got {}", m,
                              bias->type().str()));
  }
  Shape shape = windowOutputShape(xs, m, window);
  checkOut(out, DType::F32, shape, "Conv");
  int64_t n = xs[0], c = xs[1], cg = c / group, mg = m / group;
  Shape in(xs.begin() + 2, xs.end()), outSp(shape.begin() + 2, shape.end());
  int64_t inPlane = numElements(in), p = numElements(outSp);
  int64_t kn = numElements(window.kernel);
  bool direct = true; // 1x1 kernel, stride 1, no padding: X is the matrix
  for (std::size_t d = 0; d < in.size(); ++d)
    if (window.kernel[d] != 1 || window.strides[d] != 1 ||
        window.pads[d] != 0 || window.pads[d + in.size()] != 0)
      direct = false;
  std::vector<float> col;
  if (!direct)
    col.resize(static_cast<std::size_t>(cg * kn * p));
  const float *px = x.data<float>();
  const float *pw = w.data<float>();
  const float *pb = bias ? bias->data<float>() : nullptr;
  float *py = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = px + (i * c + g * cg) * inPlane;
      const float *mat = xg;
      if (!direct) {
        im2col(xg, cg, in, outSp, window, col.data());
        mat = col.data();
      }
      float *yg = py + (i * m + g * mg) * p;
      if (pb)
        for (int64_t j = 0; j < mg; ++j)
          std::fill(yg + j * p, yg + (j + 1) * p, pb[g * mg + j]);
      sgemm(mg, p, cg * kn, pw + g * mg * cg * kn, cg * kn, mat, p,
            pb ? 1.f : 0.f, yg, p, "Conv");
    }
}

void shoal::rt::cpu::batchNorm(const Tensor &x, const Tensor &scale,
                               const Tensor &bias, const Tensor &mean,
                               const Tensor &var, float epsilon, Tensor &out) {
  checkIn(x, DType::F32, "BatchNormalization", "X");
  if (x.rank() < 2)
    throw Error(fmt::format("BatchNormalization: X must have rank >= 2, got "
                            "{}",
                            x.type().str()));
  int64_t c = x.shape()[1];
  const char *names[] = {"scale", "B", "input_mean", "input_var"};
  const Tensor *params[] = {&scale, &bias, &mean, &var};
  for (int i = 0; i < 4; ++i)
    if (params[i]->dtype() != DType::F32 || params[i]->shape() != Shape{c})
      throw Error(fmt::format("BatchNormalization: {} must be f32[{}], got {}",
                              names[i], c, params[i]->type().str()));
  checkOut(out, DType::F32, x.shape(), "BatchNormalization");
  int64_t n = x.shape()[0];
  int64_t inner = numElements(Shape(x.shape().begin() + 2, x.shape().end()));
  const float *px = x.data<float>();
  float *py = out.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double a = double(scale.data<float>()[ch]) /
               std::sqrt(double(var.data<float>()[ch]) + double(epsilon));
    float fa = static_cast<float>(a);
    float fb = static_cast<float>(double(bias.data<float>()[ch]) -
                                  double(mean.data<float>()[ch]) * a);
    for (int64_t i = 0; i < n; ++i) {
      const float *src = px + (i * c + ch) * inner;
      float *dst = py + (i * c + ch) * inner;
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = src[j] * fa + fb;
    }
  }
}

namespace {

/// The pooling loop over `planes` planes of spatial shape `in`; along every
/// spatial dimension d and output index o the window reads count[d][o]
/// input indices from firstIdx[d][o], dil[d] apart, and the average divides
/// by the product of divisor[d][o].
template <bool IsMax>
void poolLoop(const float *px, float *py, int64_t planes, const Shape &in,
              const Shape &outSp,
              const std::vector<std::vector<int64_t>> &firstIdx,
              const std::vector<std::vector<int64_t>> &count,
              const std::vector<std::vector<int64_t>> &divisor,
              const std::vector<int64_t> &dil) {
  const float init = IsMax ? -std::numeric_limits<float>::infinity() : 0.f;
  // Branch-free, so that max over unordered data does not mispredict; a
  // NaN in the window makes the max NaN.
  auto take = [](float &acc, bool &nan, float v) {
    if (IsMax) {
      acc = v > acc ? v : acc;
      nan |= v != v;
    } else {
      acc += v;
    }
  };
  auto finish = [](float acc, bool nan, int64_t div) {
    if (IsMax)
      return nan ? std::numeric_limits<float>::quiet_NaN() : acc;
    return div > 0 ? acc / float(div) : 0.f;
  };
  std::size_t sr = in.size();
  int64_t inPlane = numElements(in), outPlane = numElements(outSp);
  if (sr <= 2) {
    // 1-D runs as 2-D with a single row.
    static const std::vector<int64_t> zero = {0}, one = {1};
    bool two = sr == 2;
    int64_t w = in[sr - 1], oh = two ? outSp[0] : 1, ow = outSp[sr - 1];
    const std::vector<int64_t> &fh = two ? firstIdx[0] : zero,
                               &ch = two ? count[0] : one,
                               &dh = two ? divisor[0] : one;
    const std::vector<int64_t> &fw = firstIdx[sr - 1], &cw = count[sr - 1],
                               &dw = divisor[sr - 1];
    int64_t dilH = two ? dil[0] : 1, dilW = dil[sr - 1];
    for (int64_t pl = 0; pl < planes; ++pl) {
      const float *src = px + pl * inPlane;
      float *dst = py + pl * outPlane;
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float acc = init;
          bool nan = false;
          if (ch[i] > 0 && cw[j] > 0)
            for (int64_t a = 0; a < ch[i]; ++a) {
              const float *row = src + (fh[i] + a * dilH) * w + fw[j];
              if (dilW == 1)
                for (int64_t b = 0; b < cw[j]; ++b)
                  take(acc, nan, row[b]);
              else
                for (int64_t b = 0; b < cw[j]; ++b)
                  take(acc, nan, row[b * dilW]);
            }
          *dst++ = finish(acc, nan, dh[i] * dw[j]);
        }
    }
    return;
  }
  // Any number of spatial dimensions.
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t last = sr - 1;
  std::vector<int64_t> oc(sr), kc(sr);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float *src = px + pl * inPlane;
    float *dst = py + pl * outPlane;
    std::fill(oc.begin(), oc.end(), 0);
    for (int64_t o = 0; o < outPlane; ++o) {
      bool empty = false;
      int64_t div = 1;
      for (std::size_t d = 0; d < sr; ++d) {
        if (count[d][oc[d]] == 0)
          empty = true;
        div *= divisor[d][oc[d]];
      }
      float acc = init;
      bool nan = false;
      if (!empty) {
        std::fill(kc.begin(), kc.end(), 0);
        int64_t nL = count[last][oc[last]], dL = dil[last];
        while (true) {
          int64_t base = firstIdx[last][oc[last]];
          for (std::size_t d = 0; d < last; ++d)
            base += (firstIdx[d][oc[d]] + kc[d] * dil[d]) * is[d];
          const float *row = src + base;
          for (int64_t j = 0; j < nL; ++j)
            take(acc, nan, row[j * dL]);
          std::size_t d = last;
          while (d-- > 0) {
            if (++kc[d] < count[d][oc[d]])
              break;
            kc[d] = 0;
          }
          if (d == static_cast<std::size_t>(-1))
            break;
        }
      }
      dst[o] = finish(acc, nan, div);
      for (std::size_t d = sr; d-- > 0;) {
        if (++oc[d] < outSp[d])
          break;
        oc[d] = 0;
      }
    }
  }
}

} // namespace

void shoal::rt::cpu::pool(PoolOp op, const Tensor &x,
                          const WindowParams &window, bool countIncludePad,
                          Tensor &out) {
  const char *name = op == PoolOp::Max ? "MaxPool" : "AveragePool";
  // f16 and bf16 in f32; the max of 8-bit integers too (exact in f32).
  if (isHalfDType(x.dtype()) ||
      (op == PoolOp::Max &&
       (x.dtype() == DType::U8 || x.dtype() == DType::I8))) {
    if (!out.defined() || out.dtype() != x.dtype())
      checkOut(out, x.dtype(), out.shape(), name);
    Tensor r(DType::F32, out.shape());
    pool(op, toF32(x), window, countIncludePad, r);
    return fromF32(r, out);
  }
  checkIn(x, DType::F32, name, "X");
  if (x.rank() < 3)
    throw Error(
        fmt::format("{}: X must have rank >= 3, got {}", name, x.type().str()));
  Shape shape = windowOutputShape(x.shape(), x.shape()[1], window);
  checkOut(out, DType::F32, shape, name);
  if (op == PoolOp::Average)
    for (int64_t d : window.dilations)
      if (d != 1)
        throw Error("AveragePool: dilations must be 1");
  const Shape &xs = x.shape();
  std::size_t sr = xs.size() - 2;
  Shape in(xs.begin() + 2, xs.end()), outSp(shape.begin() + 2, shape.end());
  // Along every spatial dimension and output index: the first input index
  // the window reads, how many it reads (dilation apart) and, for the
  // average, the divisor's factor.
  std::vector<std::vector<int64_t>> firstIdx(sr), count(sr), divisor(sr);
  for (std::size_t d = 0; d < sr; ++d) {
    int64_t k = window.kernel[d], s = window.strides[d],
            dil = window.dilations[d], pb = window.pads[d],
            pe = window.pads[d + sr];
    for (int64_t o = 0; o < outSp[d]; ++o) {
      int64_t start = o * s - pb;
      int64_t kLo = start >= 0 ? 0 : ceilDiv(-start, dil);
      int64_t kHi =
          in[d] - start > 0 ? std::min(k, ceilDiv(in[d] - start, dil)) : 0;
      kHi = std::max(kHi, kLo);
      firstIdx[d].push_back(start + kLo * dil);
      count[d].push_back(kHi - kLo);
      // With dilation 1: the window clipped to the padded input.
      int64_t padded = std::min(start + k, in[d] + pe) - std::max(start, -pb);
      divisor[d].push_back(countIncludePad ? padded : kHi - kLo);
    }
  }
  int64_t planes = xs[0] * xs[1];
  if (op == PoolOp::Max)
    poolLoop<true>(x.data<float>(), out.data<float>(), planes, in, outSp,
                   firstIdx, count, divisor, window.dilations);
  else
    poolLoop<false>(x.data<float>(), out.data<float>(), planes, in, outSp,
                    firstIdx, count, divisor, window.dilations);
}

void shoal::rt::cpu::globalPool(PoolOp op, const Tensor &x, Tensor &out) {
  const char *name = op == PoolOp::Max ? "GlobalMaxPool" : "GlobalAveragePool";
  checkIn(x, DType::F32, name, "X");
  if (x.rank() < 2)
    throw Error(
        fmt::format("{}: X must have rank >= 2, got {}", name, x.type().str()));
  Shape shape = x.shape();
  std::fill(shape.begin() + 2, shape.end(), 1);
  checkOut(out, DType::F32, shape, name);
  int64_t planes = shape[0] * shape[1];
  int64_t n = numElements(Shape(x.shape().begin() + 2, x.shape().end()));
  const float *px = x.data<float>();
  float *py = out.data<float>();
  for (int64_t p = 0; p < planes; ++p) {
    const float *src = px + p * n;
    if (op == PoolOp::Max) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j)
        if (src[j] > m || std::isnan(src[j]))
          m = src[j];
      py[p] = m;
    } else {
      double s = 0;
      for (int64_t j = 0; j < n; ++j)
        s += src[j];
      py[p] = n ? static_cast<float>(s / double(n))
                : std::numeric_limits<float>::quiet_NaN();
    }
  }
}
