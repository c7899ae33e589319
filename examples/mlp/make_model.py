#!/usr/bin/python3
"""Generate shoal's MLP example: a 3-layer MLP on 2-D input, exported to ONNX.

    /usr/bin/python3 examples/mlp/make_model.py --out DIR [--seed S]

writes
    DIR/model.onnx         opset 17: Gemm(transB=1) -> GELU (Div/Erf/Add/Mul)
                           -> Gemm -> Relu -> Gemm
    DIR/inputs/x.npy       float32 [8, 32], standard normal
    DIR/reference/y.npy    float32 [8, 24], PyTorch's own output

Node names follow the module path: /fc1/Gemm, /act/Erf, /fc2/Gemm, /relu/Relu,
/fc3/Gemm.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

BATCH = 8
IN, HIDDEN, MID, OUT = 32, 128, 32, 24


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN, HIDDEN)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(HIDDEN, MID)
        self.relu = nn.ReLU()
        self.fc3 = nn.Linear(MID, OUT)

    def forward(self, x):
        return self.fc3(self.relu(self.fc2(self.act(self.fc1(x)))))


def init_weights(model, seed):
    """Random weights and (non-zero) biases from a seeded generator."""
    g = torch.Generator().manual_seed(4321 + seed)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            p.data.normal_(0.0, 1.0 / np.sqrt(p.shape[1]), generator=g)
        else:
            p.data.normal_(0.0, 0.1, generator=g)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    model = MLP()
    init_weights(model, args.seed)
    model.eval()

    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "reference"), exist_ok=True)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    np.save(os.path.join(args.out, "inputs", "x.npy"), x)

    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy().astype(np.float32)
    np.save(os.path.join(args.out, "reference", "y.npy"), y)

    path = os.path.join(args.out, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(x),), path,
                          opset_version=17, input_names=["x"],
                          output_names=["y"], do_constant_folding=True)

    m = common.check_onnx(path, common.MLP_ALLOWED_OPS)
    gemms = [n for n in m.graph.node if n.op_type == "Gemm"]
    if len(gemms) != 3:
        raise SystemExit("error: expected 3 Gemm nodes, got %d" % len(gemms))
    common.verify_onnx_against_reference(path, {"x": x}, {"y": y})
    nparams = sum(p.numel() for p in model.parameters())
    print("MLP: %d -> %d -> GELU -> %d -> ReLU -> %d, batch %d"
          % (IN, HIDDEN, MID, OUT, BATCH))
    print("parameters: %d (%s as float32)" % (nparams, common.human_size(4 * nparams)))
    print("wrote %s (%s)" % (path, common.human_size(os.path.getsize(path))))
    print("wrote %s %s, %s %s" % (
        os.path.join(args.out, "inputs", "x.npy"), list(x.shape),
        os.path.join(args.out, "reference", "y.npy"), list(y.shape)))
    common.print_graph_summary(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
