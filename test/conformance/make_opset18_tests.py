#!/usr/bin/python3
"""Writes node tests, in the layout of ONNX's backend node tests, for the ops
whose signature changed in opsets 18 to 21 (ONNX 1.12's test data, which
run_node_tests.py runs, stops at opset 17).

    /usr/bin/python3 test/conformance/make_opset18_tests.py [--out DIR] [--check-ort]

Each test is DIR/<name>/model.onnx (one node; compile-time operands such as
axes, pads and split sizes are initializers) and test_data_set_0/
input_I.pb, output_I.pb. Expected outputs come from numpy written from the
ONNX operator specification, not from shoal. --check-ort also runs every
model with onnxruntime (an independent executor that knows these opsets;
the shared venv has it) and fails if it disagrees with numpy.

The outputs are committed (test/conformance/opset18/); rerun this after
changing it. run_node_tests.py --data test/conformance/opset18 runs them
(ctest: conformance.opset18).
"""

import argparse
import math
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(18)
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def make(name, opset, op, inputs, outputs, attrs=None, initializers=None,
         node_inputs=None):
    """A one-node model: `inputs` and `outputs` are (name, array) pairs,
    `initializers` (name, array) pairs of compile-time operands."""
    initializers = initializers or []
    node_inputs = node_inputs or [n for n, _ in inputs]
    node = helper.make_node(op, node_inputs, [n for n, _ in outputs],
                            **(attrs or {}))

    def info(n, a):
        return helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype)
            if hasattr(helper, "np_dtype_to_tensor_dtype")
            else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype], list(a.shape))

    graph = helper.make_graph(
        [node], name, [info(n, a) for n, a in inputs],
        [info(n, a) for n, a in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = {18: 8, 19: 9, 20: 9, 21: 10}[opset]
    return name, model, inputs, outputs


def erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


@test
def gelu():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32) * 2
    y = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return make("test_gelu_default_opset20", 20, "Gelu", [("x", x)],
                [("y", y.astype(np.float32))])


@test
def gelu_tanh():
    x = RNG.standard_normal((2, 7)).astype(np.float32) * 2
    x64 = x.astype(np.float64)
    y = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                 (x64 + 0.044715 * x64 ** 3)))
    return make("test_gelu_tanh_opset20", 20, "Gelu", [("x", x)],
                [("y", y.astype(np.float32))], {"approximate": "tanh"})


def group_norm(x, groups, scale, bias, eps, per_channel):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    norm = (g - mean) / np.sqrt(var + eps)
    if per_channel:
        norm = norm.reshape(n, c, -1)
    norm = norm * scale.reshape(-1, 1) + bias.reshape(-1, 1)
    return norm.reshape(x.shape).astype(np.float32)


@test
def group_norm_18():
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
    scale = RNG.standard_normal(3).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    y = group_norm(x, 3, scale, bias, 1e-5, per_channel=False)
    return make("test_group_normalization_opset18", 18, "GroupNormalization",
                [("x", x), ("scale", scale), ("bias", bias)], [("y", y)],
                {"num_groups": 3})


@test
def group_norm_21():
    x = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    scale = RNG.standard_normal(6).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    y = group_norm(x, 2, scale, bias, 1e-3, per_channel=True)
    return make("test_group_normalization_opset21", 21, "GroupNormalization",
                [("x", x), ("scale", scale), ("bias", bias)], [("y", y)],
                {"num_groups": 2, "epsilon": 1e-3})


@test
def reduce_mean_axes_input():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    axes = np.array([-1, 1], dtype=np.int64)
    y = x.mean(axis=(2, 1), keepdims=False)
    return make("test_reduce_mean_axes_input_opset18", 18, "ReduceMean",
                [("x", x)], [("y", y)], {"keepdims": 0},
                [("axes", axes)], ["x", "axes"])


@test
def reduce_mean_no_axes():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    y = x.mean(keepdims=True)
    return make("test_reduce_mean_all_opset18", 18, "ReduceMean",
                [("x", x)], [("y", y)])


@test
def reduce_mean_noop():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    return make("test_reduce_mean_noop_opset18", 18, "ReduceMean",
                [("x", x)], [("y", x.copy())], {"noop_with_empty_axes": 1})


@test
def split_even():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    a, b, c = np.split(x, 3, axis=1)
    return make("test_split_num_outputs_even_opset18", 18, "Split",
                [("x", x)], [("a", a), ("b", b), ("c", c)],
                {"axis": 1, "num_outputs": 3})


@test
def split_uneven():
    x = RNG.standard_normal((7, 2)).astype(np.float32)
    # ceil(7 / 3) = 3: parts of 3, 3 and 1.
    a, b, c = x[:3], x[3:6], x[6:]
    return make("test_split_num_outputs_uneven_opset18", 18, "Split",
                [("x", x)], [("a", a), ("b", b), ("c", c)],
                {"num_outputs": 3})


@test
def pad_axes():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    pads = np.array([1, 0, 2, 3], dtype=np.int64)  # axes -1, 1: begins, ends
    axes = np.array([-1, 1], dtype=np.int64)
    value = np.array(0.5, dtype=np.float32)
    y = np.pad(x, [(0, 0), (0, 3), (1, 2)], constant_values=0.5)
    return make("test_pad_axes_opset18", 18, "Pad", [("x", x)], [("y", y)],
                None, [("pads", pads), ("value", value), ("axes", axes)],
                ["x", "pads", "value", "axes"])


@test
def pad_axes_reflect():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    pads = np.array([2, 1], dtype=np.int64)
    axes = np.array([1], dtype=np.int64)
    y = np.pad(x, [(0, 0), (2, 1)], mode="reflect")
    return make("test_pad_axes_reflect_opset19", 19, "Pad", [("x", x)],
                [("y", y)], {"mode": "reflect"},
                [("pads", pads), ("axes", axes)], ["x", "pads", "", "axes"])


@test
def cast_saturate():
    x = (RNG.standard_normal((3, 4)) * 100).astype(np.float32)
    return make("test_cast_saturate_opset19", 19, "Cast", [("x", x)],
                [("y", x.astype(np.float16))],
                {"to": TensorProto.FLOAT16, "saturate": 1})


@test
def average_pool_dilations():
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    y = x.reshape(1, 2, 2, 2, 2, 2).mean(axis=(3, 5))
    return make("test_averagepool_dilations_1_opset19", 19, "AveragePool",
                [("x", x)], [("y", y)],
                {"kernel_shape": [2, 2], "strides": [2, 2],
                 "dilations": [1, 1]})


@test
def softmax_21():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return make("test_softmax_opset21", 21, "Softmax", [("x", x)],
                [("y", (e / e.sum(axis=-1, keepdims=True)).astype(np.float32))])


def write(out, name, model, inputs, outputs):
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for i, (n, a) in enumerate(values):
            t = numpy_helper.from_array(a, n)
            with open(os.path.join(folder, "test_data_set_0",
                                   "%s_%d.pb" % (kind, i)), "wb") as f:
                f.write(t.SerializeToString())


def check_ort(model, inputs, outputs):
    import onnxruntime
    sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
    got = sess.run(None, {n: a for n, a in inputs})
    for (n, want), g in zip(outputs, got):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5, err_msg=n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "opset18"))
    ap.add_argument("--check-ort", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for fn in TESTS:
        name, model, inputs, outputs = fn()
        if args.check_ort:
            check_ort(model, inputs, outputs)
        write(args.out, name, model, inputs, outputs)
        print("wrote %s" % name)


if __name__ == "__main__":
    main()
