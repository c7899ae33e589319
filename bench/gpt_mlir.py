#!/usr/bin/env python3
"""Emit the shoal-dialect MLIR of a GPT decoder (Megatron-LM's GPT), shapes only.

The graph is the one `shoal-translate --import-onnx` makes from the PyTorch
export of a GPT (examples/gpt, bench/gpt_cuda.py): same op sequence, same
node names (the `loc("...")` of every op, which the spec's `nodes:` globs
match), so the planner sees what it would see after an import, without
building or reading a multi-hundred-GB ONNX file. Weights are
`shoal.weight "name" : tensor<...>` ops (shape only, never any data).

The model, as Megatron-LM's GPT (Narayanan et al., SC'21):

  token embedding (gather, [V, h]) + learned position embedding ([s, h])
  L pre-LN blocks:
    x = x + proj(attention(LN_1(x)))        causal, heads of h / heads
    x = x + fc2(GELU(fc(LN_2(x))))          h -> 4h -> h, biases on all
  final LayerNorm, LM head [h, V]

Export-level choices (what torch.onnx.export writes; none changes the FLOPs
or the parameter count beyond what is said here):
- Q, K and V are three h x h MatMul+Add (Megatron fuses them into one
  h x 3h GEMM; same FLOPs and parameters).
- The position embedding is an `Add` of a [s, h] weight (the exporter folds
  Gather(wpe, arange(s)) into an initializer); max positions = --seq.
- The causal mask is one additive [s, s] weight "mask" (0 on and below the
  diagonal, -inf above), added to the scaled scores of every layer; the
  scale is a Mul by 1/sqrt(h / heads).
- GELU is exact (erf), in the 5-op form PyTorch exports for nn.GELU, so
  `--shoal-fuse` turns it into `shoal.gelu` and the attention chain into
  `shoal.attention`. (Megatron's fused bias-GELU uses the tanh form.)
- No dropout (an inference export drops it).
- LM head: untied by default (its own weight "lm_head.weight" [h, V], so the
  parameter count has V*h more than Megatron's, which ties it to the word
  embedding); --tie-embeddings emits Transpose(wte.weight) -> MatMul instead.
- Linear weights are stored [in, out] (what the exporter's MatMul reads).
- The parameter count printed (header comment and stderr) leaves out the
  mask; tied, it is the paper's equation (2) plus the final LayerNorm's 2h
  (GPT-3: 174.62B tied, 175.24B untied).

  /usr/bin/python3 bench/gpt_mlir.py --layers 96 --hidden 12288 --heads 96 \\
      --seq 2048 --vocab 51200 --batch 1 -o gpt3-175b.mlir
  build/bin/shoal-opt gpt3-175b.mlir --shoal-annotate="spec=spec.yaml" ...
"""

import argparse
import math
import sys

DTYPES = ("f32", "f16", "bf16")


class Emitter:
    """Writes the body of @main: one SSA value per op, each with a loc."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.lines = []
        self.count = 0
        self.weights = {}  # name -> (ssa, shape), emitted once, at first use
        self.params = 0

    def _type(self, shape, dtype=None):
        dims = "x".join(str(d) for d in shape)
        return "tensor<%s%s%s>" % (dims, "x" if dims else "", dtype or self.dtype)

    def _new(self):
        self.count += 1
        return "%%%d" % (self.count - 1)

    def weight(self, name, shape):
        """The weight `name`, as the importer makes it (loc = its name)."""
        if name in self.weights:
            ssa, old = self.weights[name]
            assert old == tuple(shape), name
            return (ssa, old)
        ssa = self._new()
        self.lines.append('%s = shoal.weight "%s" : %s loc("%s")'
                          % (ssa, name, self._type(shape), name))
        self.weights[name] = (ssa, tuple(shape))
        if name != "mask":  # a buffer, not a parameter
            self.params += math.prod(shape)
        return (ssa, tuple(shape))

    def const(self, value, loc):
        """A scalar constant of the model's element type."""
        ssa = self._new()
        self.lines.append('%s = shoal.constant dense<%.8e> : %s loc("%s")'
                          % (ssa, value, self._type(()), loc))
        return (ssa, ())

    def op(self, name, operands, shape, loc, attrs=""):
        """shoal.<name> of `operands` with one result of `shape`."""
        ssa = self._new()
        ins = ", ".join(self._type(v[1], v[2] if len(v) > 2 else None)
                        for v in operands)
        self.lines.append("%s = shoal.%s %s%s : (%s) -> %s loc(\"%s\")" % (
            ssa, name, ", ".join(v[0] for v in operands),
            " {%s}" % attrs if attrs else "", ins, self._type(shape), loc))
        return (ssa, tuple(shape))


def broadcast(a, b):
    """numpy broadcast of two shapes."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        assert x == y or x == 1 or y == 1, (a, b)
        out.append(max(x, y))
    return tuple(out)


def build(args):
    """The module's text."""
    B, T, C, H, V, L = args.batch, args.seq, args.hidden, args.heads, args.vocab, args.layers
    if C % H:
        sys.exit("--hidden (%d) must be a multiple of --heads (%d)" % (C, H))
    D = C // H
    e = Emitter(args.dtype)

    def binary(name, a, b, loc):
        return e.op(name, [a, b], broadcast(a[1], b[1]), loc)

    def layer_norm(x, prefix, loc):
        g = e.weight(prefix + ".weight", (C,))
        b = e.weight(prefix + ".bias", (C,))
        return e.op("layer_norm", [x, g, b], x[1], loc,
                    "axis = -1 : i64, epsilon = 1.000000e-05 : f32")

    def linear(x, wname, n_in, n_out, loc):
        """MatMul then Add(bias, y), as the exporter writes nn.Linear."""
        w = e.weight(wname + ".weight", (n_in, n_out))
        y = e.op("matmul", [x, w], x[1][:-1] + (n_out,), loc + "/MatMul")
        b = e.weight(wname + ".bias", (n_out,))
        return binary("add", b, y, loc + "/Add")

    def transpose(x, perm, loc):
        shape = tuple(x[1][p] for p in perm)
        return e.op("transpose", [x], shape, loc,
                    "perm = array<i64: %s>" % ", ".join(str(p) for p in perm))

    ids = ("%ids", (B, T), "i64")  # (ssa, shape[, element type])
    wte = e.weight("wte.weight", (V, C))
    x = e.op("gather", [wte, ids], (B, T, C), "/wte/Gather", "axis = 0 : i64")
    x = binary("add", x, e.weight("wpe.weight", (T, C)), "/Add")
    for i in range(L):
        p, w = "/h.%d/" % i, "h.%d." % i
        a = layer_norm(x, w + "ln_1", p + "ln_1/LayerNormalization")
        q = linear(a, w + "attn.q", C, C, p + "attn/q")
        q = e.op("reshape", [q], (B, T, H, D), p + "attn/Reshape")
        q = transpose(q, (0, 2, 1, 3), p + "attn/Transpose")
        k = linear(a, w + "attn.k", C, C, p + "attn/k")
        k = e.op("reshape", [k], (B, T, H, D), p + "attn/Reshape_1")
        k = transpose(k, (0, 2, 3, 1), p + "attn/Transpose_1")
        v = linear(a, w + "attn.v", C, C, p + "attn/v")
        v = e.op("reshape", [v], (B, T, H, D), p + "attn/Reshape_2")
        v = transpose(v, (0, 2, 1, 3), p + "attn/Transpose_2")
        s = e.op("matmul", [q, k], (B, H, T, T), p + "attn/MatMul")
        s = binary("mul", s, e.const(1.0 / math.sqrt(D), p + "attn/Constant_3"), p + "attn/Mul")
        s = binary("add", s, e.weight("mask", (T, T)), p + "attn/Add")
        s = e.op("softmax", [s], s[1], p + "attn/Softmax", "axis = -1 : i64")
        o = e.op("matmul", [s, v], (B, H, T, D), p + "attn/MatMul_1")
        o = transpose(o, (0, 2, 1, 3), p + "attn/Transpose_3")
        o = e.op("reshape", [o], (B, T, C), p + "attn/Reshape_3")
        o = linear(o, w + "attn.proj", C, C, p + "attn/proj")
        x = binary("add", x, o, p + "Add")
        m = layer_norm(x, w + "ln_2", p + "ln_2/LayerNormalization")
        m = linear(m, w + "mlp.fc", C, 4 * C, p + "mlp/fc")
        g = binary("div", m, e.const(math.sqrt(2.0), p + "mlp/act/Constant"), p + "mlp/act/Div")
        g = e.op("erf", [g], g[1], p + "mlp/act/Erf")
        g = binary("add", g, e.const(1.0, p + "mlp/act/Constant_1"), p + "mlp/act/Add")
        g = binary("mul", m, g, p + "mlp/act/Mul")
        g = binary("mul", g, e.const(0.5, p + "mlp/act/Constant_2"), p + "mlp/act/Mul_1")
        m = linear(g, w + "mlp.proj", 4 * C, C, p + "mlp/proj")
        x = binary("add", x, m, p + "Add_1")
    x = layer_norm(x, "ln_f", "/ln_f/LayerNormalization")
    if args.tie_embeddings:
        head = transpose(wte, (1, 0), "/lm_head/Transpose")
    else:
        head = e.weight("lm_head.weight", (C, V))
    logits = e.op("matmul", [x, head], (B, T, V), "/lm_head/MatMul")

    out_type = e._type(logits[1])
    header = [
        "// GPT decoder (Megatron-LM GPT), shapes only: layers %d, hidden %d, heads %d,"
        % (L, C, H),
        "// seq %d, vocab %d, batch %d, %s, LM head %s; %d parameters."
        % (T, V, B, args.dtype, "tied to wte" if args.tie_embeddings else "untied",
           e.params),
        "// Written by bench/gpt_mlir.py.",
        # shoal.shapes_only: a plan of it is for shoal-sim (which predicts
        # it); shoal-run refuses it, there are no weights to load.
        'module attributes {shoal.source = "%s", shoal.shapes_only} {' % args.source,
        '  func.func @main(%%ids: %s {shoal.name = "input_ids"}) -> '
        '(%s {shoal.name = "logits"}) {' % (e._type((B, T), "i64"), out_type),
    ]
    body = ["    " + l for l in e.lines]
    footer = ["    return %s : %s" % (logits[0], out_type), "  }", "}", ""]
    return "\n".join(header + body + footer), e.params, len(e.lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1, help="the graph's batch dimension")
    ap.add_argument("--dtype", choices=DTYPES, default="f32",
                    help="element type of weights and activations (default f32)")
    ap.add_argument("--tie-embeddings", action="store_true",
                    help="LM head = Transpose(wte.weight) (Megatron's default) "
                         "instead of its own lm_head.weight")
    ap.add_argument("--source", default="gpt.onnx",
                    help="the module's shoal.source (where a plan would load "
                         "weights from; never read by the planner)")
    ap.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    args = ap.parse_args()
    for k in ("layers", "hidden", "heads", "seq", "vocab", "batch"):
        if getattr(args, k) < 1:
            sys.exit("--%s must be positive" % k)
    text, params, ops = build(args)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    print("gpt_mlir: %d ops, %d parameters (%.2fB)" % (ops, params, params / 1e9),
          file=sys.stderr)


if __name__ == "__main__":
    main()
