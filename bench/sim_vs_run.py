#!/usr/bin/python3
"""shoal-sim's predicted step time against shoal-run's measured one.

    /usr/bin/python3 bench/sim_vs_run.py --bin build/bin [--out DIR]
        [--layers 8] [--hidden 1024] [--batch 128] [--steps 10]

One calibration, then three sharded plans of the same model on 2 ranks:

1. Calibrate. A one-rank run (one BLAS thread) of a stack of `layers`
   Linear+GELU layers gives the FLOP/s one core achieves. That one figure
   replaces the CPU entry's datasheet-free 0.1 TFLOP/s in the cluster spec
   (one efficiency per device, not per plan).
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
  - {devices: {type: CPU, count: %d, peak_tflops: {fp32: %.6f}}}
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

    # 1. Calibration on one rank, one thread.
    one = os.path.join(args.out, "one.plan")
    subprocess.run([compile_, model, "-o", one], check=True)
    res = subprocess.run([run, one, "--inputs", inputs, "--outputs",
                          os.path.join(args.out, "out1")] + steps,
                         check=True, capture_output=True, text=True, env=env)
    measured = ms_per_step(res.stdout)
    probe = os.path.join(args.out, "probe.yaml")
    with open(probe, "w") as f:
        f.write(CLUSTER % (1, 0.1))
    predicted = predicted_ms(sim, one, probe)
    tflops = 0.1 * predicted / measured
    print("calibration: one rank %.3f ms/step; at 0.1 TFLOP/s predicted %.3f ms"
          " -> %.4f TFLOP/s per core" % (measured, predicted, tflops))
    cluster = os.path.join(args.out, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER % (2, tflops))

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
