"""compile, simulate and train: thin wrappers over shoal-compile, shoal-sim
and shoal-run (no compiler logic here)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

from . import onnx_export as _export
from . import scopes as _scopes
from .errors import ShoalError

_REPO_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "bin")


def tool(name):
    """The path of a shoal tool: $SHOAL_BIN/NAME, else NAME on PATH, else
    the build folder of the repository this package lies in."""
    folder = os.environ.get("SHOAL_BIN")
    candidates = [os.path.join(folder, name)] if folder else []
    found = shutil.which(name)
    if found:
        candidates.append(found)
    candidates.append(os.path.join(_REPO_BIN, name))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise ShoalError("%s not found: set SHOAL_BIN to the folder of shoal's tools "
                     "(BUILD/bin) or put them on PATH" % name)


def _run(cmd, what):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        raise _tool_error(cmd, proc.returncode, proc.stdout, what)
    return proc.stdout


def _tool_error(cmd, returncode, output, what):
    lines = [l for l in output.splitlines() if "error:" in l]
    message = "\n".join(lines) if lines else output.strip()[-2000:]
    return ShoalError("%s failed (exit status %d): %s" % (what, returncode, message),
                      command=cmd, returncode=returncode, output=output)


class CompileResult:
    """What shoal.compile made: the plan, the parallelism report, and the
    spec and training config it wrote."""

    def __init__(self, plan, report, spec, train_config, world_size):
        self.plan = plan
        self.report = report
        self.spec = spec
        self.train_config = train_config
        self.world_size = world_size

    def __fspath__(self):
        return self.plan

    def __repr__(self):
        return "CompileResult(plan=%r, world_size=%d)" % (self.plan, self.world_size)


def write_spec(model_path, path):
    """The annotation spec of an exported model's scopes and the config's
    spec options, written to PATH; returns its dict."""
    side = _export.sidecar(model_path)
    config = _scopes.current_config()
    spec = {"version": 1, "default": config.get("default", "replicate")}
    if "pipeline" in config:
        spec["pipeline"] = config["pipeline"]
    if "inputs" in config:
        spec["inputs"] = config["inputs"]
    spec["scopes"] = side["scopes"]
    with open(path, "w") as f:
        f.write("# Written by shoal (Python) from the scopes of %s\n" % model_path)
        yaml.safe_dump(spec, f, sort_keys=False, default_flow_style=None)
    return spec


def write_train_config(model_path, path):
    """The training config of the config's options, the module's float
    buffers frozen (PyTorch never trains buffers); returns its dict."""
    config = _scopes.current_config()
    if "loss" not in config:
        raise ShoalError("shoal.compile(train=True) needs a loss: "
                         "shoal.config(loss={'kind': 'cross_entropy', "
                         "'output': ..., 'labels': ...})")
    train = {"version": 1}
    for key in ("loss", "optimizer", "zero", "recompute", "precision",
                "loss_scale", "grad_bucket_mb"):
        if key in config:
            train[key] = config[key]
    frozen = list(config.get("frozen", []))
    try:
        side = _export.sidecar(model_path)
        frozen += [b for b in side.get("frozen", []) if b not in frozen]
    except ShoalError:
        pass
    if frozen:
        train["frozen"] = frozen
    with open(path, "w") as f:
        f.write("# Written by shoal (Python) for %s\n" % model_path)
        yaml.safe_dump(train, f, sort_keys=False, default_flow_style=None)
    return train


def compile(model, world_size, out=None, train=True, spec=None, cluster=None,
            extra_args=()):
    """shoal-compile MODEL --annotate SPEC --world-size N [--train CONFIG]
    -o OUT --report-file OUT.report.txt. The spec is the one the scopes of
    shoal.export make (or `spec`, a YAML file of one's own); the training
    config comes from shoal.config. Returns a CompileResult."""
    model = os.fspath(model)
    out = out or os.path.splitext(model)[0] + ".plan"
    base = os.path.splitext(out)[0]
    spec_path = spec
    if spec_path is None and os.path.exists(model + _export.SIDECAR):
        spec_path = base + ".spec.yaml"
        write_spec(model, spec_path)
    train_path = None
    # No spec and no scopes (a model shoal.export did not write): the whole
    # model is one replicate(1) TaskGraph, data parallel over the world.
    cmd = [tool("shoal-compile"), model, "--world-size", str(world_size)]
    if spec_path is not None:
        cmd += ["--annotate", os.fspath(spec_path)]
    if train:
        train_path = base + ".train.yaml"
        write_train_config(model, train_path)
        cmd += ["--train", train_path]
    if cluster:
        cmd += ["--cluster", os.fspath(cluster)]
    report_path = base + ".report.txt"
    cmd += ["-o", out, "--report-file", report_path] + list(extra_args)
    _run(cmd, "shoal-compile")
    with open(report_path) as f:
        report = f.read()
    return CompileResult(out, report, spec_path, train_path, world_size)


def simulate(plan, cluster, extra_args=()):
    """shoal-sim PLAN --cluster CLUSTER: the predicted step, as text."""
    return _run([tool("shoal-sim"), os.fspath(plan), "--cluster", os.fspath(cluster)]
                + list(extra_args), "shoal-sim")


class TrainResult:
    """A finished run: the losses of its steps (from --metrics), every
    metrics record, and shoal-run's output."""

    def __init__(self, records, output):
        self.records = records
        self.losses = [r["loss"] for r in records if "loss" in r]
        self.output = output


def launch_command(ranks, argv, launcher="mpirun"):
    """argv under mpirun (-np RANKS, --oversubscribe) or torchrun
    (--standalone --nproc_per_node RANKS --no-python); argv alone for one
    rank."""
    if ranks == 1 and launcher == "mpirun":
        return list(argv)
    if launcher == "mpirun":
        mpirun = shutil.which("mpirun")
        if not mpirun:
            raise ShoalError("mpirun not found (Open MPI's openmpi-bin), which "
                             "launches %d ranks" % ranks)
        cmd = [mpirun, "--oversubscribe", "-np", str(ranks)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
        return cmd + list(argv)
    if launcher == "torchrun":
        # The torchrun of the Python running this (a venv's), else PATH's.
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        if not os.access(torchrun, os.X_OK):
            torchrun = shutil.which("torchrun")
        if not torchrun:
            raise ShoalError("torchrun not found next to %s or on PATH"
                             % sys.executable)
        return [torchrun, "--standalone", "--nproc_per_node", str(ranks),
                "--no-python"] + list(argv)
    raise ShoalError("launcher must be 'mpirun' or 'torchrun', got %r" % launcher)


def train(plan, steps, data=None, inputs=None, outputs=None, ranks=None,
          launcher="mpirun", metrics=None,
          save=None, export_safetensors=None, export_onnx=None, extra_args=(),
          on_line=None, env=None):
    """Runs shoal-run PLAN --steps STEPS on RANKS ranks (the plan's world
    size when `plan` is a CompileResult) under mpirun or torchrun, passing
    each output line to `on_line` (default: print) as it comes. Returns a
    TrainResult; a failed run raises ShoalError with shoal-run's error."""
    if ranks is None:
        if not isinstance(plan, CompileResult):
            raise ShoalError("shoal.train: give ranks= (or the CompileResult "
                             "of shoal.compile)")
        ranks = plan.world_size
    if on_line is None:
        on_line = print
    fd, metrics_path = tempfile.mkstemp(prefix="shoal-metrics-", suffix=".jsonl")
    os.close(fd)
    os.unlink(metrics_path)
    argv = [tool("shoal-run"), os.fspath(plan), "--steps", str(steps)]
    # A forward plan has no losses to record (metrics=None: a CompileResult
    # says which it is; a plan file is taken for a training plan unless the
    # run writes --outputs).
    if metrics is None:
        metrics = plan.train_config is not None if isinstance(plan, CompileResult) \
            else outputs is None
    if metrics:
        argv += ["--metrics", metrics_path, "--log-every", "1"]
    if data is not None:
        argv += ["--data", os.fspath(data)]
    if inputs is not None:
        argv += ["--inputs", os.fspath(inputs)]
    if outputs is not None:
        argv += ["--outputs", os.fspath(outputs)]
    if save is not None:
        argv += ["--save", os.fspath(save)]
    if export_safetensors is not None:
        argv += ["--export-safetensors", os.fspath(export_safetensors)]
    if export_onnx is not None:
        argv += ["--export-onnx", os.fspath(export_onnx)]
    argv += list(extra_args)
    cmd = launch_command(ranks, argv, launcher)
    run_env = dict(os.environ, **(env or {}))
    run_env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    lines = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=run_env)
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            on_line(line)
        proc.wait()
        output = "\n".join(lines)
        if proc.returncode != 0:
            raise _tool_error(cmd, proc.returncode, output, "shoal-run")
        records = []
        if os.path.exists(metrics_path):
            with open(metrics_path) as f:
                records = [json.loads(l) for l in f if l.strip()]
        return TrainResult(records, output)
    finally:
        if os.path.exists(metrics_path):
            os.unlink(metrics_path)
