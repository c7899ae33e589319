#!/usr/bin/python3
"""torch.nn.TransformerEncoder (small), exported to ONNX.

    /usr/bin/python3 examples/families/transformer_encoder.py --out DIR
        [--seed S] [--opset N]

Config: nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=64, nhead=4,
dim_feedforward=128, dropout=0.1, activation="relu", batch_first=True,
norm_first=False), num_layers=2), no mask. Input src float32 [4, 16, 64]
(N(0, 1)), output out float32 [4, 16, 64].

About the "fast path" in torch 1.13: in eval mode, TransformerEncoderLayer
calls the fused kernel torch._transformer_encoder_layer_fwd unless autograd
is recording (grad enabled and parameters requiring grad). The exporter has
no symbolic for that kernel, so exporting under torch.no_grad() fails with
UnsupportedOperatorError. The model is therefore exported with grad enabled
(as torch.onnx.export does by default), which traces the ordinary
MultiheadAttention path; the reference is computed under torch.no_grad()
in eval mode (fast path). The no_grad attempt is repeated on every run and
its outcome recorded in ops.json ("variants").

nn.TransformerEncoder deep-copies the layer, so a fresh model has identical
weights in every layer, and the exporter then deduplicates the repeated
initializers into Identity nodes. Every parameter is re-drawn here so that
the layers differ (as in a trained model) and no Identity appears.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

D_MODEL = 64
NHEAD = 4
DIM_FF = 128
LAYERS = 2
BATCH = 4
SEQ = 16


def build(torch):
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(D_MODEL, NHEAD, dim_feedforward=DIM_FF, dropout=0.1,
                                       activation="relu", batch_first=True,
                                       norm_first=False)
    return nn.TransformerEncoder(layer, num_layers=LAYERS)


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

    r = common.rng(args.seed)
    src = r.standard_normal((BATCH, SEQ, D_MODEL)).astype(np.float32)

    # The fast-path attempt: export under torch.no_grad().
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with torch.no_grad():
                common.export_onnx(model, (torch.from_numpy(src),),
                                   os.path.join(tmp, "m.onnx"), ["src"], ["out"], args.opset)
            variants["export under torch.no_grad()"] = "exported"
        except Exception as e:  # noqa: BLE001 (the exporter's error is the finding)
            msg = str(e).split("\n")[0]
            variants["export under torch.no_grad()"] = "failed: %s: %s" % (type(e).__name__, msg)
    variants["export with grad enabled (kept)"] = "exported"
    for k, v in variants.items():
        print("%s: %s" % (k, v))

    common.export_family("transformer_encoder", model, {"src": src}, ["out"], args,
                         variants=variants,
                         dynamic_axes={"src": {0: "batch", 1: "seq"},
                                       "out": {0: "batch", 1: "seq"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
