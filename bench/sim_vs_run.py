#!/usr/bin/python3
"""shoal-sim's predicted step time against shoal-run's measured one.

    /usr/bin/python3 bench/sim_vs_run.py --bin build/bin [--out DIR]
        [--layers 8] [--hidden 1024] [--batch 128] [--steps 10]

One calibration, then three sharded plans of the same model on 2 ranks:

1. Calibrate. `shoal-run --profile` records every op's time in one-rank
   runs (one BLAS thread) of a stack of `layers` Linear+GELU layers at the
   full batch and at a quarter of it, and every all-reduce's time in
   tensor-parallel runs on 2 ranks of a *different* model (hidden 512) at
   two batch sizes. `shoal-sim --calibration` fits from those profiles the
   CPU's matrix-product peak P and half rows h (rate = P * m / (m + h)),
   its memory bandwidth (other ops) and the link's bandwidth and latency
   (ring formulas), per device type, link and op class, never per plan,
   and uses them in place of the datasheet figures.
2. Compare. For DP2, TP2 and PP2 (GPipe, 4 micro-batches), compile, predict
   with shoal-sim on 2 calibrated CPU devices, run under mpirun (one core
   each), and print both step times and the relative error.

Needs 2 cores free; figures from an oversubscribed machine mean nothing.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, HERE)
import common  # noqa: E402
from pipeline_bubble import make_model, spec_text  # noqa: E402

# Datasheet figures only: shoal-sim --calibration replaces them.
CLUSTER = """version: 1
nodes:
  - {devices: {type: CPU, count: %d}}
"""


def ms_per_step(stdout):
    m = re.search(r"([0-9.]+) ms/step", stdout)
    if not m:
        raise RuntimeError("no step time in shoal-run's output:\n" + stdout)
    return float(m.group(1))


def predicted_ms(sim, plan, cluster, calibration, show=False):
    res = subprocess.run([sim, plan, "--cluster", cluster] + calibration,
                         check=True, capture_output=True, text=True)
    if show:
        for line in res.stdout.splitlines():
            if "calibrated:" in line:
                print(line)
    m = re.search(r"predicted step ([0-9.]+) ms", res.stdout)
    return float(m.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="build/bench-out/sim")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5,
                    help="rounds of calibration and measurement (medians)")
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
    # The link's runs are short and their all-reduces noisy: more steps.
    link_steps = ["--steps", str(3 * args.steps), "--warmup", "2"]

    # 1. Calibration: profiles of one-rank runs (one thread) at two batch
    # sizes, and of a tensor-parallel plan of another model on 2 ranks.
    def calibrate(tag):
        profiles = []
        for rows in (args.batch, args.batch // 4):
            d = os.path.join(args.out, "cal%d" % rows)
            cm = os.path.join(d, "model.onnx")
            if not os.path.exists(cm):
                os.makedirs(os.path.join(d, "in"), exist_ok=True)
                np.save(os.path.join(d, "in", "x.npy"),
                        make_model(cm, args.layers, args.hidden, rows))
                subprocess.run([compile_, cm, "-o", os.path.join(d, "p.plan")],
                               check=True)
            # One run on each core at once: the device as the sharded runs
            # see it, its neighbour busy too (shared caches and memory).
            procs = []
            for core in range(2):
                prof = os.path.join(d, "profile%s-%d.json" % (tag, core))
                procs.append(subprocess.Popen(
                    ["taskset", "-c", str(core), run, os.path.join(d, "p.plan"),
                     "--inputs", os.path.join(d, "in"), "--outputs",
                     os.path.join(d, "out%d" % core), "--profile", prof] + steps,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    env=env))
                profiles.append(prof)
            for proc in procs:
                _, err = proc.communicate()
                if proc.returncode:
                    raise SystemExit("error: a calibration run failed:\n" + err)
        for rows in (64, 256):
            d = os.path.join(args.out, "link%d" % rows)
            cm = os.path.join(d, "model.onnx")
            plan = os.path.join(d, "p.plan")
            if not os.path.exists(cm):
                os.makedirs(os.path.join(d, "in"), exist_ok=True)
                np.save(os.path.join(d, "in", "x.npy"), make_model(cm, 4, 512, rows))
                spec = os.path.join(d, "tp.yaml")
                with open(spec, "w") as f:
                    f.write("version: 1\nscopes:\n"
                            "  - {split: 2, name: m, nodes: [\"*\"]}\n")
                subprocess.run([compile_, cm, "--annotate", spec, "--world-size", "2",
                                "-o", plan], check=True)
            prof = os.path.join(d, "profile%s.json" % tag)
            subprocess.run(
                common.mpirun_cmd(args.mpirun, 2, [run, plan, "--inputs",
                                                   os.path.join(d, "in"), "--outputs",
                                                   os.path.join(d, "out"),
                                                   "--profile", prof]
                                  + link_steps),
                check=True, capture_output=True, text=True, env=env)
            profiles.append(prof)
        calibration = []
        for p in profiles:
            calibration += ["--calibration", p]
        return calibration

    cluster = os.path.join(args.out, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER % 2)

    # 2. Three sharded plans on 2 ranks.
    specs = {
        "DP2": "version: 1\nscopes:\n  - {replicate: 2, name: m, nodes: [\"*\"]}\n",
        "TP2": "version: 1\nscopes:\n  - {split: 2, name: m, nodes: [\"*\"]}\n",
        "PP2": spec_text(2, args.layers, 4, "gpipe"),
    }
    plans = {}
    for name, text in specs.items():
        spec = os.path.join(args.out, name + ".yaml")
        with open(spec, "w") as f:
            f.write(text)
        plans[name] = os.path.join(args.out, name + ".plan")
        subprocess.run([compile_, model, "--annotate", spec, "--world-size", "2",
                        "-o", plans[name]], check=True)

    # Rounds: a calibration, then each plan's prediction and measurement,
    # back to back, so that both see the machine in the same state.
    pred = {name: [] for name in specs}
    meas = {name: [] for name in specs}
    for rnd in range(args.repeats):
        calibration = calibrate(str(rnd))
        for name in specs:
            pred[name].append(predicted_ms(sim, plans[name], cluster, calibration,
                                           show=rnd == 0 and name == "DP2"))
            res = subprocess.run(
                common.mpirun_cmd(args.mpirun, 2, [run, plans[name], "--inputs", inputs,
                                                   "--outputs",
                                                   os.path.join(args.out, "out_" + name)]
                                  + steps),
                check=True, capture_output=True, text=True, env=env)
            meas[name].append(ms_per_step(res.stdout))
    print("%-5s %14s %14s %8s   %s" % ("plan", "predicted ms", "measured ms", "error",
                                       "errors of the rounds"))
    worst = 0
    for name in specs:
        errs = [(p - m) / m for p, m in zip(pred[name], meas[name])]
        err = statistics.median(errs)
        worst = max(worst, abs(err))
        print("%-5s %14.3f %14.3f %+7.1f%%   %s" % (
            name, statistics.median(pred[name]), statistics.median(meas[name]),
            100 * err, ", ".join("%+.1f%%" % (100 * e) for e in errs)))
    print("worst error (median of %d rounds): %.1f%% (target: 5%%)"
          % (args.repeats, 100 * worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
