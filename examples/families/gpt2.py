#!/usr/bin/python3
"""GPT-2-style decoder (small), exported to ONNX with the exporter's usual
shape computations.

    /usr/bin/python3 examples/families/gpt2.py --out DIR [--seed S] [--opset N]
        [--causal-mask auto|runtime|buffer]

Config: vocab 100, 32 positions, hidden 64, 4 heads, 2 layers, batch 2, seq 16.
Written like Hugging Face's modeling_gpt2 (without dropout/cache):
  * token embedding + learned positions, position ids from torch.arange over
    the input's length (input_ids.size(-1)) -> Range, Unsqueeze, Gather
  * fused qkv Linear (c_attn) split with .split(C, dim=2) -> Split; heads via
    x.size()[:-1] + (H, D) and view -> Shape/Slice/Concat/Reshape
  * attention scaled by v.size(-1) ** 0.5 computed from the shape
  * causal mask: torch.tril(torch.ones(T, T)) built in forward from the
    sequence length (Trilu, opset >= 14), or, with --causal-mask buffer (the
    default at opset 13, which has no Trilu), GPT-2's own registered
    tril buffer sliced [k_len - q_len : k_len, :k_len] at run time;
    applied with torch.where(mask, att, finfo.min) -> Where
  * "gelu_new": 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) -> Pow, Tanh
  * LayerNorm (LayerNormalization at opset 17, ReduceMean/Sub/Pow/Sqrt/Div
    at opset 13), lm_head tied to the token embedding.

Writes DIR/model.onnx, DIR/inputs/input_ids.npy (int64 [2, 16] in [0, 100)),
DIR/reference/logits.npy (float32 [2, 16, 100]) and DIR/ops.json.
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

VOCAB = 100
N_POSITIONS = 32
HIDDEN = 64
HEADS = 4
LAYERS = 2
BATCH = 2
SEQ = 16


def build(torch, causal_mask):
    nn = torch.nn

    class GPT2Attention(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.n_head = H
            self.split_size = C
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            if causal_mask == "buffer":
                self.register_buffer("bias", torch.tril(
                    torch.ones((N_POSITIONS, N_POSITIONS), dtype=torch.bool)).view(
                        1, 1, N_POSITIONS, N_POSITIONS), persistent=False)

        def _split_heads(self, x):
            new_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
            return x.view(new_shape).permute(0, 2, 1, 3)  # (B, H, T, D)

        def _merge_heads(self, x):
            x = x.permute(0, 2, 1, 3).contiguous()
            new_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
            return x.view(new_shape)

        def _attn(self, q, k, v):
            att = torch.matmul(q, k.transpose(-1, -2))
            att = att / (v.size(-1) ** 0.5)
            q_len, k_len = q.size(-2), k.size(-2)
            if causal_mask == "buffer":
                mask = self.bias[:, :, k_len - q_len:k_len, :k_len]
            else:
                mask = torch.tril(torch.ones(q_len, k_len, dtype=torch.bool,
                                             device=att.device))
                mask = mask.view(1, 1, q_len, k_len)
            mask_value = torch.tensor(torch.finfo(att.dtype).min, dtype=att.dtype)
            att = torch.where(mask, att, mask_value)
            att = nn.functional.softmax(att, dim=-1)
            return torch.matmul(att, v)

        def forward(self, x):
            q, k, v = self.c_attn(x).split(self.split_size, dim=2)
            q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
            y = self._merge_heads(self._attn(q, k, v))
            return self.c_proj(y)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))

    class GPT2MLP(nn.Module):
        def __init__(self, C):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(gelu_new(self.c_fc(x)))

    class GPT2Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = GPT2Attention(C, H)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp = GPT2MLP(C)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2LMHeadModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, HIDDEN)
            self.wpe = nn.Embedding(N_POSITIONS, HIDDEN)
            self.h = nn.ModuleList([GPT2Block(HIDDEN, HEADS) for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)
            self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

        def forward(self, input_ids):
            input_shape = input_ids.size()
            input_ids = input_ids.view(-1, input_shape[-1])
            position_ids = torch.arange(0, input_shape[-1], dtype=torch.long,
                                        device=input_ids.device)
            position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
            x = self.wte(input_ids) + self.wpe(position_ids)
            for block in self.h:
                x = block(x)
            x = self.ln_f(x)
            x = x.view(input_shape + (x.size(-1),))
            return self.lm_head(x)

    return GPT2LMHeadModel()


def main(argv=None):
    def extra(ap):
        ap.add_argument("--causal-mask", choices=["auto", "runtime", "buffer"],
                        default="auto",
                        help="runtime: torch.tril in forward (needs opset >= 14); "
                             "buffer: GPT-2's registered tril buffer, sliced; "
                             "auto (default): runtime if opset >= 14 else buffer")
    args = common.parse_args(__doc__, argv, extra)
    torch = common.setup_torch(args.seed)
    mask = args.causal_mask
    if mask == "auto":
        mask = "runtime" if args.opset >= 14 else "buffer"
    model = build(torch, mask)
    with torch.no_grad():  # GPT-2-like init: N(0, 0.02) weights, small biases
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
    common.randomize_norms(model, args.seed)
    r = common.rng(args.seed)
    inputs = {"input_ids": r.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)}
    notes = ["causal mask: %s" % {
        "runtime": "torch.tril(torch.ones(T, T)) in forward (Trilu)",
        "buffer": "registered torch.tril buffer of %d positions, sliced in forward"
                  % N_POSITIONS}[mask]]
    common.export_family("gpt2", model, inputs, ["logits"], args, notes=notes,
                         dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                       "logits": {0: "batch", 1: "seq"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
