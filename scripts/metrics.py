#!/usr/bin/python3
"""Curves and TensorBoard logs from shoal-run's metrics (--metrics FILE).

    scripts/metrics.py plot RUN.jsonl [OTHER.jsonl ...] -o curves.png
        [--label NAME ...] [--title TEXT]
    scripts/metrics.py tensorboard RUN.jsonl --logdir DIR

`plot` draws, with matplotlib (Debian's python3-matplotlib), the training
loss and the evaluation loss against the step (left), and the throughput
(tokens or samples per second) against the step (right), one line per file:
several runs (another layout, a PyTorch reference written in the same
format) side by side. `tensorboard` writes TensorBoard event files with
tensorboardX (installed into the test venv by scripts/install-deps.sh):
every numeric field of every record as the scalar `train/<field>` or
`eval/<field>` at its step; open them with `tensorboard --logdir DIR`.

A run resumed into the same metrics file appends to it: the steps after the
checkpoint it resumed from appear twice, and the later record of a step
wins. The file format is in docs/Training.md ("Metrics").
"""

import argparse
import json
import math
import os
import sys


def read_metrics(path):
    """(train records, eval records) of a metrics file, each sorted by step,
    the last record of a step kept."""
    train, evals = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit("error: %s:%d: not a JSON object (%s)" % (path, n, e))
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise SystemExit("error: %s:%d: expected an object with an integer \"step\", "
                                 "got %s" % (path, n, line[:80]))
            (evals if "eval_loss" in rec else train)[rec["step"]] = rec
    return ([train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)])


def throughput_key(records):
    for key in ("tokens_per_s", "samples_per_s"):
        if any(isinstance(r.get(key), (int, float)) for r in records):
            return key
    return None


def series(records, key):
    pts = [(r["step"], r[key]) for r in records
           if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in pts], [p[1] for p in pts]


def cmd_plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = args.label or []
    if len(labels) > len(args.files):
        raise SystemExit("error: %d --label for %d files" % (len(labels), len(args.files)))
    labels += [os.path.splitext(os.path.basename(p))[0] for p in args.files[len(labels):]]
    fig, (ax_loss, ax_rate) = plt.subplots(1, 2, figsize=(12, 4.5))
    rate_key = None
    for path, label in zip(args.files, labels):
        train, evals = read_metrics(path)
        if not train and not evals:
            raise SystemExit("error: %s holds no records" % path)
        x, y = series(train, "loss")
        line, = ax_loss.plot(x, y, label="%s train" % label, linewidth=1.2)
        x, y = series(evals, "eval_loss")
        if x:
            ax_loss.plot(x, y, "o--", color=line.get_color(), label="%s eval" % label,
                         markersize=4)
        key = throughput_key(train)
        if key:
            rate_key = rate_key or key
            x, y = series(train, key)
            ax_rate.plot(x, y, color=line.get_color(), label=label, linewidth=1.2)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("loss")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_rate.set_xlabel("step")
    ax_rate.set_ylabel((rate_key or "throughput").replace("_per_s", "/s"))
    ax_rate.set_title("throughput")
    if rate_key:
        ax_rate.legend()
    ax_rate.grid(alpha=0.3)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print("wrote %s (%d run%s)" % (args.output, len(args.files),
                                   "" if len(args.files) == 1 else "s"))
    return 0


def cmd_tensorboard(args):
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise SystemExit("error: %s cannot import tensorboardX (scripts/install-deps.sh "
                         "installs it into the test venv, ~/.cache/shoal-venv; or pip "
                         "install tensorboardX)" % sys.executable)
    train, evals = read_metrics(args.file)
    writer = SummaryWriter(logdir=args.logdir)
    count = 0
    for group, records in (("train", train), ("eval", evals)):
        for r in records:
            for key, value in r.items():
                if key == "step" or isinstance(value, bool) or \
                        not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                name = key[len("eval_"):] if group == "eval" and key.startswith("eval_") else key
                writer.add_scalar("%s/%s" % (group, name), value, r["step"])
                count += 1
    writer.close()
    print("wrote %d scalars of %d steps to %s" % (count, len(train) + len(evals), args.logdir))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plot", help="loss and throughput curves to a PNG")
    p.add_argument("files", nargs="+", help="metrics JSONL files (shoal-run --metrics)")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--label", action="append", help="a name per file, in order")
    p.add_argument("--title", default=None)
    t = sub.add_parser("tensorboard", help="TensorBoard event files")
    t.add_argument("file", help="a metrics JSONL file")
    t.add_argument("--logdir", required=True, help="the TensorBoard log folder")
    args = ap.parse_args(argv)
    for path in getattr(args, "files", None) or [args.file]:
        if not os.path.isfile(path):
            raise SystemExit("error: %s: no such file" % path)
    return cmd_plot(args) if args.cmd == "plot" else cmd_tensorboard(args)


if __name__ == "__main__":
    sys.exit(main())
