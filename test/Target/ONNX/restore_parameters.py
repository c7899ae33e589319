#!/usr/bin/python3
"""Writes the models of restore-parameters.test: what torch.onnx.export in
eval mode with constant folding makes of a model's parameters.

    restore_parameters.py OUT_DIR

merged.onnx   a parameter read through Identity ('blk.bias' = Identity of
              'ln.bias', both zeros) and the folded transposed copy of a tied
              embedding ('onnx::MatMul_9' = emb^T) feeding the head's MatMul
unclear.onnx  folded copies the importer cannot attribute: 'onnx::MatMul_3'
              (all ones, as is 'w.ones') and 'onnx::MatMul_5' (equal to both
              'a.weight' and 'b.weight')
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inits, inputs, outputs, path):
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((5, 4)).astype(np.float32)
    model([
        helper.make_node("Gather", ["emb", "ids"], ["/wte/Gather_output_0"], name="/wte/Gather"),
        helper.make_node("Add", ["/wte/Gather_output_0", "ln.bias"], ["/ln/Add_output_0"],
                         name="/ln/Add"),
        helper.make_node("Identity", ["ln.bias"], ["blk.bias"], name="Identity_0"),
        helper.make_node("Add", ["/ln/Add_output_0", "blk.bias"], ["/blk/Add_output_0"],
                         name="/blk/Add"),
        helper.make_node("MatMul", ["/blk/Add_output_0", "onnx::MatMul_9"],
                         ["/lm_head/MatMul_output_0"], name="/lm_head/MatMul"),
        helper.make_node("Add", ["/lm_head/MatMul_output_0", "out.bias"], ["y"],
                         name="/lm_head/Add"),
    ], {"emb": emb, "ln.bias": np.zeros(4, np.float32),
        "onnx::MatMul_9": np.ascontiguousarray(emb.T),
        "out.bias": rng.standard_normal(5).astype(np.float32)},
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])],
        os.path.join(out, "merged.onnx"))

    w = rng.standard_normal((4, 4)).astype(np.float32)
    model([
        helper.make_node("MatMul", ["x", "w.ones"], ["/a/MatMul_output_0"], name="/a/MatMul"),
        helper.make_node("MatMul", ["/a/MatMul_output_0", "onnx::MatMul_3"],
                         ["/b/MatMul_output_0"], name="/b/MatMul"),
        helper.make_node("MatMul", ["/b/MatMul_output_0", "a.weight"], ["/c/MatMul_output_0"],
                         name="/c/MatMul"),
        helper.make_node("MatMul", ["/c/MatMul_output_0", "b.weight"], ["/d/MatMul_output_0"],
                         name="/d/MatMul"),
        helper.make_node("MatMul", ["/d/MatMul_output_0", "onnx::MatMul_5"], ["y"],
                         name="/e/MatMul"),
    ], {"w.ones": np.ones((4, 4), np.float32), "onnx::MatMul_3": np.ones((4, 4), np.float32),
        "a.weight": w, "b.weight": w.copy(), "onnx::MatMul_5": w.copy()},
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        os.path.join(out, "unclear.onnx"))


if __name__ == "__main__":
    main()
