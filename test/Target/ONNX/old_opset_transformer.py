#!/usr/bin/python3
"""An nn.TransformerEncoder exported by torch 1.13 at an old opset (11 by
default) imports through ONNX's version converter and computes what PyTorch
computes (the converter's Softmax 12 -> 13 adapter needs shapes the exporter
computes at run time).

    /usr/bin/python3 old_opset_transformer.py --work DIR [--bin BUILD/bin] [--opset 11]

Without --bin, shoal-compile and shoal-run are taken from PATH (lit puts
the build's there). old-opset-transformer.test runs it.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", help="folder of shoal-compile and shoal-run")
    ap.add_argument("--work", required=True)
    ap.add_argument("--opset", type=int, default=11)
    args = ap.parse_args()
    os.makedirs(os.path.join(args.work, "in"), exist_ok=True)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
    model = torch.nn.TransformerEncoder(
        layer, num_layers=2, norm=torch.nn.LayerNorm(16)).eval()
    src = torch.randn(5, 2, 16)
    path = os.path.join(args.work, "model.onnx")
    torch.onnx.export(model, (src,), path, opset_version=args.opset,
                      input_names=["src"], output_names=["out"],
                      dynamic_axes={"src": {0: "T", 1: "B"}})
    with torch.no_grad():
        want = model(src).numpy()
    np.save(os.path.join(args.work, "in", "src.npy"), src.numpy())
    plan = os.path.join(args.work, "model.plan")
    tool = lambda name: os.path.join(args.bin, name) if args.bin else name
    subprocess.run([tool("shoal-compile"), path,
                    "--input-shape", "src=5,2,16", "--world-size", "1",
                    "-o", plan], check=True)
    out = os.path.join(args.work, "out")
    subprocess.run([tool("shoal-run"), plan, "--inputs",
                    os.path.join(args.work, "in"), "--outputs", out],
                   check=True)
    got = np.load(os.path.join(out, "out.npy"))
    err = np.abs(got - want).max()
    print("opset %d: max abs error %.3g" % (args.opset, err))
    return 0 if got.shape == want.shape and err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
