#!/usr/bin/python3
"""The planner's memory estimate against shoal-run --report-memory.

    /usr/bin/python3 bench/memory_model.py --bin build/bin [--out DIR]
        [--layouts dp2,dp2-mb2,tp2,tp2-sp,pp2,pp2-v2] [--options plain,zero1,...] [--rtol 0.1]
    /usr/bin/python3 bench/memory_model.py --bin build/bin --model gpt2

For the GPT example (examples/gpt/make_model.py) under each layout (DP2,
DP2 with 2 micro-batches of gradient accumulation, TP2, TP2 with sequence
parallelism, PP2 with 1F1B, PP2 interleaved with 2 chunks per stage, on 2
ranks) and each training option (plain AdamW,
`zero: 1|2|3`, `recompute: full|selective`, `precision: bf16`):

1. `shoal-compile --train --cluster` (two CPU devices) makes the plan and
   writes the planner's estimate per stage (`shoal.plan`'s
   `stage_{weights,gradients,optimizer,activations}_bytes`, from
   `estimateMemory`, read from `--emit-mlir`);
2. `shoal-run --steps 1 --report-memory=ranks` under mpirun reports the
   same four parts for every rank (docs/Runtime.md); each pipeline stage
   is compared with its own rank (rank 0 otherwise);
3. `shoal-sim PLAN --cluster` predicts each program's parts from the
   compiled plan, with the runtime's own buffer plan (docs/Planner.md);
4. the table gives all three, per part, and estimate / measured. A planner
   part is "ok" within --rtol (relative to the measured part, parts under
   1 KiB on both sides count as equal); a shoal-sim part is "ok" when it
   prints the same MiB (3 decimals) as shoal-run. Exit status 1 if any part
   is off (with --sim-only, if any shoal-sim part is off).

The model is the examples' small GPT (113,408 parameters): the figures are
KiB, but every part is counted the way it is for a large model. `--model
NAME` takes a language model of the model zoo instead (test/zoo/models.py:
gpt2, llama, bert, ...: Hugging Face `transformers` models not written for
the project, exported by the zoo, with the zoo's layer-wise specs and its
cross-entropy training config); it runs itself under the test-reference
virtual environment's python (scripts/install-deps.sh), which has
`transformers`, and exits 77 (skipped) without it.
"""

import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

CLUSTER = """version: 1
nodes:
  - {devices: {type: CPU, count: 2, peak_tflops: {fp32: 0.05}, memory_GiB: 16}}
"""
SPECS = {"dp2": "spec_dp.yaml", "tp2": "spec_tp.yaml", "pp2": "spec_pp2.yaml",
         # Interleaved 1F1B: 4 chunks on 2 stages (docs/Pipelines.md).
         "pp2-v2": "spec_interleaved.yaml",
         # TP2 with sequence parallelism (docs/Training.md).
         "tp2-sp": "spec_tp_sp.yaml"}
# Layouts made from another by adding lines to its spec: DP2 accumulating
# gradients over 2 micro-batches (its forward and backward become tasks of
# their own, as a pipeline stage's).
DERIVED = {"dp2-mb2": ("dp2", "pipeline: {num_micro_batch: 2}\n")}


# The zoo's names for layouts named otherwise here (test/zoo/run_zoo.py).
ZOO_LAYOUTS = {"pp2-v2": "pp2-interleaved"}


def derived_spec(spec_text, layout, d):
    """The spec of `layout` from its base layout's text, written into `d`."""
    path = os.path.join(d, "spec.yaml")
    with open(path, "w") as f:
        f.write(spec_text + DERIVED[layout][1])
    return path
OPTIONS = {
    "plain": "",
    "zero1": "zero: 1\n",
    "zero2": "zero: 2\n",
    "zero3": "zero: 3\n",
    "rc-full": "recompute: full\n",
    "rc-selective": "recompute: selective\n",
    "bf16": "precision: bf16\n",
}
PARTS = ["weights", "gradients", "optimizer", "activations"]
# Parts the planner is known to miss, with the looser bound they are held
# to and why: (model, layout, option, part) as regular expressions. Each is
# an open item, printed, not hidden.
KNOWN_GAPS = [
    # Under: the runtime holds GPT-2's c_attn weight gradient (48 KiB, whole:
    # the fused [E, 3E] weight stays whole under tensor parallelism) from
    # the second layer's backward to the step's end, where it is summed
    # over the tp group; the planner prices a split op's weight gradient as
    # its shard's, summed in place. Goes with splitting c_attn (the
    # Hugging Face families issue).
    ("gpt2", r"tp2-sp", "rc-full", "activations", 0.2,
     "the runtime holds the whole c_attn weight gradient from the second "
     "layer's backward to the step's end (c_attn stays whole under tensor "
     "parallelism); the planner counts no such temporary"),
]
# The planner's step for the layout it compiles (shoal-plan's remark) and
# shoal-sim's for the compiled plan.
PLANNED_RE = re.compile(r"shoal-plan: (?:as annotated|hardware-aware) \(.*?\): "
                        r"([0-9.e+]+) ms per step")
STEP_RE = re.compile(r"predicted step ([0-9.e+]+) ms")
SIM_RE = re.compile(r"shoal-sim: .* \(\d+ ranks\): .*memory [\d.]+ MiB \(weights ([\d.]+) MiB, "
                    r"grads ([\d.]+) MiB, optimizer ([\d.]+) MiB, activations ([\d.]+) MiB\)")
REPORT_RE = re.compile(r"memory of rank (\d+): weights ([\d.]+) MiB, grads ([\d.]+) MiB, "
                       r"optimizer ([\d.]+) MiB, activations ([\d.]+) MiB, "
                       r"peak [\d.]+ MiB")
# Of the activations, what the weight gradients add before their sum
# (MemoryReport::gradientTemporaries), in both: compared for equality.
SIM_TEMP_RE = re.compile(r"shoal-sim: .* \(\d+ ranks\): .*weight gradients before their "
                         r"sum ([\d.]+) MiB")
REPORT_TEMP_RE = re.compile(r"memory of rank (\d+): .*weight gradients before their sum "
                            r"([\d.]+) MiB")


def planner_parts(mlir_path):
    """[{part: bytes}] per stage from the shoal.plan attribute; None when
    the planner kept the layout as annotated without predicting it (an
    interleaved pipeline whose chunks are not alike, docs/Planner.md)."""
    with open(mlir_path) as f:
        text = f.read()
    stages = None
    for part in PARTS:
        m = re.search(r"stage_%s_bytes = array<i64: ([\d, ]+)>" % part, text)
        if not m:
            if part == PARTS[0] and "stage_" not in text:
                return None
            raise SystemExit("error: %s has no stage_%s_bytes in shoal.plan" % (mlir_path, part))
        values = [int(x) for x in m.group(1).split(",")]
        if stages is None:
            stages = [dict() for _ in values]
        for s, v in zip(stages, values):
            s[part] = v
    return stages


def gpt_model(out):
    """examples/gpt's model, token labels, its specs and the GPT training
    config in `out`: (layout -> spec path, config text)."""
    common.run_cmd([sys.executable, os.path.join(REPO, "examples", "gpt", "make_model.py"),
                    "--out", out])
    import numpy as np
    ids = np.load(os.path.join(out, "inputs", "input_ids.npy"))
    np.save(os.path.join(out, "inputs", "labels.npy"),
            np.random.default_rng(1).integers(0, 96, size=ids.shape, dtype=np.int64))
    with open(os.path.join(REPO, "test", "e2e", "train_adamw.yaml")) as f:
        config = f.read()
    def spec_of(layout, d):
        if layout in DERIVED:
            with open(os.path.join(REPO, "examples", "gpt", SPECS[DERIVED[layout][0]])) as f:
                return derived_spec(f.read(), layout, d)
        return os.path.join(REPO, "examples", "gpt", SPECS[layout])
    return spec_of, config


def zoo_model(name, out):
    """A language model of the model zoo, exported as the zoo does, with
    token labels, the zoo's specs and its cross-entropy config."""
    sys.path.insert(0, os.path.join(REPO, "test", "zoo"))
    import run_zoo
    missing = common.missing_modules(["torch", "onnx", "transformers"])
    vpy = run_zoo.venv_python()
    if missing and os.path.isfile(vpy) and not os.environ.get("SHOAL_ZOO_REEXEC"):
        # The test-reference environment has transformers.
        os.environ["SHOAL_ZOO_REEXEC"] = "1"
        os.execv(vpy, [vpy, os.path.abspath(__file__)] + sys.argv[1:])
    if missing:
        print("SKIP: %s cannot import %s (scripts/install-deps.sh installs them in %s)"
              % (sys.executable, ", ".join(missing), os.path.dirname(os.path.dirname(vpy))))
        sys.exit(run_zoo.SKIP)
    try:
        import torch
        import models as zoo
        model = zoo.BY_NAME.get(name)
        if model is None or not model.lm:
            raise SystemExit("error: --model %s: not a language model of test/zoo/models.py "
                             "(known: gpt, %s)" % (name, ", ".join(
                                 m.name for m in zoo.MODELS if m.lm)))
        torch.manual_seed(0)
        _, inputs, out_names, info = run_zoo.export(model, out, torch)
    except ImportError as e:
        raise SystemExit("error: --model %s needs the test-reference environment's python "
                         "(~/.cache/shoal-venv/bin/python, scripts/install-deps.sh): %s"
                         % (name, e))
    import numpy as np
    ref = np.load(os.path.join(out, "reference", out_names[0] + ".npy"))
    np.save(os.path.join(out, "inputs", "labels.npy"),
            np.random.default_rng(1).integers(0, ref.shape[-1], size=ref.shape[:-1],
                                              dtype=np.int64))
    nodes = info["node_names"]

    def spec_of(layout, d):
        base = DERIVED[layout][0] if layout in DERIVED else layout
        text = run_zoo.make_spec(model, "train-" + ZOO_LAYOUTS.get(base, base), nodes)
        if layout in DERIVED:
            return derived_spec(text, layout, d)
        path = os.path.join(d, "spec.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path
    return spec_of, run_zoo.TRAIN_CONFIG_CE % out_names[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="BUILD/bin")
    ap.add_argument("--out", default="/tmp/shoal-memory-model", help="work folder (emptied)")
    ap.add_argument("--layouts", default="dp2,dp2-mb2,tp2,tp2-sp,pp2,pp2-v2")
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--rtol", type=float, default=0.1)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--model", default="gpt",
                    help="gpt (examples/gpt) or a language model of test/zoo/models.py")
    ap.add_argument("--sim-only", action="store_true",
                    help="fail only on shoal-sim parts (the ctest memory.sim)")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    if a.model == "gpt":
        spec_of, base_config = gpt_model(out)
    else:
        spec_of, base_config = zoo_model(a.model, out)
    model = os.path.join(out, "model.onnx")
    cluster = os.path.join(out, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    rows, bad, sim_bad, gaps, unpredicted, steps = [], 0, 0, [], 0, []
    temp_checked, temp_bad = 0, []
    for layout in a.layouts.split(","):
        for opt in a.options.split(","):
            d = os.path.join(out, "%s-%s" % (layout, opt))
            os.makedirs(d)
            config = os.path.join(d, "train.yaml")
            with open(config, "w") as f:
                f.write(base_config + OPTIONS[opt])
            plan, mlir = os.path.join(d, "model.plan"), os.path.join(d, "model.mlir")
            res = common.run_cmd([os.path.join(a.bin, "shoal-compile"), model, "--annotate",
                                  spec_of(layout, d),
                                  "--world-size", "2", "--train", config, "--cluster", cluster,
                                  "-o", plan, "--emit-mlir", mlir, "--explain"])
            planned = [float(x) for x in PLANNED_RE.findall(res.stderr)]
            est = planner_parts(mlir)
            res = common.run_cmd([os.path.join(a.bin, "shoal-sim"), plan, "--cluster", cluster])
            m = STEP_RE.search(res.stdout)
            if planned and m:
                steps.append((layout, opt, planned[-1], float(m.group(1))))
            sim = [dict(zip(PARTS, (float(x) for x in m.groups())))
                   for m in SIM_RE.finditer(res.stdout)]
            sim_temp = [float(x) for x in SIM_TEMP_RE.findall(res.stdout)]
            predicted = est is not None
            if not predicted:
                est = [None] * len(sim)
            if len(sim) != len(est):
                raise SystemExit("error: shoal-sim printed %d programs' memory for %d stages:\n%s"
                                 % (len(sim), len(est), res.stdout))
            run = common.mpirun_cmd(a.mpirun, 2, [
                os.path.join(a.bin, "shoal-run"), plan, "--steps", "1", "--inputs",
                os.path.join(out, "inputs"), "--report-memory=ranks"])
            res = common.run_cmd(run, env_extra=common.MPI_ENV)
            ranks = {int(m.group(1)): dict(zip(PARTS, (float(x) * (1 << 20)
                                                        for x in m.groups()[1:5])))
                     for m in REPORT_RE.finditer(res.stdout + res.stderr)}
            if sorted(ranks) != [0, 1]:
                raise SystemExit("error: no memory report per rank from %s" % " ".join(run))
            ranks_temp = {int(r): float(x) for r, x in
                          REPORT_TEMP_RE.findall(res.stdout + res.stderr)}
            for k in range(len(est)):
                temp_checked += 1
                if k >= len(sim_temp) or k not in ranks_temp or \
                        abs(sim_temp[k] - ranks_temp[k]) >= 5e-4:
                    sim_bad += 1
                    temp_bad.append("%s %s stage %d: shoal-sim %s MiB, shoal-run %s MiB" % (
                        layout, opt, k, sim_temp[k] if k < len(sim_temp) else "-",
                        ranks_temp.get(k, "-")))
            # Stage k of a pipeline on rank k; one stage on both ranks
            # (rank 0's figures).
            for k, stage in enumerate(est):
                name = layout if len(est) == 1 else "%s stage %d" % (layout, k)
                for part in PARTS:
                    r = ranks[k][part]
                    # Both print MiB with 3 decimals.
                    s_mib = sim[k][part]
                    s_ok = abs(s_mib - r / (1 << 20)) < 5e-4
                    sim_bad += not s_ok
                    if not predicted:
                        unpredicted += 1
                        rows.append((name, opt, part, None, r, None, True, s_mib * 1024, s_ok))
                        continue
                    e = stage[part]
                    ratio = e / r if r else float("inf") if e else 1.0
                    rtol, why = a.rtol, None
                    for gm, gl, go, gp, bound, reason in KNOWN_GAPS:
                        if (re.fullmatch(gm, a.model) and re.fullmatch(gl, name)
                                and re.fullmatch(go, opt) and gp == part):
                            rtol, why = bound, reason
                    ok = (e < 1024 and r < 1024) or abs(e - r) <= rtol * r
                    if why and ok and abs(e - r) > a.rtol * r:
                        gaps.append((name, opt, part, rtol, why))
                    bad += not ok
                    rows.append((name, opt, part, e, r, ratio, ok, s_mib * 1024, s_ok))
    print("| layout | option | part | planner KiB | shoal-sim KiB | measured KiB "
          "| planner / measured | |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for layout, opt, part, e, r, ratio, ok, s_kib, s_ok in rows:
        flags = [] if ok else ["**planner off**"]
        if not s_ok:
            flags.append("**shoal-sim off**")
        print("| %s | %s | %s | %s | %.1f | %.1f | %s | %s |" % (
            layout, opt, part, "-" if e is None else "%.1f" % (e / 1024), s_kib,
            r / 1024, "-" if ratio is None else "%.2f" % ratio,
            ", ".join(flags) or "ok"))
    for name, opt, part, rtol, why in gaps:
        print("\nknown gap (<= %.0f%%): %s %s %s: %s" % (100 * rtol, name, opt, part, why))
    print("\nplanner: %d of %d parts within %.0f%% (%d of them within a known gap's bound)"
          % (len(rows) - unpredicted - bad, len(rows) - unpredicted, a.rtol * 100, len(gaps)))
    if unpredicted:
        print("planner: %d parts of layouts kept as annotated, not predicted (\"-\")"
              % unpredicted)
    print("shoal-sim: %d of %d parts equal to shoal-run's (to 0.001 MiB)"
          % (len(rows) + temp_checked - sim_bad, len(rows) + temp_checked))
    print("shoal-sim: the weight gradients before their sum (of the activations) equal "
          "to shoal-run's in %d of %d programs" % (temp_checked - len(temp_bad), temp_checked))
    for line in temp_bad:
        print("  differs: %s" % line)
    if steps:
        print("\n| layout | option | planner step (ms) | shoal-sim step (ms) | off |")
        print("| --- | --- | ---: | ---: | ---: |")
        for layout, opt, p, q in steps:
            print("| %s | %s | %.4g | %.4g | %+.1f%% |" % (layout, opt, p, q, 100 * (q / p - 1)))
        within = sum(abs(q / p - 1) <= a.rtol for _, _, p, q in steps)
        print("\nplanner step: %d of %d layouts within %.0f%% of shoal-sim's (printed, "
              "not checked)" % (within, len(steps), a.rtol * 100))
    if a.sim_only:
        return 1 if sim_bad else 0
    return 1 if bad or sim_bad else 0


if __name__ == "__main__":
    sys.exit(main())
