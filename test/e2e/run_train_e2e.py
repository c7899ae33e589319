#!/usr/bin/python3
"""End-to-end training test of shoal on the GPT example (docs/Training.md).

    /usr/bin/python3 test/e2e/run_train_e2e.py --bin BUILD/bin \
        --spec NAME.yaml --world-size N --work DIR [--steps K] [mode]

Default mode (layout test):
  (a) generate the GPT (examples/gpt/make_model.py) into DIR; random labels
      DIR/inputs/labels.npy next to the example's input_ids.npy;
  (b) one-rank training plan (test/e2e/spec_one_rank.yaml) and an N-rank one
      under SPEC, both `shoal-compile ... --train CONFIG`;
  (c) `shoal-run PLAN --steps K --inputs DIR/inputs --save CKPT` for each
      (the N-rank one under mpirun);
  (d) PyTorch: examples/gpt/train_reference.py, K steps from the same
      weights (read from model.onnx) with the same config;
  (e) assemble every weight and optimizer state from each checkpoint
      (manifest.json + shard files at their offsets; every element must be
      covered once, overlapping shards must agree) and compare:
        N-rank vs one-rank, N-rank vs PyTorch, one-rank vs PyTorch.
      Weights: max|a - b| / max(max|b|, 1e-12) per tensor <= --rtol (1e-5).
      Optimizer state (adam.m = EMA of the clipped gradient, sqrt(adam.v),
      sgd.momentum): max|a - b| / max(max|b|, 1e-3 * M) <= --state-rtol
      (1e-4), M the largest |b| of that kind over all tensors (a floor for
      the attention key biases, whose gradient is zero in exact arithmetic
      and so only rounding noise). With Adam the weights alone barely see the
      gradient's scale (m / sqrt(v) is scale-free), so the state is the
      gradient check. Also the loss of every step (progress lines) and the
      last step's loss.npy against PyTorch's at --rtol. --ignore N sets N
      labels to ignore_index (-100): the loss divides by all positions.

--loss-drop FACTOR (use --steps 100 and a config with a real learning rate):
  train the N-rank plan on a fixed synthetic task (next token of a
  repeating 12-token pattern; DIR/tokens.npy [64, T+1] with --data) and
  require final loss <= initial loss / FACTOR (step 1's loss vs the last
  step's loss.npy). PyTorch's curve on the same data is printed alongside.

--resume-check: under the N-rank plan with --data, 2K straight steps vs K
  steps + --save, then --resume + K steps (K = --steps, 10 by default here):
  every tensor of the two final checkpoints must be bit-identical, and the
  losses of the last K steps equal.

--cluster FILE (default mode): the N-rank plan is compiled with --cluster
  FILE --explain; its --explain must deal different micro-batch counts to
  the replicas (uneven batch shares), and every weight after K steps must
  equal that of the plan compiled without --cluster within --plain-rtol,
  the optimizer state within --state-rtol.

--zero N (default mode): the N-rank plan trains with `zero: N` added to the
  config (ZeRO stage N, docs/Training.md "ZeRO"); the same layout without
  ZeRO also trains K steps, and besides the comparisons above every tensor
  weight of the two checkpoints must agree within --plain-rtol (1e-6), the
  optimizer state within --state-rtol, and
  `shoal-run --report-memory` of the two must show the optimizer state
  (N >= 1), the gradients (N >= 2) and the weights (N = 3) of the ZeRO run
  at most 1/dp of the plain run's (+2% slack for the tensors ZeRO keeps
  whole), dp being --zero-dp (the ranks of the ZeRO axes); the others no
  more than plain (gradients under stage 1: plain + 1/dp, the whole
  accumulator over micro-batches and the scattered block).

--reshard SPEC2 --world-size2 M: K steps under SPEC on N ranks (--data),
  save; resume that checkpoint for 1 more step under SPEC (layout A) and
  under SPEC2 on M ranks (layout B); compare B vs A, and both vs PyTorch's
  K+1 steps, as in the default mode.

--export-check: K steps (2 by default here) under SPEC on N ranks with
  `--export-onnx DIR/export/trained.onnx --export-safetensors
  DIR/export/st` and no --save (the weights reach rank 0 through a scratch
  checkpoint, which must be gone afterwards); PyTorch trains K steps from the
  same weights (train_reference.py --logits). Then
    (a) the exported ONNX model passes onnx.checker, keeps the source's
        inputs and outputs, holds its tensors of 1 KiB or more in
        trained.onnx.data, and its initializers equal PyTorch's trained
        weights (--rtol; frozen ones the source's, exactly);
    (b) onnxruntime runs it on the example's input_ids, and so does shoal's
        own one-rank forward plan of it; both outputs match the trained
        PyTorch model's (--export-rtol, 1e-4);
    (c) safetensors.torch.load_file reads DIR/export/st/model.safetensors:
        every tensor equals the exported initializer of its name and
        PyTorch's trained weight; mapped onto the PyTorch GPT's parameter
        names (the exporter renames transposed Linear weights
        `onnx::MatMul_NNN`), load_state_dict(strict=True) takes them and
        the model's output matches the trained model's (--export-rtol).
  Needs onnxruntime and safetensors: when /usr/bin/python3 lacks them the
  script reruns itself under ${SHOAL_VENV:-~/.cache/shoal-venv}/bin/python
  (scripts/install-deps.sh), else exits 77 (skip).

Exit status: 0 pass, 1 fail, 2 usage error, 77 skip.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

REFERENCE = os.path.join(REPO, "examples", "gpt", "train_reference.py")
ONE_RANK_SPEC = os.path.join(HERE, "spec_one_rank.yaml")
DEFAULT_CONFIG = os.path.join(HERE, "train_adamw.yaml")
# Optimizer state is compared relative to max(|reference|, floor * the largest
# |reference| of its kind): a moment whose true value is zero (the attention
# key bias's gradient: softmax ignores a shift shared by all keys) is
# rounding noise, and only an absolute bound means anything there.
# --state-floor sets it (bf16 runs: their noise is ~bf16's 2^-8).
STATE_FLOOR = 1e-3


class Skip(Exception):
    """The test cannot run here (no usable GPU for --run-arg=--backend=cuda)."""


# Exit status of a test that cannot run here (ctest SKIP_RETURN_CODE).
SKIP = 77


class Prepared(Exception):
    """--phase prepare: the plans are compiled; stop before the first run."""


class Failure(Exception):
    """A check failed; the message says which and why."""


# ---------------------------------------------------------------------------
# Checkpoints (docs/Training.md)

def checkpoint_dir(ckpt):
    """DIR/<latest> of a checkpoint folder."""
    latest = os.path.join(ckpt, "latest")
    if not os.path.isfile(latest):
        raise Failure("checkpoint %s has no `latest` file (contents: %s)"
                      % (ckpt, sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else "missing"))
    with open(latest) as f:
        name = f.read().strip()
    step = os.path.join(ckpt, name)
    if not name or not os.path.isdir(step):
        raise Failure("checkpoint %s: latest names %r, which is not a folder" % (ckpt, name))
    return step


def read_checkpoint(ckpt, expect_step=None, expect_world=None):
    """Assemble every tensor of the newest checkpoint in `ckpt`.

    Returns (manifest, {name: array}). Raises Failure on a malformed
    manifest, a shard outside the global shape, a shard of the wrong dtype,
    overlapping shards that disagree, or elements no shard covers."""
    step_dir = checkpoint_dir(ckpt)
    mpath = os.path.join(step_dir, "manifest.json")
    try:
        with open(mpath) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure("cannot read %s: %s" % (mpath, e))
    if man.get("format") != "shoal.checkpoint" or man.get("version") != 1:
        raise Failure("%s: format %r version %r, expected shoal.checkpoint 1"
                      % (mpath, man.get("format"), man.get("version")))
    if expect_step is not None and man.get("step") != expect_step:
        raise Failure("%s: step %r, expected %d" % (mpath, man.get("step"), expect_step))
    if expect_world is not None and man.get("world_size") != expect_world:
        raise Failure("%s: world_size %r, expected %d"
                      % (mpath, man.get("world_size"), expect_world))
    if os.path.basename(step_dir) != "step-%08d" % man.get("step", -1):
        raise Failure("%s: folder name does not match step %r" % (step_dir, man.get("step")))
    tensors = {}
    problems = []
    for name, t in sorted((man.get("tensors") or {}).items()):
        shape = tuple(int(d) for d in t.get("shape", []))
        dtype = np.dtype(t.get("dtype", "float32"))
        full = np.zeros(shape, dtype=dtype)
        count = np.zeros(shape, dtype=np.int32)
        if not t.get("shards"):
            problems.append("%s: no shards" % name)
            continue
        for sh in t["shards"]:
            path = os.path.join(step_dir, sh["file"])
            try:
                a = np.load(path, allow_pickle=False)
            except Exception as e:
                problems.append("%s: cannot read shard %s: %s" % (name, sh["file"], e))
                continue
            off = tuple(int(o) for o in sh.get("offset", [0] * len(shape)))
            if a.dtype != dtype:
                problems.append("%s: shard %s has dtype %s, manifest %s"
                                % (name, sh["file"], a.dtype, dtype))
            if a.ndim != len(shape) or len(off) != len(shape) or any(
                    o < 0 or o + n > d for o, n, d in zip(off, a.shape, shape)):
                problems.append("%s: shard %s %s at offset %s outside %s"
                                % (name, sh["file"], list(a.shape), list(off), list(shape)))
                continue
            sl = tuple(slice(o, o + n) for o, n in zip(off, a.shape))
            seen = count[sl] > 0
            if seen.any() and not np.array_equal(full[sl][seen], a[seen]):
                problems.append("%s: shard %s overlaps another with different values"
                                % (name, sh["file"]))
            full[sl] = a
            count[sl] += 1
        if (count == 0).any():
            problems.append("%s: %d of %d elements in no shard"
                            % (name, int((count == 0).sum()), count.size))
        tensors[name] = full
    if problems:
        raise Failure("checkpoint %s:\n  %s" % (step_dir, "\n  ".join(problems)))
    return man, tensors


def read_reference(folder):
    """({weight name: array}, {state name: array}, index) of train_reference.py."""
    with open(os.path.join(folder, "index.json")) as f:
        idx = json.load(f)
    w = {n: np.load(os.path.join(folder, "weights", f)) for n, f in idx["weights"].items()}
    s = {n: np.load(os.path.join(folder, "state", f)) for n, f in idx["state"].items()}
    return w, s, idx


# ---------------------------------------------------------------------------
# Comparison

def state_kind(name):
    return name.split("/", 1)[0] + "/" if "/" in name else ""


def state_view(name, a):
    """sqrt(adam.v) (the gradient's scale); others as they are."""
    a = np.asarray(a, dtype=np.float64)
    return np.sqrt(np.maximum(a, 0)) if name.startswith("adam.v/") else a


def compare_sets(label, actual, expected, names, rtol, state=False, state_floor=STATE_FLOOR):
    """Rows (label, name, err, problem) for names in both sets."""
    rows = []
    floors = {}
    if state:
        for n in names:
            if n in expected:
                k = state_kind(n)
                m = float(np.max(np.abs(state_view(n, expected[n])))) if expected[n].size else 0.0
                floors[k] = max(floors.get(k, 0.0), m)
    for n in names:
        if n not in actual or n not in expected:
            rows.append((label, n, None, "missing in %s" % (
                "actual" if n not in actual else "expected")))
            continue
        a, b = actual[n], expected[n]
        if a.shape != b.shape:
            rows.append((label, n, None, "shape %s != %s" % (list(a.shape), list(b.shape))))
            continue
        if not np.isfinite(a).all():
            rows.append((label, n, None, "NaN/Inf in actual"))
            continue
        if state:
            av, bv = state_view(n, a), state_view(n, b)
            denom = max(float(np.max(np.abs(bv))) if bv.size else 0.0,
                        state_floor * floors.get(state_kind(n), 0.0), 1e-30)
            err = float(np.max(np.abs(av - bv))) / denom if av.size else 0.0
        else:
            err = common.rel_error(a, b)
        rows.append((label, n, err, None if err <= rtol else "error %.3e > %.1e" % (err, rtol)))
    return rows


def print_worst(rows, rtol, show):
    """Per comparison: a summary line, the `show` worst tensors and every
    failing one. Returns True when every row passed."""
    ok = True
    labels = []
    for r in rows:
        if r[0] not in labels:
            labels.append(r[0])
    w1 = max([len("tensor")] + [len(r[1]) for r in rows])
    for label in labels:
        rs = [r for r in rows if r[0] == label]
        bad = [r for r in rs if r[3] is not None]
        ok = ok and not bad
        errs = [r for r in rs if r[2] is not None]
        worst = sorted(errs, key=lambda r: -r[2])
        top = worst[0] if worst else None
        print("%s: %d tensors, max error %s%s, %s" % (
            label, len(rs), "%.3e" % top[2] if top else "-",
            " (%s)" % top[1] if top else "", "ok" if not bad else "%d FAIL" % len(bad)))
        shown = worst[:show] + [r for r in bad if r not in worst[:show]]
        for _, name, err, problem in shown:
            print("    %-*s  %12s  %s" % (w1, name, "%.3e" % err if err is not None else "-",
                                         "ok" if problem is None else "FAIL: " + problem))
    sys.stdout.flush()
    return ok


# Rank 0's progress lines; "[rank 0] " where test/launch_env.py started it.
STEP_RE = re.compile(r"^(?:\[rank 0\] )?step\s+(\d+)/(\d+)\s+loss\s+(\S+)", re.M)


def step_losses(stdout):
    """[(step, loss)] from shoal-run's progress lines."""
    out = []
    for m in STEP_RE.finditer(stdout):
        try:
            out.append((int(m.group(1)), float(m.group(3))))
        except ValueError:
            out.append((int(m.group(1)), float("nan")))
    return out


def compare_losses(label, got, ref, rtol):
    """got: [(step, loss)] of the run's last len(got) steps; ref: PyTorch's
    losses of the same steps. Returns rows."""
    rows = []
    if len(got) != len(ref):
        return [(label, "losses", None, "%d progress lines, expected %d"
                 % (len(got), len(ref)))]
    for (s, a), b in zip(got, ref):
        err = abs(a - b) / max(abs(b), 1e-12)
        rows.append((label, "loss step %d" % s, err,
                     None if err <= rtol else "%.6f vs %.6f: error %.3e > %.1e"
                     % (a, b, err, rtol)))
    return rows


# ---------------------------------------------------------------------------
# Runs

class Ctx:
    def __init__(self, args):
        self.args = args
        self.phase = args.phase
        self.compile = None if args.phase == "run" else common.find_tool(args.bin,
                                                                         "shoal-compile")
        self.run = None if args.phase == "prepare" else common.find_tool(args.bin, "shoal-run")
        if args.launch == "mpirun" and args.phase != "prepare" and \
                shutil.which(args.mpirun) is None:
            raise common.CommandError("mpirun not found: %s" % args.mpirun)
        self.work = os.path.abspath(args.work)
        self.model = os.path.join(self.work, "model.onnx")
        self.inputs = os.path.join(self.work, "inputs")
        # --zero N / --recompute MODE: the config with those keys set
        # (written into the work folder when the first plan is compiled).
        self.variant = {}
        if args.zero is not None:
            self.variant["zero"] = str(args.zero)
        if args.recompute is not None:
            self.variant["recompute"] = args.recompute
        if args.precision is not None:
            self.variant["precision"] = args.precision
        if args.loss_scale_initial is not None:
            # No growth within the run: every change of the scale is a
            # back-off after an overflow.
            self.variant["loss_scale"] = "{initial: %r, growth_interval: 100000}" % (
                args.loss_scale_initial)
        # The plain run of --zero/--recompute keeps the precision.
        self.plain_variant = {k: v for k, v in self.variant.items()
                              if k not in ("zero", "recompute")}
        self.variants = {}  # config path -> its variant
        self.compile_log = {}  # plan file name -> shoal-compile's output
        self.config = self.variant_config(self.variant)
        self.plain_config = self.variant_config(self.plain_variant)

    def variant_config(self, variant):
        """The config path of `variant` (the given config with those keys
        set), written when a plan is first compiled with it."""
        if not variant:
            return self.args.config
        path = os.path.join(self.work, "train_%s.yaml" % "_".join(
            k + re.sub(r"[^A-Za-z0-9.]", "", v) for k, v in sorted(variant.items())))
        self.variants[path] = variant
        return path

    def write_config(self, path):
        """Writes the variant config `path` names, if it is one."""
        variant = self.variants.get(path)
        if variant is None or os.path.isfile(path):
            return
        with open(self.args.config) as f:
            lines = [ln for ln in f.read().splitlines() if ln.split(":")[0] not in variant]
        with open(path, "w") as f:
            f.write("\n".join(lines + ["%s: %s" % kv for kv in sorted(variant.items())]) + "\n")

    def compile_plan(self, spec, world, out, config=None, extra=()):
        if self.phase == "run":
            # Compiled by --phase prepare.
            if not os.path.isfile(out):
                raise common.CommandError("--phase run: %s is missing (run --phase "
                                          "prepare first)" % out)
            return out
        self.write_config(config or self.config)
        res = common.run_cmd([self.compile, self.model, "--annotate", spec, "--world-size",
                              world, "--train", config or self.config, "-o", out]
                             + list(self.args.compile_arg) + list(extra),
                             timeout=self.args.timeout)
        self.compile_log[os.path.basename(out)] = (res.stdout or "") + (res.stderr or "")
        print("plan: %s (%s)" % (out, common.human_size(os.path.getsize(out))))
        return out

    def train(self, plan, world, steps, save, data=None, resume=None, outputs=None,
              par=None, extra=()):
        """shoal-run the training plan (no --save when `save` is None);
        returns its stdout. The --run-arg flags go to the N-rank runs (par:
        by default, those of world > 1)."""
        if self.phase == "prepare":
            raise Prepared()
        if par is None:
            par = world > 1
        argv = [self.run, plan, "--steps", steps] + list(extra)
        if save:
            argv += ["--save", save]
        argv += ["--data", data] if data else ["--inputs", self.inputs]
        if resume:
            argv += ["--resume", resume]
        if outputs:
            argv += ["--outputs", outputs]
        if par:
            argv += self.args.run_arg
            if self.args.check_overlap:
                self.trace = os.path.join(self.work, "trace.json")
                argv += ["--trace", self.trace]
        env = None
        if world > 1 and self.args.launch == "env":
            argv = common.launch_env_cmd(world, self.args.timeout, argv)
        elif world > 1:
            argv = common.mpirun_cmd(self.args.mpirun, world, argv)
            env = common.MPI_ENV
        try:
            res = common.run_cmd(argv, env_extra=env, timeout=self.args.timeout + 30)
        except common.CommandError as e:
            if par and "no CUDA device" in str(e):
                raise Skip(next(ln for ln in str(e).splitlines() if "no CUDA device" in ln))
            raise
        lines = res.stdout.splitlines()
        if len(lines) > 14:
            lines = lines[:6] + ["  ... (%d lines)" % (len(lines) - 12)] + lines[-6:]
        for ln in lines:
            print("  | " + ln)
        if res.stderr.strip():
            for ln in res.stderr.strip().splitlines()[-8:]:
                print("  ! " + ln)
        print("  (%.1f s)" % res.elapsed)
        return res.stdout

    def reference(self, steps, out, data=None, extra=()):
        argv = [common.PYTHON, REFERENCE, "--model", self.model, "--config", self.config,
                "--steps", steps, "--out", out, "--seed", self.args.seed, "--quiet"]
        argv += list(extra)
        argv += ["--data", data] if data else ["--inputs", self.inputs]
        res = common.run_cmd(argv, timeout=self.args.timeout)
        sys.stdout.write(res.stdout)
        return read_reference(out)


def trained_names(ref_w, ref_s, ckpts):
    """Names compared: PyTorch's trained weights and optimizer state. Fails
    when a checkpoint lacks one; reports extra names."""
    for label, (man, t) in ckpts.items():
        missing = sorted(set(ref_w) - set(t))
        if missing:
            raise Failure("%s checkpoint lacks trained weights %s (it has %s)"
                          % (label, missing, sorted(t)))
        extra = sorted(set(t) - set(ref_w) - set(ref_s))
        if extra:
            print("note: %s checkpoint also holds %s" % (label, extra))
        missing_s = sorted(set(ref_s) - set(t))
        if missing_s:
            print("note: %s checkpoint lacks optimizer state %s" % (label, missing_s[:6]
                                                                   + (["..."] if len(missing_s) > 6 else [])))
    return sorted(ref_w), sorted(ref_s)


def onnx_initializers(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def compare_ckpts(label_pairs, ref, rtol, state_rtol, initial, state_floor=STATE_FLOOR):
    """label_pairs: [(label, tensors_a, tensors_b)] with tensors_b=None for
    PyTorch. Returns rows."""
    ref_w, ref_s = ref
    rows = []
    wn, sn = sorted(ref_w), sorted(ref_s)
    for label, a, b in label_pairs:
        bw = ref_w if b is None else b
        bs = ref_s if b is None else b
        rows += compare_sets(label + " (weights)", a, bw, wn, rtol)
        if sn:
            present = [n for n in sn if n in a and n in bs]
            if present:
                rows += compare_sets(label + " (optimizer state)", a, bs, present,
                                     state_rtol, state=True, state_floor=state_floor)
    for label, a, _ in label_pairs:
        frozen = {n: v for n, v in a.items() if n in initial and n not in ref_w}
        for n, v in frozen.items():
            same = v.shape == initial[n].shape and np.array_equal(v, initial[n])
            if not same:
                rows.append((label, n, None, "frozen initializer changed"))
    return rows


def write_labels(ctx):
    ids = np.load(os.path.join(ctx.inputs, "input_ids.npy"))
    vocab = onnx_initializers(ctx.model)["wte.weight"].shape[0]
    rng = np.random.default_rng(ctx.args.seed + 1)
    labels = rng.integers(0, vocab, size=ids.shape, dtype=np.int64)
    if ctx.args.ignore:
        flat = labels.reshape(-1)
        flat[rng.choice(flat.size, size=min(ctx.args.ignore, flat.size), replace=False)] = -100
    np.save(os.path.join(ctx.inputs, "labels.npy"), labels)
    print("labels: %s %s (random, seed %d; %d set to ignore_index -100)"
          % (os.path.join(ctx.inputs, "labels.npy"), list(labels.shape), ctx.args.seed + 1,
             int((labels == -100).sum())))


def write_tokens(ctx, path, rows=64, period=12, seed=7):
    """Next token of a repeating pattern of `period` distinct tokens, each
    row starting at a random phase: [rows, T+1] int64."""
    T = np.load(os.path.join(ctx.inputs, "input_ids.npy")).shape[1]
    rng = np.random.default_rng(seed)
    pat = rng.choice(96, size=period, replace=False)
    off = rng.integers(0, period, size=rows)
    tok = np.stack([pat[(o + np.arange(T + 1)) % period] for o in off]).astype(np.int64)
    np.save(path, tok)
    print("tokens: %s %s (period-%d pattern)" % (path, list(tok.shape), period))
    return path


def mode_layout(ctx, spec):
    a = ctx.args
    K = a.steps
    w = ctx.work
    base_plan = ctx.compile_plan(ONE_RANK_SPEC, 1, os.path.join(w, "base.plan"))
    par_plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "par.plan"),
                                extra=(["--cluster", a.cluster, "--explain"]
                                       + (["--shard-multiple", str(a.shard_multiple)]
                                          if a.shard_multiple else [])
                                       + ["--batch-shares", a.batch_shares]) if a.cluster
                                else ())
    print("-- (c) train %d step(s): one rank, then %d ranks" % (K, a.world_size))
    out_b = ctx.train(base_plan, 1, K, os.path.join(w, "ckpt_base"),
                      outputs=os.path.join(w, "base_out"))
    out_p = ctx.train(par_plan, a.world_size, K, os.path.join(w, "ckpt_par"),
                      outputs=os.path.join(w, "par_out"), par=True)
    print("-- (d) PyTorch, %d step(s)" % K)
    rw, rs, idx = ctx.reference(K, os.path.join(w, "reference_train"))
    print("-- (e) compare")
    base = read_checkpoint(os.path.join(w, "ckpt_base"), K, 1)[1]
    par = read_checkpoint(os.path.join(w, "ckpt_par"), K, a.world_size)[1]
    trained_names(rw, rs, {"one-rank": (None, base), "sharded": (None, par)})
    initial = onnx_initializers(ctx.model)
    rows = compare_ckpts([("sharded vs one-rank", par, base),
                          ("sharded vs PyTorch", par, None),
                          ("one-rank vs PyTorch", base, None)],
                         (rw, rs), a.rtol, a.state_rtol, initial, a.state_floor)
    ref_losses = idx["losses"]
    rows += compare_losses("sharded losses vs PyTorch", step_losses(out_p), ref_losses, a.rtol)
    rows += compare_losses("one-rank losses vs PyTorch", step_losses(out_b), ref_losses, a.rtol)
    for label, folder in (("sharded", "par_out"), ("one-rank", "base_out")):
        p = os.path.join(w, folder, "loss.npy")
        if not os.path.isfile(p):
            rows.append((label + " loss.npy", "loss", None, "missing " + p))
            continue
        got = np.load(p)
        if got.shape != () or got.dtype != np.float32:
            rows.append((label + " loss.npy", "loss", None, "loss.npy is %s %s, expected "
                         "a float32 scalar" % (got.dtype, list(got.shape))))
            continue
        rows += compare_losses(label + " loss.npy vs PyTorch", [(K, float(got))],
                               ref_losses[-1:], a.rtol)
    if a.zero is not None:
        rows += zero_checks(ctx, spec, par, K)
    if a.cluster is not None:
        rows += share_checks(ctx, spec, par, K)
    if a.recompute is not None:
        rows += recompute_checks(ctx, spec, par, K)
    if a.check_attention_memory and ctx.phase == "all":
        rows += attention_memory_check(ctx, spec, K)
    if a.precision is not None and ctx.phase == "all":
        rows += precision_checks(ctx, spec)
    if a.no_all_gather and ctx.phase == "all":
        rows += no_all_gather_check(ctx, spec)
    if a.sequence_parallel and ctx.phase == "all":
        rows += sequence_parallel_checks(ctx, spec)
    if a.check_split_weights and ctx.phase == "all":
        rows += split_weights_check(ctx, spec)
    print("PyTorch: losses %s, grad norms %s" % (
        ", ".join("%.6f" % x for x in ref_losses), ", ".join("%.4f" % x for x in idx["grad_norms"])))
    return print_worst(rows, a.rtol, a.show)


def no_all_gather_check(ctx, spec):
    """--no-all-gather: the partitioned IR of the N-rank training plan holds
    no all_gather (vocabulary-parallel embedding and loss under split: the
    logits are never gathered), and the loss is the vocabulary-parallel
    one."""
    path = os.path.join(ctx.work, "par_ir.mlir")
    ctx.compile_plan(spec, ctx.args.world_size, os.path.join(ctx.work, "par_ir.plan"),
                     extra=["--emit-mlir", path])
    with open(path) as f:
        ir = f.read()
    gathers = len(re.findall(r"shoal\.all_gather\b", ir))
    vocab = len(re.findall(r"shoal\.vocab_cross_entropy\b", ir))
    print("partitioned IR: %d all_gather, %d vocab_cross_entropy (%s)" % (gathers, vocab, path))
    problem = None
    if gathers:
        problem = "%d all_gather in the partitioned IR (expected none)" % gathers
    elif not vocab:
        problem = "no vocab_cross_entropy in the partitioned IR"
    return [("partitioned IR", "no all_gather, vocabulary-parallel loss", None, problem)]


def split_weights_check(ctx, spec):
    """--check-split-weights: every split TaskGraph of the N-rank training
    plan splits its weights over tp as the forward plan of the same spec
    does: the parallelism report warns of no split scope computing whole
    weights ("no weight or input is split"), and the training plan's split
    forward TaskGraphs all-reduce over tp at least as often as the forward
    plan's (each row-parallel product's partial sums)."""
    def report(extra, label):
        path = os.path.join(ctx.work, "report_split_%s.txt" % label)
        out = os.path.join(ctx.work, "split_%s.plan" % label)
        if extra is None:
            res = common.run_cmd([ctx.compile, ctx.model, "--annotate", spec, "--world-size",
                                  ctx.args.world_size, "-o", out, "--report-file", path]
                                 + list(ctx.args.compile_arg), timeout=ctx.args.timeout)
        else:
            ctx.compile_plan(spec, ctx.args.world_size, out, extra=["--report-file", path])
        with open(path) as f:
            return f.read()
    def tp_all_reduces(text):
        # The forward TaskGraphs' all-reduces over tp alone (not the
        # weight gradients' over dp,tp).
        n, fwd = 0, False
        for line in text.splitlines():
            m = re.match(r'TaskGraph "([^"]+)": (\w+)\(', line)
            if m:
                fwd = m.group(2) == "split" and "." not in m.group(1)
            elif fwd and re.match(r"\s+all_reduce over tp at ", line):
                n += 1
        return n
    train, fwd = report([], "train"), report(None, "forward")
    warned = [ln.strip() for ln in train.splitlines() if "no weight or input is split" in ln]
    n_train, n_fwd = tp_all_reduces(train), tp_all_reduces(fwd)
    print("split TaskGraphs: %d tensor-parallel all-reduces in the training plan's forward, "
          "%d in the forward plan's; %d 'no weight split' warnings" % (n_train, n_fwd, len(warned)))
    problem = None
    if warned:
        problem = warned[0]
    elif n_fwd == 0:
        problem = "the forward plan splits no weight either (not a split layout?)"
    elif n_train < n_fwd:
        problem = "%d tensor-parallel all-reduces in training, %d in the forward" % (n_train,
                                                                                 n_fwd)
    return [("split weights", "the training plan splits the blocks as the forward does",
             None, problem)]


def sequence_parallel_checks(ctx, spec):
    """--sequence-parallel: SPEC has `sequence_parallel: true`. Its
    partitioned IR has no all_reduce of hidden states (rank-3 tensors) but
    reduce_scatters along the sequence and all_gathers, where the same spec
    without sequence_parallel all-reduces; and --report-memory's
    activations are below that plan's."""
    a = ctx.args
    w = ctx.work
    with open(spec) as f:
        text = f.read()
    plain_spec = os.path.join(w, "spec_no_sp.yaml")
    with open(plain_spec, "w") as f:
        f.write(re.sub(r",\s*sequence_parallel:\s*true", "", text))
    counts = {}
    for label, sp in (("sp", spec), ("tp", plain_spec)):
        path = os.path.join(w, "ir_%s.mlir" % label)
        plan = ctx.compile_plan(sp, a.world_size, os.path.join(w, "ir_%s.plan" % label),
                                extra=["--emit-mlir", path])
        with open(path) as f:
            ir = f.read()
        counts[label] = (common.hidden_all_reduces(ir),
                         len(re.findall(r"shoal\.reduce_scatter [^\n]* dim 1 ", ir)),
                         len(re.findall(r"shoal\.all_gather\b", ir)), plan)
        print("partitioned IR (%s): %d all_reduce of hidden states, %d reduce_scatter "
              "along the sequence, %d all_gather (%s)" % ((label,) + counts[label][:3] + (path,)))
    rows = []
    sp, tp = counts["sp"], counts["tp"]
    problem = None
    if text == open(plain_spec).read():
        problem = "%s has no 'sequence_parallel: true' in a scope" % spec
    elif sp[0]:
        problem = "%d all_reduce of hidden states remain" % sp[0]
    elif not tp[0]:
        problem = "the plan without sequence_parallel has no all_reduce of hidden states " \
                  "(nothing to replace)"
    elif not sp[1] or not sp[2]:
        problem = "expected reduce_scatter along the sequence and all_gather, got %d and %d" \
                  % (sp[1], sp[2])
    rows.append(("partitioned IR", "reduce_scatter + all_gather for all_reduce", None, problem))
    mem_sp = report_memory(ctx, sp[3], "sp")[3]
    mem_tp = report_memory(ctx, tp[3], "tp")[3]
    ok = mem_sp < mem_tp
    print("    activations: without sequence_parallel %.3f MiB, with %.3f MiB (%.2fx) %s"
          % (mem_tp, mem_sp, mem_sp / mem_tp if mem_tp else float("nan"),
             "ok" if ok else "FAIL"))
    if not ok:
        rows.append(("memory", "activations", None, "sequence parallel %.3f MiB >= %.3f MiB"
                     % (mem_sp, mem_tp)))
    return rows


MEMORY_RANK_RE = re.compile(r"memory of rank \d+: weights ([\d.]+) MiB, grads ([\d.]+) MiB, "
                            r"optimizer ([\d.]+) MiB, activations ([\d.]+) MiB")


def plain_run(ctx, spec, K):
    """The same layout with the config as given (no --zero, no --recompute):
    (plan, checkpoint tensors after K steps). Run once, shared by the
    checks."""
    if getattr(ctx, "plain", None) is None:
        a = ctx.args
        w = ctx.work
        plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "plain.plan"),
                                config=ctx.plain_config)
        print("-- train %d step(s) of the same layout without --zero/--recompute on %d ranks"
              % (K, a.world_size))
        ctx.train(plan, a.world_size, K, os.path.join(w, "ckpt_plain"), par=True)
        ctx.plain = (plan, read_checkpoint(os.path.join(w, "ckpt_plain"), K, a.world_size)[1])
    return ctx.plain


def share_checks(ctx, spec, par, K):
    """--cluster: the plan gives the replicas uneven batch shares, as
    --batch-shares says (shoal-plan --explain: "(batch blocks a/b/...)",
    samples per replica, or "(per replica a/b/...)", micro-batches per
    replica), and trains the weights the even plan (the same spec without
    --cluster) trains."""
    a = ctx.args
    rows = []
    log = ctx.compile_log.get("par.plan", "")
    m = re.search(r"\((per replica|batch blocks) ([\d/]+)\)", log)
    counts = [int(x) for x in m.group(2).split("/")] if m else []
    print("    batch shares: %s %s" % (m.group(1) if m else "none", "/".join(map(str, counts))))
    want = "batch blocks" if a.batch_shares == "blocks" else "per replica"
    if counts and m.group(1) != want:
        rows.append(("batch shares", "plan", None, "--batch-shares %s, but shoal-plan "
                     "--explain says (%s %s)" % (a.batch_shares, m.group(1), m.group(2))))
    if counts and "are not compiled" in log:
        rows.append(("batch shares", "plan", None, "shoal-partition did not compile "
                     "the batch blocks: " + log.split("are not compiled")[1][:200]))
    # Or shards by speed (a split on devices of different speeds), compiled.
    shards = re.search(r"shards by speed per device ([\d/ (x)]+) \(per mille", log)
    print("    shards by speed: %s" % (shards.group(1) if shards else "none"))
    if shards and "are not compiled" in log:
        rows.append(("shards by speed", "plan", None, "shoal-partition did not compile "
                     "the shards by speed: " + log.split("are not compiled")[1][:200]))
    elif not shards and len(set(counts)) < 2:
        rows.append(("batch shares", "plan", None, "the plan compiled with --cluster %s "
                     "gives every replica the same micro-batches (%s)"
                     % (a.cluster, counts or "no 'per replica' in --explain")))
    _, plain = plain_run(ctx, spec, K)
    weights = sorted(n for n in plain if "/" not in n)
    states = sorted(n for n in plain if "/" in n)
    rows += compare_sets("uneven shares vs even plan (weights)", par, plain, weights,
                         a.plain_rtol)
    rows += compare_sets("uneven shares vs even plan (optimizer state)", par, plain,
                         states, a.state_rtol, state=True)
    return rows


def zero_checks(ctx, spec, par, K):
    """--zero: the same layout without ZeRO, its checkpoint and memory."""
    a = ctx.args
    plain_plan, plain = plain_run(ctx, spec, K)
    weights = sorted(n for n in plain if "/" not in n)
    states = sorted(n for n in plain if "/" in n)
    rows = compare_sets("ZeRO-%d vs plain (weights)" % a.zero, par, plain, weights,
                        a.plain_rtol)
    rows += compare_sets("ZeRO-%d vs plain (optimizer state)" % a.zero, par, plain, states,
                         a.state_rtol, state=True)
    mem = {}
    for label, plan in (("plain", plain_plan), ("zero", os.path.join(ctx.work, "par.plan"))):
        mem[label] = report_memory(ctx, plan, "plain" if label == "plain" else "par")
    kinds = ["weights", "grads", "optimizer"]
    micro = micro_batches(spec) > 1
    # Stages 1 and 2 with micro-batches sum the whole gradient before they
    # scatter: the accumulator plus the block.
    shrunk = {"optimizer"} | ({"grads"} if a.zero >= 3 or (a.zero == 2 and not micro)
                              else set()) | \
        ({"weights"} if a.zero >= 3 else set())
    for i, kind in enumerate(kinds):
        p, z = mem["plain"][i], mem["zero"][i]
        bound = (p / a.zero_dp if kind in shrunk else
                 p * (1 + 1.0 / a.zero_dp) if kind == "grads" else p) * 1.02
        ok = z <= bound
        print("    memory %-10s plain %.3f MiB, ZeRO-%d %.3f MiB (<= %.3f) %s"
              % (kind, p, a.zero, z, bound, "ok" if ok else "FAIL"))
        if not ok:
            rows.append(("memory", kind, None, "ZeRO-%d %.3f MiB > %.3f MiB (plain %.3f / %d)"
                         % (a.zero, z, bound, p, a.zero_dp if kind in shrunk else 1)))
    rows += scatter_count_checks(ctx, micro)
    return rows


def micro_batches(spec):
    """The spec's pipeline.num_micro_batch (1 without one)."""
    with open(spec) as f:
        m = re.search(r"num_micro_batch:\s*([0-9]+)", f.read())
    return int(m.group(1)) if m else 1


def scatter_count_checks(ctx, micro):
    """--zero: one traced step of the ZeRO plan; the gradient
    reduce-scatters on each rank, counted per op. Stages 1 and 2 scatter
    each gradient once per step, also with micro-batches (they accumulate
    locally first); stage 3 with micro-batches at every micro-batch."""
    a = ctx.args
    trace = os.path.join(ctx.work, "trace_zero.json")
    ctx.train(os.path.join(ctx.work, "par.plan"), a.world_size, 1,
              os.path.join(ctx.work, "ckpt_zero_trace"), par=True,
              extra=["--trace", trace])
    with open(trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    per_op = {}
    for e in events:
        if e.get("ph") == "X" and e.get("tid") == 1 and \
                e.get("name", "").startswith("ReduceScatter"):
            key = (e["pid"], e.get("args", {}).get("op"))
            per_op[key] = per_op.get(key, 0) + 1
    counts = sorted(set(per_op.values()))
    print("    reduce-scatters per op and step: %s over %d (rank, op) pairs"
          % (counts or "none", len(per_op)))
    if not per_op:
        return [("ZeRO reduce-scatters", "trace", None, "no ReduceScatter in the trace")]
    if a.zero <= 2 and counts != [1]:
        return [("ZeRO reduce-scatters", "trace", None,
                 "ZeRO-%d scattered an op's gradient %s times in one step, expected once"
                 % (a.zero, counts))]
    return []


def report_memory(ctx, plan, label):
    """shoal-run --report-memory=ranks of one step of `plan` on the N ranks:
    [weights, grads, optimizer, activations] in MiB, each the largest over
    the ranks (once per label). Not the summary line: it shows the rank with
    the largest measured process peak, which varies from run to run, and
    pipeline stages hold different activations."""
    cache = ctx.__dict__.setdefault("memory", {})
    if label in cache:
        return cache[label]
    a = ctx.args
    out = ctx.train(plan, a.world_size, 1, os.path.join(ctx.work, "ckpt_mem_" + label),
                    par=True, extra=["--report-memory=ranks"])
    ranks = [[float(x) for x in m.groups()] for m in MEMORY_RANK_RE.finditer(out)]
    if len(ranks) != a.world_size:
        raise Failure("shoal-run --report-memory=ranks printed %d rank lines, expected %d (%s)"
                      % (len(ranks), a.world_size, label))
    cache[label] = [max(r[i] for r in ranks) for i in range(4)]
    return cache[label]


def softmax_bytes(model, world):
    """Bytes of every Softmax output of the ONNX model (ONNX's shape
    inference) over `world` ranks: what selective recomputation stops
    keeping (the attention probabilities)."""
    import onnx
    m = onnx.shape_inference.infer_shapes(onnx.load(model))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.output)}
    total = 0
    for n in m.graph.node:
        if n.op_type == "Softmax":
            shape = shapes.get(n.output[0])
            if not shape or 0 in shape:
                raise Failure("ONNX shape inference gives no static shape for Softmax "
                              "node %r of %s" % (n.name, model))
            total += 4 * int(np.prod(shape))
    return total / world


def attention_memory_check(ctx, spec, K):
    """The fused attention (the default: fused before shoal-autodiff, its
    gradient recomputes the probabilities) keeps at least the attention
    probabilities less than the chain differentiated op by op (the same
    layout compiled with --fuse-before-autodiff=gelu-erf,rms-norm), by
    --report-memory; the probabilities' bytes from ONNX's shape inference."""
    a = ctx.args
    plain_plan, _ = plain_run(ctx, spec, K)
    unfused = ctx.compile_plan(spec, a.world_size, os.path.join(ctx.work, "unfused.plan"),
                               config=ctx.plain_config,
                               extra=["--fuse-before-autodiff=gelu-erf,rms-norm"])
    fused_act = report_memory(ctx, plain_plan, "plain")[3]
    unfused_act = report_memory(ctx, unfused, "unfused")[3]
    expect = softmax_bytes(ctx.model, a.world_size) / 2**20
    bound = unfused_act - 0.98 * expect
    ok = fused_act <= bound + 5e-4
    print("    activations: attention fused %.3f MiB, chain %.3f MiB (expected <= %.3f: the "
          "attention probabilities are %.3f MiB) %s"
          % (fused_act, unfused_act, bound, expect, "ok" if ok else "FAIL"))
    if not ok:
        return [("memory", "activations", None, "fused attention: %.3f MiB > %.3f MiB"
                 % (fused_act, bound))]
    return []


def recompute_checks(ctx, spec, par, K):
    """--recompute: the same layout without recomputation, bit for bit, and
    the activations of --report-memory."""
    a = ctx.args
    plain_plan, plain = plain_run(ctx, spec, K)
    rows = []
    for n in sorted(plain):
        same = n in par and par[n].shape == plain[n].shape and np.array_equal(par[n], plain[n])
        rows.append(("recompute %s vs none (bit for bit)" % a.recompute, n, 0.0 if same else None,
                     None if same else "differs"))
    p = report_memory(ctx, plain_plan, "plain")[3]
    r = report_memory(ctx, os.path.join(ctx.work, "par.plan"), "par")[3]
    # Selective drops the attention probabilities (every Softmax output):
    # the expected saving, from ONNX's shape inference of the model; full
    # drops them and every other value inside a layer. Each rank holds
    # 1/world of them: dp splits the batch, tp the heads, pp the layers.
    expect = softmax_bytes(ctx.model, a.world_size) / 2**20
    bound = p - 0.98 * expect
    ok = r <= bound + 5e-4
    print("    activations: none %.3f MiB, %s %.3f MiB (expected <= %.3f: the attention "
          "probabilities are %.3f MiB) %s" % (p, a.recompute, r, bound, expect,
                                              "ok" if ok else "FAIL"))
    if not ok:
        rows.append(("memory", "activations", None, "recompute %s: %.3f MiB > %.3f MiB"
                     % (a.recompute, r, bound)))
    return rows


COLLECTIVE_RE = re.compile(r"^\s+((?:all_reduce|all_gather|reduce_scatter|local_slice|"
                           r"all_to_all)\b.*?) at (\S+)", re.M)


def precision_checks(ctx, spec):
    """--precision: the layout is the float32 one. The parallelism reports
    of the plan and of the same layout in float32 list the same
    collectives (kind, axes and node; only the element types differ), so
    mixed precision keeps every split."""
    a = ctx.args
    w = ctx.work
    reports = {}
    # The same config (--zero, --recompute included) without the precision.
    fp32 = ctx.variant_config({k: v for k, v in ctx.variant.items()
                               if k not in ("precision", "loss_scale")})
    for label, config in (("fp32", fp32), (a.precision, ctx.config)):
        path = os.path.join(w, "report_%s.txt" % label)
        ctx.compile_plan(spec, a.world_size, os.path.join(w, "layout_%s.plan" % label),
                         config=config, extra=["--report-file", path])
        with open(path) as f:
            reports[label] = sorted(COLLECTIVE_RE.findall(f.read()))
    same = reports["fp32"] == reports[a.precision]
    print("    layout: %d collectives in float32, %d in %s, %s"
          % (len(reports["fp32"]), len(reports[a.precision]), a.precision,
             "the same" if same else "DIFFERENT"))
    rows = []
    if a.precision in ("bf16", "fp16"):
        # The whole model in 16 bits: its activations in --report-memory
        # at most --activation-ratio (0.55) x the float32 plan's (the
        # weights' 16-bit copies are counted with the weights).
        low = report_memory(ctx, os.path.join(w, "layout_%s.plan" % a.precision),
                            "layout_" + a.precision)
        full = report_memory(ctx, os.path.join(w, "layout_fp32.plan"), "layout_fp32")
        ratio = low[3] / full[3] if full[3] else float("inf")
        bound = a.activation_ratio
        print("    activations: float32 %.3f MiB, %s %.3f MiB (%.3fx, bound %gx) %s"
              % (full[3], a.precision, low[3], ratio, bound,
                 "ok" if ratio <= bound else "FAIL"))
        if not ratio <= bound:
            rows.append(("memory", "activations", None, "%s activations %.3fx the float32 "
                         "plan's (> %gx)" % (a.precision, ratio, bound)))
    if same:
        return rows
    only32 = [c for c in reports["fp32"] if c not in reports[a.precision]]
    onlyp = [c for c in reports[a.precision] if c not in reports["fp32"]]
    return rows + [("layout", "collectives", None,
                    "%s changes the layout: only in fp32 %s; only in %s %s"
                    % (a.precision, only32[:3], a.precision, onlyp[:3]))]


def mode_loss_drop(ctx, spec):
    a = ctx.args
    w = ctx.work
    tokens = write_tokens(ctx, os.path.join(w, "tokens.npy"))
    par_plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "par.plan"))
    print("-- train %d steps on %d ranks" % (a.steps, a.world_size))
    out = ctx.train(par_plan, a.world_size, a.steps, os.path.join(w, "ckpt"), data=tokens,
                    outputs=os.path.join(w, "out"))
    losses = step_losses(out)
    if not losses or losses[0][0] != 1:
        raise Failure("no progress line for step 1 in shoal-run's output")
    initial = losses[0][1]
    lp = os.path.join(w, "out", "loss.npy")
    if not os.path.isfile(lp):
        raise Failure("missing %s" % lp)
    final = float(np.load(lp))
    if losses[-1][0] == a.steps and abs(losses[-1][1] - final) > 1e-5 * max(1.0, abs(final)):
        raise Failure("the step-%d progress line says loss %.6f, loss.npy %.6f"
                      % (a.steps, losses[-1][1], final))
    # Mixed precision: bf16's curve against torch.autocast's (CPU autocast
    # has bfloat16 only, so fp16's is against float32).
    extra = ["--autocast", "bf16"] if a.precision == "bf16" else []
    _, _, idx = ctx.reference(a.steps, os.path.join(w, "reference_train"), data=tokens,
                              extra=extra)
    rl = idx["losses"]
    print("%-6s %12s %12s" % ("step", "shoal", "PyTorch"))
    for s, l in losses:
        if s == 1 or s % 10 == 0:
            print("%-6d %12.6f %12.6f" % (s, l, rl[s - 1] if s <= len(rl) else float("nan")))
    bound = initial / a.loss_drop
    print("initial loss %.6f, final loss %.6f (drop x%.1f), bound %.6f (x%g); "
          "PyTorch: %.6f -> %.6f" % (initial, final, initial / max(final, 1e-30), bound,
                                     a.loss_drop, rl[0], rl[-1]))
    if not np.isfinite(final) or not final <= bound:
        print("FAIL: final loss %.6f > initial / %g = %.6f" % (final, a.loss_drop, bound))
        return False
    if a.precision:
        # The curve follows PyTorch's: the final losses within --curve-rtol.
        ref = "torch.autocast bf16" if extra else "float32"
        rel = abs(final - rl[-1]) / abs(rl[-1])
        print("%s final loss %.6f vs PyTorch %s %.6f: relative difference %.3g (bound %g)"
              % (a.precision, final, ref, rl[-1], rel, a.curve_rtol))
        if not rel <= a.curve_rtol:
            print("FAIL: the %s curve ends %.3g from PyTorch's (> %g)"
                  % (a.precision, rel, a.curve_rtol))
            return False
    return True


SCALE_RE = re.compile(r"^step (\d+)/\d+ loss (\S+) .* loss_scale (\S+) skipped (\d+)$", re.M)


def mode_overflow(ctx, spec):
    """--overflow-check: fp16 from a loss scale so large that the backward
    overflows. Every overflowing step must be skipped (its loss repeats in
    the next step: no update, same batch) and halve the scale; once the
    scale fits, training goes on, and the weights after K steps must match
    PyTorch fp32's after K - skipped steps (--rtol)."""
    a = ctx.args
    w = ctx.work
    K = a.steps
    par_plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "par.plan"))
    print("-- train %d steps on %d ranks, fp16 from loss scale %g" % (K, a.world_size,
                                                                      a.loss_scale_initial))
    out = ctx.train(par_plan, a.world_size, K, os.path.join(w, "ckpt_par"), par=True,
                    extra=["--log-every", "1"])
    lines = [(int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4)))
             for m in SCALE_RE.finditer(out)]
    if len(lines) != K:
        raise Failure("expected %d progress lines with loss_scale and skipped, found %d"
                      % (K, len(lines)))
    rows = []
    scale, skipped, prev_loss, prev_skipped, clean = a.loss_scale_initial, 0, None, False, 0
    for step, loss, s_after, k_after in lines:
        was_skipped = k_after == skipped + 1
        if was_skipped:
            want = scale * 0.5
        elif k_after == skipped:
            want = scale
        else:
            raise Failure("step %d: skipped count went from %d to %d" % (step, skipped, k_after))
        if abs(s_after - want) > 1e-5 * want:
            rows.append(("loss scale", "step %d" % step, None,
                         "scale %g after the step, expected %g" % (s_after, want)))
        if prev_loss is not None and prev_skipped and loss != prev_loss:
            rows.append(("skipped step", "step %d" % step, None,
                         "loss %.6f differs from the skipped step's %.6f: the skipped "
                         "step changed the weights" % (loss, prev_loss)))
        prev_skipped = was_skipped
        clean = 0 if was_skipped else clean + 1
        scale, skipped, prev_loss = s_after, k_after, loss
    print("    %d of %d steps skipped, loss scale %g -> %g"
          % (skipped, K, a.loss_scale_initial, scale))
    if skipped == 0:
        raise Failure("no step overflowed from loss scale %g" % a.loss_scale_initial)
    if skipped == K:
        raise Failure("every step overflowed: nothing was trained")
    applied = K - skipped
    print("-- PyTorch fp32, %d steps (the applied ones)" % applied)
    rw, rs, idx = ctx.reference(applied, os.path.join(w, "reference_train"))
    par = read_checkpoint(os.path.join(w, "ckpt_par"), K, a.world_size)[1]
    trained_names(rw, rs, {"fp16": (None, par)})
    rows += compare_sets("fp16 (weights) vs PyTorch fp32", par, rw, sorted(rw), a.rtol)
    scaler = par.get("shoal.loss_scaler")
    # {scale, clean steps since the last change, skipped steps}.
    if scaler is None or list(scaler) != [scale, float(clean), float(skipped)]:
        rows.append(("checkpoint", "shoal.loss_scaler", None,
                     "holds %s, expected [%g, %d, %d]" % (
                         None if scaler is None else list(scaler), scale, clean, skipped)))
    return print_worst(rows, a.rtol, a.show)


def mode_resume(ctx, spec):
    a = ctx.args
    w = ctx.work
    K = a.steps
    tokens = write_tokens(ctx, os.path.join(w, "tokens.npy"))
    par_plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "par.plan"))
    print("-- %d straight steps" % (2 * K))
    out_a = ctx.train(par_plan, a.world_size, 2 * K, os.path.join(w, "ckpt_straight"), data=tokens)
    print("-- %d steps, save; resume, %d steps" % (K, K))
    ctx.train(par_plan, a.world_size, K, os.path.join(w, "ckpt_half"), data=tokens)
    out_c = ctx.train(par_plan, a.world_size, K, os.path.join(w, "ckpt_resumed"), data=tokens,
                      resume=os.path.join(w, "ckpt_half"))
    man_a, ta = read_checkpoint(os.path.join(w, "ckpt_straight"), 2 * K, a.world_size)
    read_checkpoint(os.path.join(w, "ckpt_half"), K, a.world_size)
    man_c, tc = read_checkpoint(os.path.join(w, "ckpt_resumed"), 2 * K, a.world_size)
    ok = True
    if sorted(ta) != sorted(tc):
        print("FAIL: the checkpoints hold different tensors: only straight %s, only resumed %s"
              % (sorted(set(ta) - set(tc)), sorted(set(tc) - set(ta))))
        ok = False
    diff = []
    for n in sorted(set(ta) & set(tc)):
        if ta[n].shape != tc[n].shape or ta[n].dtype != tc[n].dtype or not np.array_equal(ta[n], tc[n]):
            err = common.rel_error(tc[n], ta[n]) if ta[n].shape == tc[n].shape else float("nan")
            nd = int(np.sum(ta[n] != tc[n])) if ta[n].shape == tc[n].shape else -1
            diff.append((n, err, nd))
    print("bit-identical: %d of %d tensors" % (len(set(ta) & set(tc)) - len(diff),
                                               len(set(ta) & set(tc))))
    for n, err, nd in diff[:20]:
        print("    FAIL %-40s %d elements differ, rel. error %.3e" % (n, nd, err))
    ok = ok and not diff
    la = [l for s, l in step_losses(out_a)][K:]
    lc = [l for s, l in step_losses(out_c)]
    print("losses of steps %d..%d: straight %s" % (K + 1, 2 * K, " ".join("%.6f" % x for x in la)))
    print("                         resumed  %s" % " ".join("%.6f" % x for x in lc))
    if la != lc:
        print("FAIL: the resumed run's losses differ from the straight run's")
        ok = False
    return ok


def shoal_run_cmd(ctx, world, argv):
    """argv of shoal-run on `world` ranks (mpirun, or torchrun-style)."""
    if world > 1 and ctx.args.launch == "env":
        return common.launch_env_cmd(world, ctx.args.timeout, argv), None
    if world > 1:
        return common.mpirun_cmd(ctx.args.mpirun, world, argv), common.MPI_ENV
    return argv, None


def job_processes(marker):
    """Pids of the processes whose command line holds `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            pids.append(int(entry))
    return pids


def read_metrics(path):
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def mode_job(ctx, spec):
    """--job-check: a training job as users run one (docs/Training.md,
    "Training jobs"), under SPEC on N ranks:
      (a) --total-steps K with --eval-data/--eval-every 2/--eval-steps 2 and
          --metrics: every step's loss, learning rate and gradient norm, and
          each evaluation's loss (after steps 2, 4, ... and the last), equal
          PyTorch's (train_reference.py --eval-at) within --rtol; the JSONL
          holds one training record per progress line (loss the mean over
          the logging interval) and one evaluation record per evaluation;
          `--eval` of the model before training equals PyTorch's step-0
          evaluation;
      (b) kill and rerun: `--total-steps J --save D --save-every 2
          --keep-last 2 --resume auto` (J = max(2K, 100), so that the run
          is still going when the test reacts), SIGKILLed once its progress
          line of step K+1 is out, then the same command again: it resumes
          from the last checkpoint the killed run committed, ends at step J,
          and its checkpoint is bit-identical to an uninterrupted run's; D
          keeps only the 2 newest step folders; a third run of the same
          command has nothing left to train."""
    import signal
    import subprocess
    a = ctx.args
    w = ctx.work
    K = a.steps
    world = a.world_size
    tokens = write_tokens(ctx, os.path.join(w, "tokens.npy"))
    val = write_tokens(ctx, os.path.join(w, "val.npy"), rows=16, period=7, seed=11)
    plan = ctx.compile_plan(spec, world, os.path.join(w, "par.plan"))
    if ctx.phase == "prepare":
        raise Prepared()
    ok = True
    eval_at = sorted({s for s in range(2, K + 1, 2)} | {K})
    ref = os.path.join(w, "reference_job")
    _, _, idx = ctx.reference(K, ref, data=tokens,
                              extra=["--eval-data", val, "--eval-steps", "2",
                                     "--eval-at", ",".join(str(x) for x in [0] + eval_at)])
    ref_eval = {int(s): l for s, l in idx["eval"]}

    print("-- (a) --total-steps %d, evaluation every 2 steps, metrics" % K)
    metrics = os.path.join(w, "metrics.jsonl")
    argv = [ctx.run, plan, "--total-steps", K, "--data", tokens, "--eval-data", val,
            "--eval-every", "2", "--eval-steps", "2", "--metrics", metrics] + a.run_arg
    cmd, env = shoal_run_cmd(ctx, world, argv)
    out = common.run_cmd(cmd, env_extra=env, timeout=a.timeout + 30).stdout
    for ln in out.splitlines():
        print("  | " + ln)
    rows = compare_losses("job", step_losses(out), idx["losses"], a.rtol)
    recs = read_metrics(metrics)
    train_recs = [r for r in recs if "loss" in r]
    eval_recs = [r for r in recs if "eval_loss" in r]
    if [r["step"] for r in train_recs] != list(range(1, K + 1)):
        rows.append(("job", "metrics", None, "training records of steps %s, expected 1..%d"
                     % ([r["step"] for r in train_recs], K)))
    for r in train_recs:
        s = r["step"] - 1
        if not 0 <= s < K:
            continue
        for key, want in (("loss", idx["losses"][s]), ("lr", idx["lrs"][s]),
                          ("grad_norm", idx["grad_norms"][s])):
            got = r.get(key)
            err = abs(got - want) / max(abs(want), 1e-12) if got is not None else float("inf")
            rows.append(("job", "metrics %s step %d" % (key, r["step"]), err,
                         None if err <= a.rtol else "%r vs %r" % (got, want)))
        for key in ("step_ms", "tokens_per_s", "memory_peak_mib", "elapsed_s"):
            if not isinstance(r.get(key), (int, float)) or r[key] <= 0:
                rows.append(("job", "metrics %s step %d" % (key, r["step"]), None,
                             "missing or not positive: %r" % r.get(key)))
    if [r["step"] for r in eval_recs] != eval_at:
        rows.append(("job", "eval", None, "evaluations after steps %s, expected %s"
                     % ([r["step"] for r in eval_recs], eval_at)))
    for r in eval_recs:
        want = ref_eval.get(r["step"])
        if want is None:
            continue
        err = abs(r["eval_loss"] - want) / max(abs(want), 1e-12)
        rows.append(("job", "eval loss step %d" % r["step"], err,
                     None if err <= a.rtol else "%.6f vs %.6f" % (r["eval_loss"], want)))
        perr = abs(r["eval_ppl"] - math.exp(want)) / math.exp(want)
        rows.append(("job", "eval ppl step %d" % r["step"], perr,
                     None if perr <= a.rtol else "%.6g vs %.6g" % (r["eval_ppl"], math.exp(want))))
    argv = [ctx.run, plan, "--eval", "--eval-data", val, "--eval-steps", "2"] + a.run_arg
    cmd, env = shoal_run_cmd(ctx, world, argv)
    out0 = common.run_cmd(cmd, env_extra=env, timeout=a.timeout + 30).stdout
    m = re.search(r"^eval step 0: loss (\S+) ppl", out0, re.M)
    if not m:
        rows.append(("job", "--eval", None, "no 'eval step 0' line in:\n" + out0))
    else:
        err = abs(float(m.group(1)) - ref_eval[0]) / abs(ref_eval[0])
        rows.append(("job", "--eval step 0", err,
                     None if err <= a.rtol else "%s vs %.6f" % (m.group(1), ref_eval[0])))
    ok = print_worst(rows, a.rtol, a.show) and ok

    J = max(2 * K, 100)
    print("-- (b) --total-steps %d: kill after step %d and rerun the same command" % (J, K + 1))

    def job_argv(ckpt):
        return [ctx.run, plan, "--total-steps", J, "--data", tokens, "--save", ckpt,
                "--save-every", "2", "--keep-last", "2", "--resume", "auto"] + a.run_arg
    straight = os.path.join(w, "ckpt_job_straight")
    cmd, env = shoal_run_cmd(ctx, world, job_argv(straight))
    common.run_cmd(cmd, env_extra=env, timeout=a.timeout + 30, echo=False)
    killed = os.path.join(w, "ckpt_job_killed")
    cmd, env = shoal_run_cmd(ctx, world, [str(x) for x in job_argv(killed)])
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=full_env, start_new_session=True)
    seen = []
    for ln in proc.stdout:
        seen.append(ln.rstrip())
        if re.match(r"^step %d/" % (K + 1), ln):
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    # mpirun's ranks may sit in process groups of their own: kill every
    # process of the job (a scheduler's kill does the same), so that no rank
    # of the killed job still writes into the folder when the rerun starts.
    deadline = time.time() + 30
    while True:
        left = job_processes(killed)
        if not left:
            break
        if time.time() > deadline:
            print("FAIL: processes of the killed job survive: %s" % left)
            return False
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    print("  | (killed after) " + (seen[-1] if seen else "no output"))
    if not any(re.match(r"^step %d/" % (K + 1), ln) for ln in seen):
        print("FAIL: the run to kill ended before step %d: %s" % (K + 1, seen[-3:]))
        return False
    cmd, env = shoal_run_cmd(ctx, world, job_argv(killed))
    out = common.run_cmd(cmd, env_extra=env, timeout=a.timeout + 30).stdout
    for ln in out.splitlines()[:2] + out.splitlines()[-1:]:
        print("  | " + ln)
    m = re.search(r"resumed from \S+ at step (\d+)", out)
    if not m or not K <= int(m.group(1)) < J:
        print("FAIL: the rerun did not resume from a step in [%d, %d):\n%s" % (K, J, out))
        ok = False
    _, ta = read_checkpoint(straight, J, world)
    _, tb = read_checkpoint(killed, J, world)
    diff = [n for n in sorted(set(ta) | set(tb))
            if n not in ta or n not in tb or ta[n].dtype != tb[n].dtype
            or not np.array_equal(ta[n], tb[n])]
    print("bit-identical to the uninterrupted run: %d of %d tensors"
          % (len(set(ta) | set(tb)) - len(diff), len(set(ta) | set(tb))))
    if diff:
        print("FAIL: tensors differ: %s" % diff[:10])
        ok = False
    for ckpt in (straight, killed):
        kept = sorted(f for f in os.listdir(ckpt) if f.startswith("step-"))
        want = ["step-%08d" % (J - 2), "step-%08d" % J]
        if kept != want:
            print("FAIL: --keep-last 2 left %s in %s, expected %s" % (kept, ckpt, want))
            ok = False
    out = common.run_cmd(cmd, env_extra=env, timeout=a.timeout + 30).stdout
    if "nothing to train" not in out:
        print("FAIL: a third run of the finished job trained again:\n%s" % out)
        ok = False
    return ok


def mode_reshard(ctx, spec):
    a = ctx.args
    w = ctx.work
    K = a.steps
    spec2 = resolve_spec(a.reshard)
    if spec2 is None:
        raise Failure("spec %s not found" % a.reshard)
    tokens = write_tokens(ctx, os.path.join(w, "tokens.npy"))
    plan_a = ctx.compile_plan(spec, a.world_size, os.path.join(w, "a.plan"))
    plan_b = ctx.compile_plan(spec2, a.world_size2, os.path.join(w, "b.plan"))
    print("-- %d steps under layout A (%s, %d ranks)" % (K, os.path.basename(spec), a.world_size))
    ctx.train(plan_a, a.world_size, K, os.path.join(w, "ckpt_a"), data=tokens)
    print("-- 1 more step under layout A")
    out_aa = ctx.train(plan_a, a.world_size, 1, os.path.join(w, "ckpt_aa"), data=tokens,
                       resume=os.path.join(w, "ckpt_a"))
    print("-- 1 more step under layout B (%s, %d ranks)" % (os.path.basename(spec2), a.world_size2))
    out_ab = ctx.train(plan_b, a.world_size2, 1, os.path.join(w, "ckpt_ab"), data=tokens,
                       resume=os.path.join(w, "ckpt_a"))
    print("-- PyTorch, %d steps" % (K + 1))
    rw, rs, idx = ctx.reference(K + 1, os.path.join(w, "reference_train"), data=tokens)
    read_checkpoint(os.path.join(w, "ckpt_a"), K, a.world_size)
    aa = read_checkpoint(os.path.join(w, "ckpt_aa"), K + 1, a.world_size)[1]
    ab = read_checkpoint(os.path.join(w, "ckpt_ab"), K + 1, a.world_size2)[1]
    trained_names(rw, rs, {"A->A": (None, aa), "A->B": (None, ab)})
    initial = onnx_initializers(ctx.model)
    rows = compare_ckpts([("A->B vs A->A", ab, aa),
                          ("A->B vs PyTorch", ab, None),
                          ("A->A vs PyTorch", aa, None)],
                         (rw, rs), a.rtol, a.state_rtol, initial, a.state_floor)
    rows += compare_losses("A->B step loss vs PyTorch", step_losses(out_ab)[-1:],
                           idx["losses"][-1:], a.rtol)
    rows += compare_losses("A->A step loss vs PyTorch", step_losses(out_aa)[-1:],
                           idx["losses"][-1:], a.rtol)
    return print_worst(rows, a.rtol, a.show)


EXPORT_MODULES = ("onnxruntime", "safetensors")


def mode_export(ctx, spec):
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper
    from safetensors.torch import load_file
    a = ctx.args
    w = ctx.work
    K = a.steps
    export = os.path.join(w, "export")
    onnx_out = os.path.join(export, "trained.onnx")
    st_dir = os.path.join(export, "st")
    par_plan = ctx.compile_plan(spec, a.world_size, os.path.join(w, "par.plan"))
    print("-- train %d step(s) on %d ranks with --export-onnx and --export-safetensors"
          % (K, a.world_size))
    out = ctx.train(par_plan, a.world_size, K, None, par=True,
                    extra=["--export-onnx", onnx_out, "--export-safetensors", st_dir])
    print("-- PyTorch, %d step(s)" % K)
    rw, rs, idx = ctx.reference(K, os.path.join(w, "reference_train"), extra=["--logits"])
    ref_logits = np.load(os.path.join(w, "reference_train", "logits.npy"))
    ids = np.load(os.path.join(ctx.inputs, "input_ids.npy"))
    source = onnx.load(ctx.model)
    initial = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer}
    rows = []

    def check(label, ok, what):
        rows.append((label, what, None, None if ok else "FAIL"))

    def compare_logits(label, got):
        if got.shape != ref_logits.shape:
            rows.append((label, "logits", None, "shape %s, expected %s"
                         % (list(got.shape), list(ref_logits.shape))))
            return
        err = common.rel_error(got, ref_logits)
        rows.append((label, "logits", err, None if err <= a.export_rtol
                     else "error %.3e > %.1e" % (err, a.export_rtol)))

    leftovers = [n for n in os.listdir(export) + os.listdir(st_dir)
                 if n.startswith(".") or n.endswith(".tmp")]
    check("files", not leftovers, "no scratch checkpoint or temporary file left (%s)"
          % (", ".join(leftovers) or "none"))
    stats = [ln for ln in out.splitlines() if "exported" in ln]
    check("files", len(stats) == 2, "two 'exported' lines in shoal-run's output")

    print("-- (a) the exported ONNX model")
    onnx.checker.check_model(onnx_out)
    model = onnx.load(onnx_out)  # with its external data
    raw = onnx.load(onnx_out, load_external_data=False)
    check("onnx", [i.name for i in model.graph.input] == [i.name for i in source.graph.input]
          and [o.name for o in model.graph.output] == [o.name for o in source.graph.output],
          "the source's inputs and outputs (no labels, no loss)")
    check("onnx", len(model.graph.node) == len(source.graph.node), "the source's nodes")
    ext_ok = True
    for t in raw.graph.initializer:
        nbytes = initial[t.name].nbytes
        external = t.data_location == onnx.TensorProto.EXTERNAL
        locs = {e.key: e.value for e in t.external_data}
        if external != (nbytes >= 1024) or (external and locs.get("location") != "trained.onnx.data"):
            print("    %s: %d bytes, external %s %s" % (t.name, nbytes, external, locs))
            ext_ok = False
    check("onnx", ext_ok, "initializers of >= 1024 bytes in trained.onnx.data, the others inline")
    exported = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    check("onnx", sorted(exported) == sorted(initial), "the source's initializers")
    rows += compare_sets("exported ONNX initializers vs PyTorch", exported, rw, sorted(rw),
                         a.rtol)
    for n in sorted(set(initial) - set(rw)):
        check("exported ONNX initializers vs PyTorch", np.array_equal(exported[n], initial[n]),
              "%s (frozen) unchanged" % n)

    print("-- (b) run it: onnxruntime, and shoal on one rank")
    sess = ort.InferenceSession(onnx_out, providers=["CPUExecutionProvider"])
    compare_logits("onnxruntime(exported) vs trained PyTorch",
                   sess.run(None, {"input_ids": ids})[0])
    fwd = os.path.join(w, "exported.plan")
    common.run_cmd([ctx.compile, onnx_out, "-o", fwd], timeout=a.timeout)
    fwd_out = os.path.join(w, "exported_out")
    common.run_cmd([ctx.run, fwd, "--inputs", ctx.inputs, "--outputs", fwd_out],
                   timeout=a.timeout)
    compare_logits("shoal one-rank(exported) vs trained PyTorch",
                   np.load(os.path.join(fwd_out, "logits.npy")))

    print("-- (c) the safetensors file")
    st = {n: t.numpy() for n, t in load_file(os.path.join(st_dir, "model.safetensors")).items()}
    check("safetensors", sorted(st) == sorted(initial),
          "the initializers' names (%d tensors)" % len(st))
    for n in sorted(set(st) & set(exported)):
        check("safetensors vs exported ONNX", st[n].dtype == exported[n].dtype
              and np.array_equal(st[n], exported[n]), n)
    rows += compare_sets("safetensors vs PyTorch", st, rw, sorted(rw), a.rtol)
    sys.path.insert(0, os.path.join(REPO, "examples", "gpt"))
    import make_model
    gpt = make_model.GPT()
    state = {}
    for pname, (iname, transposed) in idx["params"].items():
        if iname in st:
            state[pname] = torch.from_numpy(np.ascontiguousarray(
                st[iname].T if transposed else st[iname]))
    for bname, _ in gpt.named_buffers():
        if bname in st:
            state[bname] = torch.from_numpy(st[bname])
    try:
        gpt.load_state_dict(state, strict=True)
        loaded = True
    except RuntimeError as e:
        print("    load_state_dict: %s" % e)
        loaded = False
    check("safetensors", loaded, "load_state_dict(strict=True) of the PyTorch GPT "
          "(%d parameters and buffers)" % len(state))
    if loaded:
        gpt.eval()
        with torch.no_grad():
            compare_logits("PyTorch GPT(safetensors) vs trained PyTorch",
                           gpt(torch.from_numpy(ids)).numpy())
    return print_worst(rows, max(a.rtol, a.export_rtol), a.show)


def resolve_spec(spec):
    for cand in (os.path.join(common.EXAMPLES_DIR, "gpt", spec), os.path.join(HERE, spec), spec):
        if os.path.isfile(cand):
            return os.path.abspath(cand)
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description="shoal end-to-end training test (GPT)")
    ap.add_argument("--bin", required=True, help="BUILD/bin with shoal-compile and shoal-run")
    ap.add_argument("--spec", required=True,
                    help="annotation spec (name in examples/gpt/ or test/e2e/, or a path)")
    ap.add_argument("--world-size", type=int, required=True, help="number of MPI ranks")
    ap.add_argument("--work", required=True, help="work folder (emptied first)")
    ap.add_argument("--config", default=DEFAULT_CONFIG,
                    help="train.yaml (name in test/e2e/ or a path; default train_adamw.yaml)")
    ap.add_argument("--steps", type=int, default=None,
                    help="optimizer steps (default 1; --loss-drop 100; --resume-check 10 "
                         "per half; --reshard 2 before the reshard)")
    ap.add_argument("--mpirun", default="mpirun", help="mpirun executable (Open MPI)")
    common.add_launch_phase_args(ap)
    ap.add_argument("--rtol", type=float, default=common.DEFAULT_RTOL,
                    help="bound on the weights' and losses' relative error (default %(default)g)")
    ap.add_argument("--state-rtol", type=float, default=1e-4,
                    help="bound on the optimizer state's relative error (default %(default)g)")
    ap.add_argument("--state-floor", type=float, default=STATE_FLOOR,
                    help="optimizer state is compared relative to max(|ref|, FLOOR x the "
                         "largest |ref| of its kind) (default %(default)g)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the model generator")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds allowed to each command (default %(default)g)")
    ap.add_argument("--ignore", type=int, default=0, metavar="N",
                    help="set N random label positions to -100 (the config's ignore_index "
                         "must be -100): the loss still divides by every position")
    ap.add_argument("--show", type=int, default=5, help="worst tensors shown per comparison")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--loss-drop", type=float, metavar="FACTOR", default=None,
                      help="final loss must be <= initial / FACTOR")
    mode.add_argument("--job-check", action="store_true",
                      help="a training job: --total-steps, evaluation, metrics, --eval, "
                      "kill and rerun with --resume auto and --keep-last (mode_job)")
    mode.add_argument("--resume-check", action="store_true",
                      help="2K straight steps vs K + save + resume + K: bit-identical")
    mode.add_argument("--reshard", metavar="SPEC2", default=None,
                      help="resume layout A's checkpoint under SPEC2")
    ap.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=None,
                    help="ZeRO stage of the N-rank plan; compared with the same layout "
                         "without ZeRO (checkpoints, --report-memory)")
    ap.add_argument("--compile-arg", action="append", default=[],
                    help="an extra shoal-compile argument for every training plan "
                         "(repeatable), e.g. --compile-arg=--fuse-before-autodiff=none")
    ap.add_argument("--check-attention-memory", action="store_true",
                    help="also compile the layout with the attention chains unfused "
                         "(--fuse-before-autodiff=gelu-erf,rms-norm) and check, with "
                         "--report-memory, that the fused attention keeps at least "
                         "the attention probabilities less")
    ap.add_argument("--recompute", choices=["none", "full", "selective"], default=None,
                    help="recompute mode of the N-rank plan; compared bit for bit with the "
                         "same layout without it, and its --report-memory activations")
    ap.add_argument("--activation-ratio", type=float, default=0.55,
                    help="with --precision: the bound on the plan's activations in "
                    "--report-memory over the float32 plan's (default 0.55)")
    ap.add_argument("--precision", choices=["bf16", "fp16"], default=None,
                    help="train with `precision: P` added to the config (docs/Training.md "
                    "\"Mixed precision\"); PyTorch stays float32 (with --loss-drop and "
                    "bf16: torch.autocast bfloat16), so give --rtol 3e-2")
    ap.add_argument("--curve-rtol", type=float, default=0.05,
                    help="--loss-drop with --precision: the final loss within this "
                    "relative difference of PyTorch's (default 0.05)")
    ap.add_argument("--loss-scale-initial", type=float, default=None, metavar="S",
                    help="fp16: `loss_scale: {initial: S}` (no growth within the run)")
    mode.add_argument("--overflow-check", action="store_true",
                      help="fp16 from --loss-scale-initial: overflowing steps are skipped "
                      "and halve the scale; the weights match PyTorch's after the "
                      "applied steps")
    ap.add_argument("--zero-dp", type=int, default=2,
                    help="ranks over which ZeRO splits (for the memory check)")
    ap.add_argument("--plain-rtol", type=float, default=1e-6,
                    help="ZeRO vs plain tolerance (weights and optimizer state)")
    mode.add_argument("--export-check", action="store_true",
                      help="--export-onnx and --export-safetensors against PyTorch "
                      "(onnxruntime, safetensors, load_state_dict)")
    ap.add_argument("--export-rtol", type=float, default=1e-4,
                    help="bound on the exported models' outputs' relative error "
                    "(default %(default)g)")
    ap.add_argument("--world-size2", type=int, default=None, help="ranks of SPEC2")
    ap.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                    help="extra shoal-run argument of the N-rank runs (repeat)")
    ap.add_argument("--no-all-gather", action="store_true",
                    help="also require that the N-rank plan's partitioned IR holds no "
                         "all_gather and a vocabulary-parallel loss (split layouts)")
    ap.add_argument("--check-split-weights", action="store_true",
                    help="also require that the training plan's split TaskGraphs split "
                         "their weights as the forward plan does (the parallelism report)")
    ap.add_argument("--shard-multiple", type=int, default=None,
                    help="with --cluster: shoal-compile --shard-multiple")
    ap.add_argument("--batch-shares", choices=("blocks", "micro-batches"), default="blocks",
                    help="with --cluster: shoal-compile --batch-shares; the plan must "
                         "compile its shares this way")
    ap.add_argument("--cluster", default=None,
                    help="compile the N-rank plan with --cluster FILE (hardware-aware: "
                         "uneven batch shares or shards by speed); it must deal uneven "
                         "micro-batch counts to the replicas or compile shards by speed, "
                         "and its weights must equal those of the "
                         "plan without --cluster within --plain-rtol")
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="SPEC has sequence_parallel: also require reduce_scatter and "
                         "all_gather in place of the hidden states' all_reduce, and "
                         "fewer activations than without it (--report-memory)")
    ap.add_argument("--check-overlap", action="store_true",
                    help="trace the N-rank runs and check that gradient all-reduces "
                         "overlap compute on some rank (check_overlap.py)")
    args = ap.parse_args(argv)

    if args.world_size < 1:
        ap.error("--world-size must be at least 1")
    if args.reshard is not None and not args.world_size2:
        ap.error("--reshard needs --world-size2")
    if args.loss_drop is not None and args.loss_drop <= 1:
        ap.error("--loss-drop FACTOR must be > 1")
    if args.overflow_check and (args.precision != "fp16" or args.loss_scale_initial is None):
        ap.error("--overflow-check needs --precision fp16 and --loss-scale-initial")
    if args.steps is None:
        args.steps = (100 if args.loss_drop is not None
                      else 10 if args.resume_check or args.job_check
                      else 2 if args.reshard or args.export_check else 1)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    cfg = args.config
    if not os.path.isfile(cfg) and os.path.isfile(os.path.join(HERE, cfg)):
        cfg = os.path.join(HERE, cfg)
    if not os.path.isfile(cfg):
        ap.error("config %s not found" % args.config)
    args.config = os.path.abspath(cfg)
    spec = resolve_spec(args.spec)
    if spec is None:
        print("FAIL: spec %s not found" % args.spec)
        return 1

    if args.export_check:
        missing = common.missing_modules(EXPORT_MODULES)
        vpy = common.venv_python()
        in_venv = os.path.realpath(sys.prefix) == os.path.realpath(
            os.path.dirname(os.path.dirname(vpy)))
        if missing and os.path.isfile(vpy) and not in_venv:
            print("%s missing here: running under %s" % (", ".join(missing), vpy), flush=True)
            os.execv(vpy, [vpy, os.path.abspath(__file__)] + (argv or sys.argv[1:]))
        if missing:
            print("SKIP: %s cannot import %s (scripts/install-deps.sh installs them into %s)"
                  % (sys.executable, ", ".join(missing), os.path.dirname(os.path.dirname(vpy))))
            return SKIP
    if args.loss_drop is not None:
        what = "loss drop x%g, %d steps" % (args.loss_drop, args.steps)
    elif args.resume_check:
        what = "resume, %d + %d steps" % (args.steps, args.steps)
    elif args.job_check:
        what = "training job, %d + %d steps" % (args.steps, args.steps)
    elif args.export_check:
        what = "export after %d steps" % args.steps
    elif args.overflow_check:
        what = "fp16 overflow from loss scale %g, %d steps" % (args.loss_scale_initial,
                                                               args.steps)
    elif args.reshard:
        what = "reshard to %s on %d ranks after %d steps" % (
            os.path.basename(args.reshard), args.world_size2, args.steps)
    else:
        what = "%d step(s)" % args.steps
    title = "train e2e gpt %s world %d, %s, %s" % (
        os.path.basename(spec), args.world_size, os.path.basename(args.config), what)
    print("== " + title)
    try:
        ctx = Ctx(args)
        if args.phase == "run":
            # Keep what --phase prepare wrote (model, inputs, plans); drop
            # every earlier run's output, so that none makes a test pass.
            if not os.path.isfile(ctx.model):
                raise common.CommandError("--phase run: %s lacks model.onnx (run --phase "
                                          "prepare first)" % ctx.work)
            for f in os.listdir(ctx.work):
                if f.startswith(("ckpt", "reference", "base_out", "par_out", "trace")):
                    p = os.path.join(ctx.work, f)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        else:
            if os.path.isdir(ctx.work):
                shutil.rmtree(ctx.work)
            os.makedirs(ctx.work)
            print("-- (a) generate the GPT model")
            res = common.generate_model("gpt", ctx.work, seed=args.seed, timeout=args.timeout)
            print("\n".join(res.stdout.splitlines()[:3]))
            write_labels(ctx)
        if args.loss_drop is not None:
            ok = mode_loss_drop(ctx, spec)
        elif args.resume_check:
            ok = mode_resume(ctx, spec)
        elif args.job_check:
            ok = mode_job(ctx, spec)
        elif args.reshard:
            ok = mode_reshard(ctx, spec)
        elif args.export_check:
            ok = mode_export(ctx, spec)
        elif args.overflow_check:
            ok = mode_overflow(ctx, spec)
        else:
            ok = mode_layout(ctx, spec)
        if ok and args.check_overlap:
            import check_overlap
            trace = getattr(ctx, "trace", None)
            if not trace:
                raise Failure("--check-overlap: no N-rank run wrote a trace")
            ok = check_overlap.check(trace)
    except Prepared:
        print("PREPARED: %s (--phase run trains and compares)" % args.work)
        return 0
    except Skip as e:
        print("SKIP: %s" % e)
        return SKIP
    except common.CommandError as e:
        print(str(e))
        ok = False
    except Failure as e:
        print("FAIL: %s" % e)
        ok = False
    print(("PASS: " if ok else "FAIL: ") + title)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
