#!/usr/bin/python3
"""The GPT example annotated, compiled and trained from Python: two
pipeline stages, each split over 2 devices, under DP2 x PP2 x TP2.

    PYTHONPATH=python /usr/bin/python3 examples/python/train_gpt.py --work DIR \
        [--world-size 8] [--steps 5]

The model is examples/gpt/make_model.py's (its Block, init_weights and
sizes); the lines between the two markers are what a user writes
(docs/Python.md puts them beside the EPL code they mirror).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "gpt"), os.path.join(HERE, "..", "..", "python")]
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import make_model  # noqa: E402
from make_model import BATCH, HEADS, HIDDEN, SEQ, VOCAB, Block, init_weights  # noqa: E402

import shoal  # noqa: E402


class GPT(make_model.GPT):
    """make_model.GPT (its forward) built with the two primitives."""

    def __init__(self, B=BATCH, T=SEQ, C=HIDDEN, H=HEADS, V=VOCAB):
        nn.Module.__init__(self)
        with shoal.split(2, name="stage0"):
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Parameter(torch.randn(T, C) * 0.02)
            first = Block(B, T, C, H)
        with shoal.split(2, name="stage1"):
            second = Block(B, T, C, H)
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)
        self.h = nn.ModuleList([first, second])
        self.register_buffer("mask", torch.triu(torch.full((T, T), -1e9), diagonal=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    tokens = os.path.join(args.work, "tokens.npy")
    rng = np.random.default_rng(args.seed)
    np.save(tokens, rng.integers(0, VOCAB, size=(4 * BATCH, SEQ + 1), dtype=np.int64))

    # --- what a user writes ---
    shoal.config({"pipeline.num_micro_batch": 2},
                 loss={"kind": "cross_entropy", "output": "logits", "labels": "labels"},
                 optimizer={"kind": "adamw", "lr": 1e-3, "weight_decay": 0.0})
    model = GPT()
    init_weights(model, args.seed)
    ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    onnx_path = shoal.export(model, (ids,), os.path.join(args.work, "gpt.onnx"),
                             input_names=["input_ids"], output_names=["logits"])
    plan = shoal.compile(onnx_path, world_size=args.world_size)
    print(plan.report)
    run = shoal.train(plan, steps=args.steps, data=tokens,
                      export_safetensors=os.path.join(args.work, "trained"))
    shoal.load_weights(model, os.path.join(args.work, "trained"))
    # ---
    print("losses", " ".join("%.6f" % l for l in run.losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
