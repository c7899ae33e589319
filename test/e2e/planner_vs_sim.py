#!/usr/bin/python3
"""The planner's prediction and shoal-sim's, on the same compiled plan, agree.

    python3 test/e2e/planner_vs_sim.py --bin build/bin --work DIR
        [--only REGEX] [--tolerance 0.10] [--python PY]

shoal-plan predicts a layout's step before anything is compiled (from the
forward graph, each op's backward as its gradient rule builds it, the
mixed-precision casts, the gradient buckets and the optimizer's update);
shoal-sim replays the compiled plan op by op (docs/Planner.md, "One cost
model"). For every case this compiles with `shoal-compile --cluster
--explain`, reads the planner's step of the layout it chose, runs
`shoal-sim` on the plan with the same cluster, and requires the two within
--tolerance (default 10%) of each other.

Cases:
- every plan the e2e suite compiles with --cluster (the `plan_*` tests:
  the GPT and MLP examples on the pinned-CPU clusters of test/Inputs,
  annotated and searched), which needs the examples' ONNX files (written
  by examples/*/make_model.py with PyTorch: --python names the interpreter);
- a GPT in shapes only (bench/gpt_mlir.py: 4 layers, hidden 512, sequence
  256, vocabulary 8192, batch 64) under data, tensor and pipeline
  parallelism and their mixes, on 8 V100 + 8 T4 and on 2 x 8 A100 + 2 x 8
  V100, forward (f16) and training (fp16 mixed precision, AdamW).

--only REGEX keeps the cases whose name matches (the ctest
`e2e.planner.planner_vs_sim` runs them all).
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INPUTS = os.path.join(REPO, "test", "Inputs")

# The clusters and the training config of Whale's scenarios.
sys.path.insert(0, os.path.join(REPO, "bench"))
from hetero_balance import CLUSTERS as WHALE, TRAIN  # noqa: E402

CLUSTERS = {name: WHALE[name] for name in ("8 V100 + 8 T4", "2 x 8 A100 + 2 x 8 V100")}

FIRST = '"/wte/*", "/Add", "/h.[01]/*"'
LAST = '"/h.[23]/*", "/ln_f/*", "/lm_head/*"'
SPECS = {
    "dp": 'version: 1\nscopes:\n  - {replicate: 1, name: all, nodes: ["*"]}\n',
    "tp8": 'version: 1\nscopes:\n  - {split: 8, name: all, nodes: ["*"]}\n',
    "pp2": ("version: 1\npipeline: {num_micro_batch: 4, schedule: 1f1b}\nscopes:\n"
            "  - {replicate: 1, name: s0, nodes: [%s]}\n"
            "  - {replicate: 1, name: s1, nodes: [%s]}\n" % (FIRST, LAST)),
    "pp2tp4": ("version: 1\npipeline: {num_micro_batch: 4, schedule: gpipe}\nscopes:\n"
               "  - {split: 4, name: s0, nodes: [%s]}\n"
               "  - {split: 4, name: s1, nodes: [%s]}\n" % (FIRST, LAST)),
}


# Cases where the planner is known to miss what shoal-sim charges, with the
# looser bound they are held to and why; each is an open item of issue 45
# ("one cost model"), printed with the case, not hidden.
KNOWN_GAPS = [
    (r"gpt plan_blocks_tp2_shards", 0.15,
     "the planner's forward compute of the small GPT under TP2 is 6-10% "
     "under shoal-sim's (even shards too); the copy into each "
     "all-reduce's result that it charged had covered that until the "
     "runtime began to reduce in place"),
]

# The layout shoal-plan chose: balanced from an annotation, or searched.
PLANNER_RE = [re.compile(r"hardware-aware \((.*)\): ([0-9.e+]+) ms per step"),
              re.compile(r"chosen: (.*), ([0-9.e+]+) ms per step")]
SIM_RE = re.compile(r"predicted step ([0-9.e+]+) ms")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def compare(args, name, model, cluster, spec=None, train=None, extra=()):
    """Compiles, simulates and compares; returns (ok, line)."""
    plan = os.path.join(args.work, re.sub(r"[^A-Za-z0-9]+", "_", name) + ".plan")
    cmd = [os.path.join(args.bin, "shoal-compile"), model, "--cluster", cluster,
           "--explain", "-o", plan] + list(extra)
    if spec:
        cmd += ["--annotate", spec]
    if train:
        cmd += ["--train", train]
    res = run(cmd)
    found = [m for r in PLANNER_RE for m in r.findall(res.stderr)]
    if res.returncode != 0 or not found:
        errors = [l for l in res.stderr.splitlines() if "error" in l] or ["?"]
        return False, "| %s | compile failed: %s |" % (name, errors[0])
    layout, planned = found[-1][0], float(found[-1][1])
    sim = run([os.path.join(args.bin, "shoal-sim"), plan, "--cluster", cluster])
    m = SIM_RE.search(sim.stdout)
    if sim.returncode not in (0, 2) or not m:
        return False, "| %s | shoal-sim failed: %s |" % (
            name, (sim.stderr.strip().splitlines() or ["?"])[-1])
    simulated = float(m.group(1))
    off = simulated / planned - 1
    bound = args.tolerance
    note = ""
    for pattern, gap_bound, why in KNOWN_GAPS:
        if re.search(pattern, name):
            bound, note = gap_bound, " known gap (<= %.0f%%): %s" % (100 * gap_bound, why)
    ok = abs(off) <= bound
    return ok, "| %s | %s | %.4g | %.4g | %+.1f%% |%s%s" % (
        name, layout, planned, simulated, 100 * off, "" if ok else " **off**", note)


def example(args, which):
    """The example's ONNX file (made once with PyTorch)."""
    out = os.path.join(args.work, which)
    model = os.path.join(out, "model.onnx")
    if not os.path.exists(model):
        subprocess.run([args.python, os.path.join(REPO, "examples", which, "make_model.py"),
                        "--out", out], check=True, capture_output=True)
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default=None, help="regex: the cases to run")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with PyTorch and onnx, for the examples' models")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)

    cases = []
    # The e2e suite's plans (test/e2e/CMakeLists.txt, plan_*).
    gpt, mlp = example(args, "gpt"), example(args, "mlp")
    cl = lambda f: os.path.join(INPUTS, f)  # noqa: E731
    ex = lambda m, s: os.path.join(REPO, "examples", m, s)  # noqa: E731
    cases += [
        ("gpt plan_pp2_hetero", gpt, cl("cluster_cpu_slow_fast.yaml"), ex("gpt", "spec_pp2.yaml"), None),
        ("mlp plan_dp2pp2_hetero", mlp, cl("cluster_cpu_2slow_2fast.yaml"), ex("mlp", "spec_pp2.yaml"), None),
        ("gpt plan_search2", gpt, cl("cluster_cpu2.yaml"), None, None),
        ("mlp plan_search4", mlp, cl("cluster_cpu_2slow_2fast.yaml"), None, None),
        ("mlp plan_dp4_shares", mlp, cl("cluster_cpu_1fast_3slow.yaml"), ex("mlp", "spec_dp.yaml"), None),
        ("gpt train dp2_shares", gpt, cl("cluster_cpu_slow_fast.yaml"), ex("gpt", "spec_dp.yaml"),
         os.path.join(HERE, "train_adamw.yaml")),
        ("mlp plan_tp4_shards", mlp, cl("cluster_cpu_1fast_3slow.yaml"),
         os.path.join(HERE, "spec_split4.yaml"), None),
        ("gpt plan_blocks_tp2_shards", gpt, cl("cluster_cpu_slow_fast.yaml"),
         ex("gpt", "spec_blocks_tp.yaml"), None, ["--shard-multiple", "16"]),
    ]

    # A GPT in shapes only.
    shapes = {}
    for dtype in ("f16", "f32"):
        shapes[dtype] = os.path.join(args.work, "gpt_%s.mlir" % dtype)
        subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpt_mlir.py"),
                        "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "256",
                        "--vocab", "8192", "--batch", "64", "--dtype", dtype,
                        "-o", shapes[dtype]], check=True, capture_output=True)
    train = os.path.join(args.work, "train_fp16.yaml")
    with open(train, "w") as f:
        f.write(TRAIN)
    for cname, text in CLUSTERS.items():
        cluster = os.path.join(args.work, re.sub(r"[^A-Za-z0-9]+", "_", cname) + ".yaml")
        with open(cluster, "w") as f:
            f.write(text)
        for sname, stext in SPECS.items():
            spec = os.path.join(args.work, "spec_%s.yaml" % sname)
            with open(spec, "w") as f:
                f.write(stext)
            cases.append(("gpt-shapes %s forward on %s" % (sname, cname), shapes["f16"],
                          cluster, spec, None))
            cases.append(("gpt-shapes %s train on %s" % (sname, cname), shapes["f32"],
                          cluster, spec, train))

    if args.only:
        cases = [c for c in cases if re.search(args.only, c[0])]
        if not cases:
            raise SystemExit("error: --only %r matches no case" % args.only)
    print("| case | layout | planner (ms) | shoal-sim (ms) | off |")
    print("| --- | --- | ---: | ---: | ---: |")
    failed = gaps = 0
    for name, model, cluster, spec, tr, *extra in cases:
        ok, line = compare(args, name, model, cluster, spec, tr, *extra)
        print(line, flush=True)
        failed += not ok
        gaps += ok and "known gap" in line
    print("%d of %d cases within %.0f%%, %d more within their known gap's bound"
          % (len(cases) - failed - gaps, len(cases), 100 * args.tolerance, gaps))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
