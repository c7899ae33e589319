//===- ShoalGradients.cpp - Gradient rules of shoal ops ---------*- C++ -*-===//
//
// The GradientOpInterface rules: for each graph op, the gradients of its
// operands from those of its results, built from graph ops (and a few
// dedicated *_grad ops where a rule written with graph ops would be slow or
// inexact). Broadcast operands get their gradient summed back to their own
// shape. Each rule is checked against PyTorch autograd and finite
// differences by test/e2e/grad_check.py.
//
//===----------------------------------------------------------------------===//

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace shoal;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Builds gradient ops at the builder's insertion point, located at `loc`.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  RankedTensorType typeLike(ArrayRef<int64_t> shape, Value elemOf) {
    return RankedTensorType::get(
        shape, cast<RankedTensorType>(elemOf.getType()).getElementType());
  }

  /// A scalar constant of `like`'s element type.
  Value scalar(double v, Value like) {
    auto type = typeLike({}, like);
    auto attr =
        DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), v));
    return b.create<ConstantOp>(loc, type, attr);
  }

  static SmallVector<int64_t> broadcast(ArrayRef<int64_t> a,
                                        ArrayRef<int64_t> c) {
    size_t rank = std::max(a.size(), c.size());
    SmallVector<int64_t> out(rank, 1);
    for (auto s : {a, c})
      for (size_t i = 0; i < s.size(); ++i) {
        int64_t &o = out[rank - s.size() + i];
        if (s[i] != 1)
          o = s[i];
      }
    return out;
  }

  template <typename OpT> Value binary(Value x, Value y) {
    auto type = typeLike(broadcast(shapeOf(x), shapeOf(y)), x);
    return b.create<OpT>(loc, type, x, y);
  }
  /// A comparison: an i1 tensor of the broadcast shape.
  template <typename OpT> Value compare(Value x, Value y) {
    auto type =
        RankedTensorType::get(broadcast(shapeOf(x), shapeOf(y)), b.getI1Type());
    return b.create<OpT>(loc, type, x, y);
  }
  template <typename OpT> Value unary(Value x) {
    return b.create<OpT>(loc, x.getType(), x);
  }
  Value add(Value x, Value y) { return binary<AddOp>(x, y); }
  Value sub(Value x, Value y) { return binary<SubOp>(x, y); }
  Value mul(Value x, Value y) { return binary<MulOp>(x, y); }
  Value div(Value x, Value y) { return binary<DivOp>(x, y); }
  Value neg(Value x) { return unary<NegOp>(x); }

  Value select(Value cond, Value x, Value y) {
    SmallVector<int64_t> shape =
        broadcast(broadcast(shapeOf(cond), shapeOf(x)), shapeOf(y));
    return b.create<WhereOp>(loc, typeLike(shape, x), cond, x, y);
  }

  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (shapeOf(x) == shape)
      return x;
    return b.create<ReshapeOp>(loc, typeLike(shape, x), x);
  }

  Value transpose(Value x, ArrayRef<int64_t> perm) {
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(shapeOf(x)[p]);
    return b.create<TransposeOp>(loc, typeLike(shape, x), x,
                                 b.getDenseI64ArrayAttr(perm));
  }

  /// Swaps the last two dimensions.
  Value transposeLast2(Value x) {
    int64_t rank = shapeOf(x).size();
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < rank; ++i)
      perm.push_back(i);
    std::swap(perm[rank - 1], perm[rank - 2]);
    return transpose(x, perm);
  }

  Value expand(Value x, ArrayRef<int64_t> shape) {
    if (shapeOf(x) == shape)
      return x;
    return b.create<ExpandOp>(loc, typeLike(shape, x), x);
  }

  Value matmul(Value x, Value y) {
    ArrayRef<int64_t> a = shapeOf(x), c = shapeOf(y);
    SmallVector<int64_t> shape = broadcast(a.drop_back(2), c.drop_back(2));
    shape.push_back(a[a.size() - 2]);
    shape.push_back(c.back());
    return b.create<MatMulOp>(loc, typeLike(shape, x), x, y);
  }

  Value gemm(Value x, Value y, bool transA, bool transB, float alpha = 1.0f) {
    int64_t m = shapeOf(x)[transA ? 1 : 0], n = shapeOf(y)[transB ? 0 : 1];
    return b.create<GemmOp>(loc, typeLike({m, n}, x), x, y, Value(),
                            b.getF32FloatAttr(alpha), b.getF32FloatAttr(1.0f),
                            b.getBoolAttr(transA), b.getBoolAttr(transB));
  }

  /// Sums `g` (of a broadcast result) back to `shape`: over the leading
  /// dimensions `shape` lacks and over those where `shape` has 1.
  Value sumTo(Value g, ArrayRef<int64_t> shape) {
    ArrayRef<int64_t> gs = shapeOf(g);
    if (gs == shape)
      return g;
    size_t lead = gs.size() - shape.size();
    SmallVector<int64_t> axes;
    bool inner = false;
    for (size_t i = 0; i < gs.size(); ++i)
      if (i < lead) {
        axes.push_back(i);
      } else if (shape[i - lead] == 1 && gs[i] != 1) {
        axes.push_back(i);
        inner = true;
      }
    if (axes.empty())
      return reshape(g, shape);
    SmallVector<int64_t> out;
    for (size_t i = 0; i < gs.size(); ++i)
      if (!llvm::is_contained(axes, (int64_t)i))
        out.push_back(gs[i]);
      else if (inner)
        out.push_back(1);
    Value s = b.create<ReduceSumOp>(loc, typeLike(out, g), g,
                                    b.getDenseI64ArrayAttr(axes),
                                    b.getBoolAttr(inner));
    return reshape(s, shape);
  }
  Value sumTo(Value g, Value like) { return sumTo(g, shapeOf(like)); }
};

bool isFloat(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}

/// An ONNX op (shoal.onnx) of one result.
Value onnxOp(OpBuilder &b, Location loc, Type type, StringRef opType,
             ArrayRef<NamedAttribute> attrs, ValueRange inputs) {
  return b
      .create<OnnxOp>(loc, TypeRange{type}, opType, b.getDictionaryAttr(attrs),
                      inputs)
      .getResult(0);
}

/// A zero tensor of `type`.
Value zeros(OpBuilder &b, Location loc, RankedTensorType type) {
  auto attr =
      DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 0.0));
  return b.create<ConstantOp>(loc, type, attr);
}

/// `x[..., begin:begin+size, ...]` along `axis`.
Value sliceAlong(OpBuilder &b, Location loc, Value x, int64_t axis,
                 int64_t begin, int64_t size) {
  SmallVector<int64_t> shape(shapeOf(x));
  shape[axis] = size;
  auto type = RankedTensorType::get(
      shape, cast<RankedTensorType>(x.getType()).getElementType());
  return onnxOp(b, loc, type, "Slice",
                {b.getNamedAttr("starts", b.getDenseI64ArrayAttr({begin})),
                 b.getNamedAttr("ends", b.getDenseI64ArrayAttr({begin + size})),
                 b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis}))},
                {x});
}

/// Gradients of the ONNX ops that shoal carries as shoal.onnx: Concat
/// (slices of the result's gradient), Split (the concatenation of the
/// results' gradients, zeros for unused results), Slice (the gradient
/// spread back to the input's shape with zeros), CumSum (the running sum
/// the other way), Pad, the hard
/// activations, Conv and the pools (dedicated *Grad ONNX-style ops that the
/// runtime implements, docs/Training.md).
LogicalResult onnxGradient(OnnxOp op, OpBuilder &b, ArrayRef<Value> resultGrads,
                           SmallVectorImpl<Value> &operandGrads,
                           llvm::function_ref<LogicalResult()> noRule) {
  Location loc = op.getLoc();
  StringRef type = op.getOpType();
  if (type == "Concat") {
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    if (!g)
      return success();
    int64_t axis = getOnnxAxis(op, shapeOf(g).size(), 0);
    if (axis < 0)
      return op.emitError() << "axis is out of range";
    int64_t offset = 0;
    for (auto [i, in] : llvm::enumerate(op.getInputs())) {
      int64_t size = shapeOf(in)[axis];
      if (isFloat(in))
        operandGrads[i] = sliceAlong(b, loc, g, axis, offset, size);
      offset += size;
    }
    return success();
  }
  if (type == "Expand" && op.getInputs().size() == 1) {
    // A broadcast (the shape folded into the result type, as LLaMA's
    // repeat_kv has it): the gradient summed back to the input's shape.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (g && isFloat(x))
      operandGrads[0] = GradBuilder{b, loc}.sumTo(g, shapeOf(x));
    return success();
  }
  if (type == "Tile" && op.getInputs().size() == 1) {
    // The result is [r0 * s0, r1 * s1, ...]: its gradient seen as
    // [r0, s0, r1, s1, ...], summed over the repeats.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    ArrayRef<int64_t> in = shapeOf(x), out = shapeOf(g);
    if (in.size() != out.size())
      return op.emitError() << "result rank differs from the input's";
    SmallVector<int64_t> split, axes;
    for (size_t d = 0; d < in.size(); ++d) {
      if (in[d] == 0 || out[d] % in[d] != 0)
        return op.emitError() << "dimension " << d << " of the result is "
                              << "not a multiple of the input's";
      axes.push_back(split.size());
      split.push_back(out[d] / in[d]);
      split.push_back(in[d]);
    }
    if (in == out) {
      operandGrads[0] = g;
      return success();
    }
    GradBuilder gb{b, loc};
    operandGrads[0] = b.create<ReduceSumOp>(
        loc, gb.typeLike(in, g), gb.reshape(g, split),
        b.getDenseI64ArrayAttr(axes), b.getBoolAttr(false));
    return success();
  }
  if (type == "CumSum" && op.getInputs().size() == 1) {
    // Every input element adds to the sums after it (before it with
    // `reverse`): the gradient is the running sum the other way, with the
    // same `exclusive`.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    DictionaryAttr attrs = op.getOnnxAttrs();
    auto flag = [&](StringRef name) {
      auto a = attrs.getAs<IntegerAttr>(name);
      return a && a.getInt() != 0;
    };
    SmallVector<NamedAttribute> out{
        b.getNamedAttr(
            "axis", b.getI64IntegerAttr(getOnnxAxis(op, shapeOf(x).size(), 0))),
        b.getNamedAttr("exclusive", b.getI64IntegerAttr(flag("exclusive"))),
        b.getNamedAttr("reverse", b.getI64IntegerAttr(!flag("reverse")))};
    operandGrads[0] = onnxOp(b, loc, x.getType(), "CumSum", out, {g});
    return success();
  }
  if (type == "TopK" && op.getInputs().size() == 1 &&
      op.getOutputs().size() == 2) {
    // The values are the input's elements at the indices (distinct within
    // a slice): their gradient goes back to those positions, a
    // ScatterElements into zeros along the axis. The indices have none.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    int64_t axis = getOnnxAxis(op, shapeOf(x).size(), -1);
    if (axis < 0)
      return op.emitError() << "axis is out of range";
    operandGrads[0] =
        onnxOp(b, loc, x.getType(), "ScatterElements",
               {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))},
               {zeros(b, loc, cast<RankedTensorType>(x.getType())),
                op.getOutputs()[1], g});
    return success();
  }
  if (type == "Resize" && op.getInputs().size() == 1) {
    // Every output element is a weighted sum of input elements: the
    // gradient adds its share back to each (ResizeGrad, with the forward's
    // attributes).
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    SmallVector<NamedAttribute> attrs(op.getOnnxAttrs().getValue());
    operandGrads[0] = onnxOp(b, loc, x.getType(), "ResizeGrad", attrs, {g});
    return success();
  }
  if (type == "Split") {
    if (llvm::all_of(resultGrads, [](Value v) { return !v; }))
      return success();
    Value x = op.getInputs()[0];
    if (!isFloat(x))
      return success();
    int64_t axis = getOnnxAxis(op, shapeOf(x).size(), 0);
    if (axis < 0)
      return op.emitError() << "axis is out of range";
    SmallVector<Value> parts;
    for (auto [i, r] : llvm::enumerate(op.getOutputs())) {
      Value g = i < resultGrads.size() ? resultGrads[i] : Value();
      parts.push_back(g ? g
                        : zeros(b, loc, cast<RankedTensorType>(r.getType())));
    }
    operandGrads[0] =
        onnxOp(b, loc, x.getType(), "Concat",
               {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))}, parts);
    return success();
  }
  if (type == "Slice") {
    // Output element i of a sliced axis is input element first + step * i.
    // The gradient is spread back: a negative step reverses the axis
    // (a Slice with step -1), a step s > 1 interleaves s - 1 zeros after
    // every element (Reshape to [.., n, 1, ..], Pad to [.., n, s, ..],
    // Reshape to [.., n * s, ..]), and a final Pad places the lot at its
    // first index (negative pads crop what runs past the end).
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    ArrayRef<int64_t> in = shapeOf(x);
    int64_t rank = in.size();
    DictionaryAttr attrs = op.getOnnxAttrs();
    auto ints = [&](StringRef name) {
      SmallVector<int64_t> v;
      if (auto a = attrs.getAs<DenseI64ArrayAttr>(name))
        v.assign(a.asArrayRef().begin(), a.asArrayRef().end());
      return v;
    };
    SmallVector<int64_t> starts = ints("starts"), axes = ints("axes"),
                         steps = ints("steps");
    if (axes.empty())
      for (int64_t d = 0; d < static_cast<int64_t>(starts.size()); ++d)
        axes.push_back(d);
    if (starts.size() != axes.size() ||
        (!steps.empty() && steps.size() != axes.size()))
      return op.emitError() << "starts, axes and steps differ in length";
    auto elementType = cast<RankedTensorType>(x.getType()).getElementType();
    if (llvm::is_contained(shapeOf(g), 0)) {
      operandGrads[0] = zeros(b, loc, cast<RankedTensorType>(x.getType()));
      return success();
    }
    GradBuilder gb{b, loc};
    SmallVector<int64_t> begin(rank, 0), span(shapeOf(g));
    for (auto [k, a] : llvm::enumerate(axes)) {
      int64_t d = a < 0 ? a + rank : a;
      if (d < 0 || d >= rank)
        return op.emitError() << "axis " << a << " is out of range";
      int64_t step = k < steps.size() ? steps[k] : 1;
      if (step == 0)
        return op.emitError() << "step 0 on axis " << a;
      int64_t n = span[d], s = starts[k];
      // One element taken: its step does not matter (and may be huge).
      if (n == 1)
        step = step > 0 ? 1 : -1;
      if (s < 0)
        s += in[d];
      // ONNX clamps the start to [0, dim] (positive steps) or
      // [0, dim - 1] (negative ones).
      int64_t first = std::clamp<int64_t>(s, 0, step > 0 ? in[d] : in[d] - 1);
      if (step < 0) {
        ArrayRef<int64_t> gs = shapeOf(g);
        g = onnxOp(
            b, loc, g.getType(), "Slice",
            {b.getNamedAttr("starts", b.getDenseI64ArrayAttr({gs[d] - 1})),
             b.getNamedAttr("ends", b.getDenseI64ArrayAttr(
                                        {std::numeric_limits<int64_t>::min()})),
             b.getNamedAttr("axes", b.getDenseI64ArrayAttr({d})),
             b.getNamedAttr("steps", b.getDenseI64ArrayAttr({-1}))},
            {g});
        step = -step;
        first -= step * (n - 1);
      }
      if (step > 1) {
        SmallVector<int64_t> shape(shapeOf(g));
        SmallVector<int64_t> split(shape.begin(), shape.begin() + d + 1);
        split.push_back(1);
        split.append(shape.begin() + d + 1, shape.end());
        SmallVector<int64_t> pads(2 * (rank + 1), 0);
        pads[rank + 1 + d + 1] = step - 1;
        SmallVector<int64_t> padded(split);
        padded[d + 1] = step;
        Value spread =
            onnxOp(b, loc, RankedTensorType::get(padded, elementType), "Pad",
                   {b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
                    b.getNamedAttr("mode", b.getStringAttr("constant"))},
                   {gb.reshape(g, split)});
        shape[d] = n * step;
        g = gb.reshape(spread, shape);
      }
      begin[d] = first;
      span[d] = shapeOf(g)[d];
    }
    SmallVector<int64_t> pads(2 * rank, 0);
    for (int64_t d = 0; d < rank; ++d) {
      pads[d] = begin[d];
      pads[rank + d] = in[d] - begin[d] - span[d];
    }
    operandGrads[0] =
        onnxOp(b, loc, x.getType(), "Pad",
               {b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
                b.getNamedAttr("mode", b.getStringAttr("constant"))},
               {g});
    return success();
  }
  if (type == "Pad") {
    // Constant padding: the gradient cropped back, a Pad by the negated
    // pads (negative pads crop).
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    DictionaryAttr attrs = op.getOnnxAttrs();
    auto mode = attrs.getAs<StringAttr>("mode");
    if (mode && mode.getValue() != "constant")
      return op.emitError() << "gradient of a Pad in mode '" << mode.getValue()
                            << "' is not supported yet (only constant)";
    SmallVector<int64_t> pads;
    if (auto p = attrs.getAs<DenseI64ArrayAttr>("pads"))
      for (int64_t v : p.asArrayRef())
        pads.push_back(-v);
    SmallVector<NamedAttribute> out{
        b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
        b.getNamedAttr("mode", b.getStringAttr("constant"))};
    if (auto axes = attrs.get("axes"))
      out.push_back(b.getNamedAttr("axes", axes));
    operandGrads[0] = onnxOp(b, loc, x.getType(), "Pad", out, {g});
    return success();
  }
  if (type == "Conv") {
    // dX: ConvInputGrad (W^T dy, col2im); dW: ConvWeightGrad (dy im2col(X)^T
    // summed over the batch); dB: dy summed over all but the channels.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    if (!g)
      return success();
    Value x = op.getInputs()[0], w = op.getInputs()[1];
    DictionaryAttr attrs = op.getOnnxAttrs();
    SmallVector<NamedAttribute> window;
    for (StringRef name : {"strides", "pads", "dilations", "group"})
      if (Attribute a = attrs.get(name))
        window.push_back(b.getNamedAttr(name, a));
    ArrayRef<int64_t> ws = shapeOf(w);
    if (isFloat(x))
      operandGrads[0] =
          onnxOp(b, loc, x.getType(), "ConvInputGrad", window, {x, w, g});
    SmallVector<NamedAttribute> wAttrs(window);
    wAttrs.push_back(b.getNamedAttr("kernel_shape",
                                    b.getDenseI64ArrayAttr(ws.drop_front(2))));
    if (isFloat(w))
      operandGrads[1] =
          onnxOp(b, loc, w.getType(), "ConvWeightGrad", wAttrs, {x, g});
    if (op.getInputs().size() > 2 && isFloat(op.getInputs()[2])) {
      Value bias = op.getInputs()[2];
      SmallVector<int64_t> axes{0};
      for (int64_t d = 2; d < static_cast<int64_t>(shapeOf(g).size()); ++d)
        axes.push_back(d);
      operandGrads[2] = b.create<ReduceSumOp>(loc, bias.getType(), g,
                                              b.getDenseI64ArrayAttr(axes),
                                              b.getBoolAttr(false));
    }
    return success();
  }
  if (type == "MaxPool" || type == "AveragePool" || type == "GlobalMaxPool") {
    // The max goes to each window's first maximum (PyTorch's ties), the
    // average spreads over the window; both recompute the window from X.
    // GlobalMaxPool is a MaxPool whose window is the whole plane.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    DictionaryAttr attrs = op.getOnnxAttrs();
    bool isMax = type != "AveragePool";
    if (auto order = attrs.getAs<IntegerAttr>("storage_order");
        order && order.getInt() != 0)
      return op.emitError() << "gradient of a MaxPool with storage_order "
                            << order.getInt() << " is not supported (only 0)";
    SmallVector<NamedAttribute> out;
    if (type == "GlobalMaxPool") {
      out.push_back(b.getNamedAttr(
          "kernel_shape", b.getDenseI64ArrayAttr(shapeOf(x).drop_front(2))));
    } else {
      SmallVector<StringRef> names{"kernel_shape", "strides", "pads",
                                   "ceil_mode"};
      names.push_back(isMax ? "dilations" : "count_include_pad");
      for (StringRef name : names)
        if (Attribute a = attrs.get(name))
          out.push_back(b.getNamedAttr(name, a));
    }
    operandGrads[0] =
        onnxOp(b, loc, x.getType(), isMax ? "MaxPoolGrad" : "AveragePoolGrad",
               out, {x, g});
    return success();
  }
  if (type == "GlobalAveragePool") {
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    GradBuilder gb{b, loc};
    int64_t count = 1;
    for (int64_t d : shapeOf(x).drop_front(2))
      count *= d;
    operandGrads[0] = gb.mul(gb.expand(g, shapeOf(x)),
                             gb.scalar(1.0 / std::max<int64_t>(count, 1), g));
    return success();
  }
  if (type == "HardSigmoid" || type == "HardSwish") {
    // t = alpha x + beta; HardSigmoid = clamp(t, 0, 1), whose derivative is
    // alpha inside (0, 1); HardSwish = x HardSigmoid(x) (alpha 1/6, beta
    // 1/2), whose derivative is 2 alpha x + beta inside, 1 above, 0 below.
    Value g = resultGrads.empty() ? Value() : resultGrads[0];
    Value x = op.getInputs()[0];
    if (!g || !isFloat(x))
      return success();
    GradBuilder gb{b, loc};
    bool sigmoid = type == "HardSigmoid";
    double alpha = sigmoid ? 0.2 : 1.0 / 6, beta = 0.5;
    if (sigmoid) {
      if (auto a = op.getOnnxAttrs().getAs<FloatAttr>("alpha"))
        alpha = a.getValueAsDouble();
      if (auto c = op.getOnnxAttrs().getAs<FloatAttr>("beta"))
        beta = c.getValueAsDouble();
    }
    Value t = gb.add(gb.mul(x, gb.scalar(alpha, x)), gb.scalar(beta, x));
    Value zero = gb.scalar(0.0, g), one = gb.scalar(1.0, g);
    Value inside = gb.binary<AndOp>(gb.compare<GreaterOp>(t, zero),
                                    gb.compare<LessOp>(t, one));
    if (sigmoid) {
      operandGrads[0] = gb.select(inside, gb.mul(g, gb.scalar(alpha, g)), zero);
      return success();
    }
    Value slope =
        gb.add(gb.mul(x, gb.scalar(2 * alpha, x)), gb.scalar(beta, x));
    Value above = gb.select(gb.compare<GreaterOrEqualOp>(t, one), g, zero);
    operandGrads[0] = gb.select(inside, gb.mul(g, slope), above);
    return success();
  }
  return noRule();
}

} // namespace

LogicalResult shoal::buildGradient(Operation *op, OpBuilder &b,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(op->getNumOperands(), Value());
  auto noRule = [&]() -> LogicalResult {
    std::string what = op->getName().getStringRef().str();
    if (auto onnx = dyn_cast<OnnxOp>(op))
      what += " (ONNX " + onnx.getOpType().str() + ")";
    return op->emitError() << "'" << what
                           << "' has no gradient rule, but the loss depends "
                              "on it through a trained weight";
  };
  if (auto onnx = dyn_cast<OnnxOp>(op))
    return onnxGradient(onnx, b, resultGrads, operandGrads, noRule);
  if (auto gelu = dyn_cast<GeluOp>(op)) {
    // z = x + bias: dz = gelu_grad(dy, x, bias), summed to x's and bias's
    // shapes.
    if (resultGrads.empty() || !resultGrads[0])
      return success();
    GradBuilder gb{b, op->getLoc()};
    Value dz = b.create<GeluGradOp>(op->getLoc(), resultGrads[0].getType(),
                                    resultGrads[0], gelu.getInput(),
                                    gelu.getBias(), gelu.getApproximateAttr());
    operandGrads[0] = gb.sumTo(dz, gelu.getInput());
    if (gelu.getBias())
      operandGrads[1] = gb.sumTo(dz, gelu.getBias());
    return success();
  }
  if (auto att = dyn_cast<AttentionOp>(op)) {
    // One shoal.attention_grad, which recomputes the probabilities. The
    // mask gets no gradient: shoal-autodiff turns an attention whose mask
    // depends on a trained weight (a learned position bias) back into its
    // chain first.
    if (resultGrads.empty() || !resultGrads[0])
      return success();
    auto grad = b.create<AttentionGradOp>(
        op->getLoc(),
        TypeRange{att.getQ().getType(), att.getKt().getType(),
                  att.getV().getType()},
        resultGrads[0], att.getQ(), att.getKt(), att.getV(), att.getMask(),
        att.getScaleAttr());
    operandGrads[0] = grad.getDq();
    operandGrads[1] = grad.getDkt();
    operandGrads[2] = grad.getDv();
    return success();
  }
  if (isa<AddLayerNormOp>(op))
    return op->emitError() << "'" << op->getName()
                           << "' has no gradient rule (shoal-autodiff runs "
                              "before shoal-fuse)";
  if (op->getNumResults() != 1)
    return noRule();
  Value g = resultGrads.empty() ? Value() : resultGrads[0];
  if (!g)
    return success();
  GradBuilder gb{b, op->getLoc()};
  Value y = op->getResult(0);
  auto setBroadcast = [&](unsigned i, Value grad) {
    if (isFloat(op->getOperand(i)))
      operandGrads[i] = gb.sumTo(grad, op->getOperand(i));
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](AddOp o) {
        setBroadcast(0, g);
        setBroadcast(1, g);
        return success();
      })
      .Case([&](SubOp o) {
        setBroadcast(0, g);
        setBroadcast(1, gb.neg(g));
        return success();
      })
      .Case([&](MulOp o) {
        setBroadcast(0, gb.mul(g, o.getRhs()));
        setBroadcast(1, gb.mul(g, o.getLhs()));
        return success();
      })
      .Case([&](DivOp o) {
        setBroadcast(0, gb.div(g, o.getRhs()));
        // d(a/b)/db = -a/b^2 = -y/b.
        setBroadcast(1, gb.neg(gb.mul(g, gb.div(y, o.getRhs()))));
        return success();
      })
      .Case([&](PowOp o) {
        Value x = o.getLhs(), p = o.getRhs();
        Value pm1 = gb.sub(p, gb.scalar(1.0, p));
        setBroadcast(0, gb.mul(g, gb.mul(p, gb.binary<PowOp>(x, pm1))));
        setBroadcast(1, gb.mul(g, gb.mul(y, gb.unary<LogOp>(x))));
        return success();
      })
      .Case<MaxOp, MinOp>([&](Operation *o) {
        Value a = o->getOperand(0), c = o->getOperand(1);
        Value takeA = isa<MaxOp>(o) ? gb.compare<GreaterOrEqualOp>(a, c)
                                    : gb.compare<LessOrEqualOp>(a, c);
        Value zero = gb.scalar(0.0, g);
        setBroadcast(0, gb.select(takeA, g, zero));
        setBroadcast(1, gb.select(takeA, zero, g));
        return success();
      })
      .Case([&](WhereOp o) {
        Value zero = gb.scalar(0.0, g);
        setBroadcast(1, gb.select(o.getCondition(), g, zero));
        setBroadcast(2, gb.select(o.getCondition(), zero, g));
        return success();
      })
      .Case([&](NegOp) {
        operandGrads[0] = gb.neg(g);
        return success();
      })
      .Case([&](ExpOp) {
        operandGrads[0] = gb.mul(g, y);
        return success();
      })
      .Case([&](LogOp o) {
        operandGrads[0] = gb.div(g, o.getInput());
        return success();
      })
      .Case([&](SqrtOp) {
        operandGrads[0] = gb.div(gb.mul(g, gb.scalar(0.5, g)), y);
        return success();
      })
      .Case([&](TanhOp) {
        operandGrads[0] = gb.mul(g, gb.sub(gb.scalar(1.0, g), gb.mul(y, y)));
        return success();
      })
      .Case([&](SigmoidOp) {
        operandGrads[0] = gb.mul(g, gb.mul(y, gb.sub(gb.scalar(1.0, g), y)));
        return success();
      })
      .Case([&](ReciprocalOp) {
        operandGrads[0] = gb.neg(gb.mul(g, gb.mul(y, y)));
        return success();
      })
      .Case([&](SinOp o) {
        operandGrads[0] = gb.mul(g, gb.unary<CosOp>(o.getInput()));
        return success();
      })
      .Case([&](CosOp o) {
        operandGrads[0] = gb.neg(gb.mul(g, gb.unary<SinOp>(o.getInput())));
        return success();
      })
      .Case([&](ReluOp o) {
        Value zero = gb.scalar(0.0, g);
        operandGrads[0] =
            gb.select(gb.compare<GreaterOp>(o.getInput(), zero), g, zero);
        return success();
      })
      .Case([&](AbsOp o) {
        Value zero = gb.scalar(0.0, g);
        operandGrads[0] = gb.select(
            gb.compare<GreaterOrEqualOp>(o.getInput(), zero), g, gb.neg(g));
        return success();
      })
      .Case([&](ErfOp o) {
        // d erf(x)/dx = 2 / sqrt(pi) * exp(-x^2).
        Value x = o.getInput();
        Value e = gb.unary<ExpOp>(gb.neg(gb.mul(x, x)));
        operandGrads[0] =
            gb.mul(g, gb.mul(e, gb.scalar(2.0 / std::sqrt(M_PI), g)));
        return success();
      })
      .Case<FloorOp, CeilOp, NotOp, AndOp, OrOp, XorOp, EqualOp, LessOp,
            GreaterOp, LessOrEqualOp, GreaterOrEqualOp>(
          [&](Operation *) { return success(); }) // zero or no gradient
      .Case([&](CastOp o) {
        if (isFloat(o.getInput()) && isFloat(y))
          operandGrads[0] =
              b.create<CastOp>(o.getLoc(), o.getInput().getType(), g);
        return success();
      })
      .Case([&](ExpandOp o) {
        setBroadcast(0, g);
        return success();
      })
      .Case([&](ReshapeOp o) {
        operandGrads[0] = gb.reshape(g, shapeOf(o.getInput()));
        return success();
      })
      .Case([&](TransposeOp o) {
        ArrayRef<int64_t> perm = o.getPerm();
        SmallVector<int64_t> inverse(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          inverse[p] = i;
        operandGrads[0] = gb.transpose(g, inverse);
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](Operation *o) {
        Value x = o->getOperand(0);
        ArrayRef<int64_t> in = shapeOf(x);
        auto axesAttr = o->getAttrOfType<DenseI64ArrayAttr>("axes");
        SmallVector<int64_t> kept(in.begin(), in.end());
        int64_t count = 1;
        for (int64_t a : axesAttr.asArrayRef()) {
          int64_t d = a < 0 ? a + (int64_t)in.size() : a;
          count *= in[d];
          kept[d] = 1;
        }
        Value grad = gb.expand(gb.reshape(g, kept), in);
        if (isa<ReduceMeanOp>(o))
          grad = gb.mul(grad, gb.scalar(1.0 / count, grad));
        operandGrads[0] = grad;
        return success();
      })
      .Case([&](MatMulOp o) -> LogicalResult {
        Value a = o.getLhs(), c = o.getRhs();
        ArrayRef<int64_t> as = shapeOf(a), cs = shapeOf(c);
        if (as.size() < 2 || cs.size() < 2)
          return o.emitError() << "gradient of a matmul of a vector is not "
                                  "supported yet";
        if (cs.size() == 2) {
          // A weight: fold the batch into rows and use Gemm's transposes, so
          // that no transposed copy of the weight is made.
          int64_t rows = 1;
          for (int64_t d : as.drop_back())
            rows *= d;
          Value g2 = gb.reshape(g, {rows, cs[1]});
          Value a2 = gb.reshape(a, {rows, cs[0]});
          operandGrads[0] = gb.reshape(gb.gemm(g2, c, false, true), as);
          operandGrads[1] = gb.gemm(a2, g2, true, false);
          return success();
        }
        operandGrads[0] = gb.sumTo(gb.matmul(g, gb.transposeLast2(c)), as);
        operandGrads[1] = gb.sumTo(gb.matmul(gb.transposeLast2(a), g), cs);
        return success();
      })
      .Case([&](GemmOp o) {
        bool ta = o.getTransA(), tb = o.getTransB();
        float alpha = o.getAlpha().convertToFloat();
        Value a = o.getA(), c = o.getB();
        operandGrads[0] = ta ? gb.gemm(c, g, tb, true, alpha)
                             : gb.gemm(g, c, false, !tb, alpha);
        operandGrads[1] = tb ? gb.gemm(g, a, true, ta, alpha)
                             : gb.gemm(a, g, !ta, false, alpha);
        if (Value bias = o.getC()) {
          float beta = o.getBeta().convertToFloat();
          Value gc = beta == 1.0f ? g : gb.mul(g, gb.scalar(beta, g));
          operandGrads[2] = gb.sumTo(gc, bias);
        }
        return success();
      })
      .Case([&](SoftmaxOp o) {
        operandGrads[0] = b.create<SoftmaxGradOp>(o.getLoc(), y.getType(), y, g,
                                                  o.getAxisAttr());
        return success();
      })
      .Case([&](LayerNormOp o) {
        Value x = o.getInput(), scale = o.getScale();
        operandGrads[0] = b.create<LayerNormGradOp>(
            o.getLoc(), x.getType(), x, scale, g, o.getAxisAttr(),
            o.getEpsilonAttr(), o.getRmsAttr());
        int64_t rank = shapeOf(x).size();
        int64_t axis = static_cast<int64_t>(o.getAxis());
        if (axis < 0)
          axis += rank;
        Value ds = b.create<LayerNormScaleGradOp>(
            o.getLoc(), gb.typeLike(shapeOf(x).drop_front(axis), x), x, g,
            o.getAxisAttr(), o.getEpsilonAttr(), o.getRmsAttr());
        operandGrads[1] = gb.sumTo(ds, scale);
        if (Value bias = o.getBias())
          operandGrads[2] = gb.sumTo(g, bias);
        return success();
      })
      .Case([&](GatherOp o) -> LogicalResult {
        // Along axis k: move k to the front (Transpose), scatter-add there
        // (gather_grad, axis 0), and move it back. The gradient's index
        // dimensions (k .. k + rank(indices) - 1) move to the front too.
        Value data = o.getData();
        ArrayRef<int64_t> ds = shapeOf(data);
        int64_t rank = ds.size();
        int64_t axis = static_cast<int64_t>(o.getAxis());
        if (axis < 0)
          axis += rank;
        if (axis == 0) {
          operandGrads[0] =
              b.create<GatherGradOp>(o.getLoc(), data.getType(), o.getIndices(),
                                     g, ArrayAttr(), IntegerAttr());
          return success();
        }
        int64_t ir = shapeOf(o.getIndices()).size();
        SmallVector<int64_t> dataPerm{axis}, gPerm;
        for (int64_t d = 0; d < rank; ++d)
          if (d != axis)
            dataPerm.push_back(d);
        for (int64_t d = 0; d < ir; ++d)
          gPerm.push_back(axis + d);
        for (int64_t d = 0; d < axis; ++d)
          gPerm.push_back(d);
        for (int64_t d = axis + ir; d < rank - 1 + ir; ++d)
          gPerm.push_back(d);
        SmallVector<int64_t> moved;
        for (int64_t p : dataPerm)
          moved.push_back(ds[p]);
        Value scattered = b.create<GatherGradOp>(
            o.getLoc(), gb.typeLike(moved, data), o.getIndices(),
            gb.transpose(g, gPerm), ArrayAttr(), IntegerAttr());
        SmallVector<int64_t> inverse(rank);
        for (auto [i, p] : llvm::enumerate(dataPerm))
          inverse[p] = i;
        operandGrads[0] = gb.transpose(scattered, inverse);
        return success();
      })
      .Case([&](SoftmaxCrossEntropyOp o) {
        operandGrads[0] = b.create<SoftmaxCrossEntropyGradOp>(
            o.getLoc(), o.getLogits().getType(), o.getLogits(), o.getLabels(),
            g, o.getIgnoreIndexAttr());
        return success();
      })
      .Default([&](Operation *) { return noRule(); });
}
