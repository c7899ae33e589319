#!/usr/bin/python3
"""torch.nn.Transformer (encoder-decoder, sequence-first), exported to ONNX.

    /usr/bin/python3 examples/families/transformer.py --out DIR
        [--seed S] [--opset N]

Config: nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2,
num_decoder_layers=2, dim_feedforward=128, dropout=0.1, activation="relu",
batch_first=False), no masks. Inputs src float32 [12, 4, 64] and tgt
float32 [8, 4, 64] (sequence, batch, feature; N(0, 1)), output out float32
[8, 4, 64].

batch_first=False is PyTorch's default: the batch is dimension 1 of every
input and output, so specs for this model say so (`inputs: {src:
{batch_dim: 1}, tgt: {batch_dim: 1}}`, see docs/Annotations.md). Inside,
nn.MultiheadAttention merges batch and heads ([T, B, E] -> [T, B*H, D]) and
back ([T, B*H, D] -> [T*B, E], where the batch is the minor factor).

Exported with grad enabled so that nn.MultiheadAttention takes its
traceable path (see transformer_encoder.py); every parameter is re-drawn so
that the deep-copied layers differ.
"""

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

D_MODEL = 64
NHEAD = 4
DIM_FF = 128
LAYERS = 2
BATCH = 4
SRC_LEN = 12
TGT_LEN = 8


def build(torch):
    return torch.nn.Transformer(D_MODEL, NHEAD, num_encoder_layers=LAYERS,
                                num_decoder_layers=LAYERS, dim_feedforward=DIM_FF,
                                dropout=0.1, activation="relu", batch_first=False)


def make_inputs(rng):
    """Graph inputs in forward() order: src [S, B, E], tgt [T, B, E]."""
    return collections.OrderedDict(
        src=rng.standard_normal((SRC_LEN, BATCH, D_MODEL)).astype(np.float32),
        tgt=rng.standard_normal((TGT_LEN, BATCH, D_MODEL)).astype(np.float32))


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            if p.dim() == 2:
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.02)
    common.randomize_norms(model, args.seed)
    model.eval()
    inputs = make_inputs(common.rng(args.seed))
    common.export_family("transformer", model, inputs, ["out"], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
