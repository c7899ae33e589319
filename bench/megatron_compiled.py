#!/usr/bin/python3
"""Megatron-LM's published layouts, compiled by shoal and timed by shoal-sim.

    /usr/bin/python3 bench/megatron_compiled.py --bin build/bin [--rows 175B,39.1B] [--out DIR]

The path a user takes, not the planner's formulas (bench/megatron_table.py
prices the layouts with those): for each row, write the GPT as shoal IR
(shapes only, f32 weights, bf16/fp16 training by the config's `precision`;
bench/gpt_mlir.py), an annotation spec with the row's layout (one `split: TP`
scope per pipeline stage or chunk, layers evenly over them, the embeddings
and the head joining the stage they read from; data parallelism from the
world size), a training config (cross-entropy, AdamW, the row's recompute and
precision) and the cluster (DGX A100-80GB nodes, as megatron_table.py), then
run

    shoal-compile model.mlir --annotate spec.yaml --cluster cluster.yaml \\
        --train train.yaml --world-size N -o row.plan
    shoal-sim row.plan --cluster cluster.yaml --breakdown

and print shoal-sim's step, its pipeline bubble against the schedule's
(p-1)/(v*m), when the first and the last stage finish, and TFLOP/s per GPU
with the paper's FLOP count (megatron_sc21.py, equation 3) next to the
published figure. Rows: the SC'21 Table 1 rows by parameter count, and
`175B` (GPT-3 on 1024 GPUs, section 5.1: TP 8, PP 16, batch 1536, micro-batch
1, 1F1B; the split is the usual one for that model, the paper names none).
No figure is fitted: the cluster's datasheet peaks and the device catalog's
efficiencies.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import megatron_sc21 as mt  # noqa: E402
from megatron_table import CLUSTER  # noqa: E402  (DGX A100 nodes, % nodes)

TRAIN = """version: 1
loss: {kind: cross_entropy, output: logits, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-4}
precision: %s
recompute: %s
frozen: [mask]
"""

GPT3_175B = dict(params_billion=175, attention_heads=96, hidden_size=12288, num_layers=96,
                 tensor_parallel=8, pipeline_parallel=16, num_gpus=1024, batch_size=1536,
                 micro_batch_size=1, virtual_stages=None,
                 tflops_per_gpu=mt.GPT3_175B["section_5_1"]["tflops_per_gpu"])


def rows_by_name():
    rows = {"175B": GPT3_175B}
    for r in mt.TABLE_1:
        rows["%gB" % r["params_billion"]] = r
    return rows


def spec_text(row):
    """The row's layout: PP * v scopes of `split: TP` over consecutive layers."""
    tp, pp = row["tensor_parallel"], row["pipeline_parallel"]
    v = row["virtual_stages"] or 1
    layers = row["num_layers"]
    dp = row["num_gpus"] // (tp * pp)
    m = row["batch_size"] // (dp * row["micro_batch_size"])
    chunks = pp * v
    if layers % chunks:
        raise SystemExit("%d layers do not split into %d chunks" % (layers, chunks))
    per = layers // chunks
    lines = ["version: 1"]
    if pp > 1:
        sched = "interleaved, virtual_stages: %d" % v if v > 1 else "1f1b"
        lines.append("pipeline: {num_micro_batch: %d, schedule: %s}" % (m, sched))
    elif m > 1:
        lines.append("pipeline: {num_micro_batch: %d}" % m)
    lines.append("scopes:")
    for c in range(chunks):
        nodes = ", ".join('"/h.%d/*"' % i for i in range(c * per, (c + 1) * per))
        lines.append("  - {split: %d, name: c%d, nodes: [%s]}" % (tp, c, nodes))
    return "\n".join(lines) + "\n", m


def run_row(args, name, row, work):
    tag = re.sub(r"[^A-Za-z0-9]+", "_", name)
    mlir = os.path.join(work, "gpt_%s.mlir" % tag)
    if not os.path.exists(mlir):
        subprocess.run([sys.executable, os.path.join(HERE, "gpt_mlir.py"),
                        "--layers", str(row["num_layers"]),
                        "--hidden", str(row["hidden_size"]),
                        "--heads", str(row["attention_heads"]),
                        "--seq", str(mt.SETTINGS["sequence_length"]),
                        "--vocab", str(mt.SETTINGS["vocab_size"]),
                        "--batch", str(row["batch_size"]), "--dtype", "f32",
                        "-o", mlir], check=True, capture_output=True)
    spec, m = spec_text(row)
    paths = {}
    for key, text in (("spec", spec), ("cluster", CLUSTER % (row["num_gpus"] // 8)),
                      ("train", TRAIN % (args.precision, args.recompute))):
        paths[key] = os.path.join(work, "%s_%s.yaml" % (key, tag))
        with open(paths[key], "w") as f:
            f.write(text)
    plan = os.path.join(work, tag + ".plan")
    t0 = time.time()
    res = subprocess.run([os.path.join(args.bin, "shoal-compile"), mlir,
                          "--annotate", paths["spec"], "--cluster", paths["cluster"],
                          "--train", paths["train"], "--world-size", str(row["num_gpus"]),
                          "-o", plan], capture_output=True, text=True)
    compile_s = time.time() - t0
    if res.returncode != 0:
        err = [ln for ln in res.stderr.splitlines() if "error" in ln] or \
            res.stderr.strip().splitlines()[-1:] or ["?"]
        return None, "compile failed: " + err[0][:200]
    sim = subprocess.run([os.path.join(args.bin, "shoal-sim"), plan, "--cluster",
                          paths["cluster"], "--breakdown",
                          "--trace", os.path.join(work, tag + ".sim.json")],
                         capture_output=True, text=True)
    if sim.returncode not in (0, 2):
        return None, "shoal-sim failed: " + (sim.stderr.strip().splitlines() or ["?"])[-1]
    if args.verbose:
        print(sim.stdout)
    step = float(re.search(r"predicted step ([0-9.e+]+) ms", sim.stdout).group(1)) / 1e3
    bubble = re.search(r"bubble predicted ([0-9.e+-]+) .*, ([0-9.e+-]+) on the busiest stage, "
                       r".*= ([0-9.e+-]+)", sim.stdout)
    finish = [float(x) for x in re.findall(r"finishes at ([0-9.e+]+) ms", sim.stdout)]
    fits = "DOES NOT FIT" not in sim.stdout
    flops = mt.model_flops_per_iteration(row["batch_size"], mt.SETTINGS["sequence_length"],
                                         row["num_layers"], row["hidden_size"],
                                         mt.SETTINGS["vocab_size"])
    return dict(step=step, m=m, tflops=flops / step / row["num_gpus"] / 1e12,
                bubble=float(bubble.group(1)) if bubble else 0.0,
                busiest=float(bubble.group(2)) if bubble else 0.0,
                theory=float(bubble.group(3)) if bubble else 0.0,
                first=finish[0] / 1e3 if finish else None,
                last=finish[-1] / 1e3 if finish else None,
                fits=fits, compile_s=compile_s), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--rows", default="175B",
                    help="comma-separated: 175B and Table 1's (1.7B, ..., 1008B)")
    ap.add_argument("--precision", default="fp16", help="the training config's precision")
    ap.add_argument("--recompute", default="full", help="the training config's recompute")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--verbose", action="store_true", help="print shoal-sim's output")
    args = ap.parse_args(argv)
    work = args.out or tempfile.mkdtemp(prefix="shoal-megatron-compiled-")
    os.makedirs(work, exist_ok=True)
    table = rows_by_name()
    print("path timed: shoal-compile --annotate --cluster --train, then shoal-sim on the "
          "compiled plan (precision %s, recompute %s)" % (args.precision, args.recompute))
    print()
    print("| model | GPUs | TP | PP | DP | m | schedule | step (s) | bubble, busiest stage "
          "| bubble, mean | (p-1)/(v*m) | first / last stage done (s) | TFLOP/s/GPU "
          "| published | fits | compile (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- "
          "| ---: | ---: | --- | ---: |")
    failed = 0
    for name in args.rows.split(","):
        row = table.get(name)
        if row is None:
            raise SystemExit("unknown row %r (known: %s)" % (name, ", ".join(table)))
        r, err = run_row(args, name, row, work)
        tp, pp = row["tensor_parallel"], row["pipeline_parallel"]
        dp = row["num_gpus"] // (tp * pp)
        sched = "-" if pp == 1 else ("interleaved v=%d" % row["virtual_stages"]
                                    if row["virtual_stages"] else "1f1b")
        if err:
            failed += 1
            print("| %s | %d | %d | %d | %d | | %s | %s |" % (name, row["num_gpus"], tp, pp,
                                                         dp, sched, err))
            continue
        done = "%.2f / %.2f" % (r["first"], r["last"]) if r["first"] is not None else "-"
        print("| %s | %d | %d | %d | %d | %d | %s | %.2f | %.3f | %.3f | %.3f | %s | %.1f | %d "
              "| %s | %.1f |"
              % (name, row["num_gpus"], tp, pp, dp, r["m"], sched, r["step"], r["busiest"],
                 r["bubble"], r["theory"], done, r["tflops"], row["tflops_per_gpu"],
                 "yes" if r["fits"] else "no", r["compile_s"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
