#!/usr/bin/python3
"""Mixture-of-experts layer with stacked expert weights (GShard style),
exported to ONNX: the model for expert parallelism.

Config: x float32 [4, 8, 32] (32 tokens of width 32), 4 experts (an MLP
32 -> 64 -> 32 each, weights stacked as w1 [4, 32, 64] and w2 [4, 64, 32]),
top-2 routing, no capacity limit.

  1. tokens = x.view(-1, C); router Linear -> softmax over experts; keep the
     top-2 probabilities per token (renormalized), zero elsewhere: the
     combine weights [N, E];
  2. dispatch: xe[e, n] = tokens[n] where token n is routed to expert e,
     zeros elsewhere ([E, N, C]);
  3. experts: batched MatMul with w1, GELU, batched MatMul with w2 ([E, N, C]);
  4. combine: y[n] = sum_e combine[n, e] * ye[e, n]; plus the residual.

Under `split` (examples/families/spec_ep.yaml), shoal puts the experts of
w1/w2 on different devices while the tokens stay split over them too, so
the dispatch and combine become all-to-all exchanges.

Input: x float32 [4, 8, 32] (N(0, 1)). Output: y float32 [4, 8, 32].
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

BATCH = 4
SEQ = 8
HIDDEN = 32
FFN = 64
EXPERTS = 4
TOP_K = 2


def build(torch):
    nn = torch.nn

    class StackedMoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)
            self.w1 = nn.Parameter(torch.randn(EXPERTS, HIDDEN, FFN) / HIDDEN ** 0.5)
            self.w2 = nn.Parameter(torch.randn(EXPERTS, FFN, HIDDEN) / FFN ** 0.5)
            self.act = nn.GELU()

        def forward(self, x):
            B, T, C = x.shape
            tokens = x.reshape(B * T, C)
            probs = torch.softmax(self.gate(tokens), dim=-1)  # (N, E)
            kth = torch.topk(probs, TOP_K, dim=-1).values[:, TOP_K - 1:]  # (N, 1)
            keep = (probs >= kth).to(probs.dtype)
            combine = probs * keep
            combine = combine / combine.sum(dim=-1, keepdim=True)  # (N, E)
            route = combine.t().unsqueeze(-1)  # (E, N, 1)
            xe = (route > 0).to(x.dtype) * tokens.unsqueeze(0)  # (E, N, C)
            ye = torch.matmul(self.act(torch.matmul(xe, self.w1)), self.w2)
            y = (ye * route).sum(dim=0)  # (N, C)
            return x + y.reshape(B, T, C)

    return StackedMoE()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        model.gate.weight.normal_(0.0, 0.5)  # a decisive router
    r = common.rng(args.seed)
    x = r.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    common.export_family("moe_ep", model, {"x": x}, ["y"], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
