#!/usr/bin/python3
"""An opset-18 Reshape whose shape (int64 [2]) is ONNX external data at
LOCATION, relative to the model: external-ints.test."""
import sys, os, numpy as np, onnx
from onnx import helper, TensorProto
out, loc = sys.argv[1], sys.argv[2]  # model path, location
shape = np.array([3, 4], np.int64)
with open(os.path.join(os.path.dirname(out), loc), "wb") as f:
    f.write(shape.tobytes())
t = TensorProto(); t.name = "shape"; t.data_type = TensorProto.INT64; t.dims.extend([2])
t.ClearField("int64_data")
t.data_location = TensorProto.EXTERNAL
for k, v in (("location", loc), ("length", "16")):
    e = t.external_data.add(); e.key = k; e.value = v
g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="/r/Reshape")], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [t])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 8
onnx.save(m, out)
