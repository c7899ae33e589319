#!/usr/bin/python3
"""Writes OUT/model.onnx, y = Sqrt(x @ w), and OUT/inputs/{x,labels}.npy
such that a column of x @ w is 0: the loss (MSE) is finite, but Sqrt's
gradient there is infinite, and so is the gradient of w.
Used by test/tools/shoal-run-train.test (the gradient-norm guard)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
w = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], np.float32)  # column 1: x @ w = 0
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"], name="/fc/MatMul"),
     helper.make_node("Sqrt", ["h"], ["y"], name="/Sqrt")],
    "sqrt",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
    [numpy_helper.from_array(w, "w")])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
          os.path.join(out, "model.onnx"))
np.save(os.path.join(out, "inputs", "x.npy"), np.full((4, 3), 0.5, np.float32))
np.save(os.path.join(out, "inputs", "labels.npy"), np.ones((4, 2), np.float32))
