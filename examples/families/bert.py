#!/usr/bin/python3
"""BERT-style encoder (small), exported to ONNX.

    /usr/bin/python3 examples/families/bert.py --out DIR [--seed S] [--opset N]

Config: vocab 100, 64 positions, 2 token types, hidden 64, 4 heads, 2 layers,
intermediate 128, batch 2, seq 16. Written like Hugging Face's modeling_bert
(without dropout/cache):
  * word + position + token-type embeddings; position ids sliced from a
    registered arange buffer by the input length, then LayerNorm
  * attention_mask (batch, seq) of 0/1 turned into an additive mask:
    mask[:, None, None, :].to(float), (1.0 - mask) * -10000.0, broadcast over
    heads and query positions
  * separate q/k/v Linears, heads via x.size()[:-1] + (H, D) and view,
    scores / sqrt(D) + mask, softmax, post-LayerNorm residual blocks
  * erf GELU (nn.GELU) in the intermediate layer
  * pooler: Linear + tanh on the first token (hidden_states[:, 0])

Inputs: input_ids int64 [2, 16] in [0, 100), token_type_ids int64 [2, 16] of
0/1 (second segment from a random split point), attention_mask int64 [2, 16]
of 0/1 (row 0 all ones, row 1 padded: its last 5 positions are 0).
Outputs: last_hidden_state float32 [2, 16, 64], pooler_output float32 [2, 64].
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

VOCAB = 100
MAX_POSITIONS = 64
TYPE_VOCAB = 2
HIDDEN = 64
HEADS = 4
LAYERS = 2
INTERMEDIATE = 128
BATCH = 2
SEQ = 16
PAD = 5  # padded positions at the end of batch row 1


def build(torch):
    nn = torch.nn

    class BertEmbeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
            self.position_embeddings = nn.Embedding(MAX_POSITIONS, HIDDEN)
            self.token_type_embeddings = nn.Embedding(TYPE_VOCAB, HIDDEN)
            self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.register_buffer("position_ids",
                                 torch.arange(MAX_POSITIONS).expand((1, -1)),
                                 persistent=False)

        def forward(self, input_ids, token_type_ids):
            seq_length = input_ids.size()[1]
            position_ids = self.position_ids[:, 0:seq_length]
            emb = self.word_embeddings(input_ids)
            emb = emb + self.token_type_embeddings(token_type_ids)
            emb = emb + self.position_embeddings(position_ids)
            return self.LayerNorm(emb)

    class BertSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_attention_heads = HEADS
            self.attention_head_size = HIDDEN // HEADS
            self.all_head_size = HIDDEN
            self.query = nn.Linear(HIDDEN, HIDDEN)
            self.key = nn.Linear(HIDDEN, HIDDEN)
            self.value = nn.Linear(HIDDEN, HIDDEN)

        def transpose_for_scores(self, x):
            new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            return x.view(new_shape).permute(0, 2, 1, 3)

        def forward(self, hidden_states, attention_mask):
            q = self.transpose_for_scores(self.query(hidden_states))
            k = self.transpose_for_scores(self.key(hidden_states))
            v = self.transpose_for_scores(self.value(hidden_states))
            scores = torch.matmul(q, k.transpose(-1, -2))
            scores = scores / math.sqrt(self.attention_head_size)
            scores = scores + attention_mask
            probs = nn.functional.softmax(scores, dim=-1)
            ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
            new_shape = ctx.size()[:-2] + (self.all_head_size,)
            return ctx.view(new_shape)

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = BertSelfAttention()
            self.attn_out = nn.Linear(HIDDEN, HIDDEN)
            self.attn_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
            self.act = nn.GELU()  # erf GELU
            self.output = nn.Linear(INTERMEDIATE, HIDDEN)
            self.out_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

        def forward(self, x, attention_mask):
            a = self.attention(x, attention_mask)
            x = self.attn_norm(self.attn_out(a) + x)
            h = self.output(self.act(self.intermediate(x)))
            return self.out_norm(h + x)

    class BertPooler(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(HIDDEN, HIDDEN)
            self.activation = nn.Tanh()

        def forward(self, hidden_states):
            return self.activation(self.dense(hidden_states[:, 0]))

    class BertModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = BertEmbeddings()
            self.layer = nn.ModuleList([BertLayer() for _ in range(LAYERS)])
            self.pooler = BertPooler()

        def get_extended_attention_mask(self, attention_mask, dtype):
            ext = attention_mask[:, None, None, :]
            ext = ext.to(dtype=dtype)
            return (1.0 - ext) * -10000.0

        def forward(self, input_ids, token_type_ids, attention_mask):
            x = self.embeddings(input_ids, token_type_ids)
            ext = self.get_extended_attention_mask(attention_mask, x.dtype)
            for layer in self.layer:
                x = layer(x, ext)
            return x, self.pooler(x)

    return BertModel()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
    common.randomize_norms(model, args.seed)

    r = common.rng(args.seed)
    input_ids = r.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)
    token_type_ids = np.zeros((BATCH, SEQ), dtype=np.int64)
    for b in range(BATCH):
        token_type_ids[b, int(r.integers(4, SEQ - 4)):] = 1
    attention_mask = np.ones((BATCH, SEQ), dtype=np.int64)
    attention_mask[1, SEQ - PAD:] = 0
    inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids,
              "attention_mask": attention_mask}
    dyn = {k: {0: "batch", 1: "seq"} for k in inputs}
    dyn["last_hidden_state"] = {0: "batch", 1: "seq"}
    dyn["pooler_output"] = {0: "batch"}
    common.export_family("bert", model, inputs, ["last_hidden_state", "pooler_output"],
                         args, dynamic_axes=dyn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
