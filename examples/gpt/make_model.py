#!/usr/bin/python3
"""Generate shoal's GPT example: a small GPT-style decoder exported to ONNX.

    /usr/bin/python3 examples/gpt/make_model.py --out DIR [--seed S]

writes
    DIR/model.onnx              opset 17, constant shapes
    DIR/inputs/input_ids.npy    int64 [B, T], values in [0, vocab)
    DIR/reference/logits.npy    float32 [B, T, vocab], PyTorch's own output

The model is written so that the export has only static shapes and a small
set of op types (see GPT_ALLOWED_OPS in examples/common.py): every view/
reshape uses Python ints stored on the module, the position embedding is a
parameter added whole (no Slice), the causal mask is one additive buffer
(no Where), and the attention scale is a constant.

ONNX node names follow the module path, e.g. /h.0/attn/q/MatMul, which is
what the annotation specs (spec_*.yaml) match.
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

VOCAB = 96
HIDDEN = 64
HEADS = 4
LAYERS = 2
BATCH = 4
SEQ = 16


class Attention(nn.Module):
    def __init__(self, B, T, C, H):
        super().__init__()
        self.B, self.T, self.C, self.H, self.D = B, T, C, H, C // H
        self.q = nn.Linear(C, C)
        self.k = nn.Linear(C, C)
        self.v = nn.Linear(C, C)
        self.proj = nn.Linear(C, C)
        self.scale = 1.0 / math.sqrt(self.D)

    def heads(self, x):
        return x.view(self.B, self.T, self.H, self.D).transpose(1, 2)

    def forward(self, x, mask):
        q = self.heads(self.q(x))
        k = self.heads(self.k(x))
        v = self.heads(self.v(x))
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att + mask
        att = torch.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).reshape(self.B, self.T, self.C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.act = nn.GELU()  # exact GELU: exports as Div/Erf/Add/Mul
        self.proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, B, T, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attention(B, T, C, H)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=VOCAB, C=HIDDEN, H=HEADS, L=LAYERS, B=BATCH, T=SEQ):
        super().__init__()
        self.B, self.T, self.C, self.H, self.D = B, T, C, H, C // H
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Parameter(torch.randn(T, C) * 0.02)
        self.h = nn.ModuleList([Block(B, T, C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, vocab, bias=False)
        # Additive causal mask: 0 where a position may attend, -1e9 above the
        # diagonal. One buffer shared by every block: per-block copies would
        # be identical, and the exporter would deduplicate them into an
        # Identity node.
        self.register_buffer("mask", torch.triu(torch.full((T, T), -1e9), diagonal=1))

    def forward(self, input_ids):
        x = self.wte(input_ids) + self.wpe
        for block in self.h:
            x = block(x, self.mask)
        return self.lm_head(self.ln_f(x))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    model = GPT()
    init_weights(model, args.seed)
    model.eval()

    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "reference"), exist_ok=True)
    rng = np.random.default_rng(args.seed)
    ids = rng.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)
    np.save(os.path.join(args.out, "inputs", "input_ids.npy"), ids)

    with torch.no_grad():
        logits = model(torch.from_numpy(ids)).numpy().astype(np.float32)
    np.save(os.path.join(args.out, "reference", "logits.npy"), logits)

    path = os.path.join(args.out, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(ids),), path,
                          opset_version=17, input_names=["input_ids"],
                          output_names=["logits"], do_constant_folding=True)

    m = common.check_onnx(path, common.GPT_ALLOWED_OPS)
    common.verify_onnx_against_reference(path, {"input_ids": ids}, {"logits": logits})
    nparams = sum(p.numel() for p in model.parameters())
    print("GPT: vocab %d, hidden %d, heads %d, layers %d, batch %d, seq %d"
          % (VOCAB, HIDDEN, HEADS, LAYERS, BATCH, SEQ))
    print("parameters: %d (%s as float32)" % (nparams, common.human_size(4 * nparams)))
    print("wrote %s (%s)" % (path, common.human_size(os.path.getsize(path))))
    print("wrote %s %s, %s %s" % (
        os.path.join(args.out, "inputs", "input_ids.npy"), list(ids.shape),
        os.path.join(args.out, "reference", "logits.npy"), list(logits.shape)))
    common.print_graph_summary(m)
    return 0


def init_weights(model, seed):
    """GPT-2-like random init with non-trivial LayerNorm affine parameters and
    biases, so that a sharding bug in any of them shows in the output."""
    g = torch.Generator().manual_seed(1234 + seed)
    for name, p in model.named_parameters():
        if p.dim() == 2:  # Linear / Embedding weights, wpe
            p.data.normal_(0.0, 0.08, generator=g)
        elif "ln" in name and name.endswith("weight"):
            p.data.uniform_(0.8, 1.2, generator=g)
        else:  # biases (Linear, LayerNorm)
            p.data.normal_(0.0, 0.05, generator=g)


if __name__ == "__main__":
    sys.exit(main())
