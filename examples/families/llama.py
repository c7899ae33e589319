#!/usr/bin/python3
"""LLaMA-style decoder (small), exported to ONNX.

    /usr/bin/python3 examples/families/llama.py --out DIR [--seed S] [--opset N]

Config: vocab 100, hidden 64, 4 query heads and 2 key/value heads (grouped-
query attention, head dim 16), MLP 128, 2 layers, batch 2, seq 16, no biases.
Written like Hugging Face's modeling_llama (without cache):
  * RMSNorm: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight,
    computed in float32 (.to(float32) / .to(input dtype) -> Cast)
  * rotary embeddings: inv_freq buffer; in forward t = torch.arange(seq_len),
    freqs = outer(t, inv_freq) (einsum), emb = cat(freqs, freqs), cos/sin,
    indexed by position_ids = arange(seq_len); applied with rotate_half
    (x[..., :d/2], x[..., d/2:], cat(-x2, x1))
  * grouped-query attention: k/v heads repeated with repeat_kv
    (x[:, :, None].expand(B, KVH, n_rep, T, D).reshape(B, KVH*n_rep, T, D))
  * causal mask built in forward as in _make_causal_mask: torch.full of
    finfo.min, masked_fill(arange < (arange + 1).view(T, 1), 0), expanded to
    (B, 1, T, T) and added to the scores; softmax in float32
  * SiLU-gated MLP: down(silu(gate(x)) * up(x)); untied lm_head.

Inputs: input_ids int64 [2, 16] in [0, 100). Output: logits float32 [2, 16, 100].
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

VOCAB = 100
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
LAYERS = 2
BATCH = 2
SEQ = 16
ROPE_THETA = 10000.0
EPS = 1e-6


def build(torch):
    nn = torch.nn
    F = nn.functional

    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=EPS):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self, dim, base=ROPE_THETA):
            super().__init__()
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, x, seq_len):
            t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
            freqs = torch.einsum("i,j->ij", t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
        cos = cos[position_ids].unsqueeze(1)  # (B, 1, T, D)
        sin = sin[position_ids].unsqueeze(1)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

    def repeat_kv(hidden_states, n_rep):
        batch, num_kv_heads, slen, head_dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(
            batch, num_kv_heads, n_rep, slen, head_dim)
        return hidden_states.reshape(batch, num_kv_heads * n_rep, slen, head_dim)

    class LlamaAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads = HEADS
            self.head_dim = HIDDEN // HEADS
            self.num_key_value_heads = KV_HEADS
            self.num_key_value_groups = HEADS // KV_HEADS
            self.q_proj = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=False)
            self.k_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
            self.v_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
            self.o_proj = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=False)
            self.rotary_emb = LlamaRotaryEmbedding(self.head_dim)

        def forward(self, hidden_states, attention_mask, position_ids):
            bsz, q_len, _ = hidden_states.size()
            q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)
            k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                                self.head_dim)
            v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                                self.head_dim)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            kv_seq_len = k.shape[-2]
            cos, sin = self.rotary_emb(v, seq_len=kv_seq_len)
            q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)
            k = repeat_kv(k, self.num_key_value_groups)
            v = repeat_kv(v, self.num_key_value_groups)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
            att = att + attention_mask
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(att, v)
            out = out.transpose(1, 2).contiguous().reshape(bsz, q_len, HIDDEN)
            return self.o_proj(out)

    class LlamaMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
            self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
            self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = LlamaAttention()
            self.mlp = LlamaMLP()
            self.input_layernorm = LlamaRMSNorm(HIDDEN)
            self.post_attention_layernorm = LlamaRMSNorm(HIDDEN)

        def forward(self, x, attention_mask, position_ids):
            x = x + self.self_attn(self.input_layernorm(x), attention_mask, position_ids)
            return x + self.mlp(self.post_attention_layernorm(x))

    def make_causal_mask(input_ids_shape, dtype, device):
        bsz, tgt_len = input_ids_shape
        mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
        mask_cond = torch.arange(mask.size(-1), device=device)
        mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
        mask = mask.to(dtype)
        return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)

    class LlamaForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
            self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
            self.norm = LlamaRMSNorm(HIDDEN)
            self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

        def forward(self, input_ids):
            batch_size, seq_length = input_ids.shape
            position_ids = torch.arange(0, seq_length, dtype=torch.long,
                                        device=input_ids.device)
            position_ids = position_ids.unsqueeze(0).view(-1, seq_length)
            x = self.embed_tokens(input_ids)
            mask = make_causal_mask((batch_size, seq_length), x.dtype, x.device)
            for layer in self.layers:
                x = layer(x, mask, position_ids)
            return self.lm_head(self.norm(x))

    return LlamaForCausalLM()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    common.randomize_norms(model, args.seed)
    r = common.rng(args.seed)
    inputs = {"input_ids": r.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)}
    common.export_family("llama", model, inputs, ["logits"], args,
                         dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                       "logits": {0: "batch", 1: "seq"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
