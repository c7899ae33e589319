#!/usr/bin/python3
"""Pipeline bubble: measured against the schedule's (p-1)/(v*m).

    /usr/bin/python3 bench/pipeline_bubble.py --bin build/bin [--out DIR]
        [--stages 4] [--micro-batches 4,8,16] [--schedules gpipe,1f1b]
        [--layers 8] [--hidden 512] [--batch 64] [--steps 3]

Builds a stack of `layers` Linear+GELU layers (PyTorch -> ONNX), compiles it
into `stages` pipeline stages of one device each for every schedule and
micro-batch count, runs each plan under mpirun with `--steps`, and prints
shoal-run's bubble report and step time per configuration. Each stage must
have a core of its own for the figures to mean anything (4 stages: at least
4 cores); on an oversubscribed machine the stages take turns and the
measured bubble mostly shows that.
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import common  # noqa: E402


def make_model(path, layers, hidden, batch):
    import numpy as np
    import torch
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*mods).eval()
    x = torch.randn(batch, hidden)
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                      opset_version=17)
    return x.numpy().astype(np.float32)


def spec_text(stages, layers, m, schedule):
    per = layers // stages
    lines = ["version: 1",
             "pipeline: {num_micro_batch: %d, schedule: %s}" % (m, schedule),
             "scopes:"]
    for s in range(stages):
        # nn.Sequential names nodes /0/Gemm, /1/Mul, ...: layer i is modules
        # 2i and 2i+1.
        mods = range(2 * s * per, 2 * (s + 1) * per)
        pats = ", ".join('"/%d/*"' % i for i in mods)
        lines.append("  - {replicate: 1, name: s%d, nodes: [%s]}" % (s, pats))
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="build/bench-out/pipeline")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--micro-batches", default="4,8,16")
    ap.add_argument("--schedules", default="gpipe,1f1b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args(argv)
    if args.layers % args.stages:
        ap.error("--layers must be a multiple of --stages")

    import numpy as np
    os.makedirs(os.path.join(args.out, "in"), exist_ok=True)
    model = os.path.join(args.out, "model.onnx")
    x = make_model(model, args.layers, args.hidden, args.batch)
    np.save(os.path.join(args.out, "in", "x.npy"), x)
    compile_ = common.find_tool(args.bin, "shoal-compile")
    run = common.find_tool(args.bin, "shoal-run")
    print("model: %d x Linear(%d)+GELU, batch %d; %d stages, %d steps"
          % (args.layers, args.hidden, args.batch, args.stages, args.steps))
    print("%-8s %4s %12s %10s %10s" % ("schedule", "m", "ms/step", "measured",
                                       "(p-1)/m"))
    for schedule in args.schedules.split(","):
        for m in [int(v) for v in args.micro_batches.split(",")]:
            if args.batch % m:
                continue
            tag = "%s_m%d" % (schedule, m)
            spec = os.path.join(args.out, tag + ".yaml")
            with open(spec, "w") as f:
                f.write(spec_text(args.stages, args.layers, m, schedule))
            plan = os.path.join(args.out, tag + ".plan")
            subprocess.run([compile_, model, "--annotate", spec, "-o", plan],
                           check=True)
            cmd = common.mpirun_cmd(args.mpirun, args.stages,
                                    [run, plan, "--inputs",
                                     os.path.join(args.out, "in"), "--outputs",
                                     os.path.join(args.out, "out_" + tag),
                                     "--steps", str(args.steps), "--warmup", "1",
                                     "--trace", os.path.join(args.out, tag + ".json")])
            env = dict(os.environ, **common.MPI_ENV)
            res = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                 env=env)
            step = re.search(r"([0-9.]+) ms/step", res.stdout)
            bubble = re.search(r"bubble measured ([0-9.]+).*= ([0-9.]+)",
                               res.stdout)
            print("%-8s %4d %12s %10s %10s"
                  % (schedule, m, step.group(1) if step else "?",
                     bubble.group(1) if bubble else "?",
                     bubble.group(2) if bubble else "?"))
    print("traces: %s/*.json (open in Perfetto)" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
