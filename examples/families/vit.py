#!/usr/bin/python3
"""Small vision transformer, exported to ONNX.

    /usr/bin/python3 examples/families/vit.py --out DIR [--seed S] [--opset N]

Config: 3x32x32 images, Conv2d patch embedding 4x4 stride 4 (64 patches),
hidden 64, 4 heads, MLP 128, 2 pre-norm encoder blocks, 10 classes, batch 2.
Written like timm's VisionTransformer:
  * patch embedding: Conv2d(3, 64, 4, stride 4) -> x.flatten(2).transpose(1, 2)
  * class token expanded to the batch (cls_token.expand(B, -1, -1)) and
    concatenated in front, learned position embedding added
  * blocks: x + attn(norm1(x)), x + mlp(norm2(x)); attention with a fused
    qkv Linear, reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4), unbind(0),
    (q * scale) @ k^T, softmax, @ v, transpose + reshape(B, N, C), proj;
    MLP with erf GELU
  * final LayerNorm, head Linear on the class token (x[:, 0]).

Input: pixel_values float32 [2, 3, 32, 32] (N(0, 1)).
Output: logits float32 [2, 10].
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402

IMAGE = 32
PATCH = 4
CHANNELS = 3
HIDDEN = 64
HEADS = 4
MLP = 128
LAYERS = 2
CLASSES = 10
BATCH = 2


def build(torch):
    nn = torch.nn

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(CHANNELS, HIDDEN, kernel_size=PATCH, stride=PATCH)

        def forward(self, x):
            x = self.proj(x)  # (B, C, H/4, W/4)
            return x.flatten(2).transpose(1, 2)  # (B, N, C)

    class Attention(nn.Module):
        def __init__(self, dim, num_heads):
            super().__init__()
            self.num_heads = num_heads
            self.head_dim = dim // num_heads
            self.scale = self.head_dim ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim)
            qkv = qkv.permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = attn.softmax(dim=-1)
            x = (attn @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj(x)

    class Mlp(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(HIDDEN, eps=1e-6)
            self.attn = Attention(HIDDEN, HEADS)
            self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-6)
            self.mlp = Mlp(HIDDEN, MLP)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            num_patches = (IMAGE // PATCH) ** 2
            self.patch_embed = PatchEmbed()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, HIDDEN))
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, HIDDEN))
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.norm = nn.LayerNorm(HIDDEN, eps=1e-6)
            self.head = nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            x = self.patch_embed(x)
            cls = self.cls_token.expand(x.shape[0], -1, -1)
            x = torch.cat((cls, x), dim=1)
            x = x + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            x = self.norm(x)
            return self.head(x[:, 0])

    return VisionTransformer()


def main(argv=None):
    args = common.parse_args(__doc__, argv)
    torch = common.setup_torch(args.seed)
    model = build(torch)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
            else:
                p.normal_(0.0, 0.02)
    common.randomize_norms(model, args.seed)
    r = common.rng(args.seed)
    pixels = r.standard_normal((BATCH, CHANNELS, IMAGE, IMAGE)).astype(np.float32)
    common.export_family("vit", model, {"pixel_values": pixels}, ["logits"], args,
                         dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
