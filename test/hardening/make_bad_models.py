#!/usr/bin/python3
"""Writes the bad ONNX models of the hardening catalogue into OUT:

  int64_raw.onnx       an int64 initializer whose raw_data is 12 bytes for 2
                       elements (ONNX's ParseData<int64> wrote past its buffer)
  float_short.onnx     a float weight whose float_data holds 5 of 6 elements
  orphan_output.onnx   opset 12, a graph output no node produces (ONNX's
                       version converter crashed with SIGSEGV)
  conv_zero_stride.onnx, pool_zero_stride.onnx, conv_zero_dilation.onnx
                       strides/dilations of 0 (SIGFPE in ONNX's conv/pool
                       shape inference)
  depth_zero_block.onnx  DepthToSpace with blocksize 0
  range_huge.onnx      Range(0, 2^40, 1) on constants (constant folding grew
                       to 16.8 GB)
  const_huge.onnx      ConstantOfShape([16384, 16384]) (6.3 GB)
  expand_huge.onnx     Expand of a constant to [2^31, 2^31] (an element count
                       that overflows int64 when multiplied further)
  bad_dtype.onnx       an initializer of data_type 999
  negative_dim.onnx    an initializer with a dim of -3
  ext_missing.onnx     a weight in an external-data file that is not there
  ext_short.onnx       a weight whose external data runs past the file's end
  ext_fifo.onnx        a weight whose external data file is fifo.bin (the
                       test makes it a FIFO)

Each is small: the failures come from their contents, not their size."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, name.split(".")[0], inputs, outputs,
                              list(inits))
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", opset)])
    with open(os.path.join(out, name), "wb") as f:
        f.write(model.SerializeToString())


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.array(value)))


# int64 shape initializer: dims [2], raw_data 12 bytes.
shape = TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2],
                    raw_data=b"\x02\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00")
save("int64_raw.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"],
                                         name="/Reshape")],
     [vi("x", [6])], [vi("y", [2, 3])], [shape])

w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 2],
                float_data=[1, 2, 3, 4, 5])
save("float_short.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"],
                                           name="/fc/MatMul")],
     [vi("x", [4, 3])], [vi("y", [4, 2])], [w])

save("orphan_output.onnx", [helper.make_node("Relu", ["x"], ["h"],
                                             name="/Relu")],
     [vi("x", [2, 3])], [vi("y", [2, 3])], opset=12)

wconv = numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "w")
save("conv_zero_stride.onnx",
     [helper.make_node("Conv", ["x", "w"], ["y"], name="/conv/Conv",
                       strides=[0, 0])],
     [vi("x", [1, 1, 4, 4])], [vi("y", ["n", "c", "h", "w"])], [wconv])
save("conv_zero_dilation.onnx",
     [helper.make_node("Conv", ["x", "w"], ["y"], name="/conv/Conv",
                       dilations=[0, 1])],
     [vi("x", [1, 1, 4, 4])], [vi("y", ["n", "c", "h", "w"])], [wconv])
save("pool_zero_stride.onnx",
     [helper.make_node("MaxPool", ["x"], ["y"], name="/pool/MaxPool",
                       kernel_shape=[2, 2], strides=[1, 0])],
     [vi("x", [1, 1, 4, 4])], [vi("y", ["n", "c", "h", "w"])])
save("depth_zero_block.onnx",
     [helper.make_node("DepthToSpace", ["x"], ["y"], name="/DepthToSpace",
                       blocksize=0)],
     [vi("x", [1, 4, 2, 2])], [vi("y", ["n", "c", "h", "w"])])

save("range_huge.onnx",
     [const("start", np.int64(0)), const("limit", np.int64(1 << 40)),
      const("delta", np.int64(1)),
      helper.make_node("Range", ["start", "limit", "delta"], ["r"],
                       name="/Range"),
      helper.make_node("Cast", ["r"], ["rf"], name="/Cast",
                       to=TensorProto.FLOAT),
      helper.make_node("Add", ["x", "rf"], ["y"], name="/Add")],
     [vi("x", [1])], [vi("y", ["n"])])
save("const_huge.onnx",
     [const("dims", np.array([16384, 16384], np.int64)),
      helper.make_node("ConstantOfShape", ["dims"], ["c"],
                       name="/ConstantOfShape"),
      helper.make_node("Add", ["x", "c"], ["y"], name="/Add")],
     [vi("x", [1])], [vi("y", ["a", "b"])])
save("expand_huge.onnx",
     [const("one", np.ones((1, 1), np.float32)),
      const("dims", np.array([1 << 31, 1 << 31], np.int64)),
      helper.make_node("Expand", ["one", "dims"], ["c"], name="/Expand"),
      helper.make_node("Add", ["x", "c"], ["y"], name="/Add")],
     [vi("x", [1])], [vi("y", ["a", "b"])])

bad = TensorProto(name="w", data_type=999, dims=[3, 2], raw_data=bytes(24))
save("bad_dtype.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"],
                                         name="/fc/MatMul")],
     [vi("x", [4, 3])], [vi("y", [4, 2])], [bad])
neg = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-3, 2],
                  raw_data=bytes(24))
save("negative_dim.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"],
                                            name="/fc/MatMul")],
     [vi("x", [4, 3])], [vi("y", [4, 2])], [neg])


def external(name, location, length):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 2],
                    data_location=TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", "0"),
                 ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    save(name, [helper.make_node("MatMul", ["x", "w"], ["y"],
                                 name="/fc/MatMul")],
         [vi("x", [4, 3])], [vi("y", [4, 2])], [t])


external("ext_missing.onnx", "missing.bin", 24)
with open(os.path.join(out, "short.bin"), "wb") as f:
    f.write(bytes(16))
external("ext_short.onnx", "short.bin", 24)
external("ext_fifo.onnx", "fifo.bin", 24)  # the test makes fifo.bin a FIFO
