#!/usr/bin/python3
"""A layer applied twice (ALBERT's shared weights) under TP, against PyTorch.

    /usr/bin/python3 test/e2e/shared_layer_e2e.py --bin BUILD/bin --work DIR \
        [--spec SPEC --world-size N] [--steps K]

(a) builds a small model: an input projection nn.Linear(C_IN, C) (which a
    split scope column-splits), ONE block (LayerNorm, Linear(C, 4C), GELU,
    Linear(4C, C), with a residual) applied twice, and a head Linear(C, C_OUT);
    every parameter perturbed (LayerNorm biases not zero), MSE loss;
(b) exports it in training mode (training=TRAINING, do_constant_folding=False,
    opset 17), shoal-compile --train (AdamW lr --lr, eps 1e-8, no weight
    decay) under --spec (examples/gpt/spec_tp.yaml: split 2 over
    everything) on --world-size ranks, and shoal-run K steps under mpirun
    with the same batch every step and --save;
(c) PyTorch's K steps of the model itself (torch.optim.AdamW): every step's
    loss within --rtol (1e-5), and every parameter, and its AdamW moments
    (the checkpoint's adam.m/<name>, adam.v/<name>) within --rtol of
    PyTorch's (the largest difference relative to the tensor's largest
    magnitude).

The block's weights are read by two layers. Before the fix of issue 49
("In-place updates keep their state with their weight"), TP2 left the
LayerNorm bias whole while its moments were stored split over tp: the plan
all-gathered the moments into temporaries and shoal.adamw updated those, so
the stored moments stayed zero; the losses matched for 2 steps and were off
by ~1e-4 from step 3, and the checkpoint's adam.m/adam.v of block.ln.bias
were all zero. Exit status 0 on a match, 1 otherwise.
"""

import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
import common  # noqa: E402

import numpy as np  # noqa: E402

STEP_RE = re.compile(r"^(?:\[rank 0\] )?step\s+(\d+)/(\d+)\s+loss\s+(\S+)", re.M)
BATCH, SEQ, C_IN, C, C_OUT = 4, 8, 16, 32, 8


def build_model():
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(C)
            self.fc1 = nn.Linear(C, 4 * C)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * C, C)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.ln(x))))

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(C_IN, C)
            self.block = Block()
            self.head = nn.Linear(C, C_OUT)

        def forward(self, x):
            h = self.inp(x)
            h = self.block(h)  # layer 1
            h = self.block(h)  # layer 2: the same weights
            return self.head(h)

    torch.manual_seed(0)
    model = Shared()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--spec", default=os.path.join(REPO, "examples", "gpt", "spec_tp.yaml"))
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from run_train_e2e import Failure, read_checkpoint

    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "inputs"))
    compile_ = common.find_tool(a.bin, "shoal-compile")
    run = common.find_tool(a.bin, "shoal-run")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SEQ, C_IN)).astype(np.float32)
    y = rng.standard_normal((BATCH, SEQ, C_OUT)).astype(np.float32)
    np.save(os.path.join(work, "inputs", "x.npy"), x)
    np.save(os.path.join(work, "inputs", "labels.npy"), y)

    model = build_model()
    model.train()
    onnx_path = os.path.join(work, "model.onnx")
    torch.onnx.export(model, (torch.from_numpy(x),), onnx_path, opset_version=17,
                      input_names=["x"], output_names=["out"], do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    config = os.path.join(work, "train.yaml")
    with open(config, "w") as f:
        f.write("version: 1\nloss: {kind: mse, output: out, labels: labels}\n"
                "optimizer: {kind: adamw, lr: %r, eps: 1.0e-8, weight_decay: 0.0}\n" % a.lr)

    # (c) PyTorch's steps.
    ref_model = build_model()
    opt = torch.optim.AdamW(ref_model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    ref = []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(ref_model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        ref.append(float(loss))

    # (b) shoal.
    plan = os.path.join(work, "model.plan")
    mlir = os.path.join(work, "model.mlir")
    res = common.run_cmd([compile_, onnx_path, "--annotate", a.spec, "--world-size",
                          a.world_size, "--train", config, "--emit-mlir", mlir, "-o", plan],
                         timeout=a.timeout)
    sys.stdout.write(res.stderr or "")
    ckpt = os.path.join(work, "ckpt")
    argv_run = [run, plan, "--steps", a.steps, "--inputs", os.path.join(work, "inputs"),
                "--save", ckpt]
    env = None
    if a.world_size > 1:
        argv_run = common.mpirun_cmd(a.mpirun, a.world_size, argv_run)
        env = common.MPI_ENV
    res = common.run_cmd(argv_run, env_extra=env, timeout=a.timeout)

    failures = []
    got = [(int(m.group(1)), float(m.group(3))) for m in STEP_RE.finditer(res.stdout)]
    if len(got) != a.steps:
        failures.append("%d progress lines, expected %d" % (len(got), a.steps))
    worst = 0.0
    for (s, v), want in zip(got, ref):
        err = abs(v - want) / max(abs(want), 1e-12)
        worst = max(worst, err)
        print("  step %d: loss %.7f, PyTorch %.7f, error %.2e" % (s, v, want, err))
        if err > a.rtol:
            failures.append("step %d: loss %.7f vs PyTorch %.7f (error %.2e > %.0e)"
                            % (s, v, want, err, a.rtol))
    print("largest loss error %.2e over %d steps" % (worst, len(got)))

    # The parameters and the AdamW moments against PyTorch's.
    try:
        _, saved = read_checkpoint(ckpt, a.steps, a.world_size)
    except Failure as e:
        saved = {}
        failures.append("checkpoint: %s" % e)
    worst = {"param": 0.0, "adam.m": 0.0, "adam.v": 0.0}
    for name, p in ref_model.named_parameters():
        st = opt.state[p]
        for kind, key, want in (("param", name, p.detach()),
                                ("adam.m", "adam.m/" + name, st["exp_avg"]),
                                ("adam.v", "adam.v/" + name, st["exp_avg_sq"])):
            want = want.numpy().astype(np.float64)
            if key not in saved:
                failures.append("%s: not in the checkpoint" % key)
                continue
            have = saved[key].astype(np.float64)
            if have.shape != want.shape:
                failures.append("%s: shape %s, PyTorch %s" % (key, have.shape, want.shape))
                continue
            err = np.max(np.abs(have - want)) / max(np.max(np.abs(want)), 1e-30)
            worst[kind] = max(worst[kind], err)
            if err > a.rtol:
                failures.append("%s differs from PyTorch's: %.2e (largest |value| %.2e, "
                                "shoal's %.2e)" % (key, err, np.max(np.abs(want)),
                                                   np.max(np.abs(have))))
    print("largest error against PyTorch: parameters %.2e, adam.m %.2e, adam.v %.2e"
          % (worst["param"], worst["adam.m"], worst["adam.v"]))

    for f in failures:
        print("FAIL: " + f)
    print("PASS" if not failures else "FAILED (%d)" % len(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
