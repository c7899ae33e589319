#!/usr/bin/python3
"""The planner's search only returns layouts that compile (and run).

    /usr/bin/python3 test/e2e/search_sweep.py --bin build/bin --work DIR
        [--quick] [--run-max N] [--mpirun mpirun]

For cluster shapes of 1 to 9 devices of 1 to 3 kinds (one node per kind,
and one device per node), 3 devices (2 V100 + 1 T4, the case of issue 16)
and 4096 devices (512 nodes of 8 A100), `shoal-compile MODEL --cluster C`
(no annotation: shoal-plan searches) must either compile the layout it
chose or, when no layout suits the cluster at all, say so (never choose a
layout and then fail). Models: the GPT and MLP examples (batch 4 and 8),
and for 4096 devices an MLP with a batch of 1024 (`torch.nn`).

Winners on at most --run-max ranks (default 4) also run under mpirun and
must match the PyTorch reference outputs the example writes (1e-4
relative).

--quick (the ctest) takes every third shape of 1-9 devices plus the 3- and
4096-device shapes.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

KINDS = ["V100-32GB", "T4", "A100-80GB"]
NO_LAYOUT = "no layout of the model suits"


def shapes():
    """(name, [(kind, nodes, devices per node)])."""
    out = []
    for n in range(1, 10):
        for k in range(1, min(3, n) + 1):
            counts = [n // k + (1 if i < n % k else 0) for i in range(k)]
            out.append(("%d dev, %d kinds, node per kind" % (n, k),
                        [(KINDS[i], 1, c) for i, c in enumerate(counts)]))
            if n > 1:
                out.append(("%d dev, %d kinds, device per node" % (n, k),
                            [(KINDS[i], c, 1) for i, c in enumerate(counts)]))
    out.append(("2 V100 + 1 T4", [("V100-32GB", 1, 2), ("T4", 1, 1)]))
    return out


def cluster_yaml(groups):
    lines = ["version: 1", "nodes:"]
    for kind, nodes, per in groups:
        lines.append("  - {count: %d, devices: {type: %s, count: %d}}" % (nodes, kind, per))
    if sum(nodes for _, nodes, _ in groups) > 1:
        lines += ["links:", "  inter_node: {bandwidth_Gbps: 100, latency_us: 25}"]
    return "\n".join(lines) + "\n"


def make_big_mlp(out):
    """An MLP with a batch of 1024 (for 4096 devices: dp 512 x tp 8)."""
    import torch
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)).eval()
    x = torch.randn(1024, 64)
    path = os.path.join(out, "model.onnx")
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                      opset_version=17)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--run-max", type=int, default=4)
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    models = {}
    for name in ("gpt", "mlp"):
        d = os.path.join(a.work, name)
        if not os.path.exists(os.path.join(d, "model.onnx")):
            common.run_cmd([sys.executable, os.path.join(REPO, "examples", name, "make_model.py"),
                            "--out", d])
        models[name] = d
    cases = shapes()
    if a.quick:
        cases = cases[::3] + [c for c in cases[-1:] if c not in cases[::3]]
    jobs = [(m, name, groups) for name, groups in cases for m in ("gpt", "mlp")]
    big = make_big_mlp(os.path.join(a.work, "mlp1024"))
    jobs.append(("mlp1024", "4096 dev (512 x 8 A100)", [("A100-80GB", 512, 8)]))

    failures, rows = [], []
    for i, (model, name, groups) in enumerate(jobs):
        d = os.path.join(a.work, "case%03d" % i)
        os.makedirs(d, exist_ok=True)
        spec = os.path.join(d, "cluster.yaml")
        with open(spec, "w") as f:
            f.write(cluster_yaml(groups))
        world = sum(nodes * per for _, nodes, per in groups)
        onnx = big if model == "mlp1024" else os.path.join(models[model], "model.onnx")
        plan = os.path.join(d, "model.plan")
        res = subprocess.run([os.path.join(a.bin, "shoal-compile"), onnx, "--cluster", spec,
                              "--explain", "-o", plan], capture_output=True, text=True)
        chosen = re.search(r"^chosen: (.*?),", res.stderr, re.M)
        chosen = chosen.group(1) if chosen else "-"
        if res.returncode != 0:
            if chosen == "-" and NO_LAYOUT in res.stderr:
                rows.append((name, model, world, "none suits (clear error)", "ok"))
                continue
            failures.append("%s / %s: chose %s and failed:\n%s" % (name, model, chosen,
                                                                   res.stderr[-2000:]))
            rows.append((name, model, world, chosen, "FAILED to compile"))
            continue
        result = "compiled"
        if world <= a.run_max and model in models:
            out = os.path.join(d, "out")
            run = common.mpirun_cmd(a.mpirun, world, [
                os.path.join(a.bin, "shoal-run"), plan, "--inputs",
                os.path.join(models[model], "inputs"), "--outputs", out])
            r = subprocess.run(run, capture_output=True, text=True,
                               env=dict(os.environ, **common.MPI_ENV))
            if r.returncode != 0:
                failures.append("%s / %s: %s does not run:\n%s" % (name, model, chosen,
                                                                  r.stderr[-2000:]))
                result = "FAILED to run"
            else:
                worst = 0.0
                ref_dir = os.path.join(models[model], "reference")
                for f in sorted(os.listdir(ref_dir)):
                    ref, got = np.load(os.path.join(ref_dir, f)), np.load(os.path.join(out, f))
                    worst = max(worst, float(np.abs(ref - got).max() / max(np.abs(ref).max(), 1e-30)))
                result = "ran, %.1e of PyTorch" % worst
                if not worst <= 1e-4:
                    failures.append("%s / %s: %s differs from PyTorch by %.2e"
                                    % (name, model, chosen, worst))
                    result += " FAILED"
        rows.append((name, model, world, chosen, result))

    print("| cluster | model | devices | chosen | result |")
    print("| --- | --- | ---: | --- | --- |")
    for r in rows:
        print("| %s | %s | %d | %s | %s |" % r)
    print("\n%d cases, %d failed" % (len(rows), len(failures)))
    for f in failures:
        print("error: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
