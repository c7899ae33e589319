"""Shared helpers for shoal's Python examples and end-to-end tests.

Used by examples/*/make_model.py, examples/run_example.py and
test/e2e/run_e2e.py. Only the standard library and numpy are needed here
(torch/onnx are imported by the model generators, not by this module), so the
comparison code can be used on its own.

Run everything with /usr/bin/python3: it is the interpreter that has torch,
onnx and numpy installed.
"""

import os
import re
import shlex
import subprocess
import sys
import time

import numpy as np

# Interpreter used for every Python subprocess (model generation).
# The interpreter with torch: Debian's here; SHOAL_TEST_PYTHON elsewhere (the
# GPU machine's Python, scripts/gpu_checks.py).
PYTHON = os.environ.get("SHOAL_TEST_PYTHON", "/usr/bin/python3")

EXAMPLES_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(EXAMPLES_DIR)

# Relative error bound used by the e2e tests and run_example.py.
DEFAULT_RTOL = 1e-5

# Op types each example model may contain after export (checked by the
# generators so that the compiler only ever sees what it supports).
GPT_ALLOWED_OPS = frozenset({
    "MatMul", "Add", "Mul", "Div", "Sub", "Gather", "Reshape", "Transpose",
    "Softmax", "LayerNormalization", "Erf", "Constant", "Sqrt", "Pow",
})
MLP_ALLOWED_OPS = frozenset({
    "Gemm", "Relu", "Erf", "Add", "Mul", "Div", "Constant",
})


class CommandError(RuntimeError):
    """A subprocess failed; the message holds its command line and output."""

    def __init__(self, msg, result=None):
        super().__init__(msg)
        self.result = result


def fmt_cmd(cmd, env_extra=None):
    """The command as a copy-pastable shell line."""
    prefix = ""
    if env_extra:
        prefix = " ".join("%s=%s" % (k, shlex.quote(str(v)))
                          for k, v in sorted(env_extra.items())) + " "
    return prefix + " ".join(shlex.quote(str(c)) for c in cmd)


def missing_modules(names):
    """The modules of `names` this interpreter cannot import (an ImportError,
    or a broken install)."""
    import importlib
    out = []
    for n in names:
        try:
            importlib.import_module(n)
        except Exception:
            out.append(n)
    return out


def venv_python():
    """The python of scripts/install-deps.sh's virtual environment."""
    venv = os.environ.get("SHOAL_VENV") or os.path.expanduser("~/.cache/shoal-venv")
    return os.path.join(venv, "bin", "python")


def run_cmd(cmd, env_extra=None, timeout=None, check=True, echo=True,
            cwd=None, log=None):
    """Run `cmd` (a list), capturing stdout/stderr.

    env_extra: variables added to the current environment.
    check: raise CommandError (with the captured output in the message) when
           the command exits non-zero, is killed by a signal, times out or
           cannot be started.
    Returns the subprocess.CompletedProcess (with .elapsed set, seconds).
    """
    cmd = [str(c) for c in cmd]
    out = log if log is not None else sys.stdout
    if echo:
        print("$ " + fmt_cmd(cmd, env_extra), file=out, flush=True)
    env = dict(os.environ)
    if env_extra:
        env.update({k: str(v) for k, v in env_extra.items()})
    t0 = time.time()
    try:
        res = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True,
                             errors="replace", timeout=timeout)
    except FileNotFoundError as e:
        raise CommandError("cannot run %s: %s" % (cmd[0], e))
    except subprocess.TimeoutExpired as e:
        def _s(x):
            if x is None:
                return ""
            return x.decode(errors="replace") if isinstance(x, bytes) else x
        raise CommandError(
            "command timed out after %ss: %s\n--- stdout ---\n%s\n"
            "--- stderr ---\n%s" % (timeout, fmt_cmd(cmd, env_extra),
                                    _s(e.stdout), _s(e.stderr)))
    res.elapsed = time.time() - t0
    if check and res.returncode != 0:
        raise CommandError(
            "command failed (%s): %s\n--- stdout ---\n%s\n--- stderr ---\n%s"
            % (describe_returncode(res.returncode), fmt_cmd(cmd, env_extra),
               res.stdout, res.stderr), res)
    return res


def describe_returncode(rc):
    if rc < 0:
        import signal
        try:
            return "killed by signal %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit status %d" % rc


def npy_names(folder):
    """Sorted tensor names (file names without .npy) in `folder`."""
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-4] for f in os.listdir(folder)
                  if f.endswith(".npy") and os.path.isfile(os.path.join(folder, f)))


def rel_error(a, b):
    """max|a-b| / max(max|b|, 1e-12), computed in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    denom = max(float(np.max(np.abs(b))), 1e-12)
    return float(np.max(np.abs(a - b))) / denom


def compare_arrays(a, b, rtol=DEFAULT_RTOL):
    """Compare a (under test) against b (expected).

    Returns (error or None, problem or None). A problem is a short string
    saying why the pair fails outright (shape, dtype, NaN/Inf); the error is
    the relative error when it could be computed.
    """
    if a.shape != b.shape:
        return None, "shape %s != %s" % (list(a.shape), list(b.shape))
    if a.dtype != b.dtype:
        # Still compute the error so the table is useful, but fail.
        problem = "dtype %s != %s" % (a.dtype, b.dtype)
    else:
        problem = None
    for arr, what in ((a, "actual"), (b, "expected")):
        if arr.dtype.kind in "fc":
            if np.isnan(arr).any():
                return None, "NaN in %s" % what
            if not np.isfinite(arr).all():
                return None, "Inf in %s" % what
    err = rel_error(a, b)
    if problem is None and not err <= rtol:
        problem = "error %.3e > %.1e" % (err, rtol)
    return err, problem


def _load(path):
    try:
        return np.load(path, allow_pickle=False), None
    except Exception as e:  # corrupt/truncated file, pickled object, ...
        return None, "cannot read %s: %s" % (path, e)


def compare_dirs(actual_dir, expected_dir, names=None, rtol=DEFAULT_RTOL,
                 label=None):
    """Compare every tensor `name` in actual_dir against expected_dir.

    names: tensor names to compare; default: the union of both folders.
    Returns a list of rows (label, name, err, problem); problem is None for
    a pass.
    """
    label = label or "%s vs %s" % (actual_dir, expected_dir)
    if names is None:
        names = sorted(set(npy_names(actual_dir)) | set(npy_names(expected_dir)))
    rows = []
    if not names:
        rows.append((label, "-", None, "no .npy outputs in %s or %s"
                     % (actual_dir, expected_dir)))
        return rows
    for name in names:
        pa = os.path.join(actual_dir, name + ".npy")
        pb = os.path.join(expected_dir, name + ".npy")
        missing = [p for p in (pa, pb) if not os.path.isfile(p)]
        if missing:
            rows.append((label, name, None, "missing " + ", ".join(missing)))
            continue
        a, ea = _load(pa)
        b, eb = _load(pb)
        if ea or eb:
            rows.append((label, name, None, ea or eb))
            continue
        err, problem = compare_arrays(a, b, rtol)
        rows.append((label, name, err, problem))
    return rows


def print_table(rows, rtol=DEFAULT_RTOL, out=None):
    """Print comparison rows; returns True when every row passed."""
    out = out or sys.stdout
    w0 = max([len("comparison")] + [len(r[0]) for r in rows])
    w1 = max([len("output")] + [len(r[1]) for r in rows])
    print("%-*s  %-*s  %12s  %s" % (w0, "comparison", w1, "output",
                                    "rel. error", "result (bound %.0e)" % rtol),
          file=out)
    print("-" * (w0 + w1 + 36), file=out)
    ok = True
    for label, name, err, problem in rows:
        es = "%.3e" % err if err is not None else "-"
        res = "ok" if problem is None else "FAIL: " + problem
        ok = ok and problem is None
        print("%-*s  %-*s  %12s  %s" % (w0, label, w1, name, es, res), file=out)
    out.flush()
    return ok


def max_error(rows):
    """Largest error among rows, or None."""
    errs = [r[2] for r in rows if r[2] is not None]
    return max(errs) if errs else None


def generate_model(model, out_dir, seed=0, echo=True, timeout=600):
    """Run examples/<model>/make_model.py (or, for a model family,
    examples/families/<model>.py) --out out_dir as a subprocess."""
    script = os.path.join(EXAMPLES_DIR, model, "make_model.py")
    if not os.path.isfile(script):
        script = os.path.join(EXAMPLES_DIR, "families", model + ".py")
    if not os.path.isfile(script):
        raise CommandError("no model generator %s" % script)
    return run_cmd([PYTHON, script, "--out", out_dir, "--seed", str(seed)],
                   echo=echo, timeout=timeout)


def find_tool(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise CommandError("%s not found or not executable (is the project "
                           "built? --bin should be BUILD/bin)" % path)
    return path


def mpirun_cmd(mpirun, np_, argv):
    """Open MPI command line used for every sharded run."""
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np_)] + list(argv)


def launch_env_cmd(np_, timeout, argv):
    """test/launch_env.py: N processes of argv started as torchrun starts
    them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no MPI)."""
    return [sys.executable, os.path.join(REPO_ROOT, "test", "launch_env.py"),
            "--np", str(np_), "--timeout", str(timeout), "--"] + list(argv)


def add_launch_phase_args(ap):
    """--launch and --phase of the e2e harnesses (run_e2e.py,
    run_train_e2e.py)."""
    ap.add_argument("--launch", choices=["mpirun", "env"], default="mpirun",
                    help="start the N-rank runs with mpirun, or as torchrun does: one "
                         "process per rank with RANK, WORLD_SIZE, MASTER_ADDR and "
                         "MASTER_PORT and no MPI (test/launch_env.py)")
    ap.add_argument("--phase", choices=["all", "prepare", "run"], default="all",
                    help="all: everything; prepare: generate the model and compile "
                         "the plans into --work, then stop; run: run and compare what "
                         "a prepare left in --work (for a machine without the "
                         "compiler, e.g. a GPU machine: scripts/gpu_checks.py)")


# Set for every mpirun: ranks yield the CPU while waiting, so oversubscribed
# runs (more ranks than cores) do not crawl.
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}


COLLECTIVES = ("all_gather", "all_reduce", "all_to_all", "local_slice")


def count_collectives(mlir_path):
    """Collectives of a partitioned program (shoal-compile --emit-mlir), by
    kind: {"all_gather": 2, ...} (every kind present, 0 if none). The blocks
    and all-gathers of pipeline transfers (Megatron's scatter/gather,
    `shoal.reason = "pipeline transfer: ..."`) are transfers, not layouts:
    counted under "transfer" instead."""
    with open(mlir_path) as f:
        text = f.read()
    counts = {k: 0 for k in COLLECTIVES}
    counts["transfer"] = 0
    for k in COLLECTIVES:
        for line in re.findall(r"\bshoal\.%s\b[^\n]*" % k, text):
            counts["transfer" if "pipeline transfer:" in line else k] += 1
    return counts


def check_collectives(mlir_path, expected):
    """`expected`: list of "KIND=N" or "KIND<=N" strings. Prints the counts;
    returns the list of violations (empty when every bound holds)."""
    counts = count_collectives(mlir_path)
    print("collectives: " + ", ".join("%s %d" % kv for kv in sorted(counts.items())))
    bad = []
    for e in expected:
        m = re.fullmatch(r"(\w+)(<=|=)(\d+)", e)
        if not m or m.group(1) not in counts:
            bad.append("bad --expect-collectives entry %r (KIND=N or KIND<=N, "
                       "KIND one of %s)" % (e, ", ".join(COLLECTIVES)))
            continue
        kind, op, n = m.group(1), m.group(2), int(m.group(3))
        got = counts[kind]
        if (op == "=" and got != n) or (op == "<=" and got > n):
            bad.append("%s: %d in the partitioned program, expected %s%d"
                       % (kind, got, op, n))
    return bad


def hidden_all_reduces(ir):
    """all_reduce ops of rank-3 tensors ([batch, sequence, hidden]) in a
    partitioned IR's text, leaving out the vocabulary-parallel loss's
    statistics, tensors with a dimension of 1 (one row per sample, as
    CLIP's pooler picks: no sequence) and tensors of a weight's local shape
    (a stack of experts' matrices: their gradients): what sequence
    parallelism replaces with reduce_scatter and all_gather."""
    weights = set(re.findall(r"shoal\.weight [^\n]*: (tensor<[^>]*>)\s*$", ir, re.M))
    n = 0
    for line in re.findall(r"shoal\.all_reduce [^\n]*", ir):
        t = re.search(r": (tensor<((?:\d+x)+)[a-z0-9]+>)\s*$", line)
        dims = t.group(2).rstrip("x").split("x") if t else []
        if "vocabulary-parallel" not in line and len(dims) == 3 and "1" not in dims \
                and t.group(1) not in weights:
            n += 1
    return n


def human_size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def onnx_summary(model_path):
    """(node count, sorted op types, parameter count) of an ONNX model."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model_path)
    ops = sorted({n.op_type for n in m.graph.node})
    params = sum(int(np.prod(numpy_helper.to_array(t).shape))
                 for t in m.graph.initializer)
    return len(m.graph.node), ops, params


def check_onnx(model_path, allowed_ops):
    """onnx.checker + op-type whitelist. Returns the ModelProto.

    Raises SystemExit naming the unexpected op types."""
    import onnx
    m = onnx.load(model_path)
    onnx.checker.check_model(m)
    ops = {n.op_type for n in m.graph.node}
    bad = sorted(ops - set(allowed_ops))
    if bad:
        for n in m.graph.node:
            if n.op_type in bad:
                print("  unexpected: %s (%s)" % (n.name, n.op_type), file=sys.stderr)
        raise SystemExit("error: %s contains op types outside the allowed set: %s"
                         % (model_path, ", ".join(bad)))
    return m


def print_graph_summary(m, max_names=12):
    """Print op types, node count and a sample of node names."""
    from collections import Counter
    counts = Counter(n.op_type for n in m.graph.node)
    print("nodes: %d" % len(m.graph.node))
    print("op types: " + ", ".join("%s x%d" % (k, counts[k]) for k in sorted(counts)))
    print("graph inputs: " + ", ".join(
        "%s %s" % (i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in m.graph.input))
    print("graph outputs: " + ", ".join(
        "%s %s" % (o.name, [d.dim_value for d in o.type.tensor_type.shape.dim])
        for o in m.graph.output))
    names = [n.name for n in m.graph.node]
    if len(names) > max_names:
        half = max_names // 2
        sample = names[:half] + ["..."] + names[-half:]
    else:
        sample = names
    print("node names (sample): ")
    for s in sample:
        print("  " + s)


# ---------------------------------------------------------------------------
# A tiny numpy evaluator for the op types the example models use. The
# generators run it on the exported model to check that model.onnx computes
# what PyTorch computed (reference/), so a disagreement in the e2e tests
# points at shoal, not at the exporter. float64 internally.

def _erf(x):
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def eval_onnx_numpy(model_path, inputs):
    """Evaluate model_path on {input name: array}; returns {output: array}."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model_path)
    env = {}
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        env[t.name] = a.astype(np.float64) if a.dtype.kind == "f" else a
    for k, v in inputs.items():
        env[k] = v.astype(np.float64) if v.dtype.kind == "f" else v
    for n in m.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        x = [env[i] if i else None for i in n.input]
        op = n.op_type
        if op == "Constant":
            a = numpy_helper.to_array(attrs["value"])
            y = a.astype(np.float64) if a.dtype.kind == "f" else a
        elif op in ("Add", "Sub", "Mul", "Div", "Pow"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                 "Div": np.divide, "Pow": np.power}[op]
            y = f(x[0], x[1])
        elif op == "MatMul":
            y = np.matmul(x[0], x[1])
        elif op == "Gemm":
            a, b = x[0], x[1]
            if attrs.get("transA", 0):
                a = a.T
            if attrs.get("transB", 0):
                b = b.T
            y = attrs.get("alpha", 1.0) * (a @ b)
            if len(x) > 2 and x[2] is not None:
                y = y + attrs.get("beta", 1.0) * x[2]
        elif op == "Relu":
            y = np.maximum(x[0], 0)
        elif op == "Erf":
            y = _erf(x[0])
        elif op == "Sqrt":
            y = np.sqrt(x[0])
        elif op == "Gather":
            y = np.take(x[0], x[1], axis=attrs.get("axis", 0))
        elif op == "Reshape":
            shape = [int(s) for s in x[1]]
            shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
            y = x[0].reshape(shape)
        elif op == "Transpose":
            y = np.transpose(x[0], attrs.get("perm"))
        elif op == "Softmax":
            ax = attrs.get("axis", -1)
            e = np.exp(x[0] - x[0].max(axis=ax, keepdims=True))
            y = e / e.sum(axis=ax, keepdims=True)
        elif op == "LayerNormalization":
            ax = attrs.get("axis", -1)
            axes = tuple(range(ax % x[0].ndim, x[0].ndim))
            mu = x[0].mean(axis=axes, keepdims=True)
            var = ((x[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (x[0] - mu) / np.sqrt(var + attrs.get("epsilon", 1e-5)) * x[1]
            if len(x) > 2 and x[2] is not None:
                y = y + x[2]
        else:
            raise NotImplementedError("eval_onnx_numpy: op %s (%s)" % (op, n.name))
        env[n.output[0]] = y
    return {o.name: env[o.name] for o in m.graph.output}


def verify_onnx_against_reference(model_path, inputs, reference, rtol=DEFAULT_RTOL):
    """Run eval_onnx_numpy and compare with reference {name: array}; exit on
    disagreement. Prints one line per output."""
    got = eval_onnx_numpy(model_path, inputs)
    for name, ref in reference.items():
        err = rel_error(got[name], ref)
        print("numpy evaluation of %s vs PyTorch, %s: rel. error %.3e"
              % (os.path.basename(model_path), name, err))
        if not err <= rtol:
            raise SystemExit("error: the exported ONNX model disagrees with "
                             "PyTorch on %s (%.3e > %.0e)" % (name, err, rtol))
