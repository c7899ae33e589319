#!/usr/bin/python3
"""Mixture-of-experts layer (top-2 of 4 experts), exported to ONNX.

    /usr/bin/python3 examples/families/moe.py --out DIR [--seed S] [--opset N]

Config: tokens x float32 [2, 8, 32] (16 tokens of width 32), 4 experts, each a
SiLU-gated MLP 32 -> 64 -> 32 (Mixtral-style w2(silu(w1 x) * w3 x)), top-2
routing, expert capacity 12 tokens (capacity factor 1.5 * 16 tokens * 2 / 4).

Forward (static shapes throughout, no NonZero):
  1. x.view(-1, C); router Linear -> softmax -> torch.topk(k=2) over experts;
     the two weights renormalized to sum to 1                       (TopK)
  2. dense combine weights: zeros(N, E).scatter(1, topk_idx, topk_w)
                                                          (ScatterElements)
  3. per expert e: the `capacity` tokens with the largest combine weight
     (torch.topk over tokens), gathered with index_select           (Gather)
     their weights with torch.gather                        (GatherElements)
     expert MLP on the gathered tokens, scaled by the weights, and added back
     with out.scatter_add(0, idx.unsqueeze(-1).expand(-1, C), y)
                                     (ScatterElements, reduction "add")
  4. out.view(B, T, C)
A token routed to an expert is dropped by that expert only if more than
`capacity` tokens are routed to it (Switch/GShard-style capacity); tokens with
weight 0 that fill up an expert's capacity contribute 0. TopK ties can only
occur among such zero weights, so the output does not depend on how an
implementation breaks ties.

Input: x float32 [2, 8, 32] (N(0, 1)). Output: y float32 [2, 8, 32].
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

BATCH = 2
SEQ = 8
HIDDEN = 32
FFN = 64
EXPERTS = 4
TOP_K = 2
CAPACITY_FACTOR = 1.5


def build(torch):
    nn = torch.nn
    F = nn.functional

    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(HIDDEN, FFN, bias=False)
            self.w3 = nn.Linear(HIDDEN, FFN, bias=False)
            self.w2 = nn.Linear(FFN, HIDDEN, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class SparseMoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_experts = EXPERTS
            self.top_k = TOP_K
            self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)
            self.experts = nn.ModuleList([Expert() for _ in range(EXPERTS)])

        def forward(self, x):
            B, T, C = x.shape
            tokens = x.view(-1, C)  # (N, C)
            n_tokens = tokens.size(0)
            capacity = min(n_tokens, int(math.ceil(
                CAPACITY_FACTOR * B * T * self.top_k / self.num_experts)))
            router_logits = self.gate(tokens)  # (N, E)
            probs = F.softmax(router_logits, dim=-1, dtype=torch.float)
            topk_w, topk_idx = torch.topk(probs, self.top_k, dim=-1)  # (N, k)
            topk_w = topk_w / topk_w.sum(dim=-1, keepdim=True)
            topk_w = topk_w.to(x.dtype)
            combine = torch.zeros_like(probs).scatter(1, topk_idx, topk_w)  # (N, E)
            out = torch.zeros_like(tokens)
            for e, expert in enumerate(self.experts):
                col = combine[:, e]  # (N,)
                _, idx = torch.topk(col, capacity, dim=0)  # (cap,)
                xe = tokens.index_select(0, idx)  # (cap, C)
                we = torch.gather(col, 0, idx)  # (cap,)
                ye = expert(xe) * we.unsqueeze(-1)
                out = out.scatter_add(0, idx.unsqueeze(-1).expand(-1, C), ye)
            return out.view(B, T, C)

    return SparseMoE()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        model.gate.weight.normal_(0.0, 0.5)  # a decisive router
    r = common.rng(args.seed)
    x = r.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    common.export_family("moe", model, {"x": x}, ["y"], args,
                         dynamic_axes={"x": {0: "batch", 1: "seq"},
                                       "y": {0: "batch", 1: "seq"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
