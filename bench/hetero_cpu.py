#!/usr/bin/python3
"""Even against hardware-aware plans on CPU ranks whose speeds really differ.

    /usr/bin/python3 bench/hetero_cpu.py --bin build/bin [--out DIR]
        [--layouts dp4,tp4,pp2] [--repeats 3] [--steps 10]

On this 2-core machine the ranks are pinned with `taskset` so that one is
three times as fast as the others:
- dp4, tp4: rank 0 alone on core 0; ranks 1-3 share core 1 (a third each);
- pp2: rank 0 alone on core 0; rank 1 on core 1 next to two busy spinners
  (a third of it).
The cluster spec says the same (`type: CPU`, `peak_tflops: {fp32: ...}` per
node, 3:1), with the fast figure calibrated: a one-rank run of the model
pinned on a free core gives its FLOP/s.

The model is an MLP stack built here with `torch.nn` (8 blocks of
Linear(1024, 1024) + GELU, batch 384), exported to ONNX. The calibration
runs it alone on core 0 at batch 384 and at batch 4 with `--profile`: the
cluster spec's peak and `matmul_half_rows` from the matrix products' times
(what small products lose; the planner needs it to size micro-batches),
`bandwidth_GBps` from GELU's and `copy_GBps` from the profile's copy rate.
For each layout the
even plan (`--annotate` only) and the hardware-aware one (`--annotate
--cluster`) run alternately, `--repeats` times each, `--steps` forward steps
a run (after 2 warm-up steps); the table gives the median ms/step of each,
the speedup, and each plan's largest relative difference from PyTorch's
output. `shoal-plan --explain` says what balancing changed. A second table
gives shoal-sim's prediction of every plan on the same cluster spec against
its measured step.

What the compiled plans balance (docs/Planner.md): pipeline stage
boundaries and placements (PP2), data-parallel batch shares (DP4: batch blocks,
each replica its own local batch in proportion to its speed), and shards
by speed (TP4: each rank's block of every split dimension by its speed and
the ops every rank does whole, in multiples of 64 columns: 640/128/128/128
of the 1024).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

BLOCKS, WIDTH, BATCH = 8, 1024, 384
CALIBRATION_ROWS = 4

SPECS = {
    "dp4": "version: 1\nscopes:\n  - {replicate: 4, name: model, nodes: [\"*\"]}\n",
    "tp4": "version: 1\nscopes:\n  - {split: 4, name: model, nodes: [\"*\"]}\n",
    "pp2": ("version: 1\npipeline: {num_micro_batch: 4, schedule: 1f1b}\nscopes:\n"
            "  - {replicate: 1, name: s0, nodes: [%s]}\n"
            "  - {replicate: 1, name: s1, nodes: [%s]}\n"
            % (", ".join('"/blocks.%d/*"' % i for i in range(BLOCKS // 2)),
               ", ".join('"/blocks.%d/*"' % i for i in range(BLOCKS // 2, BLOCKS)))),
}
WORLD = {"dp4": 4, "tp4": 4, "pp2": 2}


def make_model(out):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(WIDTH, WIDTH)
            self.act = torch.nn.GELU()

        def forward(self, x):
            return self.act(self.fc(x))

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(BATCH, WIDTH)
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(out, "reference"), exist_ok=True)
    torch.onnx.export(model, (x,), os.path.join(out, "model.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=17)
    # The same model for a small batch (calibration).
    torch.onnx.export(model, (x[:CALIBRATION_ROWS],),
                      os.path.join(out, "model-%d.onnx" % CALIBRATION_ROWS),
                      input_names=["x"], output_names=["y"], opset_version=17)
    np.save(os.path.join(out, "inputs", "x.npy"), x.numpy())
    with torch.no_grad():
        np.save(os.path.join(out, "reference", "y.npy"), model(x).numpy())


def pin_wrapper(out, layout):
    """A script that runs its arguments on the core this rank is pinned to."""
    path = os.path.join(out, "pin-%s.sh" % layout)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# rank 0 alone on core 0, every other rank on core 1\n"
                'r=${OMPI_COMM_WORLD_RANK:-0}\n'
                'if [ "$r" = 0 ]; then c=0; else c=1; fi\n'
                'exec taskset -c $c "$@"\n')
    os.chmod(path, 0o755)
    return path


def ms_per_step(text):
    m = re.search(r"steps on .*?: ([\d.]+) ms/step", text)
    if not m:
        raise SystemExit("error: no ms/step in:\n" + text[-2000:])
    return float(m.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="/tmp/shoal-hetero-cpu")
    ap.add_argument("--layouts", default="dp4,tp4,pp2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args(argv)
    if shutil.which("taskset") is None:
        raise SystemExit("error: taskset (util-linux) is needed to pin ranks to cores")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("error: needs 2 cores")
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    make_model(out)
    model = os.path.join(out, "model.onnx")
    ref = np.load(os.path.join(out, "reference", "y.npy"))
    compile_ = os.path.join(a.bin, "shoal-compile")
    run_bin = os.path.join(a.bin, "shoal-run")
    sim_bin = os.path.join(a.bin, "shoal-sim")

    # Calibration: the model alone on core 0, at the whole batch and at a
    # small one. Matrix products of m rows run at peak * m / (m + h) (the
    # cluster spec's matmul_half_rows h, docs/Planner.md): two batch sizes
    # give the peak and h, which the planner needs to size micro-batches.
    def one_rank_ms(rows):
        plan = os.path.join(out, "one-%d.plan" % rows)
        inputs = os.path.join(out, "inputs-%d" % rows)
        os.makedirs(inputs, exist_ok=True)
        np.save(os.path.join(inputs, "x.npy"),
                np.load(os.path.join(out, "inputs", "x.npy"))[:rows])
        source = model if rows == BATCH else os.path.join(out, "model-%d.onnx" % rows)
        common.run_cmd([compile_, source, "-o", plan])
        res = common.run_cmd(["taskset", "-c", "0", run_bin, plan, "--inputs", inputs,
                              "--outputs", os.path.join(out, "o1"),
                              "--steps", str(a.steps * BATCH // rows), "--warmup", "2",
                              "--profile", os.path.join(out, "profile-%d.json" % rows)])
        return ms_per_step(res.stdout + res.stderr)
    small = CALIBRATION_ROWS
    t_big, t_small = one_rank_ms(BATCH), one_rank_ms(small)
    # From the profiles of both runs: the matrix products' time per step
    # (they give the peak and h) and the other ops' bytes per second (GELU:
    # memory bound in the cost model).
    def profiled(rows):
        with open(os.path.join(out, "profile-%d.json" % rows)) as f:
            ranks = json.load(f)["ranks"]
        ops = [o for r in ranks for o in r["ops"]]
        mm = [o for o in ops if o["kind"] in ("Gemm", "MatMul")]
        other = [o for o in ops if o["kind"] not in ("Gemm", "MatMul")]
        return (sum(o["seconds"] for o in mm), sum(o["flops"] for o in mm),
                sum(o["bytes"] for o in other) / sum(o["seconds"] for o in other) / 1e9,
                ranks[0]["copy_GBps"])
    (mm_big, mm_flops, bandwidth, copy), (mm_small, _, _, _) = (profiled(BATCH),
                                                               profiled(small))
    ratio = mm_big / mm_small
    half = max(0.0, (BATCH - ratio * small) / (ratio - 1)) if ratio > 1 else 0.0
    fast = mm_flops * (BATCH + half) / BATCH / mm_big / 1e12  # TFLOP/s
    print("calibrated: one rank alone on a core: %.2f ms at batch %d, %.2f ms at "
          "batch %d; matrix products %.2f and %.2f ms of it: peak %.4f TFLOP/s, "
          "matmul_half_rows %.2f; other ops at %.2f GB/s, copies at %.2f GB/s"
          % (t_big, BATCH, t_small, small, 1e3 * mm_big, 1e3 * mm_small, fast, half,
             bandwidth, copy))

    rows = []
    for layout in a.layouts.split(","):
        world = WORLD[layout]
        slow = world - 1
        cluster = os.path.join(out, "cluster-%s.yaml" % layout)
        with open(cluster, "w") as f:
            f.write("version: 1\nnodes:\n"
                    "  - {devices: {type: CPU, count: 1, peak_tflops: {fp32: %.6f}, "
                    "matmul_half_rows: %.3f, bandwidth_GBps: %.4f, copy_GBps: %.3f}}\n"
                    "  - {devices: {type: CPU, count: %d, peak_tflops: {fp32: %.6f}, "
                    "matmul_half_rows: %.3f, bandwidth_GBps: %.4f, copy_GBps: %.3f}}\n"
                    "links:\n  inter_node: {bandwidth_GBps: 5, latency_us: 5, transport: shm}\n"
                    % (fast, max(half, 1e-3), bandwidth, copy, slow, fast / 3,
                       max(half, 1e-3), bandwidth / 3, copy / 3))
        spec = os.path.join(out, "spec-%s.yaml" % layout)
        with open(spec, "w") as f:
            f.write(SPECS[layout])
        plans, simulated = {}, {}
        for kind in ("even", "balanced"):
            plan = os.path.join(out, "%s-%s.plan" % (layout, kind))
            cmd = [compile_, model, "--annotate", spec, "--world-size", str(world), "-o", plan]
            if kind == "balanced":
                cmd += ["--cluster", cluster, "--explain"]
            res = common.run_cmd(cmd)
            if kind == "balanced":
                for line in (res.stderr or "").splitlines():
                    if line.startswith(("shoal-plan", "  stage", "  batch")):
                        print("%s: %s" % (layout, line))
            plans[kind] = plan
            res = common.run_cmd([sim_bin, plan, "--cluster", cluster])
            m = re.search(r"predicted step ([0-9.]+) ms", res.stdout)
            if not m:
                raise SystemExit("error: no prediction in shoal-sim's output:\n" + res.stdout)
            simulated[kind] = float(m.group(1))
        wrapper = pin_wrapper(out, layout)
        spinners = []
        if layout == "pp2":
            # Two busy loops next to rank 1 on core 1: it gets a third.
            for _ in range(2):
                spinners.append(subprocess.Popen(
                    ["taskset", "-c", "1", sys.executable, "-c", "while True: pass"]))
        times = {"even": [], "balanced": []}
        errors = {}
        try:
            for rep in range(a.repeats):
                for kind in ("even", "balanced"):
                    o = os.path.join(out, "out-%s-%s" % (layout, kind))
                    cmd = common.mpirun_cmd(a.mpirun, world, [
                        wrapper, run_bin, plans[kind], "--inputs", os.path.join(out, "inputs"),
                        "--outputs", o, "--steps", str(a.steps), "--warmup", "2"])
                    if "--bind-to" not in cmd:
                        cmd[1:1] = ["--bind-to", "none"]
                    res = common.run_cmd(cmd, env_extra=common.MPI_ENV)
                    times[kind].append(ms_per_step(res.stdout + res.stderr))
                    got = np.load(os.path.join(o, "y.npy"))
                    errors[kind] = float(np.abs(got - ref).max() / np.abs(ref).max())
        finally:
            for p in spinners:
                p.kill()
                p.wait()
        even, bal = statistics.median(times["even"]), statistics.median(times["balanced"])
        rows.append((layout, even, bal, even / bal, errors["even"], errors["balanced"],
                     times["even"], times["balanced"], simulated["even"],
                     simulated["balanced"]))

    print("\n| layout | even ms/step | balanced ms/step | speedup | even vs PyTorch "
          "| balanced vs PyTorch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for layout, even, bal, sp, ee, eb in (r[:6] for r in rows):
        print("| %s | %.1f | %.1f | %.2fx | %.1e | %.1e |" % (layout, even, bal, sp, ee, eb))
    print("\nshoal-sim on the same plans and cluster spec:\n")
    print("| plan | predicted ms/step | measured ms/step | error |")
    print("| --- | ---: | ---: | ---: |")
    worst = 0.0
    for r in rows:
        for kind, meas, pred in (("even", r[1], r[8]), ("balanced", r[2], r[9])):
            err = (pred - meas) / meas
            worst = max(worst, abs(err))
            print("| %s %s | %.1f | %.1f | %+.1f%% |" % (r[0], kind, pred, meas, 100 * err))
    print("worst error: %.1f%% (target: 5%%)" % (100 * worst))
    for layout, _, _, _, _, _, te, tb in (r[:8] for r in rows):
        print("%s runs (ms/step), even: %s; balanced: %s" % (
            layout, ", ".join("%.1f" % t for t in te), ", ".join("%.1f" % t for t in tb)))
    bad = [r[0] for r in rows if max(r[4], r[5]) > 1e-4]
    if bad:
        print("error: outputs differ from PyTorch in %s" % ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
