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

and print shoal-sim's step, its pipeline bubble (idle over busy time on the
busiest stage, the mean over stages, and the time waiting on other stages
alone, counting the waits for a stage's own exchanges as work as the
schedule's formula does) against the schedule's (p-1)/(v*m), when the first and the last stage finish, and TFLOP/s per GPU
with the paper's FLOP count (megatron_sc21.py, equation 3) next to the
published figure. Rows: the SC'21 Table 1 rows by parameter count, and
`175B` (GPT-3 on 1024 GPUs, section 5.1: TP 8, PP 16, batch 1536, micro-batch
1, 1F1B; the split is the usual one for that model, the paper names none).
No figure is fitted. `--device-table datasheet` (the default) takes the
device catalog's datasheet peaks as they are; `--device-table cited` replaces
them with achieved rates that others measured and published (CITED below,
each with its source): what the best kernels of today reach on an A100, not
what Megatron's 2021 kernels reached at each row's shapes.

Beside shoal-sim's step, the planner's (shoal-compile --explain, the layout
as annotated) and the planner's memory per stage against shoal-sim's (the
`stage_memory_MiB` of `--emit-mlir`): the issue's "one cost model, one memory
model" check on these rows. `--check` exits 1 unless each row compiles and
fits with the planner's step and every stage's memory within 10% of
shoal-sim's (ctest `e2e.planner.megatron_compiled` runs every row with it).
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

# Achieved rates on DGX A100 (SXM4 80 GB) nodes, measured and published by
# others (no figure fitted to Megatron's rows):
# - matrix products: 271.2 of the 312 TFLOP/s bf16 peak (86.9%), the best
#   shape of a brute-force search with torch 2.6 / CUDA 12.6 (S. Bekman,
#   Machine Learning Engineering, compute/accelerator/README.md, "Maximum
#   Achievable Matmul FLOPS comparison table"); fp16's is taken the same;
# - memory: 1.80 of the 2.039 TB/s of HBM2e (88%), a read kernel measured
#   with Nsight Compute (NVIDIA developer forums, "Trouble to reach peak
#   bandwidth of A100", 2025; the GTC talk it cites saw at most ~90%);
# - NVLink: all_reduce_perf bus bandwidth ~200 GB/s on 8 A100-SXM4-80GB
#   (NVIDIA/nccl-tests#149, NCCL 2.18), the ring formulas' bandwidth;
# - InfiniBand HDR: 96 of the 100 GB/s of a node's 4 HDR NICs at 128 MB
#   (NVIDIA/nccl-tests#119, 3 nodes of 8 A100): 96% of the link, here of
#   200 Gb/s per GPU.
CITED_CLUSTER = """version: 1
nodes:
  - {count: %d, devices: {type: A100-80GB, count: 8, peak_tflops: {fp16: 271.2, bf16: 271.2},
     bandwidth_GBps: 1800}}
links:
  intra_node: {type: nvlink3, bandwidth_GBps: 200}
  inter_node: {bandwidth_Gbps: 192, latency_us: 5, transport: rdma}
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
    cluster = CITED_CLUSTER if args.device_table == "cited" else CLUSTER
    for key, text in (("spec", spec), ("cluster", cluster % (row["num_gpus"] // 8)),
                      ("train", TRAIN % (args.precision, args.recompute))):
        paths[key] = os.path.join(work, "%s_%s.yaml" % (key, tag))
        with open(paths[key], "w") as f:
            f.write(text)
    plan = os.path.join(work, tag + ".plan")
    t0 = time.time()
    res = subprocess.run([os.path.join(args.bin, "shoal-compile"), mlir,
                          "--annotate", paths["spec"], "--cluster", paths["cluster"],
                          "--train", paths["train"], "--world-size", str(row["num_gpus"]),
                          "--explain", "--emit-mlir", os.path.join(work, tag + ".plan.mlir"),
                          "-o", plan] + list(args.compile_arg), capture_output=True, text=True)
    compile_s = time.time() - t0
    if res.returncode != 0:
        err = [ln for ln in res.stderr.splitlines() if "error" in ln] or \
            res.stderr.strip().splitlines()[-1:] or ["?"]
        return None, "compile failed: " + err[0][:200]
    sim = subprocess.run([os.path.join(args.bin, "shoal-sim"), plan, "--cluster",
                          paths["cluster"], "--breakdown",
                          "--trace", os.path.join(work, tag + ".sim.json")]
                         + [a for f in args.calibration for a in ("--calibration", f)],
                         capture_output=True, text=True)
    if sim.returncode not in (0, 2):
        return None, "shoal-sim failed: " + (sim.stderr.strip().splitlines() or ["?"])[-1]
    if args.verbose:
        print(sim.stdout)
    step = float(re.search(r"predicted step ([0-9.e+]+) ms", sim.stdout).group(1)) / 1e3
    bubble = re.search(r"bubble predicted ([0-9.e+-]+) .*, ([0-9.e+-]+) on the busiest stage, "
                       r"([0-9.e+-]+) waiting on other stages .*= ([0-9.e+-]+)", sim.stdout)
    finish = [float(x) for x in re.findall(r"finishes at ([0-9.e+]+) ms", sim.stdout)]
    fits = "DOES NOT FIT" not in sim.stdout
    planned = re.search(r"shoal-plan: as annotated \(.*\): ([0-9.e+]+) ms per step", res.stderr)
    parts = re.search(r"its step: (.*)", res.stderr)
    negative = bool(parts and re.search(r" -[0-9]", parts.group(1)))
    # Memory per stage: the planner's estimate against shoal-sim's.
    sim_mib = [float(x) for x in re.findall(r"stage\d+ \(\d+ ranks\): .*? memory ([0-9.]+) MiB",
                                            sim.stdout)] or \
        [float(x) for x in re.findall(r"busy .*? memory ([0-9.]+) MiB", sim.stdout)]
    with open(os.path.join(work, tag + ".plan.mlir")) as f:
        ir = f.read()
    per_stage = re.search(r"stage_memory_MiB = array<i64: ([\d, ]+)>", ir)
    plan_mib = [float(x) for x in per_stage.group(1).split(",")] if per_stage else []
    mem_off = max((abs(a / b - 1) for a, b in zip(plan_mib, sim_mib)), default=None) \
        if len(plan_mib) == len(sim_mib) else None
    flops = mt.model_flops_per_iteration(row["batch_size"], mt.SETTINGS["sequence_length"],
                                         row["num_layers"], row["hidden_size"],
                                         mt.SETTINGS["vocab_size"])
    return dict(step=step, m=m, tflops=flops / step / row["num_gpus"] / 1e12,
                bubble=float(bubble.group(1)) if bubble else 0.0,
                busiest=float(bubble.group(2)) if bubble else 0.0,
                pipeline=float(bubble.group(3)) if bubble else 0.0,
                theory=float(bubble.group(4)) if bubble else 0.0,
                first=finish[0] / 1e3 if finish else None,
                last=finish[-1] / 1e3 if finish else None,
                fits=fits, compile_s=compile_s,
                planned=float(planned.group(1)) / 1e3 if planned else None,
                negative=negative, mem_off=mem_off), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--rows", default="175B",
                    help="comma-separated: 175B and Table 1's (1.7B, ..., 1008B)")
    ap.add_argument("--precision", default="fp16", help="the training config's precision")
    ap.add_argument("--recompute", default="full", help="the training config's recompute")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--verbose", action="store_true", help="print shoal-sim's output")
    ap.add_argument("--compile-arg", action="append", default=[], metavar="ARG",
                    help="extra shoal-compile argument (repeat), e.g. --scatter-gather=false")
    ap.add_argument("--device-table", choices=("datasheet", "cited"), default="datasheet",
                    help="datasheet peaks, or achieved rates published by others (CITED_CLUSTER)")
    ap.add_argument("--calibration", action="append", default=[], metavar="PROFILE.json",
                    help="shoal-sim --calibration: kernel and link rates fitted from a "
                         "shoal-run --profile of the device (repeat for several)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every row compiles and fits, and the planner's step "
                         "and each stage's memory are within 10%% of shoal-sim's, with no "
                         "negative part (issue 45's \"one cost model\")")
    args = ap.parse_args(argv)
    work = args.out or tempfile.mkdtemp(prefix="shoal-megatron-compiled-")
    os.makedirs(work, exist_ok=True)
    table = rows_by_name()
    print("path timed: shoal-compile --annotate --cluster --train, then shoal-sim on the "
          "compiled plan (precision %s, recompute %s); device table: %s"
          % (args.precision, args.recompute,
             "achieved rates published by others (CITED_CLUSTER)" if args.device_table == "cited"
             else "datasheet peaks, no efficiency below 1")
          + ("; calibrated from %s" % ", ".join(args.calibration) if args.calibration else ""))
    print()
    print("| model | GPUs | TP | PP | DP | m | schedule | step (s) | bubble, busiest stage "
          "| bubble, mean | waiting on other stages | (p-1)/(v*m) | first / last stage done (s) | TFLOP/s/GPU "
          "| published | off | fits | planner step (s) | planner / sim | planner memory, "
          "worst stage | compile (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- "
          "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
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
        planned = "-" if r["planned"] is None else "%.2f" % r["planned"]
        ratio = "-" if r["planned"] is None else "%+.1f%%" % (100 * (r["planned"] / r["step"] - 1))
        if r["negative"]:
            ratio += " (a negative part)"
        mem = "-" if r["mem_off"] is None else "%.1f%% off" % (100 * r["mem_off"])
        if args.check:
            why = [w for w, bad in (
                ("does not fit", not r["fits"]),
                ("no planner step", r["planned"] is None),
                ("planner step off by more than 10%", r["planned"] is not None
                 and abs(r["planned"] / r["step"] - 1) > 0.10),
                ("a negative part in the planner's breakdown", r["negative"]),
                ("no planner memory per stage", r["mem_off"] is None),
                ("planner memory off by more than 10%", r["mem_off"] is not None
                 and r["mem_off"] > 0.10)) if bad]
            if why:
                failed += 1
                print("FAIL %s: %s" % (name, "; ".join(why)), file=sys.stderr)
        print("| %s | %d | %d | %d | %d | %d | %s | %.2f | %.3f | %.3f | %.3f | %.3f | %s | %.1f "
              "| %d | %+.0f%% | %s | %s | %s | %s | %.1f |"
              % (name, row["num_gpus"], tp, pp, dp, r["m"], sched, r["step"], r["busiest"],
                 r["bubble"], r["pipeline"], r["theory"], done, r["tflops"], row["tflops_per_gpu"],
                 100 * (r["tflops"] / row["tflops_per_gpu"] - 1),
                 "yes" if r["fits"] else "no", planned, ratio, mem, r["compile_s"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
