#!/usr/bin/env python3
"""Import time and peak memory of GPT-3-sized graphs (no weight data).

Builds GPT graphs of hidden size 12288 (96 heads, sequence 2048, vocabulary
50304) with 12, 48 and 96 layers, every initializer pointing into an empty
external-data file (the compiler never reads weights), and times
`shoal-translate --import-onnx` and `shoal-compile` (import + parallelize +
plan export, split(8) over 64 ranks) on each, printing wall time and the
peak resident memory of the tool.

  /usr/bin/python3 bench/import_scale.py --bin build/bin [--layers 12,48,96]
"""

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time


def load_gpt_builder():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gpt_cuda", os.path.join(here, "gpt_cuda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(cmd):
    """Wall seconds and peak RSS (MiB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), res.stderr[-2000:]))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest so far; runs go from small to
    # large, so it is this run's peak.
    return seconds, max(peak, before) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--layers", default="12,48,96")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    gpt = load_gpt_builder()
    work = args.work or tempfile.mkdtemp(prefix="shoal-import-")
    spec = os.path.join(work, "spec.yaml")
    with open(spec, "w") as f:
        f.write("version: 1\nscopes:\n  - {split: 8, name: model, nodes: ['*']}\n")
    print("%7s %12s %10s %12s %12s %12s %12s" % (
        "layers", "params", "nodes", "import s", "import MiB", "compile s", "compile MiB"))
    for n in [int(x) for x in args.layers.split(",")]:
        cfg = dict(vocab=50304, hidden=12288, heads=96, layers=n, seq=2048, batch=8)
        d = os.path.join(work, "L%d" % n)
        os.makedirs(d, exist_ok=True)
        model = os.path.join(d, "model.onnx")
        gpt.build_graph(cfg, model)
        open(os.path.join(d, "weights.bin"), "wb").close()
        params = sum(int(__import__("numpy").prod(s)) for _, s in gpt.weight_list(cfg))
        import onnx
        nodes = len(onnx.load(model, load_external_data=False).graph.node)
        t_imp, m_imp = measure([os.path.join(args.bin, "shoal-translate"), "--import-onnx",
                                model, "-o", os.path.join(d, "model.mlir")])
        t_cmp, m_cmp = measure([os.path.join(args.bin, "shoal-compile"), model, "--annotate",
                                spec, "--world-size", "64", "-o", os.path.join(d, "model.plan")])
        print("%7d %11.1fB %10d %12.2f %12.0f %12.2f %12.0f" % (
            n, params / 1e9, nodes, t_imp, m_imp, t_cmp, m_cmp))


if __name__ == "__main__":
    main()
