#!/usr/bin/python3
"""Whale-style heterogeneous scenarios: hardware-aware plan vs even split.

    /usr/bin/python3 bench/hetero_balance.py --bin build/bin [--out DIR] [--check]

A GPT-2 medium sized model (24 layers, hidden 1024, 16 heads, sequence
1024, vocabulary 50304, batch 64; fp16 products, shapes only, written by
gpt_mlir.py) on mixed clusters; training steps in fp16 mixed precision with
AdamW. For each scenario shoal-plan predicts the layout as annotated (even
batch shares, the user's stage boundaries, Megatron's pipeline-major ranks)
and its hardware-aware version (batch shares by speed where they are
compiled, stage boundaries by speed, stages placed by memory), and prints
both step times and the predicted speedup. Then it compiles both plans
(`shoal-compile MODEL.mlir`, a shapes-only model: the plans are for
shoal-sim, not shoal-run) and replays each with shoal-sim: the same two
step times and speedup from the compiled plans.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CLUSTERS = {
    "8 V100 + 8 T4": """version: 1
nodes:
  - {devices: {type: V100-32GB, count: 8}}
  - {devices: {type: T4, count: 8}}
links:
  inter_node: {bandwidth_Gbps: 100, latency_us: 25, transport: tcp}
""",
    "8 V100 + 8 P100": """version: 1
nodes:
  - {devices: {type: V100-32GB, count: 8}}
  - {devices: {type: P100, count: 8}}
links:
  inter_node: {bandwidth_Gbps: 100, latency_us: 25, transport: tcp}
""",
    "2 x 8 A100 + 2 x 8 V100": """version: 1
nodes:
  - {count: 2, devices: {type: A100-80GB, count: 8}}
  - {count: 2, devices: {type: V100-16GB, count: 8}}
links:
  inter_node: {bandwidth_Gbps: 200, latency_us: 5, transport: rdma}
""",
}

DP = """version: 1
scopes:
  - {replicate: 1, name: all, nodes: ["*"]}
"""

PP2 = """version: 1
pipeline: {num_micro_batch: %d, schedule: 1f1b}
scopes:
  - {replicate: 1, name: s0, nodes: ["/wte/*", "/Add", "/h.[0-9]/*", "/h.1[01]/*"]}
  - {replicate: 1, name: s1, nodes: ["/h.1[2-9]/*", "/h.2[0-3]/*", "/ln_f/*", "/lm_head/*"]}
"""

SPLIT8_PP2 = """version: 1
pipeline: {num_micro_batch: %d, schedule: 1f1b}
scopes:
  - {split: 8, name: s0, nodes: ["/wte/*", "/Add", "/h.[0-9]/*", "/h.1[01]/*"]}
  - {split: 8, name: s1, nodes: ["/h.1[2-9]/*", "/h.2[0-3]/*", "/ln_f/*", "/lm_head/*"]}
"""

TRAIN = """version: 1
loss: {kind: cross_entropy, output: logits, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-4}
precision: fp16
frozen: [mask]
"""

SCENARIOS = [
    ("data parallel", "8 V100 + 8 T4", DP, "forward"),
    ("data parallel", "8 V100 + 8 T4", DP, "train"),
    ("data parallel", "8 V100 + 8 P100", DP, "train"),
    ("PP2 x DP8, 1F1B", "8 V100 + 8 T4", PP2 % 8, "train"),
    # 16 replicas of 4 micro-batches: the batch of 64.
    ("PP2 x DP16, 1F1B", "2 x 8 A100 + 2 x 8 V100", PP2 % 4, "train"),
    ("PP2 x TP8 x DP2, 1F1B", "2 x 8 A100 + 2 x 8 V100", SPLIT8_PP2 % 8, "train"),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every scenario compiles and shoal-sim's speedup "
                         "is within 10%% of the planner's (ctest bench.hetero_balance)")
    args = ap.parse_args(argv)
    work = args.out or tempfile.mkdtemp(prefix="shoal-hetero-")
    os.makedirs(work, exist_ok=True)
    models = {}
    for dtype in ("f16", "f32"):
        models[dtype] = os.path.join(work, "gpt_medium_%s.mlir" % dtype)
        subprocess.run([sys.executable, os.path.join(HERE, "gpt_mlir.py"), "--layers", "24",
                        "--hidden", "1024", "--heads", "16", "--seq", "1024",
                        "--vocab", "50304", "--batch", "64", "--dtype", dtype,
                        "-o", models[dtype]], check=True, capture_output=True)
    train = os.path.join(work, "train_fp16.yaml")
    with open(train, "w") as f:
        f.write(TRAIN)
    compile_ = os.path.join(args.bin, "shoal-compile")
    sim = os.path.join(args.bin, "shoal-sim")

    def simulate(plan, cluster):
        res = subprocess.run([sim, plan, "--cluster", cluster], capture_output=True, text=True)
        m = re.search(r"predicted step ([0-9.]+) ms", res.stdout)
        return float(m.group(1)) if m else None

    print("| scenario | cluster | step | planner: as annotated (ms) | hardware-aware (ms) "
          "| speedup | shoal-sim: as annotated (ms) | hardware-aware (ms) | speedup "
          "| hardware-aware layout |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    bad = 0
    for i, (name, cluster_name, spec_text, step) in enumerate(SCENARIOS):
        cluster = os.path.join(work, "cluster%d.yaml" % i)
        spec = os.path.join(work, "spec%d.yaml" % i)
        with open(cluster, "w") as f:
            f.write(CLUSTERS[cluster_name])
        with open(spec, "w") as f:
            f.write(spec_text)
        model = models["f32" if step == "train" else "f16"]
        extra = ["--train", train] if step == "train" else []
        aware = os.path.join(work, "aware%d.plan" % i)
        even = os.path.join(work, "even%d.plan" % i)
        res = subprocess.run([compile_, model, "--annotate", spec, "--cluster", cluster,
                              "--explain", "-o", aware] + extra, capture_output=True, text=True)
        a = re.search(r"as annotated \((.*)\): ([0-9.]+) ms", res.stderr)
        h = re.search(r"hardware-aware \((.*)\): ([0-9.]+) ms per step, ([0-9.]+)x", res.stderr)
        if res.returncode != 0 and a and "does not fit" in res.stderr:
            need = re.search(r"needs (\S+ \S+) of (\S+ \S+)", res.stderr)
            print("| %s | %s | %s | %.1f | refused: needs %s of %s | | | | | |"
                  % (name, cluster_name, step, float(a.group(2)),
                     need.group(1) if need else "?", need.group(2) if need else "?"))
            bad += 1
            continue
        if res.returncode != 0 or not a or not h:
            errors = [l for l in res.stderr.splitlines() if "error" in l] or ["?"]
            print("| %s | %s | %s | failed: %s |" % (name, cluster_name, step, errors[0]))
            bad += 1
            continue
        # The annotation as written: no --cluster, on as many ranks.
        world = re.search(r"on (\d+) devices", subprocess.run(
            [sim, aware, "--cluster", cluster], capture_output=True, text=True).stdout)
        subprocess.run([compile_, model, "--annotate", spec, "--world-size", world.group(1),
                        "-o", even] + extra, check=True, capture_output=True)
        s_even, s_aware = simulate(even, cluster), simulate(aware, cluster)
        if s_even is None or s_aware is None or abs(
                (s_even / s_aware) / float(h.group(3)) - 1) > 0.10:
            bad += 1
        print("| %s | %s | %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %s |"
              % (name, cluster_name, step, float(a.group(2)), float(h.group(2)),
                 float(h.group(3)), s_even, s_aware, s_even / s_aware, h.group(1)))
    if args.check and bad:
        print("error: %d scenario(s) failed or disagree with shoal-sim by more than 10%%"
              % bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
