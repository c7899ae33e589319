#!/usr/bin/python3
"""shoal-run against PyTorch eager on the CPU: GPT forward and training step.

    /usr/bin/python3 bench/cpu_vs_torch.py --bin build/bin [--out DIR]
        [--sizes small,medium,large] [--threads 1,all] [--repeats 3]
        [--train-variant 'SHOAL-COMPILE ARGS']

For each of three GPT sizes (the GPT of examples/gpt/make_model.py: MatMul +
Add linears, exact GELU, LayerNorm, softmax attention with an additive causal
mask, exported by torch.onnx.export), it compiles a forward plan and a
training plan (cross-entropy, AdamW with clip_norm 1.0, docs/Training.md)
once, then measures, alternating shoal and PyTorch in one run:
  forward        shoal-run PLAN --steps N --warmup W (its ms/step) against
                 the same model under torch.no_grad() on the same input;
  training step  shoal-run TRAIN --data tokens.npy (median step time of the
                 progress lines after the first two steps) against PyTorch's
                 forward + F.cross_entropy + backward + clip_grad_norm_ +
                 torch.optim.AdamW on the same token rows;
on one thread and on all the machine's cores. Each measurement is a fresh
process with OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS and
SHOAL_NUM_THREADS set to the thread count (and torch.set_num_threads), so
that neither side's BLAS uses more threads than the other's. Prints the
median time of each over --repeats runs and the speed ratio
torch_time / shoal_time (> 1: shoal is faster). It also checks that both
compute the same thing: the forward outputs (max abs difference) and the
first training step's loss.

PyTorch runs under --torch-python (default: this Python). The figures in
bench/README.md use PyPI's torch (MKL and oneDNN, OpenMP) in a virtual
environment:
    python3 -m venv ~/.cache/torch-venv
    ~/.cache/torch-venv/bin/pip install torch numpy
    /usr/bin/python3 bench/cpu_vs_torch.py --torch-python ~/.cache/torch-venv/bin/python
The export to ONNX always runs under this Python (torch.onnx.export of
torch 1.13 or later with its TorchScript exporter); the worker loads the
exported weights (weights.npz), so both sides start from the same numbers.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import numpy as np  # noqa: E402

# name: (vocab, hidden, heads, layers, batch, seq, forward steps, train steps)
SIZES = {
    "small": (2048, 128, 4, 2, 8, 64, 50, 20),
    "medium": (4096, 256, 8, 4, 8, 128, 10, 8),
    "large": (8192, 512, 8, 4, 4, 256, 4, 5),
}

TRAIN_YAML = """version: 1
loss: {kind: cross_entropy, output: logits, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-3, clip_norm: 1.0}
frozen: [mask]
"""


def build_model(size):
    import torch
    import make_model
    vocab, c, h, layers, b, t = SIZES[size][:6]
    torch.manual_seed(0)
    model = make_model.GPT(vocab=vocab, C=c, H=h, L=layers, B=b, T=t)
    make_model.init_weights(model, 0)
    return model.eval()


def export(size, out):
    """model.onnx, weights.npz, input_ids.npy and tokens.npy of one size."""
    import torch
    vocab, c, h, layers, b, t = SIZES[size][:6]
    model = build_model(size)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=(b, t), dtype=np.int64)
    tokens = rng.integers(0, vocab, size=(8 * b, t + 1), dtype=np.int64)
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    np.save(os.path.join(out, "inputs", "input_ids.npy"), ids)
    np.save(os.path.join(out, "tokens.npy"), tokens)
    np.savez(os.path.join(out, "weights.npz"),
             **{k: v.numpy() for k, v in model.state_dict().items()})
    with open(os.path.join(out, "train.yaml"), "w") as f:
        f.write(TRAIN_YAML)
    path = os.path.join(out, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(ids),), path, opset_version=17,
                          input_names=["input_ids"], output_names=["logits"],
                          do_constant_folding=True)


def thread_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "SHOAL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stdout))
    return p.stdout


def shoal_forward(bin_dir, out, threads, steps):
    o = run([os.path.join(bin_dir, "shoal-run"), os.path.join(out, "forward.plan"),
             "--inputs", os.path.join(out, "inputs"), "--outputs", os.path.join(out, "shoal-out"),
             "--steps", str(steps), "--warmup", "2"], thread_env(threads))
    m = re.search(r"([0-9.]+) ms/step", o)
    if not m:
        sys.exit("no step time in:\n" + o)
    return float(m.group(1))


def shoal_train(bin_dir, out, threads, steps, plan="train.plan"):
    """Median step time after the first two steps, and the first loss."""
    o = run([os.path.join(bin_dir, "shoal-run"), os.path.join(out, plan),
             "--data", os.path.join(out, "tokens.npy"), "--steps", str(steps + 2),
             "--log-every", "1"], thread_env(threads))
    lines = re.findall(r"step (\d+)/\d+ loss ([0-9.eE+-]+) time ([0-9.]+) ms", o)
    if len(lines) != steps + 2:
        sys.exit("expected %d progress lines in:\n%s" % (steps + 2, o))
    return statistics.median(float(t) for _, _, t in lines[2:]), float(lines[0][1])


def torch_forward(model, ids, steps):
    import torch
    x = torch.from_numpy(ids)
    with torch.no_grad():
        for _ in range(2):
            y = model(x)
        t0 = time.perf_counter()
        for _ in range(steps):
            y = model(x)
        dt = time.perf_counter() - t0
    return dt * 1e3 / steps, y.numpy()


def torch_train(model, tokens, batch, steps):
    """Median step time after the first two steps, and the first loss."""
    import torch
    import torch.nn.functional as F
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    times, first = [], None
    n = tokens.shape[0]
    for s in range(steps + 2):
        rows = tokens[[(s * batch + i) % n for i in range(batch)]]
        x = torch.from_numpy(rows[:, :-1].copy())
        y = torch.from_numpy(rows[:, 1:].copy())
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        if first is None:
            first = loss.item()
    return statistics.median(times[2:]) * 1e3, first


def torch_worker(args):
    """One PyTorch measurement in this process; prints a JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    model = build_model(args.size)
    w = np.load(os.path.join(args.dir, "weights.npz"))
    model.load_state_dict({k: torch.from_numpy(w[k]) for k in w.files})
    if args.worker == "forward":
        ids = np.load(os.path.join(args.dir, "inputs", "input_ids.npy"))
        ms, y = torch_forward(model, ids, SIZES[args.size][6])
        np.save(os.path.join(args.dir, "torch-logits.npy"), y)
        print(json.dumps({"ms": ms, "torch": torch.__version__}))
    else:
        tokens = np.load(os.path.join(args.dir, "tokens.npy"))
        ms, loss = torch_train(model, tokens, SIZES[args.size][4], SIZES[args.size][7])
        print(json.dumps({"ms": ms, "loss": loss, "torch": torch.__version__}))


def run_torch(python, kind, size, out, threads):
    o = run([python, os.path.abspath(__file__), "--worker", kind, "--size", size,
             "--dir", out, "--threads", str(threads)], thread_env(threads))
    return json.loads(o.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default="/tmp/shoal-cpu-vs-torch")
    ap.add_argument("--sizes", default="small,medium,large")
    ap.add_argument("--threads", default="1,all",
                    help="comma-separated thread counts; 'all' is every core")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=("forward", "train"), help="measure one of the two")
    ap.add_argument("--train-variant", metavar="ARGS",
                    help="also compile the training step with these extra "
                         "shoal-compile arguments (e.g. "
                         "--train-variant=--fuse-before-autodiff=gelu-erf,rms-norm) and "
                         "time it in the same loop (column 'variant ms')")
    ap.add_argument("--torch-python", default=sys.executable,
                    help="the Python whose torch is the reference (default: this one)")
    ap.add_argument("--worker", choices=("forward", "train"), help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.threads = int(args.threads)
        return torch_worker(args)
    cores = os.cpu_count()
    threads = sorted({cores if t == "all" else int(t) for t in args.threads.split(",")})
    sizes = args.sizes.split(",")
    for s in sizes:
        if s not in SIZES:
            sys.exit("unknown size %r (have %s)" % (s, ", ".join(SIZES)))
    kinds = [args.only] if args.only else ["forward", "train"]

    setups = {}
    for size in sizes:
        out = os.path.join(args.out, size)
        os.makedirs(out, exist_ok=True)
        export(size, out)
        compile_ = os.path.join(args.bin, "shoal-compile")
        onnx = os.path.join(out, "model.onnx")
        subprocess.run([compile_, onnx, "-o", os.path.join(out, "forward.plan")], check=True)
        subprocess.run([compile_, onnx, "--train", os.path.join(out, "train.yaml"),
                        "-o", os.path.join(out, "train.plan")], check=True)
        if args.train_variant:
            subprocess.run([compile_, onnx, "--train", os.path.join(out, "train.yaml"),
                            "-o", os.path.join(out, "variant.plan")]
                           + args.train_variant.split(), check=True)
        setups[size] = out

    res = {}
    checks = {}
    variant = {}
    version = "?"
    for _ in range(args.repeats):
        for size in sizes:
            out = setups[size]
            fsteps, tsteps = SIZES[size][6], SIZES[size][7]
            for th in threads:
                if "forward" in kinds:
                    s_ms = shoal_forward(args.bin, out, th, fsteps)
                    t = run_torch(args.torch_python, "forward", size, out, th)
                    version = t["torch"]
                    res.setdefault((size, "forward", th), ([], []))
                    res[(size, "forward", th)][0].append(s_ms)
                    res[(size, "forward", th)][1].append(t["ms"])
                    got = np.load(os.path.join(out, "shoal-out", "logits.npy"))
                    ref = np.load(os.path.join(out, "torch-logits.npy"))
                    checks[(size, "forward")] = float(np.abs(got - ref).max())
                if "train" in kinds:
                    s_ms, s_loss = shoal_train(args.bin, out, th, tsteps)
                    t = run_torch(args.torch_python, "train", size, out, th)
                    version = t["torch"]
                    res.setdefault((size, "train", th), ([], []))
                    res[(size, "train", th)][0].append(s_ms)
                    res[(size, "train", th)][1].append(t["ms"])
                    checks[(size, "train")] = abs(s_loss - t["loss"])
                    if args.train_variant:
                        v_ms, v_loss = shoal_train(args.bin, out, th, tsteps, "variant.plan")
                        variant.setdefault((size, th), []).append(v_ms)
                        checks[(size, "train variant")] = abs(v_loss - t["loss"])

    print("shoal-run vs PyTorch %s eager on %d cores, median of %d alternating runs"
          % (version, cores, args.repeats))
    print("%-8s %-22s %-8s %8s %12s %12s %8s" % ("size", "model", "step", "threads",
                                                 "shoal ms", "torch ms", "speed"))
    for size in sizes:
        vocab, c, h, layers, b, t = SIZES[size][:6]
        desc = "C%d L%d T%d B%d V%d" % (c, layers, t, b, vocab)
        for kind in kinds:
            for th in threads:
                s, p = res[(size, kind, th)]
                sm, pm = statistics.median(s), statistics.median(p)
                line = ("%-8s %-22s %-8s %8d %12.2f %12.2f %7.2fx"
                        % (size, desc, kind, th, sm, pm, pm / sm))
                if kind == "train" and variant:
                    vm = statistics.median(variant[(size, th)])
                    line += "   variant %.2f ms (%.2fx)" % (vm, pm / vm)
                print(line)
    print("agreement: " + ", ".join(
        "%s %s %s %.2e" % (size, kind, "max |logits diff|" if kind == "forward"
                            else "|first loss diff|", v)
        for (size, kind), v in sorted(checks.items())))
    bad = [k for k, v in checks.items() if not v < 1e-3]
    if bad:
        sys.exit("shoal and PyTorch disagree on %s" % bad)


if __name__ == "__main__":
    main()
