#!/usr/bin/python3
"""shoal's model zoo: real models from torchvision, torch.nn and Hugging Face
transformers (random weights, nothing downloaded), each compiled and run
under several layouts and compared with PyTorch and onnxruntime.

    test/zoo/run_zoo.py --bin BUILD/bin --work DIR [--models a,b] [--layouts 1,dp2]
        [--jobs N] [--expect test/zoo/expected_pass.json] [--report FILE.md]
        [--write-doc] [--update-expect]

For every model (test/zoo/models.py):
  (a) build it in PyTorch (eval mode), compute PyTorch's outputs, export to
      ONNX (torch.onnx.export, opset 17, static shapes, TorchScript exporter:
      dynamo=False where the torch has that argument), and run the export
      with onnxruntime (second reference, where onnxruntime runs the model);
  (b) forward layouts, each `shoal-compile [--annotate SPEC] --world-size N`
      then `shoal-run` (under `mpirun -np N` for N > 1):
        1    one rank, no spec
        dp2  replicate(2) over every node, 2 ranks
        tp2  split(2) over every node, 2 ranks
        pp2  two replicate(1) stages, the model's repeated layers cut in two
             halves (node-name patterns of models.py), num_micro_batch 2,
             1F1B, 2 ranks; n/a for models without repeated layers
      and compare every output with PyTorch's and onnxruntime's:
      max|a - b| / max|b| (examples/common.py rel_error) <= --rtol;
  (c) transformer families: training layouts train-1 (one rank),
      train-dp2, train-tp2, train-pp2 (specs as above): `shoal-compile
      --train` (MSE loss on the output against random labels, AdamW lr
      1e-3) and `shoal-run --steps 3` against the same 3 steps in PyTorch
      (torch.optim.AdamW); the loss of each step within --rtol. The losses
      of steps 2 and 3 depend on every weight after the updates, so they
      check the gradients and the optimizer too. train-zero1, train-zero2,
      train-zero3: train-dp2 with `zero: N` in the config (ZeRO stage N);
      train-zero1-mb2, train-zero3-mb2: with 2 micro-batches of gradient
      accumulation too.
      train-rc-full, train-rc-selective: train-dp2 with `recompute: full`
      or `selective` (activation recomputation). train-bf16, train-fp16:
      train-dp2 with `precision: bf16|fp16` (mixed precision), the losses
      against PyTorch float32 within 3e-2. train-tp2-ce (language models):
      train-tp2 with the cross_entropy loss on token labels (one in 8
      ignored) against F.cross_entropy; the parallelism report must show
      the vocabulary-parallel cross-entropy and no all_gather at the loss.
      train-pp2-interleaved (models with 2 repeated layers): interleaved
      1F1B, each layer cut in two chunks at its first residual Add, 4 chunks
      on 2 stages, 4 micro-batches. train-tp2-sp: train-tp2 with
      `sequence_parallel: true` (Megatron-LM's sequence parallelism); the
      partitioned IR must hold reduce_scatters along the sequence and no
      all_reduce of hidden states (rank-3 tensors). train-bf16-tp2-sp,
      train-bf16-pp2: those layouts with `precision: bf16` (the whole
      model in bf16), the losses within 3e-2 of PyTorch float32. Every
      train-bf16*/train-fp16* layout also compiles its float32 twin and
      requires the activations of its ops (shoal-sim's, less the inputs
      and constants and the float32 weight gradients before their sum;
      the program with the most) at most 0.55x the twin's.
      train-rep-split (models with repeated layers): the README's pattern,
      `default: replicate` and one `split: 2` scope over the repeated
      layers on the same 2 ranks; the report must warn of no replicated
      work and show the layers' tensor-parallel all_reduce, and the
      weights --export-onnx writes after training must match PyTorch's
      (those an initializer's name or unique initial value ties to a
      parameter) within 1e-5 of each tensor's largest value, on the
      elements whose PyTorch gradient is above rounding in every step.
  (d) every layout on 2 ranks writes the parallelism report
      (--report-file); its all_gather lines are counted: a data-parallel
      layout (dp2, train-dp2) fails on any, a tensor-parallel one (tp2,
      train-tp2) on any at a node of a repeated layer (models.py's layer
      pattern), naming the first.

Each (model, layout) is pass, fail (with the first line of the error) or
n/a. The results go to WORK/results.json and a markdown table (--report,
and with --write-doc into docs/ModelFamilies.md between the zoo markers).
--expect FILE: a JSON list of "model/layout" entries that must pass; exit 1
when one of them (among those selected) does not. --update-expect rewrites
FILE with every passing entry of this run (all models and layouts).

--torch2 runs it all under the torch 2.x virtual environment
(scripts/install-deps.sh --torch2: ${SHOAL_VENV_TORCH2:-$HOME/.cache/shoal-venv-torch2},
skip 77 when it does not exist), where PyTorch 2.x is the reference;
--exporter dynamo exports with torch.onnx.export(..., dynamo=True) (opset
20, the exporter's default, or --opset; weights in external data,
model.onnx.data) instead of the TorchScript exporter. The PP2 specs cut
the layers by the names shoal's importer gives the nodes, for dynamo
exports built from the pkg.torch.onnx.name_scopes metadata
(scoped_node_names), so PP2 checks that spec patterns match them.

References: torchvision and transformers build the models, onnxruntime is
the second executor. They come from Debian (python3-torch,
python3-torchvision) and from the virtual environment that
scripts/install-deps.sh makes (${SHOAL_VENV:-$HOME/.cache/shoal-venv}: onnxruntime,
transformers); this script re-runs itself under that environment's python
when the one it was started with lacks them. Exit status 77 (skip) when a
package the selected models need is missing even there.
"""

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
import common  # noqa: E402  (examples/common.py)
import models as zoo  # noqa: E402

import numpy as np  # noqa: E402

SKIP = 77
FORWARD_LAYOUTS = ["1", "dp2", "tp2", "pp2"]
# train-zeroN: train-dp2 with `zero: N` (ZeRO stage N, docs/Training.md);
# train-zeroN-mb2: and 2 micro-batches of gradient accumulation;
# train-rc-MODE: train-dp2 with `recompute: MODE`.
TRAIN_LAYOUTS = ["train-1", "train-dp2", "train-tp2", "train-pp2",
                 "train-zero1", "train-zero2", "train-zero3",
                 "train-zero1-mb2", "train-zero3-mb2",
                 "train-rc-full", "train-rc-selective", "train-bf16", "train-fp16",
                 "train-tp2-ce", "train-pp2-interleaved", "train-tp2-sp",
                 "train-bf16-tp2-sp", "train-bf16-pp2", "train-rep-split"]
# train-bf16, train-fp16: train-dp2 with `precision: P` (mixed precision),
# its losses against PyTorch float32 within PRECISION_RTOL; train-bf16-L:
# layout train-L with `precision: bf16`.
PRECISION_RTOL = 3e-2
# ... and their activation memory (shoal-sim's, the runtime's buffer plan:
# the program with the most; the ops' values, without the inputs and
# constants, which the plan's precision does not change, and without what
# the float32 weight gradients add before their sum) at most this fraction
# of the same layout's in float32.
ACTIVATION_RATIO = 0.55
CLUSTER = os.path.join(REPO, "test", "Inputs", "cluster_slow_cpu2.yaml")
LAYOUTS = FORWARD_LAYOUTS + TRAIN_LAYOUTS
DOC = os.path.join(REPO, "docs", "ModelFamilies.md")
TRAIN_STEPS = 3
TRAIN_CONFIG = """version: 1
loss: {kind: mse, output: %s, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-3, eps: 1.0e-8, weight_decay: 0.0}
"""
# train-tp2-ce: the language models' own loss, vocabulary-parallel under split.
TRAIN_CONFIG_CE = """version: 1
loss: {kind: cross_entropy, output: %s, labels: labels, ignore_index: -100}
optimizer: {kind: adamw, lr: 1.0e-3, eps: 1.0e-8, weight_decay: 0.0}
"""


def sim_activations(args, plan):
    """The largest activations (MiB) of the ops' values that shoal-sim
    predicts for a program of `plan` (the runtime's buffer plan, as
    shoal-run --report-memory): each program's activations less its inputs
    and constants and less the bytes its weight gradients add before their
    sum (float32 in any plan, as Megatron-LM's main_grad)."""
    res = common.run_cmd([os.path.join(args.bin, "shoal-sim"), plan, "--cluster", CLUSTER],
                         timeout=args.timeout)
    found = [float(a) - float(i) - float(g) for a, i, g in re.findall(
        r"activations ([\d.]+) MiB\).*inputs and constants ([\d.]+) MiB.*"
        r"weight gradients before their sum ([\d.]+) MiB", res.stdout)]
    if not found:
        raise common.CommandError("shoal-sim printed no activations for %s" % plan)
    return max(found)


def low_activation_ratio(args, compile_, d, r):
    """Compiles the float32 twin of a 16-bit training layout (the same
    command and spec, the config without `precision`) and compares the
    activations; returns the problem, or None."""
    train = compile_[compile_.index("--train") + 1]
    with open(train) as f:
        text = "".join(ln for ln in f if not ln.startswith("precision:"))
    twin_train = os.path.join(d, "train_fp32.yaml")
    with open(twin_train, "w") as f:
        f.write(text)
    twin = list(compile_)
    twin[twin.index("--train") + 1] = twin_train
    twin[twin.index("-o") + 1] = os.path.join(d, "model_fp32.plan")
    if "--emit-mlir" in twin:
        i = twin.index("--emit-mlir")
        del twin[i:i + 2]
    try:
        common.run_cmd(twin, timeout=args.timeout)
        low = sim_activations(args, os.path.join(d, "model.plan"))
        full = sim_activations(args, os.path.join(d, "model_fp32.plan"))
    except common.CommandError as e:
        return "activation memory: %s" % command_error(e)
    r["activations_MiB"], r["activations_fp32_MiB"] = low, full
    r["activation_ratio"] = low / full
    if low > ACTIVATION_RATIO * full:
        return ("activation memory %.3f MiB, %.3fx the float32 plan's %.3f MiB "
                "(bound %.2fx)" % (low, low / full, full, ACTIVATION_RATIO))
    return None


def venv_python(torch2=False):
    """The python of the test-reference virtual environment
    (scripts/install-deps.sh), or with torch2 of the torch 2.x one
    (scripts/install-deps.sh --torch2, ${SHOAL_VENV_TORCH2})."""
    if torch2:
        venv = os.environ.get("SHOAL_VENV_TORCH2") or \
            os.path.expanduser("~/.cache/shoal-venv-torch2")
    else:
        venv = os.environ.get("SHOAL_VENV") or os.path.expanduser("~/.cache/shoal-venv")
    return os.path.join(venv, "bin", "python")


def first_error_line(text):
    """The first line of a tool's output that says what went wrong."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for pat in (r"\berror\b", r"Error\b", r"FAIL", r"Assertion", r"terminate"):
        for l in lines:
            if re.search(pat, l) and not l.startswith("$ "):
                return l[:300]
    return lines[0][:300] if lines else "(no output)"


def command_error(e):
    """First error line of a common.CommandError."""
    r = getattr(e, "result", None)
    if r is not None:
        line = first_error_line(r.stderr + "\n" + r.stdout)
        return "%s (%s)" % (line, common.describe_returncode(r.returncode)) \
            if r.returncode < 0 else line
    return first_error_line(str(e).split("--- stdout ---")[0]) if "timed out" not in str(e) \
        else str(e).splitlines()[0]


# ---------------------------------------------------------------------------
# Specs

def layer_prefixes(model, node_names):
    """Distinct layer prefixes (models.py regex), in graph order."""
    if not model.layers:
        return []
    seen = []
    for n in node_names:
        m = re.match(model.layers, n)
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def make_spec(model, layout, node_names):
    """Annotation spec text for a layout, or None for the one-rank layout.
    Raises ValueError when the layout does not apply (n/a)."""
    kind = layout.replace("train-", "")
    if kind.startswith(("bf16-", "fp16-")):
        kind = kind[len("bf16-"):]
    # train-zeroN-mb2: gradient accumulation over 2 micro-batches.
    micro_batches = 2 if kind.startswith("zero") and kind.endswith("-mb2") else 1
    if kind.startswith(("zero", "rc-", "bf16", "fp16")):
        kind = "dp2"
    if kind == "tp2-ce":
        kind = "tp2"
    sequence_parallel = kind == "tp2-sp"
    if sequence_parallel:
        kind = "tp2"
    if kind == "1":
        return None
    if kind.startswith("pp2") and not model.pipeline:
        raise ValueError("its layers' node names cannot cut pipeline stages")
    if kind == "rep-split" and model.tensor_parallel_layers:
        raise ValueError(model.tensor_parallel_layers)
    lines = ["# %s, layout %s (generated by test/zoo/run_zoo.py)" % (model.name, layout),
             "version: 1"]
    if model.batch_dims:
        lines.append("inputs: {%s}" % ", ".join("%s: {batch_dim: %d}" % kv
                                                for kv in sorted(model.batch_dims.items())))
    if kind == "dp2":
        if micro_batches > 1:
            lines.append("pipeline: {num_micro_batch: %d}" % micro_batches)
        lines += ["scopes:", '  - {replicate: 2, name: model, nodes: ["*"]}']
    elif kind == "tp2":
        lines += ["scopes:", '  - {split: 2, name: model, nodes: ["*"]%s}'
                  % (", sequence_parallel: true" if sequence_parallel else "")]
    elif kind == "pp2-interleaved" and isinstance(model.pipeline, list):
        raise ValueError("its stages are one call of a shared layer each, "
                         "not layers to cut in chunks")
    elif kind == "pp2-interleaved":
        # Interleaved 1F1B: every layer cut in two chunks at its first
        # residual Add (attention, then the MLP), 4 chunks on 2 stages.
        pre = layer_prefixes(model, node_names)
        if len(pre) != 2:
            raise ValueError("needs 2 repeated layers to make 4 chunks")
        chunks = []
        for p in pre:
            children = []
            for n in node_names:
                if n.startswith(p) and n not in getattr(model, "constant_nodes", ()):
                    rest = n[len(p):]
                    child = rest.split("/")[0]
                    leaf = "/" not in rest
                    if (child, leaf) not in children:
                        children.append((child, leaf))
            cut = next((i for i, (c, leaf) in enumerate(children)
                        if leaf and re.match(r"Add(_\d+)?$", c)), None)
            if cut is None:
                raise ValueError("no residual Add in layer %s to cut at" % p)
            # A parallel residual (GPT-J, GPT-NeoX: attention and MLP both
            # read the layer's input, one Add at the end) leaves no module
            # after its first Add: cut before the last module instead.
            if all(leaf for _, leaf in children[cut + 1:]):
                modules = [i for i, (_, leaf) in enumerate(children) if not leaf]
                if len(modules) >= 2:
                    cut = modules[-1] - 1
            pat = lambda cs: ", ".join(  # noqa: E731
                '"%s%s%s"' % (p, c, "" if leaf else "/*") for c, leaf in cs)
            chunks += [pat(children[:cut + 1]), pat(children[cut + 1:])]
        lines += ["pipeline: {num_micro_batch: 4, schedule: interleaved, virtual_stages: 2}",
                  "scopes:"]
        lines += ["  - {replicate: 1, name: c%d, nodes: [%s]}" % (i, c)
                  for i, c in enumerate(chunks)]
    elif kind == "rep-split":
        # The README's pattern: a replicate default, one split scope over
        # the repeated layers, on the same devices.
        pre = layer_prefixes(model, node_names)
        if not pre:
            raise ValueError("no repeated layers for a split scope")
        lines += ["default: replicate", "scopes:",
                  "  - {split: 2, name: layers, nodes: [%s]}"
                  % ", ".join('"%s*"' % p for p in pre)]
    elif kind == "pp2" and isinstance(model.pipeline, list):
        # Stages the model names itself, with exclusions.
        quote = lambda ps: ", ".join('"%s"' % p for p in ps)  # noqa: E731
        lines += ["pipeline: {num_micro_batch: 2, schedule: 1f1b}", "scopes:"]
        for i, (nodes, exclude) in enumerate(model.pipeline):
            lines.append("  - {replicate: 1, name: stage%d, nodes: [%s]%s}" % (
                i, quote(nodes), ", exclude: [%s]" % quote(exclude) if exclude else ""))
    elif kind == "pp2":
        pre = layer_prefixes(model, node_names)
        if len(pre) < 2:
            raise ValueError("no repeated layers to cut into two stages")
        half = (len(pre) + 1) // 2
        pat = lambda ps: ", ".join('"%s*"' % p for p in ps)  # noqa: E731
        lines += ["pipeline: {num_micro_batch: 2, schedule: 1f1b}", "scopes:",
                  "  - {replicate: 1, name: stage0, nodes: [%s]}" % pat(pre[:half]),
                  "  - {replicate: 1, name: stage1, nodes: [%s]}" % pat(pre[half:])]
    else:
        raise ValueError("unknown layout %s" % layout)
    return "\n".join(lines) + "\n"


def world_of(layout):
    return 1 if layout in ("1", "train-1") else 2


# ---------------------------------------------------------------------------
# One model (runs in its own process: --worker)

def onnx_export(torch, module, xs, path, input_names, out_names, exporter, opset):
    """torch.onnx.export with the TorchScript exporter (dynamo=False where
    the torch has that argument) or the dynamo one (torch 2.x, onnxscript;
    no fallback to TorchScript). opset None: the exporter's default (17 for
    TorchScript here, the dynamo exporter's own, 18 or more)."""
    import inspect
    import warnings
    params = inspect.signature(torch.onnx.export).parameters
    kw = {}
    if exporter == "dynamo":
        if "dynamo" not in params:
            raise RuntimeError("torch %s has no dynamo exporter (torch 2.x needed)"
                               % torch.__version__)
        kw = {"dynamo": True}
        if "fallback" in params:
            kw["fallback"] = False   # a failed dynamo export must not turn into TorchScript
        if opset is not None:
            kw["opset_version"] = opset
    else:
        if "dynamo" in params:
            kw["dynamo"] = False
        kw.update(opset_version=opset or 17, do_constant_folding=True,
                  training=torch.onnx.TrainingMode.EVAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Grad enabled: nn.TransformerEncoderLayer's fused fast path (taken
        # under no_grad) does not export.
        torch.onnx.export(module, xs, path, input_names=input_names,
                          output_names=out_names, **kw)


def scoped_node_names(m):
    """The node names shoal's importer gives the nodes of ONNX model `m`
    (lib/Target/ONNX/NodeNames.cpp): a name that starts with '/' as it is,
    else the TorchScript-style name built from the dynamo exporter's
    pkg.torch.onnx.name_scopes metadata (`/layers.0/self_attn/MatMul`, repeats
    `_1`, `_2`, ...), else the node's own name. The PP2 specs cut the layers
    by these names."""
    import ast
    names, derived, taken = [], [], set()
    for i, n in enumerate(m.graph.node):
        scopes = None
        if not n.name.startswith("/"):
            for e in getattr(n, "metadata_props", ()):
                if e.key == "pkg.torch.onnx.name_scopes":
                    try:
                        scopes = ast.literal_eval(e.value)
                    except (ValueError, SyntaxError):
                        scopes = None
        if scopes:
            path, parent, pname = "/", "", ""
            for s in scopes[:-1]:
                if not s:
                    continue
                rel = s[len(parent) + 1:] if parent and s.startswith(parent + ".") else s
                for part in rel.split("."):  # an index joins the name before it
                    pname = pname + "." + part if part.isdigit() and pname else part
                path += pname + "/"
                parent = s
            names.append(path + n.op_type)
            derived.append(i)
        else:
            names.append(n.name or "%s_%d" % (n.op_type, i))
            taken.add(names[-1])
    nxt = collections.Counter()
    for i in derived:
        base = names[i]
        k = nxt[base]
        name = base if k == 0 else "%s_%d" % (base, k)
        while name in taken:
            k += 1
            name = "%s_%d" % (base, k)
        nxt[base] = k + 1
        taken.add(name)
        names[i] = name
    return names


def export(model, work, torch, exporter="torchscript", opset=None):
    """(a): PyTorch outputs, ONNX export, onnxruntime outputs. Returns
    (module, inputs, output names, info)."""
    import copy
    module, inputs, out_names = model.build(torch)
    module.eval()
    xs = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values())
    with torch.no_grad():
        res = module(*xs)
    res = (res,) if isinstance(res, torch.Tensor) else tuple(res)
    ref = {n: t.detach().numpy().astype(np.float32) for n, t in zip(out_names, res)}
    for n, a in ref.items():
        # A constant output (a zero-initialized head) would hide any error.
        if a.size and np.ptp(a.reshape(a.shape[0], -1), axis=0).max() == 0:
            raise ValueError("PyTorch's output %s is the same for every sample" % n)
    for sub in ("inputs", "reference", "ort"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    for n, a in inputs.items():
        np.save(os.path.join(work, "inputs", n + ".npy"), a)
    for n, a in ref.items():
        np.save(os.path.join(work, "reference", n + ".npy"), a)

    path = os.path.join(work, "model.onnx")
    # A model may pin its opset (an old one: LayerNorm decomposed into
    # ReduceMean, Sub, Pow, ...), unless --opset asks for another.
    onnx_export(torch, module, xs, path, list(inputs), out_names, exporter,
                opset or model.opset)
    import onnx
    m = onnx.load(path, load_external_data=False)
    info = {"nodes": len(m.graph.node),
            "parameters": int(sum(p.numel() for p in module.parameters())),
            "op_types": sorted({n.op_type for n in m.graph.node}),
            "opset": next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
                          None),
            "external_data": sorted({e.value for t in m.graph.initializer
                                     for e in t.external_data if e.key == "location"}),
            "node_names": scoped_node_names(m)}
    # Constant nodes fold into their users' attributes or types and are no
    # op of their own: chunk patterns leave them out.
    info["constant_nodes"] = [name for name, n in zip(info["node_names"], m.graph.node)
                              if n.op_type == "Constant"]
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        outs = sess.run(out_names, dict(inputs))
        for n, a in zip(out_names, outs):
            np.save(os.path.join(work, "ort", n + ".npy"), a)
        info["ort_vs_torch"] = max(common.rel_error(a, ref[n]) for n, a in zip(out_names, outs))
    except Exception as e:  # noqa: BLE001: onnxruntime cannot run it: no second reference
        info["ort_error"] = first_error_line(str(e))
    return copy.deepcopy(module), inputs, out_names, info


def float_buffers(module, path):
    """The float ONNX initializers that hold no parameter of `module` (nor
    a block or rows of one): a float buffer (BART's final_logits_bias), or a constant
    the dynamo exporter folded into an initializer (a Pow's exponent, rotary
    tables, a causal mask). PyTorch trains only its parameters, and an export does not
    say which initializers they are, so the zoo's training configs list the
    others as `frozen` (as a user would, docs/Training.md)."""
    import onnx
    from onnx import numpy_helper
    params = [p.detach().numpy() for p in module.parameters()]

    def holds(arrays, a):
        return any(x.shape == a.shape and np.array_equal(x, a) or
                   x.ndim == 2 and x.T.shape == a.shape and np.array_equal(x.T, a)
                   for x in arrays)

    def block_of(arrays, a):
        # `a` (or its transpose) is a block of one parameter along one
        # dimension (q, k and v sliced from nn.MultiheadAttention's packed
        # in_proj weight and bias by the TorchScript exporter's constant
        # folding), or every row of `a` is a row of one (a lookup of
        # constant rows: GPT-2's position embeddings of positions 0..S-1
        # folded by the dynamo exporter). It trains as that part of the
        # parameter does in PyTorch.
        if a.ndim == 0 or a.size == 0:
            return False
        for b in ([a, a.T] if a.ndim == 2 else [a]):
            for x in arrays:
                if x.ndim != b.ndim:
                    continue
                diff = [d for d in range(b.ndim) if x.shape[d] != b.shape[d]]
                if len(diff) != 1 or x.shape[diff[0]] < b.shape[diff[0]]:
                    continue
                d, n = diff[0], b.shape[diff[0]]
                for o in range(x.shape[d] - n + 1):
                    if np.array_equal(np.take(x, range(o, o + n), axis=d), b):
                        return True
        if a.ndim >= 2:
            for x in arrays:
                if x.ndim == 2 and x.shape[-1] == a.shape[-1]:
                    rows = {r.tobytes() for r in x}
                    if all(r.tobytes() in rows for r in a.reshape(-1, a.shape[-1])):
                        return True
        return False
    frozen = []
    for t in onnx.load(path).graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and not holds(params, a) and not block_of(params, a):
            frozen.append(t.name)
    return frozen


def save_trained_reference(path, initial, trained, grad_max, grad_min, out):
    """PyTorch's trained value of every float initializer of the export at
    `path` that is a parameter: the one of the same name, else the one
    whose initial value (or its transpose: an nn.Linear exported as MatMul)
    it equals, when only one does. Saved to `out` (npz, by initializer),
    with a mask ("NAME#mask") of the elements to compare. Left out:
    parameters, and elements, whose gradient is zero up to rounding in some
    step (below 1e-5 of the largest of any parameter; below 1e-3 of the
    tensor's largest: an attention key's bias, which the softmax cancels,
    inside a fused q/k/v bias), which AdamW moves by about lr in the
    direction of the rounding."""
    import onnx
    from onnx import numpy_helper
    ref = {}
    top = max(grad_max.values(), default=0.0)
    initial = {n: x for n, x in initial.items() if grad_max.get(n, 0.0) >= 1e-5 * top}
    for t in onnx.load(path).graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind != "f":
            continue
        if t.name in grad_max and t.name not in initial:
            continue
        if t.name in initial and initial[t.name].shape == a.shape:
            hits = [(t.name, False)]
        else:
            hits = [(n, False) for n, x in initial.items()
                    if x.shape == a.shape and np.array_equal(x, a)]
            hits += [(n, True) for n, x in initial.items()
                     if x.ndim == 2 and x.T.shape == a.shape and np.array_equal(x.T, a)]
        if len(hits) == 1:
            n, transposed = hits[0]
            mask = grad_min[n] >= 1e-3 * max(grad_max[n], 1e-30)
            ref[t.name] = trained[n].T if transposed else trained[n]
            ref[t.name + "#mask"] = mask.T if transposed else mask
    np.savez(out, **ref)


def trained_weights_problem(work, d, r):
    """train-rep-split: the weights shoal-run --export-onnx wrote after
    training against PyTorch's (save_trained_reference): the checkpoint's
    blocks, shards and views put together again. '' when they agree within
    1e-5 of the tensor's largest value, on the elements whose gradient
    is above rounding in every step."""
    import onnx
    from onnx import numpy_helper
    ref = np.load(os.path.join(work, "trained_reference.npz"))
    got = {t.name: numpy_helper.to_array(t) for t in
           onnx.load(os.path.join(d, "trained.onnx")).graph.initializer}
    # Tied copies the importer folded into the weight they copy (the
    # report's "restored parameters") are that weight in the export.
    with open(os.path.join(d, "report.txt")) as f:
        restored = [ln for ln in f.read().splitlines() if ln.startswith("restored parameters")]
    worst, where = 0.0, None
    names = [n for n in ref.files if not n.endswith("#mask")]
    for name in names:
        want, mask = ref[name], ref[name + "#mask"]
        if name not in got and any(" %s -> " % name in ln for ln in restored):
            continue
        if name not in got or got[name].shape != want.shape:
            return "trained weights: %s missing or of another shape in trained.onnx" % name
        diff = np.where(mask, np.abs(got[name] - want), 0.0)
        err = float(np.max(diff, initial=0.0)) / max(float(np.max(np.abs(want))), 1e-12)
        if err > worst:
            worst, where = err, name
    r["weights_checked"], r["weights_err"] = len(names), worst
    if not names:
        return "trained weights: no initializer maps to a PyTorch parameter"
    if worst > 1e-5:
        return "trained weights: %s differs from PyTorch's by %.2e (bound 1e-5)" % (where, worst)
    return ""


def torch_train_losses(torch, module, inputs, labels, steps, cross_entropy=False):
    """The loss of each of `steps` AdamW steps in PyTorch: MSE, or with
    cross_entropy shoal's cross_entropy (the token losses of the labels that
    are not -100, summed, / the number of positions)."""
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.0)
    xs = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values())
    lt = torch.from_numpy(labels)
    out = []
    module.grad_max, module.grad_min = {}, {}
    for _ in range(steps):
        opt.zero_grad()
        y = module(*xs)
        y = y if isinstance(y, torch.Tensor) else y[0]
        if cross_entropy:
            loss = torch.nn.functional.cross_entropy(
                y.reshape(-1, y.shape[-1]), lt.reshape(-1), ignore_index=-100,
                reduction="sum") / lt.numel()
        else:
            loss = ((y - lt) ** 2).mean()
        loss.backward()
        for n, p in module.named_parameters():
            g = np.zeros(tuple(p.shape), np.float32) if p.grad is None else \
                p.grad.detach().abs().numpy()
            module.grad_max[n] = max(module.grad_max.get(n, 0.0), float(g.max(initial=0.0)))
            low = module.grad_min.get(n)
            module.grad_min[n] = g.copy() if low is None else np.minimum(low, g)
        opt.step()
        out.append(float(loss))
    return out


def run_layout(model, layout, work, args, node_names, out_names, has_ort, train_ref):
    """One (model, layout): returns the result dictionary."""
    r = {"status": "fail"}
    t0 = time.time()
    try:
        spec_text = make_spec(model, layout, node_names)
    except ValueError as e:
        return {"status": "n/a", "reason": str(e)}
    d = os.path.join(work, layout)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    world = world_of(layout)
    compile_ = [os.path.join(args.bin, "shoal-compile"), os.path.join(work, "model.onnx"),
                "--world-size", world, "-o", os.path.join(d, "model.plan")]
    if spec_text is not None:
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec_text)
        compile_ += ["--annotate", os.path.join(d, "spec.yaml")]
    training = layout.startswith("train-")
    ce = layout == "train-tp2-ce"
    if world > 1:
        # The parallelism report: the loss's collectives, the gathers.
        compile_ += ["--report-file", os.path.join(d, "report.txt")]
    sp = layout.endswith("train-tp2-sp") or layout.endswith("-tp2-sp")
    if sp:
        compile_ += ["--emit-mlir", os.path.join(d, "partitioned.mlir")]
    if training:
        with open(os.path.join(d, "train.yaml"), "w") as f:
            f.write((TRAIN_CONFIG_CE if ce else TRAIN_CONFIG) % out_names[0])
            if getattr(model, "frozen", None):
                f.write("frozen: [%s]\n" % ", ".join(json.dumps(n) for n in model.frozen))
            if layout.startswith("train-zero"):
                f.write("zero: %s\n" % layout[len("train-zero")])
            if layout.startswith("train-rc-"):
                f.write("recompute: %s\n" % layout[len("train-rc-"):])
            if layout.startswith(("train-bf16", "train-fp16")):
                f.write("precision: %s\n" % layout[len("train-"):len("train-bf16")])
        compile_ += ["--train", os.path.join(d, "train.yaml")]
    log = open(os.path.join(d, "log.txt"), "w")
    stage = "compile"
    try:
        res = common.run_cmd(compile_, timeout=args.timeout, log=log)
        log.write(res.stdout + res.stderr)
        if args.audit and training:
            # Where the plan's ops would run on the CUDA backend with NCCL
            # (no GPU needed; docs/CUDA.md "Plan audit").
            stage = "audit"
            res = subprocess.run([os.path.join(args.bin, "shoal-run"),
                                  os.path.join(d, "model.plan"), "--backend", "cuda",
                                  "--comm", "nccl", "--audit"],
                                 capture_output=True, text=True, timeout=args.timeout)
            log.write(res.stdout + res.stderr)
            m = re.search(r"host fallbacks: (\d+); host-staged collectives and "
                          r"transfers: (\d+)", res.stdout)
            if "has no cuda backend" in res.stderr:
                r["audit_skipped"] = "this build has no CUDA backend"
            elif res.returncode != 0 or not m:
                raise common.CommandError("shoal-run --audit: exit %d: %s" % (
                    res.returncode, res.stderr.strip()[-300:]), res)
            else:
                r["audit"] = {"host": int(m.group(1)), "staged": int(m.group(2))}
                # Every op on the device and every collective on device
                # buffers; only the pipeline's Send and Recv still go
                # through host buffers (issue 46).
                off = [row for row in re.findall(
                    r"^\| (\S[^|]*?) \| (host[^|]*?) \| (\d+) \|$", res.stdout, re.M)
                    if row[0] not in ("Send", "Recv")]
                if off:
                    raise common.CommandError(
                        "shoal-run --audit: %s" % "; ".join(
                            "%s x%s: %s" % (op, n, where) for op, where, n in off), res)
        stage = "run"
        run = [os.path.join(args.bin, "shoal-run"), os.path.join(d, "model.plan")]
        if training:
            run += ["--inputs", os.path.join(work, "train_inputs_ce" if ce else "train_inputs"),
                    "--steps", TRAIN_STEPS]
            if layout == "train-rep-split":
                run += ["--export-onnx", os.path.join(d, "trained.onnx")]
        else:
            run += ["--inputs", os.path.join(work, "inputs"), "--outputs",
                    os.path.join(d, "out")]
        if world > 1:
            run = common.mpirun_cmd(args.mpirun, world, run)
        res = common.run_cmd(run, env_extra=common.MPI_ENV, timeout=args.timeout, log=log)
        log.write(res.stdout + res.stderr)
    except common.CommandError as e:
        log.write(str(e))
        r["reason"] = "%s: %s" % (stage, command_error(e))
        r["time"] = round(time.time() - t0, 1)
        return r
    finally:
        log.close()
    r["time"] = round(time.time() - t0, 1)
    gather_problem = world > 1 and check_gathers(model, layout, d, r)
    if training:
        got = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", res.stdout, re.M)]
        if len(got) != len(train_ref):
            r["reason"] = "run: printed %d step losses, expected %d" % (len(got), len(train_ref))
            return r
        errs = [abs(g - t) / max(abs(t), 1e-12) for g, t in zip(got, train_ref)]
        r["loss"], r["loss_torch"], r["loss_err"] = got, train_ref, errs
        rtol = (PRECISION_RTOL if layout.startswith(("train-bf16", "train-fp16"))
                else args.rtol)
        if all(np.isfinite(errs)) and max(errs) <= rtol:
            r["status"] = "pass"
        else:
            r["reason"] = "loss vs PyTorch, rel. error per step: %s (bound %.0e)" % (
                ", ".join("%.2e" % e for e in errs), rtol)
        if ce and r["status"] == "pass":
            # Vocabulary-parallel: the loss reduces over tp and never
            # gathers the logits.
            with open(os.path.join(d, "report.txt")) as f:
                report = f.read()
            gathers = [ln.strip() for ln in report.splitlines()
                       if ln.strip().startswith("all_gather") and " at loss" in ln]
            if "vocabulary-parallel cross-entropy" not in report or gathers:
                r["status"] = "fail"
                r["reason"] = "the loss is not vocabulary-parallel: %s" % (
                    gathers[0] if gathers else "no vocabulary-parallel cross-entropy "
                    "in the parallelism report")
            r["all_gathers"] = sum(1 for ln in report.splitlines()
                                   if ln.strip().startswith("all_gather"))
        if layout.startswith(("train-bf16", "train-fp16")) and r["status"] == "pass":
            ratio_problem = low_activation_ratio(args, compile_, d, r)
            if ratio_problem:
                r["status"] = "fail"
                r["reason"] = ratio_problem
        if layout == "train-rep-split" and r["status"] == "pass":
            with open(os.path.join(d, "report.txt")) as f:
                report = f.read()
            warned = [ln.strip() for ln in report.splitlines()
                      if "replicated work" in ln and ln.strip().startswith("warning:")]
            if warned or "all_reduce over tp" not in report:
                r["status"] = "fail"
                r["reason"] = "README pattern: %s" % (
                    warned[0] if warned else "no tensor-parallel all_reduce in the report")
            else:
                problem = trained_weights_problem(work, d, r)
                if problem:
                    r["status"], r["reason"] = "fail", problem
        if gather_problem and r["status"] == "pass":
            r["status"], r["reason"] = "fail", gather_problem
        if sp and r["status"] == "pass":
            # Sequence parallel: reduce_scatter + all_gather, not all_reduce.
            with open(os.path.join(d, "partitioned.mlir")) as f:
                ir = f.read()
            r["reduce_scatters"] = len(re.findall(r"shoal\.reduce_scatter\b", ir))
            r["hidden_all_reduces"] = common.hidden_all_reduces(ir)
            # Something split along the sequence: reduce-scattered (after a
            # row-parallel product), or sliced from a whole input when no
            # product splits a weight (experts on the local tokens).
            split = r["reduce_scatters"] or re.search(
                r'shoal\.local_slice [^\n]* over \["tp"\]', ir)
            if not split or r["hidden_all_reduces"]:
                r["status"] = "fail"
                r["reason"] = ("sequence parallel: %d reduce_scatter, %d all_reduce of "
                               "hidden states (rank-3) in the partitioned IR"
                               % (r["reduce_scatters"], r["hidden_all_reduces"]))
        return r
    problems = []
    for ref_dir, key in (("reference", "err_torch"), ("ort", "err_ort")):
        if key == "err_ort" and not has_ort:
            continue
        rows = common.compare_dirs(os.path.join(d, "out"), os.path.join(work, ref_dir),
                                   out_names, args.rtol, ref_dir)
        errs = [row[2] for row in rows if row[2] is not None]
        r[key] = max(errs) if len(errs) == len(rows) else None
        problems += ["%s vs %s: %s" % (row[1], "PyTorch" if ref_dir == "reference"
                                       else "onnxruntime", row[3]) for row in rows if row[3]]
    if problems:
        r["reason"] = problems[0]
    elif gather_problem:
        r["reason"] = gather_problem
    else:
        r["status"] = "pass"
    return r


def check_gathers(model, layout, d, r):
    """Counts the all_gathers of the layout's parallelism report (in
    r["all_gathers"], r["layer_gathers"]); returns why the layout fails
    (a data-parallel plan that gathers, a tensor-parallel one that gathers
    inside a repeated layer), or None."""
    path = os.path.join(d, "report.txt")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        gathers = [ln.strip() for ln in f if ln.strip().startswith("all_gather")]
    r["all_gathers"] = len(gathers)
    kind = layout.replace("train-", "")
    layer = re.compile(model.layers) if model.layers else None
    def where(line):  # "all_gather dim D over A at NODE[ (backward)]: why"
        m = re.search(r" at (\S+?)(?: \(\w+\))?:", line)
        return m.group(1) if m else ""
    # A TaskGraph's output made whole where the model ends inside a layer
    # (its last residual Add) is no gather inside a layer.
    inside = [g for g in gathers if layer and layer.match(where(g))
              and "of the TaskGraph is whole" not in g]
    r["layer_gathers"] = len(inside)
    if kind == "dp2" and gathers:
        return "data-parallel plan gathers: %s" % gathers[0]
    if kind == "tp2" and inside:
        return "tensor-parallel plan gathers inside a layer: %s" % inside[0]
    return None


def worker(args):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = zoo.BY_NAME[args.worker]
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    layouts = [l for l in args.layouts.split(",") if l]
    result = {"model": model.name, "group": model.group, "notes": model.notes,
              "layouts": {}}
    t0 = time.time()
    try:
        module, inputs, out_names, info = export(model, work, torch, args.exporter,
                                                 args.opset)
    except zoo.NotApplicable as e:
        for l in layouts:
            result["layouts"][l] = {"status": "n/a", "reason": str(e)}
        return result
    except Exception as e:  # noqa: BLE001: an export failure is a result
        reason = "export: %s" % first_error_line("%s: %s" % (type(e).__name__, e))
        for l in layouts:
            result["layouts"][l] = {"status": "fail", "reason": reason}
        result["export_error"] = reason
        return result
    node_names = info.pop("node_names")
    model.constant_nodes = set(info.pop("constant_nodes"))
    model.frozen = float_buffers(module, os.path.join(work, "model.onnx"))
    if model.frozen:
        info["frozen"] = model.frozen
    result["export"] = info
    result["export"]["time"] = round(time.time() - t0, 1)
    train_ref = None
    if any(l.startswith("train-") for l in layouts) and model.train:
        with torch.no_grad():
            xs = tuple(torch.from_numpy(a) for a in inputs.values())
            y = module(*xs)
            y = y if isinstance(y, torch.Tensor) else y[0]
        labels = np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(np.float32)
        tin = os.path.join(work, "train_inputs")
        shutil.copytree(os.path.join(work, "inputs"), tin)
        np.save(os.path.join(tin, "labels.npy"), labels)
        state = {k: v.clone() for k, v in module.state_dict().items()}
        initial = {n: p.detach().numpy().copy() for n, p in module.named_parameters()}
        train_ref = torch_train_losses(torch, module, inputs, labels, TRAIN_STEPS)
        trained = {n: p.detach().numpy().copy() for n, p in module.named_parameters()}
        save_trained_reference(os.path.join(work, "model.onnx"), initial, trained,
                               module.grad_max, module.grad_min,
                               os.path.join(work, "trained_reference.npz"))
        module.load_state_dict(state)
    train_ref_ce = None
    if "train-tp2-ce" in layouts and model.train and model.lm:
        # Token labels [..., VOCAB] -> [...], one in 8 ignored (-100).
        with torch.no_grad():
            xs = tuple(torch.from_numpy(a) for a in inputs.values())
            y = module(*xs)
            y = y if isinstance(y, torch.Tensor) else y[0]
        rng = np.random.default_rng(3)
        labels = rng.integers(0, y.shape[-1], size=tuple(y.shape[:-1]), dtype=np.int64)
        labels[rng.random(labels.shape) < 0.125] = -100
        tin = os.path.join(work, "train_inputs_ce")
        shutil.copytree(os.path.join(work, "inputs"), tin)
        np.save(os.path.join(tin, "labels.npy"), labels)
        train_ref_ce = torch_train_losses(torch, module, inputs, labels, TRAIN_STEPS,
                                          cross_entropy=True)
    for l in layouts:
        if l.startswith("train-") and not model.train:
            result["layouts"][l] = {"status": "n/a", "reason": "not a transformer family"}
            continue
        if l == "train-tp2-ce" and not model.lm:
            result["layouts"][l] = {"status": "n/a", "reason": "not a language model"}
            continue
        result["layouts"][l] = run_layout(model, l, work, args, node_names, out_names,
                                          "ort_error" not in info,
                                          train_ref_ce if l == "train-tp2-ce" else train_ref)
        r = result["layouts"][l]
        if "reason" in r:  # paths relative to the zoo's work folder
            r["reason"] = r["reason"].replace(os.path.dirname(work) + os.sep, "")
        print("%s %s: %s" % (model.name, l, r), flush=True)
    return result


# ---------------------------------------------------------------------------
# Tables

def cell(r):
    if r is None:
        return ""
    st = r["status"]
    if st == "n/a":
        return "n/a"
    if st == "pass":
        if "loss_err" in r:
            return "pass %.1e" % max(r["loss_err"])
        e = "%.1e" % r["err_torch"] if r.get("err_torch") is not None else "-"
        if r.get("err_ort") is not None:
            e += " / %.1e" % r["err_ort"]
        return "pass " + e
    if "loss_err" in r:
        return "**fail** %.1e" % max(r["loss_err"]) if np.isfinite(max(r["loss_err"])) \
            else "**fail** (nan)"
    if r.get("err_torch") is not None:
        return "**fail** %.1e" % r["err_torch"]
    return "**fail** (%s)" % r.get("reason", "?").split(":")[0]


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            if m:
                cpu = m.group(1).strip()
    except OSError:
        pass
    return "%s, %d cores, %s" % (cpu, os.cpu_count() or 0, platform.platform(terse=True))


def versions():
    out = []
    for mod in ("torch", "torchvision", "transformers", "onnxruntime", "onnx", "onnxscript"):
        try:
            out.append("%s %s" % (mod, __import__(mod).__version__))
        except Exception:  # noqa: BLE001
            if mod != "onnxscript":  # only the dynamo exporter needs it
                out.append("%s missing" % mod)
    return ", ".join(out)


def markdown(results, layouts, command, rtol, exporter="torchscript"):
    opsets = sorted({r["export"]["opset"] for r in results
                     if r.get("export", {}).get("opset") is not None})
    lines = [
        "Generated by `%s` on %s (%s; %s; %s exporter, opset %s). Each cell: status, then the max. relative "
        "error of the outputs vs PyTorch / vs onnxruntime (forward layouts), or the "
        "largest relative error of the %d step losses vs PyTorch (train-*); the bound is "
        "%.0e. n/a: the layout does not apply (PP2 needs repeated layers, training is "
        "run for transformer families). Failures and their first error lines follow the "
        "table." % (command, datetime.date.today().isoformat(), machine(), versions(),
                    "TorchScript (dynamo=False)" if exporter == "torchscript"
                    else "dynamo (dynamo=True)",
                    ", ".join(str(o) for o in opsets) or "?", TRAIN_STEPS, rtol),
        "",
        "| model | library | " + " | ".join(layouts) + " |",
        "| --- | --- | " + " | ".join("---" for _ in layouts) + " |",
    ]
    fails = []
    counts = collections.Counter()
    for res in results:
        cells = []
        by_reason = collections.OrderedDict()  # layouts that failed the same way
        for l in layouts:
            r = res["layouts"].get(l)
            cells.append(cell(r))
            if r:
                counts[r["status"]] += 1
                if r["status"] == "fail":
                    by_reason.setdefault(r.get("reason", "?"), []).append(l)
        fails += [(res["model"], ls, why) for why, ls in by_reason.items()]
        lines.append("| %s | %s | %s |" % (res["model"], res["group"], " | ".join(cells)))
    lines += ["", "%d pass, %d fail, %d n/a." % (counts["pass"], counts["fail"], counts["n/a"])]
    if fails:
        lines += ["", "| model | layouts | first error line |", "| --- | --- | --- |"]
        for m, ls, why in fails:
            lines.append("| %s | %s | %s |" % (m, ", ".join(ls), why.replace("|", "\\|")
                                                .replace("\n", " ")))
    ort = [(r["model"], r["export"]["ort_error"]) for r in results
           if r.get("export", {}).get("ort_error")]
    if ort:
        lines += ["", "onnxruntime could not run: " + "; ".join(
            "%s (%s)" % (m, e.replace("|", "\\|")) for m, e in ort) + "."]
    return "\n".join(lines) + "\n"


def write_doc(text, tag="zoo"):
    """Puts `text` between the <!-- TAG:begin --> and <!-- TAG:end -->
    markers of docs/ModelFamilies.md (appended with them if absent)."""
    begin, end = "<!-- %s:begin -->" % tag, "<!-- %s:end -->" % tag
    with open(DOC) as f:
        doc = f.read()
    block = begin + "\n" + text + end
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(doc)


# ---------------------------------------------------------------------------

def parse_list(text, known, what, ap):
    if text in (None, "", "all"):
        return list(known)
    items = [x for x in text.split(",") if x]
    bad = [x for x in items if x not in known]
    if bad:
        ap.error("unknown %s %s (known: %s)" % (what, ", ".join(bad), ", ".join(known)))
    return [k for k in known if k in items]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(REPO, "build", "zoo"))
    ap.add_argument("--models", default="all", help="comma-separated (default: all)")
    ap.add_argument("--layouts", default="all",
                    help="comma-separated of %s (default: all)" % ", ".join(LAYOUTS))
    ap.add_argument("--jobs", type=int, default=1, help="models run side by side")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per command")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--expect", help="JSON list of model/layout entries that must pass")
    ap.add_argument("--update-expect", action="store_true",
                    help="rewrite --expect with this run's passing entries")
    ap.add_argument("--report", help="write the markdown table here")
    ap.add_argument("--write-doc", action="store_true",
                    help="put the table into docs/ModelFamilies.md (zoo markers)")
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                    help="torch.onnx.export(dynamo=False) (default) or dynamo=True (torch 2.x)")
    ap.add_argument("--opset", type=int,
                    help="export opset (default: 17 for TorchScript, the dynamo "
                    "exporter's own default for dynamo)")
    ap.add_argument("--torch2", action="store_true",
                    help="run under the torch 2.x virtual environment (scripts/install-deps.sh "
                    "--torch2, ${SHOAL_VENV_TORCH2:-~/.cache/shoal-venv-torch2}); skip (77) "
                    "when it does not exist")
    ap.add_argument("--audit", action="store_true",
                    help="audit each training plan for the CUDA backend with NCCL "
                         "(shoal-run --audit, no GPU needed) and print where its ops "
                         "would leave the device")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = worker(args)
        with open(os.path.join(os.path.abspath(args.work), "result.json"), "w") as f:
            json.dump(res, f, indent=1)
        return 0

    names = parse_list(args.models, list(zoo.BY_NAME), "model", ap)
    layouts = parse_list(args.layouts, LAYOUTS, "layout", ap)
    needs = sorted({n for m in names for n in zoo.BY_NAME[m].needs} | {"onnxruntime"})
    if args.exporter == "dynamo":
        needs.append("onnxscript")
    missing = common.missing_modules(["torch", "onnx"] + needs)
    vpy = venv_python(args.torch2)
    venv = os.path.dirname(os.path.dirname(vpy))
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(venv)
    if args.torch2 and not in_venv and not os.path.isfile(vpy):
        print("SKIP: the torch 2.x virtual environment %s does not exist (make it with "
              "scripts/install-deps.sh --torch2, or SHOAL_TORCH2=1 scripts/install-deps.sh)"
              % venv)
        return SKIP
    if (missing or (args.torch2 and not in_venv)) and os.path.isfile(vpy) and not in_venv \
            and not os.environ.get("SHOAL_ZOO_REEXEC"):
        print("%s missing here: running under %s" % (", ".join(missing), vpy), flush=True)
        os.environ["SHOAL_ZOO_REEXEC"] = "1"
        os.execv(vpy, [vpy, os.path.abspath(__file__)] + sys.argv[1:])
    if not missing and args.exporter == "dynamo":
        import torch
        if int(torch.__version__.split(".")[0]) < 2:
            missing = ["torch>=2 (found %s)" % torch.__version__]
    if missing:
        print("SKIP: %s cannot import %s (scripts/install-deps.sh installs them; the "
              "virtual environment is %s)" % (sys.executable, ", ".join(missing),
                                               os.path.dirname(os.path.dirname(vpy))))
        return SKIP
    for tool in ("shoal-compile", "shoal-run"):
        common.find_tool(args.bin, tool)
    if shutil.which(args.mpirun) is None:
        print("FAIL: %s not found" % args.mpirun)
        return 1

    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    shown, skip = [], False
    for a in (argv if argv is not None else sys.argv[1:]):
        if skip or a.split("=")[0] in ("--bin", "--work", "--report", "--mpirun"):
            skip = "=" not in a and not skip
            continue
        shown.append(shlex.quote(a))
    command = " ".join(["test/zoo/run_zoo.py"] + shown)
    print("python %s; %s" % (sys.executable, versions()), flush=True)
    t0 = time.time()

    def one(name):
        wd = os.path.join(work, re.sub(r"[^A-Za-z0-9_.-]", "_", name))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name,
               "--work", wd, "--bin", args.bin, "--layouts", ",".join(layouts),
               "--rtol", str(args.rtol), "--timeout", str(args.timeout),
               "--mpirun", args.mpirun, "--exporter", args.exporter]
        if args.opset is not None:
            cmd += ["--opset", str(args.opset)]
        if args.audit:
            cmd.append("--audit")
        t = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, errors="replace")
        os.makedirs(wd, exist_ok=True)
        with open(os.path.join(wd, "worker.log"), "w") as f:
            f.write(p.stdout)
        try:
            with open(os.path.join(wd, "result.json")) as f:
                res = json.load(f)
        except (OSError, ValueError):
            why = "runner: %s" % first_error_line(p.stdout)
            res = {"model": name, "group": zoo.BY_NAME[name].group,
                   "layouts": {l: {"status": "fail", "reason": why} for l in layouts}}
        res["time"] = round(time.time() - t, 1)
        summary = ", ".join("%s %s" % (l, r["status"]) for l, r in res["layouts"].items())
        print("%-22s %6.1fs  %s" % (name, res["time"], summary), flush=True)
        return res

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as ex:
        results = list(ex.map(one, names))
    elapsed = time.time() - t0

    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = markdown(results, layouts, command, args.rtol, args.exporter)
    print()
    print(table)
    if args.audit:
        print("\nCUDA plan audit (shoal-run --backend cuda --comm nccl --audit): ops "
              "that would run on the CPU / collectives and transfers through host "
              "buffers, one rank of each program\n")
        print("| model | " + " | ".join(l for l in layouts if l.startswith("train-")) + " |")
        print("| --- |" + " ---: |" * sum(1 for l in layouts if l.startswith("train-")))
        for res in results:
            cells = []
            for l in layouts:
                if not l.startswith("train-"):
                    continue
                a = res["layouts"].get(l, {}).get("audit")
                cells.append("%d / %d" % (a["host"], a["staged"]) if a else "-")
            print("| %s | %s |" % (res["model"], " | ".join(cells)))
    print("total %.0f s" % elapsed)
    if args.report:
        with open(args.report, "w") as f:
            f.write(table)
    if args.write_doc:
        write_doc(table, "zoo-torch2-%s" % args.exporter if args.torch2 else "zoo")
        print("updated %s" % DOC)

    passed = sorted("%s/%s" % (r["model"], l) for r in results
                    for l, x in r["layouts"].items() if x["status"] == "pass")
    if args.update_expect:
        if not args.expect:
            ap.error("--update-expect needs --expect FILE")
        with open(args.expect, "w") as f:
            json.dump(passed, f, indent=1)
            f.write("\n")
        print("wrote %s (%d entries)" % (args.expect, len(passed)))
        return 0
    if args.expect:
        with open(args.expect) as f:
            expected = set(json.load(f))
        selected = {"%s/%s" % (m, l) for m in names for l in layouts}
        regressed = sorted((expected & selected) - set(passed))
        newly = sorted(set(passed) - expected)
        if newly:
            print("passing, not in %s yet (add them): %s" % (args.expect, ", ".join(newly)))
        if regressed:
            print("FAIL: expected to pass, did not: %s" % ", ".join(regressed))
            return 1
        print("PASS: all %d expected entries of the selection pass"
              % len(expected & selected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
