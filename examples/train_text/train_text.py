#!/usr/bin/python3
"""A training job from start to finish: a GPT trained on real text.

    /usr/bin/python3 examples/train_text/train_text.py --bin build/bin \
        --work /tmp/train_text [--steps 300] [--world-size 4]

What a new user does, one command each (every command is printed):
  1. the text: the Python standard library's sources on this machine
     (every `.py` file of `sysconfig`'s stdlib folder, sorted; one file in
     20 held out for validation), turned into Megatron indexed datasets of
     byte tokens by scripts/preprocess_data.py (docs/Data.md);
  2. the model: a GPT in PyTorch (examples/gpt/make_model.py's blocks:
     vocabulary 256 bytes, 4 layers, hidden 128, 4 heads, 64 tokens, the LM
     head tied to the embedding, GPT-2's init), exported with the call
     docs/Importer.md gives for training;
  3. `shoal-compile --train` under examples/train_text/spec_dp2_pp2.yaml (two
     pipeline stages of two blocks, 1F1B over 2 micro-batches, each stage
     replicated twice: 4 ranks) and examples/train_text/train.yaml (AdamW,
     warmup and cosine decay, clipping, no decay on biases and norms);
  4. `mpirun -n 4 shoal-run ... --data train --eval-data valid --eval-every
     100 --total-steps 300 --metrics ... --save ... --resume auto`;
  5. the same training in PyTorch (same initial weights, the same samples in
     the same order as docs/Data.md defines them, torch.optim.AdamW with the
     same two parameter groups and schedule), its metrics in the same JSONL
     format;
  6. scripts/metrics.py plot of both runs to WORK/curves.png.
Then it compares: every step's loss, and every evaluation's loss, within
--rtol (1e-5) of PyTorch's. Exit status 0 when they match.
"""

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, os.path.join(REPO, "examples", "gpt"))
# docs/Data.md's sample order, as the test of the indexed datasets
# implements it independently of shoal-run's C++ (test/e2e).
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

VOCAB, C, H, L, T, B = 256, 128, 4, 4, 64, 8
EVAL_STEPS = 4
SEED = 0


def run(cmd, env=None, log=None):
    shown = [str(c) for c in cmd]
    files = [c for c in shown if c.endswith(".py") and os.path.isfile(c)]
    if len(files) > 6:  # preprocess_data.py's inputs
        first = shown.index(files[1])
        shown = shown[:first + 2] + ["... (%d files)" % (len(files) - 1)] + \
            shown[first + len(files) - 1:]
    print("$ " + " ".join(shown), flush=True)
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                         env=dict(os.environ, **(env or {})))
    if log:
        with open(log, "w") as f:
            f.write(res.stdout)
            f.write(res.stderr)
    if res.returncode != 0:
        sys.stdout.write(res.stdout[-4000:])
        sys.stdout.write(res.stderr[-4000:])
        raise SystemExit("FAIL: exit status %d" % res.returncode)
    return res.stdout


def corpus(work):
    """Training and validation files: the stdlib's sources, one in 20 held
    out."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    if len(files) < 40:
        raise SystemExit("FAIL: only %d .py files in %s" % (len(files),
                                                             sysconfig.get_paths()["stdlib"]))
    valid = files[::20]
    train = [f for f in files if f not in set(valid)]
    return train, valid


def build_model(torch):
    import make_model
    model = make_model.GPT(vocab=VOCAB, C=C, H=H, L=L, B=B, T=T)
    model.lm_head.weight = model.wte.weight  # tied, as GPT-2
    g = torch.Generator().manual_seed(1234 + SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02, generator=g)
            elif name.endswith("bias"):
                p.zero_()
            else:  # LayerNorm weights
                p.fill_(1.0)
    return model


def export(torch, model, path):
    """docs/Importer.md's export for training."""
    ids = torch.zeros((B, T), dtype=torch.int64)
    model.train()
    torch.onnx.export(model, (ids,), path, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"],
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)


def lr_at(cfg, t):
    """docs/Training.md's schedule (warmup, then cosine to min_lr)."""
    lr, warm, total, lo = cfg["lr"], cfg["warmup_steps"], cfg["total_steps"], cfg["min_lr"]
    s = t - 1
    if s < warm:
        return lr * (s + 1) / warm
    if s >= total:
        return lo
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * (s - warm) / (total - warm)))


def pytorch_run(torch, model, train_prefix, valid_prefix, cfg, steps, eval_every, out):
    """The same job in PyTorch; returns ({step: loss}, {step: eval loss})."""
    import torch.nn.functional as F
    import check_indexed_data as data

    def dataset(prefix, d=0):
        _, seqs, _ = data.read_megatron(prefix)
        return data.Dataset(seqs, T, 1234, d)

    train_ds, valid_ds = dataset(train_prefix), dataset(valid_prefix)

    def batch(ds, s):
        rows = np.array([ds.sample(s * B + i) for i in range(B)], dtype=np.int64)
        return torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])

    def loss_of(x, y):
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() > 1 and not name.endswith("bias") else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"])
    params = [p for p in model.parameters()]
    losses, evals = {}, {}
    with open(out, "w") as log:
        def evaluate(step):
            with torch.no_grad():
                total = sum(float(loss_of(*batch(valid_ds, k))) for k in range(EVAL_STEPS))
            evals[step] = total / EVAL_STEPS
            log.write(json.dumps({"step": step, "eval_loss": evals[step],
                                  "eval_ppl": math.exp(evals[step])}) + "\n")

        start = time.perf_counter()
        for s in range(steps):
            t0 = time.perf_counter()
            x, y = batch(train_ds, s)
            opt.zero_grad(set_to_none=True)
            loss = loss_of(x, y)
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(params, cfg["clip_norm"]))
            lr = lr_at(cfg, s + 1)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
            dt = time.perf_counter() - t0
            losses[s + 1] = float(loss)
            log.write(json.dumps({"step": s + 1, "loss": float(loss), "lr": lr,
                                  "grad_norm": norm, "step_ms": dt * 1e3,
                                  "tokens_per_s": B * T / dt,
                                  "elapsed_s": time.perf_counter() - start}) + "\n")
            if (s + 1) % eval_every == 0 or s + 1 == steps:
                evaluate(s + 1)
    return losses, evals


def read_jsonl(path):
    train, evals = {}, {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "eval_loss" in r:
                evals[r["step"]] = r["eval_loss"]
            else:
                train[r["step"]] = r["loss"]
    return train, evals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="BUILD/bin with shoal-compile and shoal-run")
    ap.add_argument("--work", required=True, help="work folder (emptied first)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args(argv)

    import torch
    import yaml
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "data"))
    py = sys.executable

    print("== 1. the text: Python's standard library sources, as byte tokens")
    train_files, valid_files = corpus(work)
    nbytes = sum(os.path.getsize(f) for f in train_files)
    print("%d training files (%.1f MB), %d validation files"
          % (len(train_files), nbytes / 1e6, len(valid_files)))
    for name, files in (("train", train_files), ("valid", valid_files)):
        run([py, os.path.join(REPO, "scripts", "preprocess_data.py"), "--input"] + files
            + ["--output-prefix", os.path.join(work, "data", name)])

    print("== 2. the model: a GPT in PyTorch, exported for training")
    model = build_model(torch)
    model_path = os.path.join(work, "model.onnx")
    export(torch, model, model_path)
    nparams = sum(p.numel() for p in model.parameters())
    print("GPT: %d parameters (vocabulary %d, %d layers, hidden %d, %d heads, %d tokens, "
          "batch %d), %s" % (nparams, VOCAB, L, C, H, T, B, model_path))

    print("== 3. compile for %d ranks (DP2 x PP2)" % args.world_size)
    plan = os.path.join(work, "model.plan")
    config = os.path.join(HERE, "train.yaml")
    out = run([os.path.join(args.bin, "shoal-compile"), model_path,
               "--annotate", os.path.join(HERE, "spec_dp2_pp2.yaml"),
               "--world-size", args.world_size, "--train", config, "-o", plan])
    print("\n".join(out.splitlines()[-3:]))

    print("== 4. train with shoal-run")
    metrics = os.path.join(work, "shoal.jsonl")
    cmd = [os.path.join(args.bin, "shoal-run"), plan,
           "--data", os.path.join(work, "data", "train"),
           "--eval-data", os.path.join(work, "data", "valid"),
           "--eval-every", args.eval_every, "--eval-steps", EVAL_STEPS,
           "--total-steps", args.steps, "--metrics", metrics,
           "--save", os.path.join(work, "ckpt"), "--save-every", args.eval_every,
           "--keep-last", 2, "--resume", "auto"]
    if args.world_size > 1:
        cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np",
               args.world_size] + cmd
    out = run(cmd, env={"OMPI_MCA_mpi_yield_when_idle": "1"},
              log=os.path.join(work, "shoal.log"))
    lines = out.splitlines()
    print("\n".join(lines[:3] + ["..."] + lines[-5:]))

    print("== 5. the same job in PyTorch")
    with open(config) as f:
        cfg = yaml.safe_load(f)["optimizer"]
    reference = os.path.join(work, "pytorch.jsonl")
    ref_losses, ref_evals = pytorch_run(
        torch, model, os.path.join(work, "data", "train"),
        os.path.join(work, "data", "valid"), cfg, args.steps, args.eval_every, reference)
    print("PyTorch: first loss %.6f, last loss %.6f, eval %s"
          % (ref_losses[1], ref_losses[args.steps],
             ", ".join("%d: %.6f" % kv for kv in sorted(ref_evals.items()))))

    print("== 6. curves")
    run([py, os.path.join(REPO, "scripts", "metrics.py"), "plot", metrics, reference,
         "--label", "shoal (%d ranks)" % args.world_size, "--label", "PyTorch",
         "--title", "GPT on the Python standard library, byte tokens",
         "-o", os.path.join(work, "curves.png")])

    losses, evals = read_jsonl(metrics)
    ok = True
    worst = (0.0, None)
    for s in range(1, args.steps + 1):
        if s not in losses:
            print("FAIL: no loss of step %d in %s" % (s, metrics))
            ok = False
            continue
        err = abs(losses[s] - ref_losses[s]) / abs(ref_losses[s])
        worst = max(worst, (err, "step %d" % s))
        if err > args.rtol:
            print("FAIL: step %d: loss %.7f, PyTorch %.7f (error %.2e > %.0e)"
                  % (s, losses[s], ref_losses[s], err, args.rtol))
            ok = False
    if sorted(evals) != sorted(ref_evals):
        print("FAIL: evaluations after steps %s, PyTorch's after %s"
              % (sorted(evals), sorted(ref_evals)))
        ok = False
    for s in sorted(set(evals) & set(ref_evals)):
        err = abs(evals[s] - ref_evals[s]) / abs(ref_evals[s])
        worst = max(worst, (err, "eval %d" % s))
        print("eval step %d: shoal %.6f, PyTorch %.6f (error %.2e)"
              % (s, evals[s], ref_evals[s], err))
        if err > args.rtol:
            ok = False
    print("%s: %d steps, losses and evaluations within %.0e of PyTorch (largest error "
          "%.2e, %s); curves in %s"
          % ("PASS" if ok else "FAIL", args.steps, args.rtol, worst[0], worst[1],
             os.path.join(work, "curves.png")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
