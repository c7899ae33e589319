"""Writes DIR/m.onnx, whose input, initializer and node names hold bytes
that are not UTF-8 (ONNX names are proto2 strings: exporters and tools can
write any bytes), and DIR/in/<input>.npy; prints the expected output.

    python3 invalid_utf8_model.py DIR
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(os.path.join(out, "in"), exist_ok=True)
w = np.arange(16, dtype=np.float32).reshape(4, 4) / 10 - 0.7
x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["QQx", "QQw"], ["QQh"], name="QQmm"),
     helper.make_node("Relu", ["QQh"], ["y"], name="relu")],
    "g", [helper.make_tensor_value_info("QQx", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    [numpy_helper.from_array(w, "QQw")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
# Every "QQ" becomes the bytes FF FE (names of equal length, so that the
# serialized lengths stay right).
data = model.SerializeToString().replace(b"QQ", b"\xff\xfe")
with open(os.path.join(out, "m.onnx"), "wb") as f:
    f.write(data)
# shoal-run reads an input from a file named after it, with every
# character outside [A-Za-z0-9_.-] as '_'.
np.save(os.path.join(out, "in", "__x.npy"), x)
print(" ".join("%.4f" % v for v in np.maximum(x @ w, 0).ravel()))
