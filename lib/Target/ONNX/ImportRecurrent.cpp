//===- ImportRecurrent.cpp - ONNX LSTM and GRU, unrolled --------*- C++ -*-===//
//
// LSTM and GRU are unrolled over their (static) sequence length into ops
// that have sharding rules and gradients already: the input projection of
// every step at once (one batched MatMul), then per step a Gemm with the
// recurrent weights, Slices for the gates, Sigmoid, Tanh, Mul and Add. The
// batch dimension stays a separate dimension everywhere, so a batch split
// passes through the whole recurrence, and training needs nothing new.
//
// Supported: directions forward, reverse and bidirectional; optional B,
// initial_h, initial_c; layout 0 and 1; every output; GRU's
// linear_before_reset 0 and 1. Refused with an error naming the node:
// sequence_lens, peepholes (P), clip, input_forget, non-default activations.
//
//===----------------------------------------------------------------------===//

#include "GraphBuilder.h"
#include "Importer.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::onnx_import;

namespace {

enum class Cell { LSTM, GRU };

/// The inputs and shapes of one LSTM or GRU node, checked.
struct Recurrence {
  Cell cell;
  int64_t seq = 0, batch = 0, inputSize = 0, hidden = 0, dirs = 1;
  int64_t gates = 4;
  bool reverseOnly = false;
  bool layout1 = false;
  bool linearBeforeReset = false;
  Value x, w, r, bias, h0, c0;
};

/// Checks the attributes and inputs shoal does not support, then reads and
/// checks the inputs.
LogicalResult readRecurrence(Importer &im, const onnx::NodeProto &node,
                             Cell cell, Recurrence &rc) {
  rc.cell = cell;
  rc.gates = cell == Cell::LSTM ? 4 : 3;
  StringRef op = node.op_type();
  if (Importer::hasInput(node, 4))
    return im.nodeError() << op
                          << ": input 'sequence_lens' is not supported (every "
                             "sequence must have the full length; export "
                             "without it)";
  if (cell == Cell::LSTM && Importer::hasInput(node, 7))
    return im.nodeError() << op
                          << ": peephole weights (input 'P') are not supported";
  if (findAttr(node, "clip"))
    return im.nodeError() << op << ": attribute 'clip' is not supported";
  if (getIntAttr(node, "input_forget", 0) != 0)
    return im.nodeError() << op << ": input_forget = 1 is not supported";
  StringRef direction = "forward";
  if (const onnx::AttributeProto *a = findAttr(node, "direction"))
    direction = a->s();
  if (direction == "bidirectional")
    rc.dirs = 2;
  else if (direction == "reverse")
    rc.reverseOnly = true;
  else if (direction != "forward")
    return im.nodeError() << op << ": unknown direction '" << direction
                          << "' (forward, reverse or bidirectional)";
  SmallVector<StringRef> defaults =
      cell == Cell::LSTM ? SmallVector<StringRef>{"Sigmoid", "Tanh", "Tanh"}
                         : SmallVector<StringRef>{"Sigmoid", "Tanh"};
  if (const onnx::AttributeProto *a = findAttr(node, "activations")) {
    bool ok = a->strings_size() == static_cast<int>(defaults.size() * rc.dirs);
    for (int i = 0; ok && i < a->strings_size(); ++i)
      ok = StringRef(a->strings(i))
               .equals_insensitive(defaults[i % defaults.size()]);
    if (!ok) {
      auto diag = im.nodeError() << op << ": activations [";
      for (int i = 0; i < a->strings_size(); ++i)
        diag << (i ? ", " : "") << a->strings(i);
      diag << "] are not supported (only the defaults, ";
      for (auto [i, s] : llvm::enumerate(defaults))
        diag << (i ? ", " : "") << s;
      return diag << ", per direction)";
    }
  }
  if (findAttr(node, "activation_alpha") || findAttr(node, "activation_beta"))
    return im.nodeError() << op
                          << ": activation_alpha and activation_beta are not "
                             "supported";
  rc.layout1 = getIntAttr(node, "layout", 0) != 0;
  rc.linearBeforeReset = getIntAttr(node, "linear_before_reset", 0) != 0;

  for (int i = 0; i < 3; ++i)
    if (!Importer::hasInput(node, i))
      return im.nodeError() << op << " needs input " << i;
  auto x = im.getInput(node, 0), w = im.getInput(node, 1),
       r = im.getInput(node, 2);
  if (failed(x) || failed(w) || failed(r))
    return failure();
  rc.x = *x;
  rc.w = *w;
  rc.r = *r;
  ArrayRef<int64_t> xs = GraphBuilder::shapeOf(rc.x),
                    ws = GraphBuilder::shapeOf(rc.w);
  if (xs.size() != 3 || ws.size() != 3)
    return im.nodeError() << op << ": X and W must have rank 3, got "
                          << rc.x.getType() << " and " << rc.w.getType();
  rc.seq = rc.layout1 ? xs[1] : xs[0];
  rc.batch = rc.layout1 ? xs[0] : xs[1];
  rc.inputSize = xs[2];
  rc.hidden = ws[1] / rc.gates;
  if (int64_t h = getIntAttr(node, "hidden_size", rc.hidden); h != rc.hidden)
    return im.nodeError() << op << ": hidden_size " << h << " does not match W "
                          << rc.w.getType();
  auto expect = [&](Value v, ArrayRef<int64_t> shape,
                    StringRef name) -> LogicalResult {
    if (GraphBuilder::shapeOf(v) != shape) {
      auto diag = im.nodeError()
                  << op << ": input '" << name << "' must have shape [";
      llvm::interleaveComma(shape, diag);
      return diag << "], got " << v.getType();
    }
    return success();
  };
  int64_t g = rc.gates, h = rc.hidden;
  if (failed(expect(rc.w, {rc.dirs, g * h, rc.inputSize}, "W")) ||
      failed(expect(rc.r, {rc.dirs, g * h, h}, "R")))
    return failure();
  if (Importer::hasInput(node, 3)) {
    auto bias = im.getInput(node, 3);
    if (failed(bias) || failed(expect(*bias, {rc.dirs, 2 * g * h}, "B")))
      return failure();
    rc.bias = *bias;
  }
  SmallVector<int64_t> stateShape =
      rc.layout1 ? SmallVector<int64_t>{rc.batch, rc.dirs, h}
                 : SmallVector<int64_t>{rc.dirs, rc.batch, h};
  for (int i = 5; i < (cell == Cell::LSTM ? 7 : 6); ++i) {
    if (!Importer::hasInput(node, i))
      continue;
    auto v = im.getInput(node, i);
    if (failed(v) ||
        failed(expect(*v, stateShape, i == 5 ? "initial_h" : "initial_c")))
      return failure();
    (i == 5 ? rc.h0 : rc.c0) = *v;
  }
  return success();
}

/// One direction's outputs: the hidden state of every step (in time
/// order), and the last hidden and cell states.
struct DirectionResult {
  SmallVector<Value> hs;
  Value lastH, lastC;
};

DirectionResult unrollDirection(GraphBuilder &gb, const Recurrence &rc,
                                Value xSeq, int64_t dir, bool reverse) {
  int64_t h = rc.hidden, g = rc.gates;
  auto weight = [&](Value v) {
    ArrayRef<int64_t> s = GraphBuilder::shapeOf(v);
    return gb.reshape(gb.slice(v, 0, dir, dir + 1), s.drop_front());
  };
  Value w = weight(rc.w); // [g*h, I]
  Value r = weight(rc.r); // [g*h, h]
  Value wb, rb;
  if (rc.bias) {
    Value bias = weight(rc.bias); // [2*g*h]
    wb = gb.slice(bias, 0, 0, g * h);
    rb = gb.slice(bias, 0, g * h, 2 * g * h);
  }
  // The input projection of every step: [seq, batch, g*h].
  Value xw = gb.matmul(xSeq, gb.transpose(w, {1, 0}));
  if (wb) {
    // LSTM adds both biases once; GRU's recurrent bias of the candidate
    // gate goes inside the reset product when linear_before_reset is set,
    // so it is kept apart there (and added with R's product below).
    if (rc.cell == Cell::LSTM)
      xw = gb.add(xw, gb.add(wb, rb));
    else
      xw = gb.add(xw, wb);
  }
  auto state = [&](Value v) -> Value {
    // [dirs, batch, h] (or [batch, dirs, h]) -> [batch, h] of this dir.
    if (!v)
      return gb.splat({rc.batch, h}, 0.0, rc.x);
    return gb.reshape(gb.slice(v, rc.layout1 ? 1 : 0, dir, dir + 1),
                      {rc.batch, h});
  };
  // GRU: the recurrent weights and bias of z and r, and of h.
  Value rzr, rh, rbzr, rbh;
  if (rc.cell == Cell::GRU) {
    rzr = gb.slice(r, 0, 0, 2 * h);
    rh = gb.slice(r, 0, 2 * h, 3 * h);
    if (rb) {
      rbzr = gb.slice(rb, 0, 0, 2 * h);
      rbh = gb.slice(rb, 0, 2 * h, 3 * h);
    }
  }
  Value hPrev = state(rc.h0);
  Value cPrev = rc.cell == Cell::LSTM ? state(rc.c0) : Value();
  DirectionResult out;
  out.hs.resize(rc.seq);
  for (int64_t step = 0; step < rc.seq; ++step) {
    int64_t t = reverse ? rc.seq - 1 - step : step;
    Value xt = gb.reshape(gb.slice(xw, 0, t, t + 1), {rc.batch, g * h});
    auto gate = [&](Value v, int64_t k) {
      return gb.slice(v, 1, k * h, (k + 1) * h);
    };
    if (rc.cell == Cell::LSTM) {
      // Gates i, o, f, c.
      Value gates = gb.add(xt, gb.linear(hPrev, r, Value()));
      Value i = gb.unary<SigmoidOp>(gate(gates, 0));
      Value o = gb.unary<SigmoidOp>(gate(gates, 1));
      Value f = gb.unary<SigmoidOp>(gate(gates, 2));
      Value c = gb.unary<TanhOp>(gate(gates, 3));
      cPrev = gb.add(gb.mul(f, cPrev), gb.mul(i, c));
      hPrev = gb.mul(o, gb.unary<TanhOp>(cPrev));
    } else {
      // Gates z, r, h.
      Value zr = gb.add(gb.slice(xt, 1, 0, 2 * h), gb.linear(hPrev, rzr, rbzr));
      Value z = gb.unary<SigmoidOp>(gate(zr, 0));
      Value reset = gb.unary<SigmoidOp>(gate(zr, 1));
      Value candidate;
      if (rc.linearBeforeReset)
        candidate = gb.mul(reset, gb.linear(hPrev, rh, rbh));
      else
        candidate = gb.linear(gb.mul(reset, hPrev), rh, rbh);
      Value hTilde = gb.unary<TanhOp>(gb.add(gate(xt, 2), candidate));
      // (1 - z) * h~ + z * h = h~ + z * (h - h~).
      hPrev = gb.add(hTilde, gb.mul(z, gb.sub(hPrev, hTilde)));
    }
    out.hs[t] = hPrev;
  }
  out.lastH = hPrev;
  out.lastC = cPrev;
  return out;
}

LogicalResult convertRecurrent(Importer &im, const onnx::NodeProto &node,
                               Cell cell) {
  Recurrence rc;
  if (failed(readRecurrence(im, node, cell, rc)))
    return failure();
  GraphBuilder gb{im.builder(), im.loc()};
  Value xSeq = rc.layout1 ? gb.transpose(rc.x, {1, 0, 2}) : rc.x;
  SmallVector<DirectionResult> results;
  for (int64_t d = 0; d < rc.dirs; ++d)
    results.push_back(
        unrollDirection(gb, rc, xSeq, d, rc.reverseOnly || d == 1));
  int64_t h = rc.hidden;
  // Y: [seq, dirs, batch, h], or [batch, seq, dirs, h] with layout 1.
  auto stack = [&](auto get, int64_t axis, ArrayRef<int64_t> partShape) {
    SmallVector<Value> parts;
    for (const DirectionResult &r : results)
      parts.push_back(gb.reshape(get(r), partShape));
    return gb.concat(parts, axis);
  };
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty() || !im.isOutputUsed(node, i))
      continue;
    auto type = im.getResultType(node, i);
    if (failed(type))
      return failure();
    Value v;
    if (i == 0) {
      SmallVector<Value> steps;
      for (int64_t t = 0; t < rc.seq; ++t) {
        auto get = [&](const DirectionResult &r) { return r.hs[t]; };
        steps.push_back(
            rc.layout1 ? stack(get, 1, {rc.batch, 1, h})
                       : stack(get, 0, {1, rc.batch, h})); // [.., dirs, ..]
      }
      // Each step is [dirs, batch, h] (layout 0) or [batch, dirs, h].
      SmallVector<Value> withSeq;
      for (Value s : steps)
        withSeq.push_back(gb.reshape(
            s, rc.layout1 ? SmallVector<int64_t>{rc.batch, 1, rc.dirs, h}
                          : SmallVector<int64_t>{1, rc.dirs, rc.batch, h}));
      v = gb.concat(withSeq, rc.layout1 ? 1 : 0);
    } else {
      auto get = [&](const DirectionResult &r) {
        return i == 1 ? r.lastH : r.lastC;
      };
      v = rc.layout1 ? stack(get, 1, {rc.batch, 1, h})
                     : stack(get, 0, {1, rc.batch, h});
    }
    if (v.getType() != *type)
      return im.nodeError()
             << node.op_type() << ": output " << i << " has type " << *type
             << ", expected " << v.getType();
    im.setResult(node, i, v);
  }
  return success();
}

} // namespace

LogicalResult onnx_import::convertLSTM(Importer &im,
                                       const onnx::NodeProto &node) {
  return convertRecurrent(im, node, Cell::LSTM);
}

LogicalResult onnx_import::convertGRU(Importer &im,
                                      const onnx::NodeProto &node) {
  return convertRecurrent(im, node, Cell::GRU);
}
