#!/usr/bin/python3
"""The runtime engine on the CPU: two shoal-run builds side by side.

    python3 bench/engine_cpu.py --before OLD/bin --after build/bin --out DIR

runs the GPT example (examples/gpt: forward, and one AdamW training step per
step) with the shoal-run of `--before` and of `--after`, alternating, on the
same plans (compiled once with `--compiler`, by default the `--after`
shoal-compile), and prints the median step time and the peak resident set of
each. It is how issue 13's "no slowdown on the CPU" was checked: build the
runtime of the older commit alone (`cmake -S OLD -B OLD/build-rt
-DSHOAL_BUILD_COMPILER=OFF -DSHOAL_BUILD_TESTS=OFF && ninja -C OLD/build-rt
shoal-run`) and pass its bin folder as `--before`.

Run it with a Python that has torch (the model generator needs it), e.g. the
test virtual environment's.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN_YAML = """version: 1
loss: {kind: cross_entropy, output: logits, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-3, clip_norm: 1.0}
frozen: [mask]
"""


def timed(cmd):
    """Runs cmd under wait4; returns (stdout, peak RSS MiB)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execv(cmd[0], cmd)
    os.close(w)
    chunks = []
    with os.fdopen(r) as f:
        chunks.append(f.read())
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + "".join(chunks))
    return "".join(chunks), usage.ru_maxrss / 1024.0


def forward_ms(out):
    m = re.search(r"([0-9.]+) ms/step", out)
    if not m:
        sys.exit("no step time in:\n" + out)
    return float(m.group(1))


def train_ms(out, steps):
    """Mean training step: the run's wall time (first step included) / steps."""
    m = re.search(r"run ([0-9.]+) s\)", out)
    if not m:
        sys.exit("no run time in:\n" + out)
    return float(m.group(1)) * 1e3 / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="bin folder of the older shoal-run")
    ap.add_argument("--after", required=True, help="bin folder of the newer shoal-run")
    ap.add_argument("--compiler", help="bin folder of shoal-compile (default: --after)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    compiler = os.path.join(args.compiler or args.after, "shoal-compile")
    os.makedirs(args.out, exist_ok=True)
    gpt = os.path.join(args.out, "gpt")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples/gpt/make_model.py"),
                    "--out", gpt], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(args.out, "train.yaml"), "w") as f:
        f.write(TRAIN_YAML)
    fwd = os.path.join(args.out, "forward.plan")
    train = os.path.join(args.out, "train.plan")
    model = os.path.join(gpt, "model.onnx")
    subprocess.run([compiler, model, "-o", fwd], check=True)
    subprocess.run([compiler, model, "--train", os.path.join(args.out, "train.yaml"),
                    "-o", train], check=True)
    ids = np.load(os.path.join(gpt, "inputs", "input_ids.npy"))
    b, t = ids.shape
    rng = np.random.default_rng(0)
    tokens = os.path.join(args.out, "tokens.npy")
    np.save(tokens, rng.integers(0, 96, size=(64 * b, t + 1)).astype(np.int64))

    steps = args.steps
    results = {k: {"fwd": [], "train": [], "fwd_rss": [], "train_rss": []}
               for k in ("before", "after")}
    for _ in range(args.repeats):
        for which in ("before", "after"):
            run_bin = os.path.join(getattr(args, which), "shoal-run")
            out, rss = timed([run_bin, fwd, "--inputs", os.path.join(gpt, "inputs"),
                              "--outputs", os.path.join(args.out, "out-" + which),
                              "--steps", str(steps), "--warmup", "5"])
            results[which]["fwd"].append(forward_ms(out))
            results[which]["fwd_rss"].append(rss)
            out, rss = timed([run_bin, train, "--data", tokens, "--steps", str(steps),
                              "--log-every", str(steps)])
            results[which]["train"].append(train_ms(out, steps))
            results[which]["train_rss"].append(rss)

    print("GPT example (examples/gpt, batch %d x seq %d), %d steps, median of %d runs"
          % (b, t, steps, args.repeats))
    print("%-24s %12s %12s %8s" % ("", "before", "after", "after/before"))
    for key, label, unit in (("fwd", "forward step", "ms"), ("train", "training step", "ms"),
                             ("fwd_rss", "forward peak RSS", "MiB"),
                             ("train_rss", "training peak RSS", "MiB")):
        a = statistics.median(results["before"][key])
        c = statistics.median(results["after"][key])
        print("%-24s %9.3f %s %9.3f %s %8.3f" % (label, a, unit.ljust(3), c, unit.ljust(3), c / a))


if __name__ == "__main__":
    main()
