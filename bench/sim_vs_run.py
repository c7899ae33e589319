#!/usr/bin/python3
"""shoal-sim's predicted step time against shoal-run's measured one.

    /usr/bin/python3 bench/sim_vs_run.py --bin build/bin [--out DIR]
        [--layers 8] [--hidden 1024] [--batch 128] [--steps 10]

One calibration, then three sharded plans of the same model on 2 ranks:

1. Calibrate. One-rank runs (one BLAS thread) of a stack of `layers`
   Linear+GELU layers at the full batch and at a quarter of it give the
   FLOP/s one core achieves on matrices of those row counts. Two figures
   for the CPU entry follow, its peak P and the rows h at which matrix
   products reach half of it (rate = P * m / (m + h)); they go in the
   cluster spec. The link between the 2 ranks is calibrated the same way:
   the all-reduce times shoal-run --verbose reports for a tensor-parallel
   plan of a *different* model (hidden 512) at two batch sizes give its
   bandwidth and latency (ring all-reduce on 2 ranks: t = S/bw + 2 lat).
   These are per device, link and op class, never per plan.
2. Compare. For DP2, TP2 and PP2 (GPipe, 4 micro-batches), compile, predict
   with shoal-sim on 2 calibrated CPU devices, run under mpirun (one core
   each), and print both step times and the relative error.

Needs 2 cores free; figures from an oversubscribed machine mean nothing.
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, HERE)
import common  # noqa: E402
from pipeline_bubble import make_model, spec_text  # noqa: E402

CLUSTER = """version: 1
nodes:
  - {devices: {type: CPU, count: %d, peak_tflops: {fp32: %.6f}, matmul_half_rows: %.3f}}
links:
  intra_node: {bandwidth_GBps: %.6f, latency_us: %.3f}
"""


def ms_per_step(stdout):
    m = re.search(r"([0-9.]+) ms/step", stdout)
    if not m:
        raise RuntimeError("no step time in shoal-run's output:\n" + stdout)
    return float(m.group(1))


def predicted_ms(sim, plan, cluster):
    res = subprocess.run([sim, plan, "--cluster", cluster], check=True,
                         capture_output=True, text=True)
    m = re.search(r"predicted step ([0-9.]+) ms", res.stdout)
    return float(m.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="bench-out/sim")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args(argv)

    import numpy as np
    os.makedirs(os.path.join(args.out, "in"), exist_ok=True)
    model = os.path.join(args.out, "model.onnx")
    x = make_model(model, args.layers, args.hidden, args.batch)
    np.save(os.path.join(args.out, "in", "x.npy"), x)
    compile_ = common.find_tool(args.bin, "shoal-compile")
    run = common.find_tool(args.bin, "shoal-run")
    sim = common.find_tool(args.bin, "shoal-sim")
    inputs = os.path.join(args.out, "in")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **common.MPI_ENV)
    steps = ["--steps", str(args.steps), "--warmup", "2"]

    # 1. Calibration on one rank, one thread, at two batch sizes.
    rates = []
    for rows in (args.batch, args.batch // 4):
        d = os.path.join(args.out, "cal%d" % rows)
        os.makedirs(os.path.join(d, "in"), exist_ok=True)
        cm = os.path.join(d, "model.onnx")
        np.save(os.path.join(d, "in", "x.npy"),
                make_model(cm, args.layers, args.hidden, rows))
        plan = os.path.join(d, "p.plan")
        subprocess.run([compile_, cm, "-o", plan], check=True)
        res = subprocess.run([run, plan, "--inputs", os.path.join(d, "in"),
                              "--outputs", os.path.join(d, "out")] + steps,
                             check=True, capture_output=True, text=True, env=env)
        flops = 2.0 * rows * args.hidden * args.hidden * args.layers
        rates.append((rows, flops / (ms_per_step(res.stdout) * 1e-3)))
    (m1, r1), (m2, r2) = rates
    # r = P m / (m + h) at two m: h and P from the two runs.
    h = (r1 - r2) * m1 * m2 / (r2 * m1 - r1 * m2) if r2 * m1 != r1 * m2 else 0
    h = max(h, 0.0)
    peak = r1 * (m1 + h) / m1
    print("calibration: %d rows %.1f GFLOP/s, %d rows %.1f GFLOP/s -> peak "
          "%.1f GFLOP/s per core, half of it at %.1f rows"
          % (m1, r1 / 1e9, m2, r2 / 1e9, peak / 1e9, h))
    # The link: median all-reduce time of a TP2 plan at two sizes.
    points = []
    for rows in (64, 256):
        d = os.path.join(args.out, "link%d" % rows)
        os.makedirs(os.path.join(d, "in"), exist_ok=True)
        cm = os.path.join(d, "model.onnx")
        np.save(os.path.join(d, "in", "x.npy"), make_model(cm, 4, 512, rows))
        spec = os.path.join(d, "tp.yaml")
        with open(spec, "w") as f:
            f.write("version: 1\nscopes:\n  - {split: 2, name: m, nodes: [\"*\"]}\n")
        plan = os.path.join(d, "p.plan")
        subprocess.run([compile_, cm, "--annotate", spec, "--world-size", "2",
                        "-o", plan], check=True)
        res = subprocess.run(
            common.mpirun_cmd(args.mpirun, 2, [run, plan, "--inputs",
                                               os.path.join(d, "in"), "--outputs",
                                               os.path.join(d, "out"), "--verbose"]
                              + steps),
            check=True, capture_output=True, text=True, env=env)
        times = sorted(float(t) for t in re.findall(
            r"\(AllReduce\)\s+([0-9.]+) ms", res.stderr))
        if not times:
            raise RuntimeError("no AllReduce timings in shoal-run --verbose")
        points.append((rows * 512 * 4.0, times[len(times) // 2] * 1e-3))
    (s1, t1), (s2, t2) = points
    bw = (s2 - s1) / (t2 - t1) if t2 > t1 else s2 / t2
    lat = max((t1 - s1 / bw) / 2, 0.0)
    print("calibration: all-reduce %.0f KiB in %.1f us, %.0f KiB in %.1f us -> "
          "link %.2f GB/s, %.1f us" % (s1 / 1024, t1 * 1e6, s2 / 1024, t2 * 1e6,
                                      bw / 1e9, lat * 1e6))
    cluster = os.path.join(args.out, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER % (2, peak / 1e12, h, bw / 1e9, lat * 1e6))

    # 2. Three sharded plans on 2 ranks.
    specs = {
        "DP2": "version: 1\nscopes:\n  - {replicate: 2, name: m, nodes: [\"*\"]}\n",
        "TP2": "version: 1\nscopes:\n  - {split: 2, name: m, nodes: [\"*\"]}\n",
        "PP2": spec_text(2, args.layers, 4, "gpipe"),
    }
    print("%-5s %14s %14s %8s" % ("plan", "predicted ms", "measured ms", "error"))
    worst = 0
    for name, text in specs.items():
        spec = os.path.join(args.out, name + ".yaml")
        with open(spec, "w") as f:
            f.write(text)
        plan = os.path.join(args.out, name + ".plan")
        subprocess.run([compile_, model, "--annotate", spec, "--world-size", "2",
                        "-o", plan], check=True)
        pred = predicted_ms(sim, plan, cluster)
        res = subprocess.run(
            common.mpirun_cmd(args.mpirun, 2, [run, plan, "--inputs", inputs,
                                               "--outputs",
                                               os.path.join(args.out, "out_" + name)]
                              + steps),
            check=True, capture_output=True, text=True, env=env)
        meas = ms_per_step(res.stdout)
        err = abs(pred - meas) / meas
        worst = max(worst, err)
        print("%-5s %14.3f %14.3f %7.1f%%" % (name, pred, meas, 100 * err))
    print("worst error: %.1f%% (target: 15%%)" % (100 * worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
