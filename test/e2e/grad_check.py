#!/usr/bin/python3
"""Per-op gradient checks of shoal's training plans (docs/Training.md).

    /usr/bin/python3 test/e2e/grad_check.py --bin BUILD/bin --work DIR \
        [--ops Add,MatMul,...] [--rtol 1e-4] [--anchor]

For every case (one ONNX node), a tiny ONNX model (opset 17) whose float
operands are trainable initializers (float32), non-float operands (Gather's
indices, Where's condition) graph inputs and static operands (Pow's exponent,
Reshape's shape, ReduceSum's axes) Constant nodes; its output is `y`. It is
compiled for one rank with

    shoal-compile model.onnx --annotate test/e2e/spec_one_rank.yaml \
        --world-size 1 --train train.yaml -o model.plan

    train.yaml: loss {kind: mse, output: y, labels: target},
                optimizer {kind: sgd, lr: 1.0, momentum: 0, weight_decay: 0,
                           clip_norm: 0}

and run for one step (`shoal-run --steps 1 --inputs DIR --save CKPT
--outputs OUT`). With SGD at lr 1 the gradient is w_before - w_after, read
from the checkpoint. It is compared with torch autograd in float64 on the
same computation (loss = mean((y - target)^2)), max|g_shoal - g_torch| /
max|g_torch| per weight <= --rtol (1e-4: g is recovered from a float32
difference of weights of size ~1, whose rounding is ~1e-7 of them). The
loss (out/loss.npy) is compared with torch's too. The torch reference is
itself validated first: its forward against a numpy implementation of the
ONNX op, and its gradient against central finite differences of that
numpy forward in float64 (bound 1e-6).

Cases whose op is in EXPECTED must pass; the others are tried and reported
(supported or not) without failing the run. --anchor passes every
trainable initializer w through Add(w, w_zero), w_zero a graph input fed
zeros: a diagnostic that keeps the op's gradient testable when the importer
folds a node whose operands are all small initializers (it must not fold
trainable weights away in a training compile; the default models check
that, and a weight missing from the checkpoint fails the case).

Exit status: 0 when every expected case passes, 1 otherwise, 2 usage error.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
import common  # noqa: E402
from run_train_e2e import Failure, read_checkpoint  # noqa: E402

ONE_RANK_SPEC = os.path.join(HERE, "spec_one_rank.yaml")
TRAIN_YAML = """version: 1
loss: {kind: mse, output: y, labels: target}
optimizer: {kind: sgd, lr: 1.0, momentum: 0.0, weight_decay: 0.0, clip_norm: 0.0}
"""

# Ops whose gradient shoal must have (docs/Training.md, proto/plan.proto).
EXPECTED = {
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp",
    "Tanh", "Relu", "Sigmoid", "Erf", "Neg", "Softmax", "LayerNormalization",
    "Gather", "Reshape", "Transpose", "ReduceSum", "ReduceMean", "Where",
    "Concat", "Slice", "Split", "Pad", "HardSigmoid", "HardSwish", "Clip", "Expand",
    "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "BatchNormalization", "Gelu",
}


# Operand kinds that are trainable initializers: "w" feeds the node
# directly, "w2" through Mul(w, Constant 2) (np_fn/torch_fn get the raw w and
# scale it themselves).
TRAINED = ("w", "w2")


def erf_np(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


class Case:
    """One node. operands: [(name, kind, array)], kind 'w' (trainable
    initializer), 'w2' (trainable, fed as w * 2), 'in' (graph input, not
    differentiated) or 'const' (Constant node). np_fn / torch_fn take
    {name: array / tensor}."""

    def __init__(self, name, op, operands, np_fn, torch_fn, attrs=None, expected=None,
                 extra_outputs=(), chain=None, plan_kind=None):
        self.name, self.op, self.operands = name, op, operands
        # Instead of one `op` node: chain(helper, numpy_helper, inputs)
        # gives the nodes (as an exporter writes a function) that make `y`.
        self.chain = chain
        # An op kind the compiled plan must hold (a fused op's gradient).
        self.plan_kind = plan_kind
        # More outputs of the node, which nothing reads (Split's other parts).
        self.extra_outputs = list(extra_outputs)
        self.np_fn, self.torch_fn = np_fn, torch_fn
        self.attrs = attrs or {}
        self.expected = op in EXPECTED if expected is None else expected


def cases(rng):
    import torch

    def u(shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, size=shape)

    def n(shape):
        return rng.normal(0.0, 1.0, size=shape)

    def away_from_zero(shape, lo=0.2, hi=1.5):
        return rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)

    C = []
    # Matrix products.
    C.append(Case("MatMul", "MatMul", [("a", "w", n((2, 3, 4))), ("b", "w", n((4, 5)))],
                  lambda v: v["a"] @ v["b"], lambda v: v["a"] @ v["b"]))
    C.append(Case("MatMul_batched", "MatMul",
                  [("a", "w", n((2, 3, 4))), ("b", "w", n((2, 4, 5)))],
                  lambda v: v["a"] @ v["b"], lambda v: v["a"] @ v["b"]))
    # A weight used through a weight-only subexpression (w * 2) next to a
    # graph input: the weight must still be trained.
    C.append(Case("MatMul_scaled_weight", "MatMul",
                  [("x", "in", n((2, 3, 4))), ("b", "w2", n((4, 5)))],
                  lambda v: v["x"] @ (2 * v["b"]), lambda v: v["x"] @ (2 * v["b"])))
    C.append(Case("Gemm_transB_bias", "Gemm",
                  [("a", "w", n((3, 4))), ("b", "w", n((5, 4))), ("c", "w", n((5,)))],
                  lambda v: v["a"] @ v["b"].T + v["c"],
                  lambda v: v["a"] @ v["b"].T + v["c"], attrs={"transB": 1}))
    C.append(Case("Gemm_alpha_beta_transA", "Gemm",
                  [("a", "w", n((4, 3))), ("b", "w", n((4, 5))), ("c", "w", n((3, 5)))],
                  lambda v: 0.5 * v["a"].T @ v["b"] + 2.0 * v["c"],
                  lambda v: 0.5 * v["a"].T @ v["b"] + 2.0 * v["c"],
                  attrs={"transA": 1, "alpha": 0.5, "beta": 2.0}, expected=False))
    # Broadcasting binaries: the [4] operand's gradient sums over rows.
    for op, f in (("Add", lambda a, b: a + b), ("Sub", lambda a, b: a - b),
                  ("Mul", lambda a, b: a * b), ("Div", lambda a, b: a / b)):
        bval = away_from_zero((4,), 1.0, 2.0) if op == "Div" else n((4,))
        C.append(Case(op, op, [("a", "w", n((3, 4))), ("b", "w", bval)],
                      (lambda f: lambda v: f(v["a"], v["b"]))(f),
                      (lambda f: lambda v: f(v["a"], v["b"]))(f)))
    C.append(Case("Mul_same_shape", "Mul", [("a", "w", n((3, 4))), ("b", "w", n((3, 4)))],
                  lambda v: v["a"] * v["b"], lambda v: v["a"] * v["b"]))
    C.append(Case("Pow", "Pow", [("x", "w", u((3, 4), 0.5, 1.5)),
                                 ("e", "const", np.array(3.0))],
                  lambda v: v["x"] ** 3.0, lambda v: v["x"] ** 3.0))
    C.append(Case("Pow_half", "Pow", [("x", "w", u((3, 4), 0.5, 1.5)),
                                      ("e", "const", np.array(0.5))],
                  lambda v: v["x"] ** 0.5, lambda v: v["x"] ** 0.5))
    # Unary.
    C.append(Case("Sqrt", "Sqrt", [("x", "w", u((3, 4), 0.5, 2.0))],
                  lambda v: np.sqrt(v["x"]), lambda v: torch.sqrt(v["x"])))
    C.append(Case("Exp", "Exp", [("x", "w", n((3, 4)))],
                  lambda v: np.exp(v["x"]), lambda v: torch.exp(v["x"])))
    C.append(Case("Tanh", "Tanh", [("x", "w", n((3, 4)))],
                  lambda v: np.tanh(v["x"]), lambda v: torch.tanh(v["x"])))
    C.append(Case("Relu", "Relu", [("x", "w", away_from_zero((3, 4)))],
                  lambda v: np.maximum(v["x"], 0), lambda v: torch.relu(v["x"])))
    C.append(Case("Sigmoid", "Sigmoid", [("x", "w", n((3, 4)))],
                  lambda v: 1 / (1 + np.exp(-v["x"])), lambda v: torch.sigmoid(v["x"])))
    C.append(Case("Erf", "Erf", [("x", "w", n((3, 4)))],
                  lambda v: erf_np(v["x"]), lambda v: torch.erf(v["x"])))
    # GELU as PyTorch and Hugging Face export it. A training compile fuses
    # the erf form before shoal-autodiff (the plan has GeluGrad); the tanh
    # forms are differentiated as their chains (docs/Training.md).
    gelu_x = [("x", "w", 2 * n((3, 8))), ("b", "w", n((8,)))]
    C.append(Case("Gelu_erf_bias", "Gelu", gelu_x,
                  lambda v: gelu_np(v["x"] + v["b"], False),
                  lambda v: torch.nn.functional.gelu(v["x"] + v["b"]),
                  chain=gelu_erf_chain, plan_kind=b"GeluGrad"))
    C.append(Case("Gelu_tanh_bias", "Gelu", gelu_x,
                  lambda v: gelu_np(v["x"] + v["b"], True),
                  lambda v: torch.nn.functional.gelu(v["x"] + v["b"], approximate="tanh"),
                  chain=gelu_tanh_torch_chain))
    C.append(Case("Gelu_tanh_hf", "Gelu", [("x", "w", 2 * n((3, 8)))],
                  lambda v: gelu_np(v["x"], True),
                  lambda v: 0.5 * v["x"] * (1.0 + torch.tanh(
                      math.sqrt(2.0 / math.pi) * (v["x"] + 0.044715 * torch.pow(v["x"], 3.0)))),
                  chain=gelu_tanh_hf_chain))
    C.append(Case("Neg", "Neg", [("x", "w", n((3, 4)))],
                  lambda v: -v["x"], lambda v: -v["x"]))
    # Normalizations.
    C.append(Case("Softmax", "Softmax", [("x", "w", n((2, 3, 5)))],
                  lambda v: softmax_np(v["x"], -1), lambda v: torch.softmax(v["x"], -1),
                  attrs={"axis": -1}))
    C.append(Case("Softmax_axis1", "Softmax", [("x", "w", n((2, 3, 5)))],
                  lambda v: softmax_np(v["x"], 1), lambda v: torch.softmax(v["x"], 1),
                  attrs={"axis": 1}, expected=False))
    C.append(Case("LayerNormalization", "LayerNormalization",
                  [("x", "w", n((2, 3, 6))), ("scale", "w", u((6,), 0.5, 1.5)),
                   ("bias", "w", n((6,)))],
                  lambda v: layernorm_np(v["x"], v["scale"], v["bias"], 1e-5),
                  lambda v: torch.nn.functional.layer_norm(v["x"], (6,), v["scale"], v["bias"], 1e-5),
                  attrs={"axis": -1, "epsilon": 1e-5}))
    # RMSNorm as Hugging Face exports it: fused before shoal-autodiff into
    # LayerNorm with rms = 1, whose gradients the plan holds.
    rms_x = [("x", "w", n((2, 3, 8))), ("w", "w", u((8,), 0.5, 1.5))]
    for name, chain in (("RMSNorm_llama", rms_norm_llama_chain),
                        ("RMSNorm_t5", rms_norm_t5_chain)):
        C.append(Case(name, "LayerNormalization", rms_x,
                      lambda v: rms_norm_np(v["x"], v["w"], 1e-6),
                      lambda v: v["x"] * torch.rsqrt(v["x"].pow(2).mean(-1, keepdim=True)
                                                     + 1e-6) * v["w"],
                      chain=chain, plan_kind=b"LayerNormalizationScaleGrad"))
    # Scaled dot-product attention with an additive causal mask (a graph
    # input): fused before shoal-autodiff into Attention, whose gradients
    # are one AttentionGrad that recomputes the probabilities.
    causal = np.triu(np.full((5, 5), -1e4), 1)
    att = [("q", "w", n((2, 3, 5, 4))), ("k", "w", n((2, 3, 5, 4))),
           ("v", "w", n((2, 3, 5, 6))), ("mask", "in", causal)]
    C.append(Case("Attention", "Softmax", att,
                  lambda v: attention_np(v["q"], v["k"], v["v"], v["mask"]),
                  lambda v: torch.softmax(v["q"] @ v["k"].transpose(-1, -2) / 2.0
                                          + v["mask"], -1) @ v["v"],
                  chain=attention_chain, plan_kind=b"AttentionGrad"))
    # Data movement.
    idx = np.array([[1, 3, 1], [6, 0, 3]], dtype=np.int64)  # repeats: scatter-add
    C.append(Case("Gather", "Gather", [("data", "w", n((7, 4))), ("indices", "in", idx)],
                  lambda v: np.take(v["data"], v["indices"], axis=0),
                  lambda v: v["data"][v["indices"]], attrs={"axis": 0}))
    # Along another axis (a transpose around the scatter-add), and a scalar
    # index (x[:, -1], a last-token pooling).
    idx1 = np.array([[2, 0], [4, 2]], dtype=np.int64)
    C.append(Case("Gather_axis1", "Gather", [("data", "w", n((3, 5, 4))), ("indices", "in", idx1)],
                  lambda v: np.take(v["data"], v["indices"], axis=1),
                  lambda v: v["data"][:, v["indices"]], attrs={"axis": 1}))
    C.append(Case("Gather_scalar_last", "Gather",
                  [("data", "w", n((3, 5, 4))), ("indices", "const", np.array(4, np.int64))],
                  lambda v: v["data"][:, 4], lambda v: v["data"][:, 4], attrs={"axis": 1}))
    C.append(Case("Reshape", "Reshape", [("x", "w", n((2, 3, 4))),
                                         ("shape", "const", np.array([3, 8], dtype=np.int64))],
                  lambda v: v["x"].reshape(3, 8), lambda v: v["x"].reshape(3, 8)))
    # Expand (LLaMA's repeat_kv: a new axis broadcast, then a size-1 axis).
    C.append(Case("Expand", "Expand", [("x", "w", n((2, 1, 3, 1))),
                                       ("shape", "const", np.array([4, 2, 5, 3, 6],
                                                                   dtype=np.int64))],
                  lambda v: np.broadcast_to(v["x"], (4, 2, 5, 3, 6)),
                  lambda v: v["x"].expand(4, 2, 5, 3, 6)))
    C.append(Case("Transpose", "Transpose", [("x", "w", n((2, 3, 4)))],
                  lambda v: np.transpose(v["x"], (2, 0, 1)), lambda v: v["x"].permute(2, 0, 1),
                  attrs={"perm": [2, 0, 1]}))
    # Reductions (opset 17: ReduceSum's axes are an input, ReduceMean's an
    # attribute).
    C.append(Case("ReduceSum", "ReduceSum", [("x", "w", n((2, 3, 4))),
                                             ("axes", "const", np.array([1], dtype=np.int64))],
                  lambda v: v["x"].sum(axis=1), lambda v: v["x"].sum(dim=1),
                  attrs={"keepdims": 0}))
    C.append(Case("ReduceMean", "ReduceMean", [("x", "w", n((2, 3, 4)))],
                  lambda v: v["x"].mean(axis=-1, keepdims=True),
                  lambda v: v["x"].mean(dim=-1, keepdim=True),
                  attrs={"axes": [-1], "keepdims": 1}))
    # Concat, Slice and Split (shoal.onnx ops): slices of the gradient, the
    # gradient padded with zeros, the parts' gradients concatenated (zeros
    # for a part nothing reads).
    C.append(Case("Concat", "Concat", [("a", "w", n((2, 3))), ("b", "w", n((2, 2)))],
                  lambda v: np.concatenate([v["a"], v["b"]], axis=1),
                  lambda v: torch.cat([v["a"], v["b"]], dim=1), attrs={"axis": 1}))
    C.append(Case("Slice", "Slice",
                  [("x", "w", n((3, 6))), ("starts", "const", np.array([1, -4], np.int64)),
                   ("ends", "const", np.array([3, 5], np.int64)),
                   ("axes", "const", np.array([0, 1], np.int64))],
                  lambda v: v["x"][1:3, 2:5], lambda v: v["x"][1:3, 2:5]))
    C.append(Case("Pad", "Pad",
                  [("x", "w", n((3, 4))), ("pads", "const", np.array([1, 0, 0, 2], np.int64))],
                  lambda v: np.pad(v["x"], ((1, 0), (0, 2))),
                  lambda v: torch.nn.functional.pad(v["x"], (0, 2, 1, 0))))
    C.append(Case("Split", "Split",
                  [("x", "w", n((4, 6))), ("split", "const", np.array([2, 4], np.int64))],
                  lambda v: v["x"][:, :2], lambda v: v["x"][:, :2], attrs={"axis": 1},
                  extra_outputs=["y_rest"]))
    # Piecewise activations (values kept off their kinks): HardSigmoid and
    # HardSwish (shoal.onnx), Clip (imported as Max and Min).
    off_kinks = rng.uniform(-5.0, 5.0, size=(3, 8))
    off_kinks[np.abs(np.abs(off_kinks) - 3.0) < 0.2] += 0.5
    off_kinks[np.abs(np.abs(off_kinks) - 2.0) < 0.2] += 0.5
    off_kinks[np.abs(off_kinks - 2.5) < 0.1] += 0.3
    off_kinks[np.abs(off_kinks + 1.5) < 0.1] += 0.3
    C.append(Case("HardSigmoid", "HardSigmoid", [("x", "w", off_kinks)],
                  lambda v: np.clip(0.25 * v["x"] + 0.5, 0.0, 1.0),
                  lambda v: torch.clamp(0.25 * v["x"] + 0.5, 0.0, 1.0),
                  attrs={"alpha": 0.25, "beta": 0.5}))
    C.append(Case("HardSwish", "HardSwish", [("x", "w", off_kinks)],
                  lambda v: v["x"] * np.clip(v["x"] / 6.0 + 0.5, 0.0, 1.0),
                  lambda v: torch.nn.functional.hardswish(v["x"])))
    C.append(Case("Clip", "Clip", [("x", "w", off_kinks),
                                   ("lo", "const", np.array(-1.5)),
                                   ("hi", "const", np.array(2.5))],
                  lambda v: np.clip(v["x"], -1.5, 2.5),
                  lambda v: torch.clamp(v["x"], -1.5, 2.5)))
    # Convolutions and pools (shoal.onnx; ConvInputGrad, ConvWeightGrad,
    # MaxPoolGrad and AveragePoolGrad kernels).
    F = torch.nn.functional
    C.append(Case("Conv2d", "Conv",
                  [("x", "w", n((2, 4, 9, 8))), ("W", "w", n((6, 2, 3, 3)) * 0.3),
                   ("B", "w", n((6,)))],
                  lambda v: conv_np(v["x"], v["W"], v["B"], (2, 2), (1, 1), (2, 2), 2),
                  lambda v: F.conv2d(v["x"], v["W"], v["B"], stride=2, padding=1,
                                     dilation=2, groups=2),
                  attrs={"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 2],
                         "group": 2, "kernel_shape": [3, 3]}))
    C.append(Case("Conv1d", "Conv",
                  [("x", "w", n((2, 3, 11))), ("W", "w", n((4, 3, 3)) * 0.3)],
                  lambda v: conv_np(v["x"], v["W"], None, (1,), (2,), (1,), 1),
                  lambda v: F.conv1d(v["x"], v["W"], padding=2),
                  attrs={"pads": [2, 2]}))
    C.append(Case("Conv2d_1x1", "Conv",
                  [("x", "w", n((2, 4, 5, 5))), ("W", "w", n((3, 4, 1, 1)))],
                  lambda v: conv_np(v["x"], v["W"], None, (1, 1), (0, 0), (1, 1), 1),
                  lambda v: F.conv2d(v["x"], v["W"])))
    C.append(Case("Conv3d", "Conv",
                  [("x", "w", n((1, 2, 5, 4, 6))), ("W", "w", n((3, 2, 2, 3, 2)) * 0.3)],
                  lambda v: conv_np(v["x"], v["W"], None, (1, 2, 1), (1, 0, 1), (1, 1, 2), 1),
                  lambda v: F.conv3d(v["x"], v["W"], stride=(1, 2, 1), padding=(1, 0, 1),
                                     dilation=(1, 1, 2)),
                  attrs={"strides": [1, 2, 1], "pads": [1, 0, 1, 1, 0, 1],
                         "dilations": [1, 1, 2]}))
    # Distinct values, so that every window has one maximum.
    distinct = rng.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 50.0 - 2.5
    C.append(Case("MaxPool2d", "MaxPool", [("x", "w", distinct)],
                  lambda v: pool_np(v["x"], "max", (3, 3), (2, 2), (1, 1), True),
                  lambda v: F.max_pool2d(v["x"], 3, 2, 1),
                  attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}))
    for incl in (0, 1):
        C.append(Case("AveragePool2d_cip%d" % incl, "AveragePool", [("x", "w", n((2, 3, 7, 6)))],
                      (lambda incl: lambda v: pool_np(v["x"], "avg", (3, 2), (2, 2), (1, 1),
                                                      bool(incl)))(incl),
                      (lambda incl: lambda v: F.avg_pool2d(v["x"], (3, 2), 2, 1,
                                                           count_include_pad=bool(incl)))(incl),
                      attrs={"kernel_shape": [3, 2], "strides": [2, 2],
                             "pads": [1, 1, 1, 1], "count_include_pad": incl}))
    C.append(Case("GlobalAveragePool", "GlobalAveragePool", [("x", "w", n((2, 3, 4, 5)))],
                  lambda v: v["x"].mean(axis=(2, 3), keepdims=True),
                  lambda v: v["x"].mean(dim=(2, 3), keepdim=True)))
    C.append(Case("GlobalMaxPool", "GlobalMaxPool", [("x", "w", distinct)],
                  lambda v: v["x"].max(axis=(2, 3), keepdims=True),
                  lambda v: F.adaptive_max_pool2d(v["x"], 1)))
    # BatchNormalization in training mode: batch statistics (biased
    # variance); the running statistics are graph inputs, not trained.
    C.append(Case("BatchNormalization_train", "BatchNormalization",
                  [("x", "w", n((4, 3, 3, 2)) * 2 + 1), ("scale", "w", u((3,), 0.5, 1.5)),
                   ("bias", "w", n((3,))), ("mean", "in", n((3,))),
                   ("var", "in", u((3,), 0.5, 1.5))],
                  lambda v: batchnorm_train_np(v["x"], v["scale"], v["bias"], 1e-5),
                  lambda v: F.batch_norm(v["x"], None, None, v["scale"], v["bias"],
                                         training=True, eps=1e-5),
                  attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1},
                  extra_outputs=["running_mean", "running_var"]))
    cond = np.array(rng.integers(0, 2, size=(3, 4)), dtype=bool)
    C.append(Case("Where", "Where", [("cond", "in", cond), ("x", "w", n((3, 4))),
                                     ("y_", "w", n((4,)))],
                  lambda v: np.where(v["cond"], v["x"], v["y_"]),
                  lambda v: torch.where(v["cond"], v["x"], v["y_"])))
    # Importable ops outside the expected list (reported, not required).
    C.append(Case("Log", "Log", [("x", "w", u((3, 4), 0.5, 2.0))],
                  lambda v: np.log(v["x"]), lambda v: torch.log(v["x"])))
    C.append(Case("Reciprocal", "Reciprocal", [("x", "w", away_from_zero((3, 4), 0.5, 2.0))],
                  lambda v: 1 / v["x"], lambda v: 1 / v["x"]))
    C.append(Case("Abs", "Abs", [("x", "w", away_from_zero((3, 4)))],
                  lambda v: np.abs(v["x"]), lambda v: torch.abs(v["x"])))
    C.append(Case("Sin", "Sin", [("x", "w", n((3, 4)))],
                  lambda v: np.sin(v["x"]), lambda v: torch.sin(v["x"])))
    C.append(Case("Cos", "Cos", [("x", "w", n((3, 4)))],
                  lambda v: np.cos(v["x"]), lambda v: torch.cos(v["x"])))
    return C


def gelu_np(z, tanh_form):
    if tanh_form:
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    return 0.5 * z * (1 + erf_np(z / math.sqrt(2)))


def _chain(helper, numpy_helper, steps):
    """Nodes from (op, inputs, output[, attributes]) steps; a float input is
    a Constant."""
    nodes = []
    for i, (op, ins, out, *attrs) in enumerate(steps):
        names = []
        for j, v in enumerate(ins):
            if isinstance(v, float):
                c = "c%d_%d" % (i, j)
                nodes.append(helper.make_node(
                    "Constant", [], [c], name="/gelu/Constant_%d_%d" % (i, j),
                    value=numpy_helper.from_array(np.array(v, np.float32), c)))
                names.append(c)
            else:
                names.append(v)
        nodes.append(helper.make_node(op, names, [out], name="/gelu/%s_%d" % (op, i),
                                      **(attrs[0] if attrs else {})))
    return nodes


def gelu_erf_chain(helper, numpy_helper, inputs):
    """nn.Linear's bias add, then nn.GELU() as torch.onnx writes it."""
    x, b = inputs
    return _chain(helper, numpy_helper, [
        ("Add", [x, b], "z"), ("Div", ["z", math.sqrt(2)], "d"), ("Erf", ["d"], "e"),
        ("Add", ["e", 1.0], "p"), ("Mul", ["z", "p"], "m"), ("Mul", ["m", 0.5], "y")])


def gelu_tanh_torch_chain(helper, numpy_helper, inputs):
    """A bias add, then nn.GELU(approximate="tanh") as torch.onnx writes it."""
    x, b = inputs
    return _chain(helper, numpy_helper, [
        ("Add", [x, b], "z"), ("Mul", ["z", "z"], "z2"), ("Mul", ["z", "z2"], "z3"),
        ("Mul", [0.044715, "z3"], "q"), ("Add", ["z", "q"], "s"),
        ("Mul", [math.sqrt(2 / math.pi), "s"], "u"), ("Tanh", ["u"], "t"),
        ("Add", [1.0, "t"], "p"), ("Mul", ["z", "p"], "m"), ("Mul", [0.5, "m"], "y")])


def gelu_tanh_hf_chain(helper, numpy_helper, inputs):
    """Hugging Face's NewGELUActivation (GPT-2) as torch.onnx writes it."""
    (x,) = inputs
    return _chain(helper, numpy_helper, [
        ("Mul", [x, 0.5], "h"), ("Pow", [x, 3.0], "c"), ("Mul", ["c", 0.044715], "q"),
        ("Add", [x, "q"], "s"), ("Mul", ["s", math.sqrt(2 / math.pi)], "u"),
        ("Tanh", ["u"], "t"), ("Add", ["t", 1.0], "p"), ("Mul", ["h", "p"], "y")])


def rms_norm_llama_chain(helper, numpy_helper, inputs):
    """Hugging Face's LlamaRMSNorm (eps 1e-6) as torch.onnx writes it
    (transformers 4.36, torch 1.13, opset 17), its float32 casts included."""
    x, w = inputs
    return _chain(helper, numpy_helper, [
        ("Cast", [x], "xc", {"to": 1}), ("Pow", ["xc", 2.0], "sq"),
        ("ReduceMean", ["sq"], "ms", {"axes": [-1], "keepdims": 1}),
        ("Add", ["ms", 1e-6], "v"), ("Sqrt", ["v"], "s"), ("Div", [1.0, "s"], "r"),
        ("Mul", ["xc", "r"], "nrm"), ("Cast", ["nrm"], "nc", {"to": 1}),
        ("Mul", [w, "nc"], "y")])


def rms_norm_t5_chain(helper, numpy_helper, inputs):
    """T5LayerNorm's form: x * Reciprocal(Sqrt(mean(x * x) + eps)) * w."""
    x, w = inputs
    return _chain(helper, numpy_helper, [
        ("Mul", [x, x], "sq"), ("ReduceMean", ["sq"], "ms", {"axes": [2], "keepdims": 1}),
        ("Add", [1e-6, "ms"], "v"), ("Sqrt", ["v"], "s"), ("Reciprocal", ["s"], "r"),
        ("Mul", ["r", x], "nrm"), ("Mul", ["nrm", w], "y")])


def attention_chain(helper, numpy_helper, inputs):
    """softmax(q k^T / sqrt(d) + mask) v as torch.onnx writes it (d = 4)."""
    q, k, v, mask = inputs
    return _chain(helper, numpy_helper, [
        ("Transpose", [k], "kt", {"perm": [0, 1, 3, 2]}), ("MatMul", [q, "kt"], "s"),
        ("Div", ["s", 2.0], "sd"), ("Add", ["sd", mask], "sm"),
        ("Softmax", ["sm"], "p", {"axis": -1}), ("MatMul", ["p", v], "y")])


def attention_np(q, k, v, mask):
    return softmax_np(q @ np.swapaxes(k, -1, -2) / 2.0 + mask, -1) @ v


def rms_norm_np(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def softmax_np(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm_np(x, scale, bias, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


def conv_np(x, w, b, strides, pads, dil, group):
    """ONNX Conv in float64 (symmetric pads)."""
    sr = x.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pads])
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    k = w.shape[2:]
    out = [(x.shape[2 + d] - (k[d] - 1) * dil[d] - 1) // strides[d] + 1 for d in range(sr)]
    y = np.zeros([n, m] + out)
    mg = m // group
    for o in np.ndindex(*out):
        idx = tuple(slice(o[d] * strides[d], o[d] * strides[d] + (k[d] - 1) * dil[d] + 1,
                          dil[d]) for d in range(sr))
        for g in range(group):
            patch = x[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]  # [n, cg, k...]
            wg = w[g * mg:(g + 1) * mg]  # [mg, cg, k...]
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + o] = \
                np.tensordot(patch, wg, axes=(list(range(1, 2 + sr)), list(range(1, 2 + sr))))
    if b is not None:
        y += b.reshape([1, m] + [1] * sr)
    return y


def pool_np(x, kind, kernel, strides, pads, count_include_pad):
    """ONNX MaxPool / AveragePool in float64 (symmetric pads, no ceil)."""
    sr = x.ndim - 2
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pads], constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), [(p, p) for p in pads])
    out = [(xp.shape[2 + d] - kernel[d]) // strides[d] + 1 for d in range(sr)]
    y = np.zeros(list(x.shape[:2]) + out)
    for o in np.ndindex(*out):
        idx = tuple(slice(o[d] * strides[d], o[d] * strides[d] + kernel[d]) for d in range(sr))
        win = xp[(slice(None), slice(None)) + idx].reshape(x.shape[0], x.shape[1], -1)
        if kind == "max":
            y[(slice(None), slice(None)) + o] = win.max(axis=-1)
        else:
            cnt = np.prod(kernel) if count_include_pad else ones[idx].sum()
            y[(slice(None), slice(None)) + o] = win.sum(axis=-1) / cnt
    return y


def batchnorm_train_np(x, scale, bias, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = [1, -1] + [1] * (x.ndim - 2)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)


# ---------------------------------------------------------------------------

def build_onnx(case, path, anchor):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, inputs = [], [], []
    node_inputs = []
    for name, kind, arr in case.operands:
        if kind in TRAINED:
            inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
            if anchor:
                # w + zeros (a graph input): the node's operand is no longer
                # a constant the importer could fold.
                inputs.append(helper.make_tensor_value_info(name + "_zero", TensorProto.FLOAT,
                                                            list(arr.shape)))
                nodes.append(helper.make_node("Add", [name, name + "_zero"], [name + "_a"],
                                              name="/%s_anchor" % name))
                node_inputs.append(name + "_a")
            else:
                node_inputs.append(name)
            if kind == "w2":
                src = node_inputs.pop()
                nodes.append(helper.make_node(
                    "Constant", [], [name + "_two"], name="/%s_two" % name,
                    value=numpy_helper.from_array(np.array(2.0, np.float32), name + "_two")))
                nodes.append(helper.make_node("Mul", [src, name + "_two"], [name + "_x2"],
                                              name="/%s_scale/Mul" % name))
                node_inputs.append(name + "_x2")
        elif kind == "in":
            elem = {np.dtype(np.int64): TensorProto.INT64, np.dtype(bool): TensorProto.BOOL,
                    np.dtype(np.float64): TensorProto.FLOAT}[arr.dtype]
            inputs.append(helper.make_tensor_value_info(name, elem, list(arr.shape)))
            node_inputs.append(name)
        else:  # const
            a = arr.astype(np.float32) if arr.dtype.kind == "f" else arr
            nodes.append(helper.make_node("Constant", [], [name], name="/" + name,
                                          value=numpy_helper.from_array(a, name)))
            node_inputs.append(name)
    y = case.np_fn(np_values(case))
    if case.chain:
        nodes.extend(case.chain(helper, numpy_helper, node_inputs))
    else:
        nodes.append(helper.make_node(case.op, node_inputs, ["y"] + case.extra_outputs,
                                      name="/op/" + case.op,
                                      **case.attrs))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y.shape))
    graph = helper.make_graph(nodes, "grad_" + case.name, inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="shoal-grad-check")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return y.shape


def np_values(case):
    """Operands as the model stores them (float32-rounded), in float64."""
    v = {}
    for name, kind, arr in case.operands:
        v[name] = arr.astype(np.float32).astype(np.float64) if arr.dtype.kind == "f" else arr
    return v


def torch_reference(case, target):
    """(loss, {weight: grad}) in float64 by autograd."""
    import torch
    vals = np_values(case)
    tv = {}
    for name, kind, _ in case.operands:
        t = torch.from_numpy(np.array(vals[name]))
        if kind in TRAINED:
            t = t.double().requires_grad_(True)
        tv[name] = t
    y = case.torch_fn(tv)
    loss = ((y - torch.from_numpy(target.astype(np.float64))) ** 2).mean()
    loss.backward()
    return float(loss), {n: tv[n].grad.numpy().copy() for n, k, _ in case.operands if k in TRAINED}, \
        y.detach().numpy()


def finite_differences(case, target, h=1e-6):
    """Central differences of the numpy forward's mse loss, float64."""
    base = np_values(case)
    grads = {}
    for name, kind, _ in case.operands:
        if kind not in TRAINED:
            continue
        w = base[name]
        g = np.zeros_like(w)
        for i in np.ndindex(w.shape):
            step = h * max(1.0, abs(w[i]))
            vals = dict(base)
            wp = w.copy()
            wp[i] += step
            vals[name] = wp
            lp = np.mean((case.np_fn(vals) - target) ** 2)
            wm = w.copy()
            wm[i] -= step
            vals[name] = wm
            lm = np.mean((case.np_fn(vals) - target) ** 2)
            g[i] = (lp - lm) / (2 * step)
        grads[name] = g
    return grads


def rel(a, b):
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - b))) / max(float(np.max(np.abs(b))), 1e-30) \
        if b.size else 0.0


def run_case(case, args, tools, rng):
    """Returns (status, detail, max error): status in pass / fail /
    unsupported / folded / reference-bad."""
    d = os.path.join(args.work, case.name)
    os.makedirs(d)
    model = os.path.join(d, "model.onnx")
    yshape = build_onnx(case, model, args.anchor)
    target = rng.normal(0.0, 2.0, size=yshape)
    target32 = target.astype(np.float32)
    target = target32.astype(np.float64)

    # The torch reference, checked against the numpy op and finite
    # differences.
    loss_t, g_t, y_t = torch_reference(case, target)
    y_np = case.np_fn(np_values(case))
    ferr = rel(y_t, y_np)
    g_fd = finite_differences(case, target)
    fd_err = max(rel(g_t[n], g_fd[n]) for n in g_t)
    if ferr > 1e-12 or fd_err > 1e-6:
        return "reference-bad", "torch forward vs numpy %.1e, autograd vs finite " \
            "differences %.1e" % (ferr, fd_err), None

    inputs = os.path.join(d, "inputs")
    os.makedirs(inputs)
    np.save(os.path.join(inputs, "target.npy"), target32)
    for name, kind, arr in case.operands:
        if kind == "in":
            np.save(os.path.join(inputs, name + ".npy"),
                    arr.astype(np.float32) if arr.dtype.kind == "f" else arr)
        if kind in TRAINED and args.anchor:
            np.save(os.path.join(inputs, name + "_zero.npy"), np.zeros(arr.shape, np.float32))
    cfg = os.path.join(d, "train.yaml")
    with open(cfg, "w") as f:
        f.write(TRAIN_YAML)
    plan = os.path.join(d, "model.plan")
    res = common.run_cmd([tools[0], model, "--annotate", ONE_RANK_SPEC, "--world-size", 1,
                          "--train", cfg, "-o", plan], check=False, timeout=args.timeout,
                         echo=args.verbose)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["(no stderr)"])
        if "nothing to train" in res.stderr:
            return "folded", "shoal-compile %s (the node's weights were folded into " \
                "a constant at import): %s" % (common.describe_returncode(res.returncode),
                                                " | ".join(msg[-3:])), None
        return "unsupported", "shoal-compile %s: %s" % (
            common.describe_returncode(res.returncode), " | ".join(msg[-3:])), None
    if case.plan_kind:
        with open(plan, "rb") as f:
            if case.plan_kind not in f.read():
                return "fail", "the plan has no %s op (the chain was not fused before " \
                    "shoal-autodiff)" % case.plan_kind.decode(), None
    ckpt, out = os.path.join(d, "ckpt"), os.path.join(d, "out")
    res = common.run_cmd([tools[1], plan, "--steps", 1, "--inputs", inputs, "--save", ckpt,
                          "--outputs", out], check=False, timeout=args.timeout,
                         echo=args.verbose)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["(no stderr)"])
        return "fail", "shoal-run %s: %s" % (common.describe_returncode(res.returncode),
                                             " | ".join(msg[-3:])), None
    try:
        _, t = read_checkpoint(ckpt, 1, 1)
    except Failure as e:
        return "fail", str(e).replace("\n", " | "), None
    errs = []
    problems = []
    for name, kind, arr in case.operands:
        if kind not in TRAINED:
            continue
        if name not in t:
            problems.append("weight %s not in the checkpoint (not trained; folded to a "
                            "constant?) - it has %s" % (name, sorted(t)))
            continue
        w0 = arr.astype(np.float32).astype(np.float64)
        w1 = t[name].astype(np.float64)
        if w1.shape != w0.shape:
            problems.append("%s: checkpoint shape %s, expected %s"
                            % (name, list(w1.shape), list(w0.shape)))
            continue
        g = w0 - w1
        e = rel(g, g_t[name])
        errs.append(e)
        if not e <= args.rtol:
            k = np.unravel_index(np.argmax(np.abs(g - g_t[name])), g.shape)
            problems.append("d%s: error %.3e > %.0e (worst at %s: shoal %.6g, torch %.6g)"
                            % (name, e, args.rtol, list(k), g[k], g_t[name][k]))
    lp = os.path.join(out, "loss.npy")
    if os.path.isfile(lp):
        lerr = abs(float(np.load(lp)) - loss_t) / max(abs(loss_t), 1e-30)
        errs.append(lerr)
        if not lerr <= args.rtol:
            problems.append("loss %.6g vs torch %.6g (error %.3e)"
                            % (float(np.load(lp)), loss_t, lerr))
    else:
        problems.append("no loss.npy in --outputs")
    worst = max(errs) if errs else None
    if problems:
        return "fail", "; ".join(problems), worst
    return "pass", "grads of %s" % ", ".join(n for n, k, _ in case.operands if k in TRAINED), worst


def main(argv=None):
    ap = argparse.ArgumentParser(description="shoal per-op gradient checks")
    ap.add_argument("--bin", required=True, help="BUILD/bin with shoal-compile and shoal-run")
    ap.add_argument("--work", required=True, help="work folder (emptied first)")
    ap.add_argument("--ops", default=None,
                    help="comma-separated case names or op types (default: all)")
    ap.add_argument("--rtol", type=float, default=1e-4,
                    help="bound on the gradients' relative error (default %(default)g)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--anchor", action="store_true",
                    help="feed each trainable initializer through Add(w, zeros graph "
                         "input), so that no node has only constant operands")
    ap.add_argument("--verbose", action="store_true", help="echo the commands")
    args = ap.parse_args(argv)
    args.work = os.path.abspath(args.work)

    try:
        tools = (common.find_tool(args.bin, "shoal-compile"), common.find_tool(args.bin, "shoal-run"))
    except common.CommandError as e:
        print("FAIL: %s" % e)
        return 1
    if os.path.isdir(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    rng = np.random.default_rng(args.seed)
    all_cases = cases(rng)
    if args.ops:
        want = set(args.ops.split(","))
        all_cases = [c for c in all_cases if c.name in want or c.op in want]
        if not all_cases:
            ap.error("no case matches --ops %s" % args.ops)

    rows = []
    for c in all_cases:
        crng = np.random.default_rng([args.seed, sum(map(ord, c.name))])
        try:
            st, detail, err = run_case(c, args, tools, crng)
        except common.CommandError as e:
            st, detail, err = "fail", str(e).splitlines()[0], None
        rows.append((c, st, detail, err))
        print("%-24s %-18s %-11s %10s  %s" % (c.name, c.op, st.upper(),
                                            "%.2e" % err if err is not None else "-", detail),
              flush=True)

    bad = [(c, st, d) for c, st, d, _ in rows if c.expected and st != "pass"]
    extra_ok = [c.name for c, st, _, _ in rows if not c.expected and st == "pass"]
    extra_no = [(c.name, st) for c, st, _, _ in rows if not c.expected and st != "pass"]
    print()
    print("expected ops: %d cases, %d pass" % (sum(1 for r in rows if r[0].expected),
                                               sum(1 for r in rows if r[0].expected and r[1] == "pass")))
    if extra_ok:
        print("other cases that pass: %s" % ", ".join(extra_ok))
    if extra_no:
        print("other cases not working (not required): %s"
              % ", ".join("%s (%s)" % x for x in extra_no))
    for st, what in (("unsupported", "EXPECTED BUT UNSUPPORTED by shoal-compile --train"),
                     ("folded", "EXPECTED BUT WEIGHTS FOLDED AWAY (no trainable weight left)"),
                     ("fail", "EXPECTED BUT WRONG OR FAILING"),
                     ("reference-bad", "REFERENCE CHECK FAILED")):
        names = [c.name for c, s_, _ in bad if s_ == st]
        if names:
            print("%s: %s" % (what, ", ".join(names)))
    for c, st, d in bad:
        print("FAIL %s (%s): %s: %s" % (c.name, c.op, st, d))
    summary = {"pass": [c.name for c, st, _, _ in rows if st == "pass"],
               "fail": [c.name for c, st, _, _ in rows if st != "pass"]}
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("PASS: grad check" if not bad else "FAIL: grad check (%d expected case(s))" % len(bad))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
