#!/usr/bin/python3
"""shoal-plan's predictions for Megatron-LM's weak-scaling table (SC'21).

    /usr/bin/python3 bench/megatron_table.py --bin build/bin [--out DIR]

For every row of Table 1 of Narayanan et al., "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM" (SC'21; the data
and its sources are in megatron_sc21.py): write the GPT as shoal IR (shapes
only, fp16, one sample; gpt_mlir.py), describe the cluster (GPUs / 8
DGX A100-80GB nodes, NVLink 3 inside, one 200 Gb/s HDR InfiniBand link per
GPU), and ask shoal-plan for the row's own layout (tp, pp, dp, micro-batch
size, schedule; a training step with full recomputation, fp16 products,
`global-batch` = the row's batch). Its predicted step time gives TFLOP/s per
GPU with the paper's own FLOP count (equation 3), next to the published
figure.

Calibration: one figure, the fraction of the A100's fp16 peak that matrix
products reach, fitted on the first row (1.7B, data parallel only) and used
unchanged for every other row. Memory bandwidth and links keep their
datasheet figures.
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

CLUSTER = """version: 1
nodes:
  - {count: %d, devices: {type: A100-80GB, count: 8}}
links:
  intra_node: {type: nvlink3}
  inter_node: {bandwidth_Gbps: 200, latency_us: 5, transport: rdma}
"""


def write_row(row, work):
    name = "gpt_%gB" % row["params_billion"]
    mlir = os.path.join(work, name + ".mlir")
    if not os.path.exists(mlir):
        subprocess.run([sys.executable, os.path.join(HERE, "gpt_mlir.py"),
                        "--layers", str(row["num_layers"]),
                        "--hidden", str(row["hidden_size"]),
                        "--heads", str(row["attention_heads"]),
                        "--seq", str(mt.SETTINGS["sequence_length"]),
                        "--vocab", str(mt.SETTINGS["vocab_size"]),
                        "--batch", "1", "--dtype", "f16", "-o", mlir],
                       check=True, capture_output=True)
    cluster = os.path.join(work, "cluster_%d.yaml" % row["num_gpus"])
    with open(cluster, "w") as f:
        f.write(CLUSTER % (row["num_gpus"] // 8))
    return mlir, cluster


def predict(opt, row, work, efficiency):
    mlir, cluster = write_row(row, work)
    dp = row["num_gpus"] // (row["tensor_parallel"] * row["pipeline_parallel"])
    options = [
        "cluster=" + cluster, "step=train-recompute", "precision=fp16",
        "global-batch=%d" % row["batch_size"], "explain=true", "top=1",
        "matmul-efficiency=%g" % efficiency,
        "tp=%d" % row["tensor_parallel"], "pp=%d" % row["pipeline_parallel"],
        "dp=%d" % dp, "micro-batch-size=%d" % row["micro_batch_size"],
    ]
    if row["pipeline_parallel"] > 1:
        if row["virtual_stages"]:
            options += ["schedule=interleaved",
                        "virtual-stages=%d" % row["virtual_stages"]]
        else:
            options += ["schedule=1f1b"]
    t0 = time.time()
    res = subprocess.run([opt, mlir, "--shoal-plan=" + " ".join(options),
                          "-o", os.devnull], capture_output=True, text=True)
    seconds = time.time() - t0
    # The first row of --explain's table: the layout, its step and memory
    # (also when it does not fit, in which case shoal-plan refuses it).
    m = re.search(r"^ +1  (.*?) +([0-9.e+-]+) +[0-9.e+-]+ +[0-9.]+% +(.*? / [0-9.]+ GiB)(  does not fit)?$",
                  res.stderr, re.M)
    if not m:
        raise RuntimeError("shoal-plan failed for %s:\n%s" % (row["params_billion"],
                                                             res.stderr[:3000]))
    step = float(m.group(2)) / 1e3
    memory = m.group(3) + (" (does not fit)" if m.group(4) else "")
    flops = mt.model_flops_per_iteration(row["batch_size"], mt.SETTINGS["sequence_length"],
                                         row["num_layers"], row["hidden_size"],
                                         mt.SETTINGS["vocab_size"])
    return flops / step / row["num_gpus"] / 1e12, step, memory, seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args(argv)
    opt = os.path.join(args.bin, "shoal-opt")
    work = args.out or tempfile.mkdtemp(prefix="shoal-megatron-")
    os.makedirs(work, exist_ok=True)

    # Calibrate the one efficiency on the first row (bisection: the
    # predicted TFLOP/s grows with it).
    first = mt.TABLE_1[0]
    lo, hi = 0.05, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        tflops = predict(opt, first, work, mid)[0]
        if tflops < first["tflops_per_gpu"]:
            lo = mid
        else:
            hi = mid
    eff = 0.5 * (lo + hi)
    print("calibrated on the 1.7B row: matrix products reach %.3f of the A100's "
          "fp16 peak (312 TFLOP/s)" % eff)
    print()
    print("| params | GPUs | TP | PP | DP | batch | micro-batch | schedule "
          "| published TFLOP/s/GPU | predicted | error | step (s) | memory / GPU | plan time (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    errors = []
    for row in mt.TABLE_1:
        tflops, step, memory, seconds = predict(opt, row, work, eff)
        err = (tflops - row["tflops_per_gpu"]) / row["tflops_per_gpu"]
        if row is not first:
            errors.append(abs(err))
        sched = "-" if row["pipeline_parallel"] == 1 else (
            "interleaved v=%d" % row["virtual_stages"] if row["virtual_stages"] else "1f1b")
        dp = row["num_gpus"] // (row["tensor_parallel"] * row["pipeline_parallel"])
        print("| %gB | %d | %d | %d | %d | %d | %d | %s | %d | %.1f | %+.1f%% | %.2f | %s | %.2f |"
              % (row["params_billion"], row["num_gpus"], row["tensor_parallel"],
                 row["pipeline_parallel"], dp, row["batch_size"],
                 row["micro_batch_size"], sched, row["tflops_per_gpu"], tflops,
                 100 * err, step, memory, seconds))
    print()
    print("mean |error| over the %d rows not used for calibration: %.1f%%, max %.1f%%"
          % (len(errors), 100 * sum(errors) / len(errors), 100 * max(errors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
