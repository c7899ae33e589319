//===- ConstantFolding.cpp - Fold ONNX shape computations -------*- C++ -*-===//
//
// Exporters compute shapes at run time (Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape, Range for positions, Trilu/Where for causal masks,
// ScatterND for shifted-window masks).
// With static input shapes all of that is constant: this folds such nodes
// over small constant tensors, so the imported graph has static shapes and
// no shape arithmetic.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "onnx/defs/tensor_proto_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <numeric>
#include <optional>
#include <unordered_map>

using namespace shoal::onnx_import;

namespace {

using onnx::TensorProto;

/// Thrown (and caught in foldNode) when a node cannot be folded.
struct NotFoldable {
  std::string why;
};

[[noreturn]] void notFoldable(const std::string &why) {
  throw NotFoldable{why};
}

/// The most elements a folded result may have (32 MiB of doubles while
/// folding); checked before anything that size is allocated, so that a tiny
/// model cannot make the compiler allocate gigabytes.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 22;

std::string formatDims(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

/// The element count of `dims`, refusing negative dims and counts over
/// kMaxFoldedElements (without overflowing on the way).
int64_t boundedCount(const std::vector<int64_t> &dims) {
  for (int64_t d : dims)
    if (d < 0)
      notFoldable("negative dimension in " + formatDims(dims));
  if (std::find(dims.begin(), dims.end(), 0) != dims.end())
    return 0;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (n > kMaxFoldedElements / d)
      notFoldable("its result " + formatDims(dims) + " would have more than " +
                  std::to_string(kMaxFoldedElements) +
                  " elements, the most shoal folds at compile time");
    n *= d;
  }
  return n;
}

/// A count held in a double, printed whole ("1099511627776", not
/// "1099511627776.000000").
std::string wholeNumber(double count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", count);
  return buf;
}

/// A small tensor with every element held as a double (exact for the
/// integers shapes use).
struct Lit {
  int32_t type = TensorProto::FLOAT;
  std::vector<int64_t> dims;
  std::vector<double> v;

  int64_t size() const { return boundedCount(dims); }
};

bool isInteger(int32_t t) {
  return t == TensorProto::INT64 || t == TensorProto::INT32 ||
         t == TensorProto::INT8 || t == TensorProto::UINT8 ||
         t == TensorProto::INT16 || t == TensorProto::UINT16 ||
         t == TensorProto::UINT32 || t == TensorProto::UINT64;
}

Lit fromProto(const TensorProto &t) {
  Lit l;
  l.type = t.data_type();
  l.dims.assign(t.dims().begin(), t.dims().end());
  int64_t n = l.size();
  switch (l.type) {
  case TensorProto::FLOAT:
    for (float x : onnx::ParseData<float>(&t))
      l.v.push_back(x);
    break;
  case TensorProto::DOUBLE:
    for (double x : onnx::ParseData<double>(&t))
      l.v.push_back(x);
    break;
  case TensorProto::INT64:
    for (int64_t x : onnx::ParseData<int64_t>(&t))
      l.v.push_back(static_cast<double>(x));
    break;
  case TensorProto::INT32:
    for (int32_t x : onnx::ParseData<int32_t>(&t))
      l.v.push_back(x);
    break;
  case TensorProto::BOOL:
  case TensorProto::UINT8:
  case TensorProto::INT8:
    if (t.has_raw_data()) {
      for (char c : t.raw_data())
        l.v.push_back(l.type == TensorProto::INT8 ? static_cast<int8_t>(c)
                                                  : static_cast<uint8_t>(c));
    } else {
      for (int32_t x : t.int32_data())
        l.v.push_back(x);
    }
    break;
  default:
    notFoldable("element type " + std::to_string(l.type));
  }
  if (static_cast<int64_t>(l.v.size()) != n)
    notFoldable("data does not match its dims");
  return l;
}

/// INT64_MAX (Slice's "to the end") is 2^63 as a double, out of int64's
/// range: saturate rather than convert (undefined, INT64_MIN on x86).
int64_t toInt64(double x) {
  constexpr double kLimit = 9223372036854775807.0; // 2^63
  if (x >= kLimit)
    return INT64_MAX;
  if (x <= -kLimit)
    return INT64_MIN;
  return static_cast<int64_t>(x);
}

TensorProto toProto(const Lit &l, const std::string &name) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(l.type);
  for (int64_t d : l.dims)
    t.add_dims(d);
  for (double x : l.v) {
    switch (l.type) {
    case TensorProto::FLOAT:
      t.add_float_data(static_cast<float>(x));
      break;
    case TensorProto::DOUBLE:
      t.add_double_data(x);
      break;
    case TensorProto::INT64:
      t.add_int64_data(toInt64(x));
      break;
    default: // INT32, BOOL, INT8, UINT8 live in int32_data
      t.add_int32_data(static_cast<int32_t>(x));
      break;
    }
  }
  return t;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::vector<int64_t> broadcast(const std::vector<std::vector<int64_t>> &all) {
  size_t rank = 0;
  for (const auto &d : all)
    rank = std::max(rank, d.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto &d : all)
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t &o = out[rank - d.size() + i];
      if (d[i] == 1)
        continue;
      if (o != 1 && o != d[i])
        notFoldable("shapes do not broadcast");
      o = d[i];
    }
  return out;
}

/// Elementwise over numpy-broadcast inputs.
template <typename F>
Lit elementwise(const std::vector<const Lit *> &in, int32_t type, F f) {
  std::vector<std::vector<int64_t>> dims;
  for (const Lit *l : in)
    dims.push_back(l->dims);
  Lit out;
  out.type = type;
  out.dims = broadcast(dims);
  int64_t n = out.size();
  std::vector<int64_t> ostr = stridesOf(out.dims);
  std::vector<std::vector<int64_t>> istr;
  for (const Lit *l : in) {
    std::vector<int64_t> s = stridesOf(l->dims);
    std::vector<int64_t> aligned(out.dims.size(), 0);
    for (size_t i = 0; i < l->dims.size(); ++i)
      if (l->dims[i] != 1)
        aligned[out.dims.size() - l->dims.size() + i] = s[i];
    istr.push_back(aligned);
  }
  std::vector<double> args(in.size());
  out.v.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < in.size(); ++k) {
      int64_t idx = 0, rem = i;
      for (size_t d = 0; d < out.dims.size(); ++d) {
        idx += (rem / ostr[d]) * istr[k][d];
        rem %= ostr[d];
      }
      args[k] = in[k]->v[idx];
    }
    out.v[i] = f(args);
  }
  return out;
}

int64_t normAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    notFoldable("axis out of range");
  return axis < 0 ? axis + rank : axis;
}

double castTo(double x, int32_t type) {
  switch (type) {
  case TensorProto::FLOAT:
    return static_cast<float>(x);
  case TensorProto::DOUBLE:
    return x;
  case TensorProto::BOOL:
    return x != 0;
  case TensorProto::INT64:
  case TensorProto::INT32:
  case TensorProto::INT8:
  case TensorProto::UINT8:
    return std::trunc(x);
  default:
    notFoldable("Cast to type " + std::to_string(type));
  }
}

/// Copies the block of `in` given by per-dimension index lists.
Lit gatherIndices(const Lit &in, const std::vector<std::vector<int64_t>> &idx) {
  Lit out;
  out.type = in.type;
  for (const auto &i : idx)
    out.dims.push_back(static_cast<int64_t>(i.size()));
  int64_t n = out.size();
  std::vector<int64_t> istr = stridesOf(in.dims), ostr = stridesOf(out.dims);
  out.v.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0, rem = i;
    for (size_t d = 0; d < out.dims.size(); ++d) {
      src += idx[d][rem / ostr[d]] * istr[d];
      rem %= ostr[d];
    }
    out.v[i] = in.v[src];
  }
  return out;
}

/// An ints attribute, empty when absent.
std::vector<int64_t> intsAttr(const onnx::NodeProto &node, const char *name) {
  std::vector<int64_t> r;
  if (auto a = getIntsAttr(node, name))
    r.assign(a->begin(), a->end());
  return r;
}

std::vector<int64_t> ints(const Lit &l) {
  std::vector<int64_t> r;
  for (double x : l.v)
    r.push_back(toInt64(x));
  return r;
}

std::vector<Lit> evaluate(const onnx::NodeProto &node,
                          const std::vector<const Lit *> &in) {
  const std::string &op = node.op_type();
  auto input = [&](size_t i) -> const Lit & {
    if (i >= in.size() || !in[i])
      notFoldable("missing input");
    return *in[i];
  };
  auto has = [&](size_t i) { return i < in.size() && in[i]; };
  auto unary = [&](auto f) {
    return std::vector<Lit>{elementwise({&input(0)}, input(0).type,
                                        [&](auto &a) { return f(a[0]); })};
  };
  auto binary = [&](auto f, int32_t type) {
    return std::vector<Lit>{elementwise(
        {&input(0), &input(1)}, type, [&](auto &a) { return f(a[0], a[1]); })};
  };
  int32_t t0 = has(0) ? input(0).type : 0;
  bool intType = isInteger(t0);

  if (op == "Identity")
    return {input(0)};
  if (op == "Add")
    return binary([](double a, double b) { return a + b; }, t0);
  if (op == "Sub")
    return binary([](double a, double b) { return a - b; }, t0);
  if (op == "Mul")
    return binary([](double a, double b) { return a * b; }, t0);
  if (op == "Div")
    return binary(
        [&](double a, double b) {
          if (intType) {
            if (b == 0)
              notFoldable("integer division by zero");
            return std::trunc(a / b);
          }
          return a / b;
        },
        t0);
  if (op == "Mod") {
    // Swin computes its window padding as (w - W % w) % w.
    bool fmod = getIntAttr(node, "fmod", 0) != 0;
    return binary(
        [&](double a, double b) {
          if (b == 0)
            notFoldable("Mod by zero");
          double r = std::fmod(a, b);
          if (!fmod && r != 0 && (r < 0) != (b < 0))
            r += b;
          return r;
        },
        t0);
  }
  if (op == "Pow")
    return binary([](double a, double b) { return std::pow(a, b); }, t0);
  if (op == "Max")
    return binary([](double a, double b) { return std::max(a, b); }, t0);
  if (op == "Min")
    return binary([](double a, double b) { return std::min(a, b); }, t0);
  if (op == "Equal")
    return binary([](double a, double b) { return double(a == b); },
                  TensorProto::BOOL);
  if (op == "Less")
    return binary([](double a, double b) { return double(a < b); },
                  TensorProto::BOOL);
  if (op == "Greater")
    return binary([](double a, double b) { return double(a > b); },
                  TensorProto::BOOL);
  if (op == "And")
    return binary([](double a, double b) { return double(a && b); },
                  TensorProto::BOOL);
  if (op == "Or")
    return binary([](double a, double b) { return double(a || b); },
                  TensorProto::BOOL);
  if (op == "Not")
    return unary([](double a) { return double(!a); });
  if (op == "Neg")
    return unary([](double a) { return -a; });
  if (op == "Abs")
    return unary([](double a) { return std::fabs(a); });
  if (op == "Sqrt")
    return unary([](double a) { return std::sqrt(a); });
  if (op == "Exp")
    return unary([](double a) { return std::exp(a); });
  if (op == "Log")
    return unary([](double a) { return std::log(a); });
  if (op == "Sin")
    return unary([](double a) { return std::sin(a); });
  if (op == "Cos")
    return unary([](double a) { return std::cos(a); });
  if (op == "Floor")
    return unary([](double a) { return std::floor(a); });
  if (op == "Ceil")
    return unary([](double a) { return std::ceil(a); });
  if (op == "Reciprocal")
    return unary([](double a) { return 1.0 / a; });
  if (op == "Where")
    return {elementwise({&input(0), &input(1), &input(2)}, input(1).type,
                        [](auto &a) { return a[0] != 0 ? a[1] : a[2]; })};
  if (op == "Cast") {
    int32_t to = static_cast<int32_t>(getIntAttr(node, "to", 0));
    Lit out = input(0);
    out.type = to;
    for (double &x : out.v)
      x = castTo(x, to);
    return {out};
  }
  if (op == "Reshape") {
    std::vector<int64_t> shape = ints(input(1));
    const Lit &x = input(0);
    int64_t known = 1, inferred = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && getIntAttr(node, "allowzero", 0) == 0)
        shape[i] = i < x.dims.size() ? x.dims[i] : 0;
      if (shape[i] == -1)
        inferred = static_cast<int64_t>(i);
      else if (shape[i] < 0 || __builtin_mul_overflow(known, shape[i], &known))
        notFoldable("Reshape to " + formatDims(shape));
    }
    if (inferred >= 0)
      shape[inferred] = known ? x.size() / known : 0;
    Lit out = x;
    out.dims = shape;
    if (out.size() != x.size())
      notFoldable("Reshape changes the element count");
    return {out};
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (has(1))
      axes = ints(input(1));
    else
      axes = intsAttr(node, "axes");
    Lit out = input(0);
    if (op == "Unsqueeze") {
      int64_t rank = static_cast<int64_t>(out.dims.size() + axes.size());
      for (int64_t &a : axes)
        a = normAxis(a, rank);
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes)
        out.dims.insert(out.dims.begin() + a, 1);
    } else {
      int64_t rank = static_cast<int64_t>(out.dims.size());
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < rank; ++d) {
        bool drop = axes.empty()
                        ? out.dims[d] == 1
                        : std::any_of(axes.begin(), axes.end(), [&](int64_t a) {
                            return normAxis(a, rank) == d;
                          });
        if (!drop)
          dims.push_back(out.dims[d]);
      }
      out.dims = dims;
    }
    return {out};
  }
  if (op == "Concat") {
    int64_t rank = static_cast<int64_t>(input(0).dims.size());
    int64_t axis = normAxis(getIntAttr(node, "axis", 0), rank);
    Lit out;
    out.type = input(0).type;
    out.dims = input(0).dims;
    out.dims[axis] = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      if (static_cast<int64_t>(input(k).dims.size()) != rank)
        notFoldable("Concat inputs of different ranks");
      out.dims[axis] += input(k).dims[axis];
    }
    boundedCount(out.dims);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= out.dims[d];
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < in.size(); ++k) {
        int64_t block = input(k).size() / std::max<int64_t>(outer, 1);
        out.v.insert(out.v.end(), input(k).v.begin() + o * block,
                     input(k).v.begin() + (o + 1) * block);
      }
    return {out};
  }
  if (op == "Gather") {
    const Lit &data = input(0), &indices = input(1);
    int64_t rank = static_cast<int64_t>(data.dims.size());
    int64_t axis = normAxis(getIntAttr(node, "axis", 0), rank);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= data.dims[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= data.dims[d];
    Lit out;
    out.type = data.type;
    out.dims.assign(data.dims.begin(), data.dims.begin() + axis);
    out.dims.insert(out.dims.end(), indices.dims.begin(), indices.dims.end());
    out.dims.insert(out.dims.end(), data.dims.begin() + axis + 1,
                    data.dims.end());
    for (int64_t o = 0; o < outer; ++o)
      for (double x : indices.v) {
        int64_t i = static_cast<int64_t>(x);
        if (i < 0)
          i += data.dims[axis];
        if (i < 0 || i >= data.dims[axis])
          notFoldable("Gather index out of range");
        auto begin = data.v.begin() + (o * data.dims[axis] + i) * inner;
        out.v.insert(out.v.end(), begin, begin + inner);
      }
    return {out};
  }
  if (op == "Slice") {
    const Lit &x = input(0);
    int64_t rank = static_cast<int64_t>(x.dims.size());
    std::vector<int64_t> starts = ints(input(1)), ends = ints(input(2));
    std::vector<int64_t> axes, steps(starts.size(), 1);
    if (has(3))
      axes = ints(input(3));
    else
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(static_cast<int64_t>(i));
    if (has(4))
      steps = ints(input(4));
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
      notFoldable("Slice starts, ends, axes and steps differ in length");
    std::vector<std::vector<int64_t>> idx(rank);
    for (int64_t d = 0; d < rank; ++d) {
      idx[d].resize(x.dims[d]);
      std::iota(idx[d].begin(), idx[d].end(), 0);
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t d = normAxis(axes[i], rank), n = x.dims[d], step = steps[i];
      if (step == 0)
        notFoldable("Slice step 0");
      int64_t s = starts[i], e = ends[i];
      if (s < 0)
        s += n;
      if (e < 0)
        e += n;
      if (step > 0) {
        s = std::clamp<int64_t>(s, 0, n);
        e = std::clamp<int64_t>(e, 0, n);
      } else {
        s = std::clamp<int64_t>(s, 0, n - 1);
        e = std::clamp<int64_t>(e, -1, n - 1);
      }
      idx[d].clear();
      for (int64_t j = s; step > 0 ? j < e : j > e; j += step)
        idx[d].push_back(j);
    }
    return {gatherIndices(x, idx)};
  }
  if (op == "Transpose") {
    const Lit &x = input(0);
    int64_t rank = static_cast<int64_t>(x.dims.size());
    std::vector<int64_t> perm = intsAttr(node, "perm");
    if (perm.empty())
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t d = 0; d < rank; ++d)
      if (static_cast<int64_t>(sorted.size()) != rank || sorted[d] != d)
        notFoldable("Transpose perm is not a permutation of the axes");
    Lit out;
    out.type = x.type;
    for (int64_t p : perm)
      out.dims.push_back(x.dims[p]);
    std::vector<int64_t> istr = stridesOf(x.dims), ostr = stridesOf(out.dims);
    out.v.resize(x.v.size());
    for (int64_t i = 0; i < out.size(); ++i) {
      int64_t src = 0, rem = i;
      for (int64_t d = 0; d < rank; ++d) {
        src += (rem / ostr[d]) * istr[perm[d]];
        rem %= ostr[d];
      }
      out.v[i] = x.v[src];
    }
    return {out};
  }
  if (op == "Expand") {
    Lit shape;
    shape.dims = ints(input(1));
    shape.v.assign(1, 0);
    std::vector<int64_t> target = broadcast({input(0).dims, shape.dims});
    Lit ones;
    ones.dims = target;
    ones.v.assign(ones.size(), 0);
    return {elementwise({&input(0), &ones}, input(0).type,
                        [](auto &a) { return a[0]; })};
  }
  if (op == "ConstantOfShape") {
    Lit out;
    out.dims = ints(input(0));
    out.type = TensorProto::FLOAT;
    double value = 0;
    if (const onnx::AttributeProto *a = findAttr(node, "value")) {
      Lit v = fromProto(a->t());
      out.type = v.type;
      if (!v.v.empty())
        value = v.v[0];
    }
    out.v.assign(out.size(), value);
    return {out};
  }
  if (op == "Range") {
    double start = input(0).v.at(0), limit = input(1).v.at(0),
           delta = input(2).v.at(0);
    if (delta == 0)
      notFoldable("Range delta 0");
    Lit out;
    out.type = input(0).type;
    double count = std::ceil((limit - start) / delta);
    if (!(count <= static_cast<double>(kMaxFoldedElements)))
      notFoldable("its result would have " + wholeNumber(count) +
                  " elements, more than the " +
                  std::to_string(kMaxFoldedElements) +
                  " shoal folds at compile time");
    int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
    for (int64_t i = 0; i < n; ++i)
      out.v.push_back(castTo(start + i * delta, out.type));
    out.dims = {n};
    return {out};
  }
  if (op == "Trilu") {
    Lit out = input(0);
    int64_t k = has(1) ? static_cast<int64_t>(input(1).v.at(0)) : 0;
    bool upper = getIntAttr(node, "upper", 1) != 0;
    size_t r = out.dims.size();
    if (r < 2)
      notFoldable("Trilu needs rank >= 2");
    int64_t rows = out.dims[r - 2], cols = out.dims[r - 1];
    for (int64_t i = 0; i < out.size(); ++i) {
      int64_t row = (i / cols) % rows, col = i % cols;
      bool keep = upper ? col - row >= k : col - row <= k;
      if (!keep)
        out.v[i] = 0;
    }
    return {out};
  }
  if (op == "Einsum") {
    // The outer product rotary embeddings use ("i,j->ij").
    std::string eq;
    if (const onnx::AttributeProto *a = findAttr(node, "equation"))
      eq = a->s();
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    if (in.size() != 2 || input(0).dims.size() != 1 ||
        input(1).dims.size() != 1 || eq.size() != 7 || eq[1] != ',' ||
        eq.substr(3, 2) != "->" || eq[5] != eq[0] || eq[6] != eq[2])
      notFoldable("only outer-product Einsum ('i,j->ij') is folded");
    Lit out;
    out.type = input(0).type;
    out.dims = {input(0).dims[0], input(1).dims[0]};
    out.v.reserve(out.size());
    for (double a : input(0).v)
      for (double b : input(1).v)
        out.v.push_back(a * b);
    return {out};
  }
  if (op == "Split") {
    const Lit &x = input(0);
    int64_t rank = static_cast<int64_t>(x.dims.size());
    int64_t axis = normAxis(getIntAttr(node, "axis", 0), rank);
    std::vector<int64_t> sizes =
        has(1) ? ints(input(1)) : intsAttr(node, "split");
    int outputs = node.output_size();
    if (outputs == 0)
      notFoldable("Split without outputs");
    if (sizes.empty())
      sizes.assign(outputs, x.dims[axis] / outputs);
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size < 0 || size > x.dims[axis] - total)
        notFoldable("Split sizes do not fit the axis");
      total += size;
    }
    std::vector<Lit> out;
    int64_t start = 0;
    for (int64_t size : sizes) {
      std::vector<std::vector<int64_t>> idx(rank);
      for (int64_t d = 0; d < rank; ++d) {
        if (d == axis) {
          for (int64_t j = start; j < start + size; ++j)
            idx[d].push_back(j);
        } else {
          idx[d].resize(x.dims[d]);
          std::iota(idx[d].begin(), idx[d].end(), 0);
        }
      }
      out.push_back(gatherIndices(x, idx));
      start += size;
    }
    return out;
  }
  if (op == "Tile") {
    const Lit &x = input(0);
    std::vector<int64_t> repeats = ints(input(1));
    if (repeats.size() != x.dims.size())
      notFoldable("Tile needs one repeat per dimension");
    std::vector<int64_t> tiled(x.dims.size());
    for (size_t d = 0; d < x.dims.size(); ++d) {
      if (repeats[d] < 0)
        notFoldable("negative Tile repeat");
      if (repeats[d] > 0 && x.dims[d] > kMaxFoldedElements / repeats[d])
        notFoldable("Tile result too large to fold");
      tiled[d] = repeats[d] * x.dims[d];
    }
    boundedCount(tiled);
    std::vector<std::vector<int64_t>> idx(x.dims.size());
    for (size_t d = 0; d < x.dims.size(); ++d) {
      for (int64_t r = 0; r < repeats[d]; ++r)
        for (int64_t j = 0; j < x.dims[d]; ++j)
          idx[d].push_back(j);
    }
    return {gatherIndices(x, idx)};
  }
  if (op == "CumSum") {
    const Lit &x = input(0);
    std::vector<int64_t> axisInput = ints(input(1));
    int64_t rank = static_cast<int64_t>(x.dims.size());
    if (axisInput.size() != 1 || rank == 0)
      notFoldable("CumSum needs one axis and a ranked input");
    int64_t axis = normAxis(axisInput[0], rank);
    bool exclusive = getIntAttr(node, "exclusive", 0) != 0;
    bool reverse = getIntAttr(node, "reverse", 0) != 0;
    int64_t n = x.dims[axis], inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= x.dims[d];
    Lit out = x;
    int64_t lines = n == 0 ? 0 : x.size() / n;
    for (int64_t l = 0; l < lines; ++l) {
      int64_t base = l / inner * n * inner + l % inner;
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = base + (reverse ? n - 1 - j : j) * inner;
        if (!exclusive)
          acc += x.v[k];
        out.v[k] = acc;
        if (exclusive)
          acc += x.v[k];
      }
    }
    return {out};
  }
  if (op == "ScatterND") {
    const Lit &data = input(0), &indices = input(1), &updates = input(2);
    std::string reduction = "none";
    if (const onnx::AttributeProto *a = findAttr(node, "reduction"))
      reduction = a->s();
    if (reduction != "none" && reduction != "add" && reduction != "mul")
      notFoldable("ScatterND reduction '" + reduction + "'");
    if (indices.dims.empty())
      notFoldable("ScatterND indices need rank >= 1");
    size_t k = static_cast<size_t>(indices.dims.back());
    if (k > data.dims.size())
      notFoldable("ScatterND index longer than data's rank");
    int64_t slice = 1;
    for (size_t d = k; d < data.dims.size(); ++d)
      slice *= data.dims[d];
    int64_t count = 1;
    for (size_t d = 0; d + 1 < indices.dims.size(); ++d)
      count *= indices.dims[d];
    // No index at all writes nothing, whatever the updates (PyTorch exports
    // an empty slice assignment with the updates of the full slice).
    if (count == 0)
      return {data};
    if (updates.size() != count * slice)
      notFoldable("ScatterND updates do not fit");
    std::vector<int64_t> strides = stridesOf(data.dims);
    Lit out = data;
    for (int64_t i = 0; i < count; ++i) {
      int64_t offset = 0;
      for (size_t j = 0; j < k; ++j) {
        int64_t v = static_cast<int64_t>(indices.v[i * k + j]);
        if (v < 0)
          v += data.dims[j];
        if (v < 0 || v >= data.dims[j])
          notFoldable("ScatterND index out of range");
        offset += v * strides[j];
      }
      for (int64_t e = 0; e < slice; ++e) {
        double &o = out.v[offset + e];
        double u = updates.v[i * slice + e];
        o = reduction == "add" ? o + u : reduction == "mul" ? o * u : u;
      }
    }
    return {out};
  }
  if (op == "OneHot") {
    const Lit &indices = input(0), &values = input(2);
    if (input(1).v.size() != 1 || values.v.size() != 2)
      notFoldable("OneHot needs a scalar depth and two values");
    int64_t depth = static_cast<int64_t>(input(1).v[0]);
    if (depth < 1)
      notFoldable("OneHot depth < 1");
    int64_t rank = static_cast<int64_t>(indices.dims.size()) + 1;
    int64_t axis = normAxis(getIntAttr(node, "axis", -1), rank);
    Lit out;
    out.type = values.type;
    out.dims = indices.dims;
    out.dims.insert(out.dims.begin() + axis, depth);
    int64_t inner = 1;
    for (size_t d = axis; d < indices.dims.size(); ++d)
      inner *= indices.dims[d];
    out.v.assign(out.size(), values.v[0]);
    for (int64_t i = 0; i < indices.size(); ++i) {
      int64_t v = static_cast<int64_t>(indices.v[i]);
      if (v < 0)
        v += depth;
      if (v < 0 || v >= depth)
        continue; // out of range: all "off"
      int64_t o = i / inner, r = i % inner;
      out.v[(o * depth + v) * inner + r] = values.v[1];
    }
    return {out};
  }
  notFoldable("not a foldable op");
}

} // namespace

bool shoal::onnx_import::isFoldableOp(llvm::StringRef opType) {
  static const char *ops[] = {
      "Identity",  "Add",     "Sub",       "Mul",        "Div",
      "Pow",       "Max",     "Min",       "Equal",      "Less",
      "Greater",   "And",     "Or",        "Not",        "Neg",
      "Abs",       "Sqrt",    "Exp",       "Log",        "Sin",
      "Cos",       "Floor",   "Ceil",      "Reciprocal", "Where",
      "Cast",      "Reshape", "Unsqueeze", "Squeeze",    "Concat",
      "Gather",    "Slice",   "Transpose", "Expand",     "ConstantOfShape",
      "Range",     "Trilu",   "Einsum",    "Split",      "Tile",
      "ScatterND", "OneHot",  "Mod",       "CumSum"};
  return llvm::is_contained(ops, opType);
}

std::optional<std::vector<onnx::TensorProto>>
shoal::onnx_import::foldNode(const onnx::NodeProto &node,
                             llvm::ArrayRef<const onnx::TensorProto *> inputs,
                             std::string &why) {
  try {
    std::vector<Lit> lits;
    lits.reserve(inputs.size());
    std::vector<const Lit *> ptrs;
    for (const TensorProto *t : inputs) {
      if (!t) {
        ptrs.push_back(nullptr);
        continue;
      }
      lits.push_back(fromProto(*t));
      ptrs.push_back(&lits.back());
    }
    // `lits` must not reallocate after taking pointers.
    std::vector<Lit> results = evaluate(node, ptrs);
    if (static_cast<int>(results.size()) < node.output_size())
      notFoldable("fewer results than outputs");
    std::vector<TensorProto> out;
    for (int i = 0; i < node.output_size(); ++i) {
      if (results[i].size() > (1 << 22))
        notFoldable("result too large to fold");
      // Inputs shape inference let through but that do not fit (so the
      // result's data and dims disagree) leave the node unfolded.
      if (results[i].size() != static_cast<int64_t>(results[i].v.size()))
        notFoldable("inputs of inconsistent shapes");
      out.push_back(toProto(results[i], node.output(i)));
    }
    return out;
  } catch (const NotFoldable &e) {
    why = e.why;
  } catch (const std::exception &e) {
    why = e.what();
  }
  return std::nullopt;
}

namespace {
/// The static dims of a value's type, if known.
std::optional<std::vector<int64_t>> staticDims(const onnx::TypeProto *type) {
  if (!type || !type->has_tensor_type() || !type->tensor_type().has_shape())
    return std::nullopt;
  std::vector<int64_t> dims;
  for (const auto &d : type->tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return std::nullopt;
    dims.push_back(d.dim_value());
  }
  return dims;
}
} // namespace

int shoal::onnx_import::foldModelConstants(onnx::GraphProto &graph,
                                           bool foldFloatInitializers) {
  std::unordered_map<std::string, const onnx::TypeProto *> types;
  for (const auto &v : graph.input())
    types[v.name()] = &v.type();
  for (const auto &v : graph.value_info())
    types[v.name()] = &v.type();
  for (const auto &v : graph.output())
    types[v.name()] = &v.type();
  std::unordered_map<std::string, const TensorProto *> constants;
  std::unordered_map<std::string, int64_t> initializerSizes;
  for (const TensorProto &t : graph.initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims())
      n *= d;
    bool external = t.data_location() == TensorProto::EXTERNAL ||
                    t.external_data_size() > 0;
    // Training: float initializers are weights to train, not constants.
    bool isFloat = t.data_type() == TensorProto::FLOAT ||
                   t.data_type() == TensorProto::DOUBLE ||
                   t.data_type() == TensorProto::FLOAT16 ||
                   t.data_type() == TensorProto::BFLOAT16;
    if (n <= 4096 && !external && (foldFloatInitializers || !isFloat))
      constants[t.name()] = &t;
  }
  int folded = 0;
  std::vector<onnx::NodeProto> nodes;
  std::deque<TensorProto> owned;
  for (const onnx::NodeProto &node : graph.node()) {
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    std::optional<std::vector<TensorProto>> out;
    if (defaultDomain && node.op_type() == "Constant" &&
        node.attribute_size() == 1 && node.attribute(0).name() == "value") {
      constants[node.output(0)] = &node.attribute(0).t();
    } else if (defaultDomain &&
               (node.op_type() == "Shape" || node.op_type() == "Size") &&
               node.input_size() == 1) {
      auto it = types.find(node.input(0));
      if (auto dims = staticDims(it == types.end() ? nullptr : it->second)) {
        Lit l;
        l.type = TensorProto::INT64;
        if (node.op_type() == "Size") {
          int64_t n = 1;
          for (int64_t d : *dims)
            n *= d;
          l.v = {static_cast<double>(n)};
        } else {
          int64_t rank = dims->size();
          int64_t start = getIntAttr(node, "start", 0),
                  end = getIntAttr(node, "end", rank);
          start =
              std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
          end = std::clamp<int64_t>(end < 0 ? end + rank : end, start, rank);
          for (int64_t i = start; i < end; ++i)
            l.v.push_back(static_cast<double>((*dims)[i]));
          l.dims = {end - start};
        }
        out = std::vector<TensorProto>{toProto(l, node.output(0))};
      }
    } else if (defaultDomain && node.op_type() == "CastLike" &&
               node.input_size() == 2 && constants.count(node.input(0))) {
      // CastLike of a constant (PyTorch's dynamo exporter writes scalars
      // so) is a Cast to the element type of its second input.
      auto it = types.find(node.input(1));
      if (it != types.end() && it->second->has_tensor_type() &&
          it->second->tensor_type().elem_type() != 0) {
        onnx::NodeProto cast;
        cast.set_op_type("Cast");
        cast.add_input(node.input(0));
        cast.add_output(node.output(0));
        onnx::AttributeProto *to = cast.add_attribute();
        to->set_name("to");
        to->set_type(onnx::AttributeProto::INT);
        to->set_i(it->second->tensor_type().elem_type());
        std::string why;
        out = foldNode(cast, {constants[node.input(0)]}, why);
      }
    } else if (defaultDomain && isFoldableOp(node.op_type()) &&
               node.op_type() != "Identity") {
      std::vector<const TensorProto *> inputs;
      bool all = true, any = false;
      for (const std::string &in : node.input()) {
        if (in.empty()) {
          inputs.push_back(nullptr);
          continue;
        }
        auto it = constants.find(in);
        if (it == constants.end()) {
          all = false;
          break;
        }
        inputs.push_back(it->second);
        any = true;
      }
      if (all && (any || node.op_type() == "ConstantOfShape")) {
        std::string why;
        out = foldNode(node, inputs, why);
      }
    }
    if (!out) {
      nodes.push_back(node);
      continue;
    }
    // Replace the node by one Constant per output, keeping its name.
    for (int i = 0; i < node.output_size(); ++i) {
      onnx::NodeProto c;
      c.set_op_type("Constant");
      // Keep the node's metadata (its module path, NodeNames.cpp).
      c.mutable_unknown_fields()->MergeFrom(node.unknown_fields());
      c.set_name(node.output_size() == 1
                     ? node.name()
                     : node.name() + "_" + std::to_string(i));
      c.add_output(node.output(i));
      onnx::AttributeProto *a = c.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = (*out)[i];
      nodes.push_back(std::move(c));
      // A copy that stays put: `nodes` moves its elements as it grows.
      constants[node.output(i)] = &owned.emplace_back((*out)[i]);
    }
    ++folded;
  }
  // `constants` may point into the old nodes, cleared below; it is not used
  // after this point.
  graph.clear_node();
  for (onnx::NodeProto &n : nodes)
    *graph.add_node() = std::move(n);
  return folded;
}
