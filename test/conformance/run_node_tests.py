#!/usr/bin/python3
"""ONNX backend node-test conformance runner for shoal.

    /usr/bin/python3 test/conformance/run_node_tests.py --bin BUILD/bin \
        --work DIR [--ops Add,MatMul,...] [--filter REGEX] \
        [--report FILE.md] [--expect FILE.json] [--data DIR] [--jobs N]

Runs the ONNX node tests (one ONNX node per model, from the Debian package
libonnx-testdata: /usr/include/onnx/backend/test/data/node/<test>/) whose
single node's op_type is in the op list (default: supported_ops.txt next to
this script). For each test:

  shoal-compile <test>/model.onnx --world-size 1 -o WORK/<test>/plan
  and, for each <test>/test_data_set_K:
    inputs  input_I.pb  -> WORK/<test>/K/inputs/<graph input I>.npy
    shoal-run WORK/<test>/plan --inputs .../inputs --outputs .../outputs
    compare .../outputs/<graph output I>.npy with output_I.pb

(in file names every character of a tensor name outside [A-Za-z0-9_.-]
becomes '_', as shoal-run expects). With --upgrade-opset N, a model whose
default-domain opset is below N is first converted to opset N with
onnx.version_converter (WORK/<test>/model.onnx). The comparison is ONNX's backend-test
one: shapes and dtypes must match; floats with numpy.testing.assert_allclose
(rtol=1e-3, atol=1e-7, NaN equal to NaN); integers and bools exactly.

Outcomes: pass, fail-compile, fail-run, fail-compare, skipped (a tensor type
shoal does not have -- it has float32, float64, float16, bfloat16, int64,
int32, int8, uint8 and bool -- or a
sequence/optional/map input or output; found from the model's types before
anything runs). A test with several data sets takes the first failure.

--expect FILE.json: a JSON list of test names that must pass; exit 1 if a
selected one does not pass or one is not in the test data at all (names
left out by --ops/--filter are not checked). Without it the exit status is
0 unless the runner itself breaks (exit 2: bad usage, tools missing for
5 minutes, a Python error while running a test). Exit 77 when the test
data is not installed (ctest reports the test as skipped).

The tools may be rebuilt while this runs: a missing tool is waited for and
an exec error or a crash by a signal is retried (once for a crash).
"""

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OPS_FILE = os.path.join(HERE, "supported_ops.txt")
DEFAULT_DATA_DIRS = [
    "/usr/include/onnx/backend/test/data/node",  # libonnx-testdata
    "/usr/share/onnx/backend/test/data/node",
]

RTOL = 1e-3
ATOL = 1e-7
TOOL_TIMEOUT_S = 300  # one shoal-compile or shoal-run
TOOL_WAIT_S = 300  # how long to wait for a tool that is missing (rebuild)
_gave_up_waiting = set()  # tools that stayed missing for TOOL_WAIT_S

OUTCOMES = ["pass", "fail-compile", "fail-run", "fail-compare", "skipped"]


def die(msg, code=2):
    print("run_node_tests: " + msg, file=sys.stderr)
    sys.exit(code)


try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:  # the runner cannot work at all
    die("needs numpy and onnx (%s); use /usr/bin/python3" % e)

# ONNX tensor element types shoal has (float32, float64, float16, bfloat16,
# int64, int32, int8, uint8, bool). numpy has no bfloat16: onnx's
# numpy_helper gives bfloat16 tensors as float32, which shoal-run accepts
# for a bfloat16 input (rounding to nearest even) and writes for a bfloat16
# output.
TP = onnx.TensorProto
SUPPORTED_ELEM = {TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16, TP.INT32,
                  TP.INT64, TP.INT8, TP.UINT8, TP.BOOL}


def elem_name(t):
    try:
        return TP.DataType.Name(t).lower()
    except ValueError:
        return "elem_type %d" % t


def sanitize(name):
    """shoal's file name for a tensor name (lib/Runtime/Npy.cpp)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def default_data_dir():
    cands = list(DEFAULT_DATA_DIRS)
    cands.append(os.path.join(os.path.dirname(onnx.__file__),
                              "backend", "test", "data", "node"))
    for d in cands:
        if os.path.isdir(d):
            return d
    return None


def read_ops_file(path):
    ops = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                ops.append(line)
    return ops


# ---------------------------------------------------------------------------
# Test selection and type checks
# ---------------------------------------------------------------------------

class NodeTest:
    def __init__(self, name, path, model):
        self.name = name
        self.path = path
        self.op = model.graph.node[0].op_type
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [v for v in model.graph.input if v.name not in inits]
        self.outputs = list(model.graph.output)
        self.data_sets = sorted(
            (d for d in os.listdir(path)
             if d.startswith("test_data_set_")
             and os.path.isdir(os.path.join(path, d))),
            key=lambda d: int(d.rsplit("_", 1)[1]) if d.rsplit("_", 1)[1].isdigit() else 0)


def value_type_problem(v, what):
    """Why shoal cannot take/produce ValueInfo `v`, or None."""
    t = v.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        return "%s %s has %s type" % (what, v.name, (kind or "no").replace("_type", ""))
    et = t.tensor_type.elem_type
    if et not in SUPPORTED_ELEM:
        return "%s %s has dtype %s" % (what, v.name, elem_name(et))
    return None


def skip_reason(test):
    reasons = []
    for v in test.inputs:
        r = value_type_problem(v, "input")
        if r:
            reasons.append(r)
    for v in test.outputs:
        r = value_type_problem(v, "output")
        if r:
            reasons.append(r)
    if not test.data_sets:
        reasons.append("no test_data_set")
    return "; ".join(reasons) if reasons else None


def discover(data_dir, ops, regex):
    """All node tests (name -> op, or None when the model is not a single
    node), and the selected NodeTests."""
    all_tests = {}
    selected = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        model_path = os.path.join(path, "model.onnx")
        if not os.path.isfile(model_path):
            continue
        try:
            model = onnx.load(model_path, load_external_data=False)
        except Exception as e:
            print("warning: %s: cannot load model.onnx: %s" % (name, e), file=sys.stderr)
            all_tests[name] = None
            continue
        if len(model.graph.node) != 1:
            all_tests[name] = None  # e.g. *_expanded function bodies
            continue
        op = model.graph.node[0].op_type
        all_tests[name] = op
        if ops is not None and op not in ops:
            continue
        if regex is not None and not regex.search(name):
            continue
        selected.append(NodeTest(name, path, model))
    return all_tests, selected


# ---------------------------------------------------------------------------
# Running the tools
# ---------------------------------------------------------------------------

def first_error_line(text):
    """The first line of a tool's error output: the first line that says
    'error', else the first non-empty line."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if re.search(r"\berror\b", l, re.IGNORECASE):
            return l
    return lines[0] if lines else ""


def run_tool(tool, args, cwd):
    """Runs a shoal tool. Tolerates a tool that is missing or being
    replaced by a rebuild: waits for it and retries; a crash by a signal is
    retried once. Returns (returncode, stdout, stderr); returncode None on
    timeout."""
    deadline = time.time() + (5 if tool in _gave_up_waiting else TOOL_WAIT_S)
    crashes = 0
    while True:
        if not os.path.isfile(tool):
            if time.time() > deadline:
                _gave_up_waiting.add(tool)
                return 127, "", "%s: not found (waited for it)" % tool
            time.sleep(2)
            continue
        # Each singleton MPI start gets its own session folder: Open MPI's
        # shared one in /tmp can race between parallel starts ("mkdir
        # failed ... File exists").
        # (A short path: Open MPI puts Unix sockets there.)
        try:
            with tempfile.TemporaryDirectory(prefix="shoal") as tmp:
                p = subprocess.run([tool] + args, cwd=cwd, capture_output=True,
                                   text=True, errors="replace",
                                   timeout=TOOL_TIMEOUT_S,
                                   env=dict(os.environ, TMPDIR=tmp))
        except subprocess.TimeoutExpired:
            return None, "", "timed out after %d s" % TOOL_TIMEOUT_S
        except OSError as e:  # ETXTBSY, ENOEXEC, ENOENT mid-rebuild
            if time.time() > deadline:
                return 126, "", "%s: %s" % (tool, e)
            time.sleep(2)
            continue
        if p.returncode < 0 and crashes == 0:
            crashes += 1  # maybe a half-written binary; once more
            time.sleep(3)
            continue
        return p.returncode, p.stdout, p.stderr


def tool_failure(rc, err, out):
    if rc is None:
        return err
    line = first_error_line(err) or first_error_line(out)
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = "signal %d" % -rc
        return "crashed (%s)%s" % (sig, ": " + line if line else "")
    return line or "exit status %d, no message" % rc


# ---------------------------------------------------------------------------
# Comparison (ONNX backend-test rules)
# ---------------------------------------------------------------------------

def value_elem_type(v):
    return v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else None


def load_data(pb, v):
    """The numpy array of TensorProto file `pb` for graph input/output `v`.
    ONNX 1.12's node tests store bfloat16 values as UINT16 tensors of their
    bit patterns; numpy has no bfloat16, so they become (exact) float32,
    shoal's convention for bfloat16 in .npy files."""
    arr = numpy_helper.to_array(onnx.load_tensor(pb))
    if value_elem_type(v) == TP.BFLOAT16 and arr.dtype == np.uint16:
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def bf16_bits(a):
    """The bfloat16 bit patterns of float32 array `a` (its values must be
    bfloat16 values)."""
    return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def compare_bf16_truncated(expected, actual):
    """ONNX 1.12's reference Cast to bfloat16 truncates the float32 (the
    node tests' generator takes the upper 16 bits; onnx/onnx#3876), while
    shoal rounds to nearest even like ONNX Runtime and PyTorch. So a
    bfloat16 output may equal the reference or be one bfloat16 step larger
    in magnitude (the rounding up that truncation misses), nothing else.
    None if so, else a reason."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return compare(expected, actual)
    a = actual.astype(np.float32)
    if not np.array_equal(bf16_bits(a).view(np.uint16).astype(np.uint32) << 16,
                          a.view(np.uint32)):
        return "output values are not all bfloat16 values"
    ea, eb = bf16_bits(expected).astype(np.int64), bf16_bits(a).astype(np.int64)
    nan = np.isnan(expected) & np.isnan(a)
    ok = nan | (ea == eb) | ((eb == ea + 1) & ((ea & 0x7f80) != 0x7f80))
    if ok.all():
        return None
    return "%d of %d bfloat16 elements neither the reference nor one step above it" % (
        int((~ok).sum()), expected.size)


def compare(expected, actual):
    """None if `actual` matches `expected`, else a short reason."""
    if actual.dtype != expected.dtype:
        return "dtype %s, expected %s" % (actual.dtype, expected.dtype)
    if actual.shape != expected.shape:
        return "shape %s, expected %s" % (actual.shape, expected.shape)
    if expected.size == 0:
        return None
    if np.issubdtype(expected.dtype, np.floating) or np.issubdtype(expected.dtype, np.complexfloating):
        try:
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
            return None
        except AssertionError:
            pass
        e = expected.astype(np.float64)
        a = actual.astype(np.float64)
        nan_mismatch = int(np.sum(np.isnan(e) != np.isnan(a)))
        ok = ~(np.isnan(e) | np.isnan(a))
        diff = np.abs(a - e)
        # inf == inf counts as no error
        diff[ok & (a == e)] = 0.0
        bad = ok & ~(diff <= ATOL + RTOL * np.abs(e))
        abs_err = float(np.max(diff[ok])) if ok.any() else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(np.abs(e) > 0, diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
        rel_err = float(np.max(rel[ok])) if ok.any() else 0.0
        msg = "max abs err %.3g, max rel err %.3g, %d of %d elements off" % (
            abs_err, rel_err, int(bad.sum()) + nan_mismatch, expected.size)
        if nan_mismatch:
            msg += " (%d NaN mismatches)" % nan_mismatch
        return msg
    if np.array_equal(actual, expected):
        return None
    bad = int(np.sum(actual != expected))
    msg = "%d of %d elements differ" % (bad, expected.size)
    if expected.dtype != np.bool_:
        d = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        msg += ", max abs err %.3g" % float(d.max())
    return msg


# ---------------------------------------------------------------------------
# One test
# ---------------------------------------------------------------------------

class Result:
    def __init__(self, test, outcome, reason="", seconds=0.0):
        self.name = test.name
        self.op = test.op
        self.outcome = outcome
        self.reason = reason
        self.seconds = seconds


def default_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


# Inputs a static compiler needs at compile time (shapes, axes, sizes,
# indices of slices). The node tests feed them as graph inputs; the runner
# embeds them as initializers from the first data set, which is what an
# exporter with static shapes writes (and those tests have one data set).
COMPILE_TIME_INPUTS = {
    "Reshape": {1}, "ReduceSum": {1}, "Slice": {1, 2, 3, 4}, "Split": {1},
    "Trilu": {1}, "Expand": {1}, "TopK": {1}, "Unsqueeze": {1},
    "Squeeze": {1}, "Range": {0, 1, 2}, "ConstantOfShape": {0}, "Pad": {1, 2, 3},
    "Tile": {1}, "OneHot": {1}, "CumSum": {1},
    # Resize's roi, scales and sizes (Upsample's scales) give the output
    # shape and the coordinate transform.
    "Resize": {1, 2, 3}, "Upsample": {1},
    # Dropout's training_mode (and ratio, in training) decide what the node
    # computes.
    "Dropout": {1, 2},
    # Only the type of CastLike's second input matters; ONNX 1.12's bfloat16
    # CastLike models declare it [3, 4] while their data is [1].
    "CastLike": {1},
}


def embed_compile_time_inputs(test, model_path, tdir):
    """Returns (model path, names of the graph inputs that were embedded)."""
    model = onnx.load(model_path)
    node = model.graph.node[0]
    wanted = {node.input[i] for i in COMPILE_TIME_INPUTS.get(node.op_type, ())
              if i < len(node.input) and node.input[i]}
    # Graph inputs the node does not read (the CastLike *_expanded tests
    # keep `like`, declared [3, 4] with data [1] in ONNX 1.12's bfloat16
    # ones): their values cannot matter.
    wanted |= {v.name for v in model.graph.input if v.name not in node.input}
    names = [v.name for v in test.inputs]
    embed = [n for n in names if n in wanted]
    if not embed:
        return model_path, set()
    src = os.path.join(test.path, test.data_sets[0])
    keep = []
    for i, v in enumerate(model.graph.input):
        if v.name in embed:
            t = onnx.load_tensor(
                os.path.join(src, "input_%d.pb" % names.index(v.name)))
            if value_elem_type(v) == TP.BFLOAT16 and t.data_type == TP.UINT16:
                t.data_type = TP.BFLOAT16  # the bits, as ONNX 1.12 stores them
            t.name = v.name
            model.graph.initializer.append(t)
        else:
            keep.append(v)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    path = os.path.join(tdir, "model_static.onnx")
    onnx.save(model, path)
    return path, set(embed)


def run_test(test, bin_dir, work_dir, upgrade_opset=None):
    start = time.time()
    note = []

    def result(outcome, reason=""):
        return Result(test, outcome, "; ".join([reason] + note if reason else note),
                      time.time() - start)

    why = skip_reason(test)
    if why:
        return result("skipped", why)

    compile_tool = os.path.join(bin_dir, "shoal-compile")
    run_tool_path = os.path.join(bin_dir, "shoal-run")
    tdir = os.path.join(work_dir, test.name)
    shutil.rmtree(tdir, ignore_errors=True)
    os.makedirs(tdir)
    plan = os.path.join(tdir, "plan")
    model_path = os.path.join(test.path, "model.onnx")

    if upgrade_opset:
        from onnx import version_converter
        model = onnx.load(model_path)
        old = default_opset(model)
        if old is not None and old < upgrade_opset:
            try:
                model = version_converter.convert_version(model, upgrade_opset)
            except Exception as e:
                return result("fail-compile", "onnx.version_converter %d -> %d: %s"
                              % (old, upgrade_opset, first_error_line(str(e))))
            model_path = os.path.join(tdir, "model.onnx")
            onnx.save(model, model_path)
            note.append("converted from opset %d" % old)

    model_path, embedded = embed_compile_time_inputs(test, model_path, tdir)
    if embedded:
        note.append("embedded as constants: " + ", ".join(sorted(embedded)))
    rc, out, err = run_tool(compile_tool, [model_path, "--world-size", "1", "-o", plan], tdir)
    with open(os.path.join(tdir, "compile.log"), "w") as f:
        f.write(out + err)
    if rc != 0 or not os.path.isfile(plan):
        if rc == 0:
            return result("fail-compile", "exit status 0 but no plan written")
        return result("fail-compile", tool_failure(rc, err, out).replace(
            model_path, "model.onnx"))

    for ds in test.data_sets:
        src = os.path.join(test.path, ds)
        ddir = os.path.join(tdir, ds)
        in_dir = os.path.join(ddir, "inputs")
        out_dir = os.path.join(ddir, "outputs")
        os.makedirs(in_dir)
        for i, v in enumerate(test.inputs):
            if v.name in embedded:
                continue
            pb = os.path.join(src, "input_%d.pb" % i)
            if not os.path.isfile(pb):
                return result("skipped", "%s: no input_%d.pb for input %s" % (ds, i, v.name))
            arr = load_data(pb, v)
            np.save(os.path.join(in_dir, sanitize(v.name) + ".npy"), arr)

        rc, out, err = run_tool(run_tool_path, [plan, "--inputs", in_dir,
                                                "--outputs", out_dir], ddir)
        with open(os.path.join(ddir, "run.log"), "w") as f:
            f.write(out + err)
        if rc != 0:
            why = tool_failure(rc, err, out).replace(plan, "plan")
            return result("fail-run", "%s: %s" % (ds, why) if len(test.data_sets) > 1 else why)

        prefix = ds + ": " if len(test.data_sets) > 1 else ""
        for i, v in enumerate(test.outputs):
            pb = os.path.join(src, "output_%d.pb" % i)
            if not os.path.isfile(pb):
                return result("skipped", "%sno output_%d.pb for output %s" % (prefix, i, v.name))
            raw = numpy_helper.to_array(onnx.load_tensor(pb))
            expected = load_data(pb, v)
            got_path = os.path.join(out_dir, sanitize(v.name) + ".npy")
            if not os.path.isfile(got_path):
                return result("fail-run", "%soutput %s not written (%s.npy)"
                              % (prefix, v.name, sanitize(v.name)))
            try:
                actual = np.load(got_path, allow_pickle=False)
            except Exception as e:
                return result("fail-run", "%soutput %s unreadable: %s" % (prefix, v.name, e))
            if value_elem_type(v) == TP.BFLOAT16 and raw.dtype == np.uint16:
                bad = compare_bf16_truncated(expected, actual)
            else:
                bad = compare(expected, actual)
            if bad:
                if len(test.outputs) > 1:
                    bad = "output %s: %s" % (v.name, bad)
                return result("fail-compare", prefix + bad)
    return result("pass")


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------

def per_op_counts(results, ops_order):
    counts = collections.OrderedDict()
    for op in ops_order:
        counts[op] = collections.Counter()
    for r in results:
        counts.setdefault(r.op, collections.Counter())[r.outcome] += 1
    return counts


def summary_line(results, ops_label):
    c = collections.Counter(r.outcome for r in results)
    failed = c["fail-compile"] + c["fail-run"] + c["fail-compare"]
    return "conformance: %d passed, %d failed, %d skipped of %d node tests (ops: %s)" % (
        c["pass"], failed, c["skipped"], len(results), ops_label)


def normalize_reason(reason):
    """A failure reason with test-specific details taken out, for counting
    the most common ones."""
    r = re.sub(r"^test_data_set_\d+: ", "", reason)
    r = re.sub(r"\(known: [^)]*\)?", "(known: …)", r)
    r = re.sub(r"(op #\d+ '[^']*') \(\w+\)", r"\1 (…)", r)
    r = re.sub(r"/\S+/", "", r)  # paths
    r = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", r)
    r = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", r)
    r = re.sub(r"<[^<>]*>", "<…>", r)
    r = re.sub(r"\(N( x N)*\)|\[N(, N)*\]", "(…)", r)
    return r[:160]


def common_reasons(results, limit=10):
    """[(count, outcome, normalized reason, 'ops: A, B' or the example
    test)] of the most common failure reasons."""
    c = collections.Counter()
    example = {}
    ops = collections.defaultdict(list)
    for r in results:
        if r.outcome.startswith("fail"):
            key = (r.outcome, normalize_reason(r.reason))
            c[key] += 1
            example.setdefault(key, r.name)
            if r.op not in ops[key]:
                ops[key].append(r.op)
    out = []
    for k, n in c.most_common(limit):
        where = ("ops: " + ", ".join(ops[k])) if len(ops[k]) > 1 else "e.g. " + example[k]
        out.append((n, k[0], k[1], where))
    return out


def md_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(path, results, ops_order, header_line, elapsed):
    counts = per_op_counts(results, ops_order)
    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    lines = []
    lines.append("# shoal ONNX node-test conformance")
    lines.append("")
    lines.append("`%s` (%.0f s)" % (header_line, elapsed))
    lines.append("")
    lines.append("## Per-op totals")
    lines.append("")
    lines.append("| op | tests | pass | fail-compile | fail-run | fail-compare | skipped |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    tot = collections.Counter()
    for op, c in counts.items():
        n = sum(c.values())
        if not n:
            continue
        tot.update(c)
        lines.append("| %s | %d | %d | %d | %d | %d | %d |" % (
            op, n, c["pass"], c["fail-compile"], c["fail-run"], c["fail-compare"], c["skipped"]))
    lines.append("| **total** | %d | %d | %d | %d | %d | %d |" % (
        sum(tot.values()), tot["pass"], tot["fail-compile"], tot["fail-run"],
        tot["fail-compare"], tot["skipped"]))
    lines.append("")
    reasons = common_reasons(results)
    if reasons:
        lines.append("## Most common failure reasons")
        lines.append("")
        lines.append("| tests | outcome | reason (normalized) | where |")
        lines.append("|---:|---|---|---|")
        for n, outcome, reason, ex in reasons:
            lines.append("| %d | %s | %s | %s |" % (n, outcome, md_escape(reason), ex))
        lines.append("")
    empty = [op for op, c in counts.items() if not c]
    if empty:
        lines.append("Ops with no selected single-node test: %s." % ", ".join(empty))
        lines.append("")
    lines.append("## Results by op")
    for op in counts:
        rs = sorted(by_op.get(op, []), key=lambda r: r.name)
        if not rs:
            continue
        lines.append("")
        c = counts[op]
        lines.append("### %s (%d of %d pass)" % (op, c["pass"], sum(c.values())))
        lines.append("")
        lines.append("| test | op | outcome | reason |")
        lines.append("|---|---|---|---|")
        for r in rs:
            lines.append("| %s | %s | %s | %s |" % (r.name, r.op, r.outcome, md_escape(r.reason)))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="folder with shoal-compile and shoal-run")
    ap.add_argument("--work", required=True, help="scratch folder (per-test plans, inputs, outputs, logs)")
    ap.add_argument("--ops", help="comma-separated op types (default: supported_ops.txt)")
    ap.add_argument("--ops-file", default=DEFAULT_OPS_FILE, help=argparse.SUPPRESS)
    ap.add_argument("--filter", help="only tests whose name matches this regex (re.search)")
    ap.add_argument("--report", help="write a markdown report here")
    ap.add_argument("--expect", help="JSON list of test names that must pass")
    ap.add_argument("--json", help="also write all results as JSON here")
    ap.add_argument("--write-expect", metavar="FILE.json",
                    help="write the names of the tests that passed, as a JSON list "
                         "(to refresh expected_pass.json)")
    ap.add_argument("--data", help="node test folder (default: %s)" % DEFAULT_DATA_DIRS[0])
    ap.add_argument("--upgrade-opset", type=int, metavar="N",
                    help="convert models whose default-domain opset is below N to opset N "
                         "with onnx.version_converter before compiling (off by default: "
                         "the models are compiled as ONNX ships them)")
    ap.add_argument("--jobs", type=int, default=2, help="tests run at once (default 2)")
    args = ap.parse_args()

    data_dir = args.data or default_data_dir()
    if not data_dir or not os.path.isdir(data_dir):
        print("run_node_tests: ONNX node test data not found (%s); install the "
              "Debian package libonnx-testdata (scripts/install-deps.sh)"
              % (args.data or ", ".join(DEFAULT_DATA_DIRS)), file=sys.stderr)
        sys.exit(77)

    if args.ops:
        ops_order = [o.strip() for o in args.ops.split(",") if o.strip()]
        ops_label = ",".join(ops_order)
    else:
        ops_order = read_ops_file(args.ops_file)
        ops_label = "%d from %s" % (len(ops_order), os.path.basename(args.ops_file))
    ops = set(ops_order)
    regex = re.compile(args.filter) if args.filter else None

    expected_pass = None
    if args.expect:
        with open(args.expect) as f:
            expected_pass = json.load(f)
        if not isinstance(expected_pass, list) or not all(isinstance(x, str) for x in expected_pass):
            die("%s: expected a JSON list of test names" % args.expect)

    bin_dir = os.path.abspath(args.bin)
    work_dir = os.path.abspath(args.work)
    os.makedirs(work_dir, exist_ok=True)

    for tool in ("shoal-compile", "shoal-run"):
        path = os.path.join(bin_dir, tool)
        waited = 0
        while not os.path.isfile(path):
            if waited == 0:
                print("conformance: waiting for %s (being rebuilt?)" % path)
                sys.stdout.flush()
            if waited >= TOOL_WAIT_S:
                die("%s not found" % path)
            time.sleep(5)
            waited += 5

    all_tests, selected = discover(data_dir, ops, regex)
    n = len(selected)
    print("conformance: %d node tests selected from %s (%d jobs)" % (n, data_dir, args.jobs))
    sys.stdout.flush()

    start = time.time()
    results = []
    runner_errors = []
    lock = threading.Lock()
    width = len(str(n))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_test, t, bin_dir, work_dir, args.upgrade_opset): t for t in selected}
        for fut in concurrent.futures.as_completed(futures):
            t = futures[fut]
            try:
                r = fut.result()
            except Exception as e:  # a bug in this runner, or unreadable data
                r = Result(t, "fail-run", "runner error: %s: %s" % (type(e).__name__, e))
                runner_errors.append(r)
            with lock:
                results.append(r)
                print("[%*d/%d] %-60s %-12s %s" % (width, len(results), n, r.name, r.outcome,
                                                   r.reason[:150]))
                sys.stdout.flush()
    elapsed = time.time() - start
    results.sort(key=lambda r: (r.op, r.name))

    line = summary_line(results, ops_label)
    print()
    print(line)
    print("time: %.1f s" % elapsed)
    counts = per_op_counts(results, ops_order)
    empty = [op for op, c in counts.items() if not c]
    print("%-20s %5s %5s %7s %5s %7s %5s" % ("op", "tests", "pass", "compile", "run", "compare", "skip"))
    for op, c in counts.items():
        if not c:
            continue
        print("%-20s %5d %5d %7d %5d %7d %5d" % (op, sum(c.values()), c["pass"], c["fail-compile"],
                                                 c["fail-run"], c["fail-compare"], c["skipped"]))
    if empty:
        print("ops with no selected single-node test: %s" % " ".join(empty))
    reasons = common_reasons(results, 8)
    if reasons:
        print("most common failure reasons:")
        for cnt, outcome, reason, ex in reasons:
            print("  %4d %-12s %s  (%s)" % (cnt, outcome, reason, ex))

    if args.report:
        write_report(args.report, results, ops_order, line, elapsed)
        print("report: %s" % args.report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"test": r.name, "op": r.op, "outcome": r.outcome, "reason": r.reason}
                       for r in results], f, indent=1)
            f.write("\n")

    if args.write_expect:
        with open(args.write_expect, "w") as f:
            json.dump(sorted(r.name for r in results if r.outcome == "pass"), f, indent=1)
            f.write("\n")
        print("passing tests written to %s" % args.write_expect)

    status = 0
    if runner_errors:
        print("conformance: the runner itself failed on %d tests (e.g. %s: %s)"
              % (len(runner_errors), runner_errors[0].name, runner_errors[0].reason))
        status = 2
    if expected_pass is not None:
        by_name = {r.name: r for r in results}
        missing = [t for t in expected_pass if t not in all_tests]
        regressed = [by_name[t] for t in expected_pass if t in by_name and by_name[t].outcome != "pass"]
        unchecked = [t for t in expected_pass if t in all_tests and t not in by_name]
        newly = sorted(r.name for r in results if r.outcome == "pass" and r.name not in set(expected_pass))
        for t in missing:
            print("EXPECTED TO PASS, NOT IN THE TEST DATA: %s" % t)
        for r in regressed:
            print("EXPECTED TO PASS: %s: %s %s" % (r.name, r.outcome, r.reason))
        if unchecked:
            print("expect: %d expected tests not selected (--ops/--filter), not checked" % len(unchecked))
        if newly:
            print("expect: %d tests pass that %s does not list (add them): %s"
                  % (len(newly), os.path.basename(args.expect), " ".join(newly)))
        if missing or regressed:
            print("conformance: FAILED: %d expected passes regressed, %d missing"
                  % (len(regressed), len(missing)))
            status = max(status, 1)
        else:
            print("conformance: all %d expected passes pass" % (len(expected_pass) - len(unchecked)))
    return status


if __name__ == "__main__":
    sys.exit(main())
