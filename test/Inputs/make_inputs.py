#!/usr/bin/python3
"""Writes the binary ONNX models the importer tests read (test/Target/ONNX).

    /usr/bin/python3 test/Inputs/make_inputs.py [--out DIR]

The outputs are committed; rerun this after changing it. What the text
syntax of onnx 1.12 cannot express (node names, raw_data, external data) is
made here.

  named.onnx             named nodes ("/blk/fc/MatMul"), an unnamed one, and
                         a Constant stored as raw_data; also the model the
                         truncation test cuts short
  external_weights.onnx  an initializer of 50000x12288 f32 (2.3 GiB) stored
  external_weights.bin   as external data in an empty file: importing it must
                         not read the weights
  unsupported_named.onnx a named Hardmax node (unsupported)
  constants_raw.onnx     Constants of every supported type stored as raw_data
  dynamo_named.onnx      an opset-20 model in the style of torch.onnx.export(
                         ..., dynamo=True): nodes named node_<Op>_<n> with
                         their module path in metadata_props
                         (pkg.torch.onnx.name_scopes), a field onnx 1.12
                         does not have and that is written as raw bytes
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model, out, name):
    onnx.checker.check_model(model)
    path = os.path.join(out, name)
    onnx.save(model, path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


def named(out):
    w = numpy_helper.from_array(
        np.arange(32, dtype=np.float32).reshape(4, 8) / 32, "blk.fc.weight")
    # numpy_helper stores the data as raw_data.
    scale = numpy_helper.from_array(np.array([0.5, 2.0], dtype=np.float32))
    shape = numpy_helper.from_array(np.array([2, 4, 2], dtype=np.int64))
    nodes = [
        helper.make_node("MatMul", ["x", "blk.fc.weight"], ["h"],
                         name="/blk/fc/MatMul"),
        helper.make_node("Constant", [], ["s"], name="/blk/Constant",
                         value=scale),
        helper.make_node("Constant", [], ["shape"], value=shape),
        helper.make_node("Reshape", ["h", "shape"], ["r"],
                         name="/blk/Reshape"),
        helper.make_node("Mul", ["r", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "named",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 2])],
        initializer=[w])
    save(helper.make_model(graph, opset_imports=OPSET), out, "named.onnx")


def external_weights(out):
    big = TensorProto()
    big.name = "lm_head.weight"
    big.data_type = TensorProto.FLOAT
    big.dims.extend([12288, 50000])
    big.data_location = TensorProto.EXTERNAL
    for key, value in [("location", "external_weights.bin"),
                       ("offset", "0"),
                       ("length", str(12288 * 50000 * 4))]:
        entry = big.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "lm_head.weight"], ["logits"],
                          name="/lm_head/MatMul")],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12288])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [1, 50000])],
        initializer=[big])
    # The data file exists (ONNX's checker looks for it) but is empty.
    open(os.path.join(out, "external_weights.bin"), "wb").close()
    model = helper.make_model(graph, opset_imports=OPSET)
    path = os.path.join(out, "external_weights.onnx")
    onnx.save(model, path)
    # By path, so that the data file is looked for next to the model.
    onnx.checker.check_model(path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


def unsupported_named(out):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="/stem/Relu"),
         helper.make_node("Hardmax", ["r"], ["y"],
                          name="/stem/hardmax/Hardmax")],
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])])
    save(helper.make_model(graph, opset_imports=OPSET), out,
         "unsupported_named.onnx")


def constants_raw(out):
    arrays = {
        "f32": np.array([1.5, -2.0], dtype=np.float32),
        "f64": np.array([0.25, -1e300], dtype=np.float64),
        "f16": np.array([1.0, -0.5], dtype=np.float16),
        "i64": np.array([-9000000000, 3], dtype=np.int64),
        "i32": np.array([[-7, 0], [1, 2]], dtype=np.int32),
        "i8": np.array([-128, 127], dtype=np.int8),
        "u8": np.array([0, 255], dtype=np.uint8),
        "b": np.array([True, False, True]),
    }
    tensors = {k: numpy_helper.from_array(v) for k, v in arrays.items()}
    # bfloat16 has no numpy type: 1.0 and -2.0 as raw little-endian bits.
    tensors["bf16"] = helper.make_tensor(
        "", TensorProto.BFLOAT16, [2],
        np.array([0x3F80, 0xC000], dtype=np.uint16).tobytes(), raw=True)
    assert all(t.HasField("raw_data") for t in tensors.values())
    nodes = [helper.make_node("Constant", [], [k], name="/const/" + k,
                              value=t) for k, t in tensors.items()]
    outputs = [helper.make_tensor_value_info(k, t.data_type, list(t.dims))
               for k, t in tensors.items()]
    graph = helper.make_graph(nodes, "constants_raw", [], outputs)
    save(helper.make_model(graph, opset_imports=OPSET), out,
         "constants_raw.onnx")


def with_metadata(node, props):
    """Adds NodeProto.metadata_props (field 9, IR version 10) entries: onnx
    1.12's Python classes do not have the field, protobuf keeps it as an
    unknown field."""
    def varint(n):
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    for key, value in props.items():
        entry = field(1, key.encode()) + field(2, value.encode())
        node.MergeFromString(field(9, entry))
    return node


def dynamo_named(out):
    w0 = numpy_helper.from_array(
        np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8),
        "layers.0.fc.weight")
    w1 = numpy_helper.from_array(
        np.linspace(1, -1, 32, dtype=np.float32).reshape(8, 4),
        "layers.1.fc.weight")
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")

    def scoped(op, inputs, outputs, name, scopes, **attrs):
        return with_metadata(
            helper.make_node(op, inputs, outputs, name=name, **attrs),
            {"namespace": "unused", "pkg.torch.onnx.name_scopes": scopes})

    nodes = [
        scoped("MatMul", ["x", "layers.0.fc.weight"], ["h0"], "node_MatMul_0",
               "['', 'layers.0', 'layers.0.fc', 'linear']"),
        scoped("Gelu", ["h0"], ["a0"], "node_Gelu_1",
               "['', 'layers.0', 'layers.0.act', 'gelu']"),
        scoped("MatMul", ["a0", "layers.1.fc.weight"], ["h1"],
               "node_MatMul_2",
               "['', 'layers.1', 'layers.1.fc', 'linear_1']"),
        # A second op of the same type in the same module: numbered.
        scoped("MatMul", ["x", "layers.0.fc.weight"], ["h2"],
               "node_MatMul_3",
               "['', 'layers.1', 'layers.1.fc', 'linear_2']"),
        # Double quotes, as repr() writes a name holding a quote.
        scoped("ReduceMean", ["h1", "axes"], ["m"], "node_ReduceMean_4",
               '["", "head\'s", "mean"]', keepdims=0),
        # A name that carries a module path wins over the metadata.
        scoped("Relu", ["h2"], ["r"], "/head/Relu", "['', 'other', 'relu']"),
        # No metadata: the node's own name.
        helper.make_node("Neg", ["m"], ["y"], name="node_Neg_6"),
    ]
    graph = helper.make_graph(
        nodes, "dynamo_named",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 8])],
        initializer=[w0, w1, axes])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    # onnx 1.12's checker does not know opset 20: saved unchecked.
    path = os.path.join(out, "dynamo_named.onnx")
    onnx.save(model, path)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    named(args.out)
    external_weights(args.out)
    unsupported_named(args.out)
    constants_raw(args.out)
    dynamo_named(args.out)


if __name__ == "__main__":
    main()
