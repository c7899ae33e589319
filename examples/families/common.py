"""Shared code for the model-family generators in examples/families/.

Every generator (gpt2.py, bert.py, llama.py, ...) builds a small PyTorch model
with random weights and calls `export_family`, which writes

    DIR/model.onnx             torch.onnx.export, static shapes, named I/O
    DIR/inputs/<input>.npy     the inputs the reference was computed on
    DIR/reference/<out>.npy    PyTorch's own eval-mode output (float32)
    DIR/ops.json               op types with counts, opset, I/O, and the
                               nodes that fold to constants given the static
                               input shapes (the shape-computation subgraphs)

and checks the result with onnx.checker (full check, with shape inference).
By default it also evaluates model.onnx with the small numpy interpreter below
(`eval_onnx`) and compares the result with the PyTorch reference, so that a
wrong export is caught here and not blamed on the compiler (--no-verify skips
that).

Run with /usr/bin/python3 (the interpreter that has torch, onnx and numpy).
Only torch, onnx and numpy are used; nothing is downloaded.
"""

import argparse
import collections
import json
import math
import os
import sys
import time

import numpy as np

PYTHON = "/usr/bin/python3"
FAMILIES_DIR = os.path.dirname(os.path.abspath(__file__))

# Relative error (max |a-b| / max |b|) allowed between the numpy evaluation of
# model.onnx (float64 internally) and the PyTorch reference.
VERIFY_RTOL = 1e-4


# ---------------------------------------------------------------------------
# Command line, seeding


def parse_args(doc, argv=None, extra=None):
    """--out DIR [--seed S] [--opset N] [--no-verify]; `extra(ap)` may add
    family-specific options."""
    ap = argparse.ArgumentParser(description=doc.strip().split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    ap.add_argument("--opset", type=int, default=17, help="ONNX opset (13-17, default 17)")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip the numpy evaluation of model.onnx against PyTorch")
    ap.add_argument("--no-constant-folding", action="store_true",
                    help="export with do_constant_folding=False (default: True)")
    ap.add_argument("--dynamic-axes", action="store_true",
                    help="NOT the default, for comparison only: mark the batch and "
                         "sequence axes dynamic, so that the exporter keeps its "
                         "Shape->Gather->Unsqueeze->Concat chains instead of folding "
                         "them to constants")
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if not 13 <= args.opset <= 17:
        ap.error("--opset must be in 13..17")
    return args


def setup_torch(seed):
    """Seed torch, make it single-threaded and deterministic. Returns torch."""
    import torch
    torch.set_num_threads(1)  # the build machines are small and shared
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    return torch


def rng(seed, salt=0):
    """numpy Generator for inputs; `salt` separates it from the weight seed."""
    return np.random.default_rng([seed, 1000 + salt])


def randomize_norms(model, seed):
    """Give LayerNorm/RMSNorm/BatchNorm non-trivial affine parameters (and
    BatchNorm non-trivial running statistics), so that a mistake in any of
    them shows in the output. Default init has weight 1, bias 0."""
    import torch
    import torch.nn as nn
    g = torch.Generator().manual_seed(4321 + seed)
    for mod in model.modules():
        if isinstance(mod, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)) or \
                type(mod).__name__.endswith("RMSNorm"):
            with torch.no_grad():
                if getattr(mod, "weight", None) is not None:
                    mod.weight.uniform_(0.7, 1.3, generator=g)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.normal_(0.0, 0.1, generator=g)
                if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    mod.running_mean.normal_(0.0, 0.2, generator=g)
                    mod.running_var.uniform_(0.5, 2.0, generator=g)


# ---------------------------------------------------------------------------
# Export


def export_family(name, model, inputs, output_names, args, *,
                  do_constant_folding=True, training=None, verify=None,
                  export_kwargs=None, notes=None, variants=None, dynamic_axes=None):
    """Compute the reference, export, check and describe one model.

    name:          family name (printed, stored in ops.json)
    model:         torch.nn.Module (put in eval mode here)
    inputs:        OrderedDict {input name: numpy array}, in forward() order
    output_names:  names of forward()'s outputs (a tensor or a tuple)
    args:          parsed parse_args() namespace (out, seed, opset)
    training:      torch.onnx.TrainingMode (default EVAL)
    notes:         list of strings stored in ops.json
    variants:      extra information stored in ops.json (e.g. the export
                   variants that were tried)
    dynamic_axes:  {name: {axis: symbol}} used only with --dynamic-axes
    Returns the ops.json dictionary.
    """
    import onnx
    import torch

    t0 = time.time()
    out = args.out
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(out, "reference"), exist_ok=True)
    model.eval()
    if training is None:
        training = torch.onnx.TrainingMode.EVAL

    tensors = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values())
    with torch.no_grad():
        res = model(*tensors)
    if isinstance(res, torch.Tensor):
        res = (res,)
    res = tuple(res)
    if len(res) != len(output_names):
        raise SystemExit("error: %s returned %d outputs, expected %d (%s)"
                         % (name, len(res), len(output_names), ", ".join(output_names)))
    reference = collections.OrderedDict()
    for oname, t in zip(output_names, res):
        reference[oname] = t.detach().numpy().astype(np.float32)

    for iname, a in inputs.items():
        np.save(os.path.join(out, "inputs", iname + ".npy"), a)
    for oname, a in reference.items():
        np.save(os.path.join(out, "reference", oname + ".npy"), a)

    if getattr(args, "no_constant_folding", False):
        do_constant_folding = False
    kw = dict(export_kwargs or {})
    if getattr(args, "dynamic_axes", False):
        if not dynamic_axes:
            raise SystemExit("error: %s has no dynamic axes to offer" % name)
        kw["dynamic_axes"] = dynamic_axes
    path = os.path.join(out, "model.onnx")
    export_onnx(model, tensors, path, list(inputs), list(output_names), args.opset,
                do_constant_folding=do_constant_folding, training=training, **kw)

    m = check_model(path)
    for o in m.graph.output:
        shape = [d.dim_value if d.HasField("dim_value") else d.dim_param
                 for d in o.type.tensor_type.shape.dim]
        if o.name in reference and shape != list(reference[o.name].shape) \
                and "dynamic_axes" not in kw:
            raise SystemExit("error: output %s has ONNX shape %s, PyTorch shape %s"
                             % (o.name, shape, list(reference[o.name].shape)))

    info = describe(m)
    info["family"] = name
    info["seed"] = args.seed
    info["export"] = {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "do_constant_folding": bool(do_constant_folding),
        "training": str(training).split(".")[-1],
        "dynamic_axes": kw.get("dynamic_axes"),
    }
    info["parameters"] = int(sum(p.numel() for p in model.parameters()))
    if notes:
        info["notes"] = list(notes)
    if variants:
        info["variants"] = variants

    if verify is None:
        verify = not getattr(args, "no_verify", False)
    if verify:
        got = eval_onnx(m, inputs)
        info["verify"] = {}
        for oname, ref in reference.items():
            err = rel_error(got[oname], ref)
            info["verify"][oname] = float("%.3e" % err)
            print("numpy evaluation of model.onnx vs PyTorch, %s: rel. error %.2e"
                  % (oname, err))
            if not err <= VERIFY_RTOL:
                raise SystemExit("error: %s: the exported model disagrees with PyTorch on "
                                 "%s (rel. error %.3e > %.0e)" % (name, oname, err, VERIFY_RTOL))

    with open(os.path.join(out, "ops.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")

    print("%s: opset %d, %d nodes, %d parameters, %.1f s" % (
        name, args.opset, info["num_nodes"], info["parameters"], time.time() - t0))
    print("inputs:  " + ", ".join("%s %s %s" % (k, v["dtype"], v["shape"])
                                  for k, v in info["inputs"].items()))
    print("outputs: " + ", ".join("%s %s %s" % (k, v["dtype"], v["shape"])
                                  for k, v in info["outputs"].items()))
    print("ops: " + ", ".join("%s x%d" % kv for kv in info["op_counts"].items()))
    print("foldable (shape-computation) nodes: %d" % len(info["foldable_nodes"]))
    print("wrote %s" % out)
    return info


def export_onnx(model, tensors, path, input_names, output_names, opset,
                do_constant_folding=True, training=None, **kw):
    """torch.onnx.export with static shapes (no dynamic_axes)."""
    import warnings
    import torch
    if training is None:
        training = torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        # TracerWarnings ("Converting a tensor to a Python integer...") are
        # expected: shapes are static on purpose.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*__floordiv__ is deprecated.*")
        # Printed for training=PRESERVE even when the model is in eval mode
        # (resnet18.py); constant folding is exact there.
        warnings.filterwarnings("ignore", message=".*recommended that constant folding be turned off.*")
        torch.onnx.export(model, tensors, path, opset_version=opset,
                          input_names=input_names, output_names=output_names,
                          do_constant_folding=do_constant_folding,
                          training=training, **kw)


def check_model(path):
    """onnx.checker (full_check runs strict shape inference too). Returns the
    loaded ModelProto."""
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    return m


# ---------------------------------------------------------------------------
# Describing a graph


_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
                16: "bfloat16"}


def _value_info(v):
    tt = v.type.tensor_type
    return {"dtype": _ONNX_DTYPES.get(tt.elem_type, str(tt.elem_type)),
            "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param
                      for d in tt.shape.dim]}


def iter_nodes(graph):
    """All nodes, including those in subgraphs (If/Loop/Scan bodies)."""
    import onnx
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g)


# Ops whose output depends only on the input's shape (or on nothing).
_SHAPE_ONLY_OPS = {"Shape", "Size", "Constant"}
# Ops that never fold (random) even with constant inputs.
_NEVER_FOLD_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                   "RandomUniformLike", "Multinomial", "Bernoulli"}


def foldable_nodes(graph):
    """Nodes whose outputs are compile-time constants once the graph inputs
    have static shapes: Shape/Size/Constant nodes, and every node all of whose
    inputs are such outputs or initializers. These are the shape-computation
    subgraphs (Shape->Gather->Unsqueeze->Concat->Reshape chains, Range for
    positions, masks built from shapes, ...) that the importer must fold.

    Returns a list of (node, [consumer nodes that are not foldable]) in graph
    order; the second element names where the constant is used."""
    const = {t.name for t in graph.initializer}
    fold = []
    fold_ids = set()
    for n in graph.node:
        if n.op_type in _NEVER_FOLD_OPS:
            continue
        ins = [i for i in n.input if i]
        if n.op_type in _SHAPE_ONLY_OPS or (ins and all(i in const for i in ins)):
            fold.append(n)
            fold_ids.add(id(n))
            const.update(o for o in n.output if o)
    consumers = collections.defaultdict(list)
    for n in graph.node:
        if id(n) in fold_ids:
            continue
        for i in n.input:
            consumers[i].append(n)
    result = []
    for n in fold:
        users = []
        for o in n.output:
            users.extend(consumers.get(o, []))
        result.append((n, users))
    return result


def _attr_str(a):
    """Short text for an attribute value (tensors/graphs summarized)."""
    import onnx
    v = onnx.helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.TENSOR:
        dt = _ONNX_DTYPES.get(v.data_type, str(v.data_type))
        return "tensor(%s%s)" % (dt, list(v.dims))
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "graph"
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, float):
        return "%.6g" % v
    if isinstance(v, (list, tuple)):
        return "[%s]" % ",".join(x.decode() if isinstance(x, bytes) else
                                 ("%.6g" % x if isinstance(x, float) else str(x)) for x in v)
    if a.type == onnx.AttributeProto.INT and a.name in ("to", "dtype"):
        return _ONNX_DTYPES.get(v, str(v))
    return str(v)


def attribute_variants(graph):
    """{op type: {"attr=value, ...": count}}: the distinct attribute sets each
    op type is used with (Constant's value is left out)."""
    out = collections.defaultdict(collections.Counter)
    for n in iter_nodes(graph):
        parts = sorted("%s=%s" % (a.name, _attr_str(a)) for a in n.attribute
                       if not (n.op_type == "Constant" and a.name == "value"))
        out[n.op_type][", ".join(parts) if parts else "-"] += 1
    return collections.OrderedDict(
        (op, collections.OrderedDict(sorted(c.items()))) for op, c in sorted(out.items()))


def describe(m):
    """The ops.json dictionary (without export details) for ModelProto m."""
    counts = collections.Counter(n.op_type for n in iter_nodes(m.graph))
    domains = {(op.domain or "ai.onnx"): op.version for op in m.opset_import}
    init_names = {t.name for t in m.graph.initializer}
    fold = foldable_nodes(m.graph)
    fold_counts = collections.Counter(n.op_type for n, _ in fold)
    return {
        "opset": domains.get("ai.onnx"),
        "opset_imports": domains,
        "ops": sorted(counts),
        "op_counts": collections.OrderedDict(sorted(counts.items())),
        # nodes of each op type that fold to constants (see foldable_nodes)
        "foldable_op_counts": collections.OrderedDict(sorted(fold_counts.items())),
        "num_nodes": sum(counts.values()),
        "attributes": attribute_variants(m.graph),
        "num_initializers": len(m.graph.initializer),
        "inputs": collections.OrderedDict(
            (i.name, _value_info(i)) for i in m.graph.input if i.name not in init_names),
        "outputs": collections.OrderedDict((o.name, _value_info(o)) for o in m.graph.output),
        "foldable_nodes": [
            {"name": n.name, "op": n.op_type, "inputs": list(n.input),
             "outputs": list(n.output),
             "used_by": ["%s (%s)" % (u.name, u.op_type) for u in users]}
            for n, users in fold if n.op_type != "Constant"],
        "foldable_constant_nodes": sum(1 for n, _ in fold if n.op_type == "Constant"),
    }


# ---------------------------------------------------------------------------
# A numpy interpreter for the op types the families use (float64 for float
# tensors). It is slow and simple on purpose: it exists to check that the
# exported graph computes what PyTorch computed.


def rel_error(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _axes_arg(node_inputs, attrs, idx=1):
    if len(node_inputs) > idx and node_inputs[idx] is not None:
        return [int(a) for a in np.asarray(node_inputs[idx]).reshape(-1)]
    if "axes" in attrs:
        return list(attrs["axes"])
    return None


def _pool_out(n, k, s, pb, pe, d=1, ceil=False):
    eff = (k - 1) * d + 1
    v = (n + pb + pe - eff) / s + 1
    return int(math.ceil(v) if ceil else math.floor(v))


def _conv(x, w, b, attrs):
    # x [N, C, H, W], w [M, C/g, kh, kw]
    N, C, H, W = x.shape
    M, Cg, kh, kw = w.shape
    g = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    Ho = _pool_out(H, kh, sh, pads[0], pads[2], dh)
    Wo = _pool_out(W, kw, sw, pads[1], pads[3], dw)
    cols = np.empty((N, C, kh, kw, Ho, Wo), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + sh * Ho:sh, j * dw:j * dw + sw * Wo:sw]
    Mg = M // g
    ys = []
    for gi in range(g):
        c = cols[:, gi * Cg:(gi + 1) * Cg].reshape(N, Cg * kh * kw, Ho * Wo)
        wg = w[gi * Mg:(gi + 1) * Mg].reshape(Mg, Cg * kh * kw)
        ys.append(np.einsum("mk,nkp->nmp", wg, c))
    y = np.concatenate(ys, axis=1).reshape(N, M, Ho, Wo)
    if b is not None:
        y = y + b.reshape(1, M, 1, 1)
    return y


def _maxpool(x, attrs):
    N, C, H, W = x.shape
    kh, kw = attrs["kernel_shape"]
    sh, sw = attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    ceil = bool(attrs.get("ceil_mode", 0))
    Ho = _pool_out(H, kh, sh, pads[0], pads[2], ceil=ceil)
    Wo = _pool_out(W, kw, sw, pads[1], pads[3], ceil=ceil)
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2] + kh), (pads[1], pads[3] + kw)),
                constant_values=-np.inf)
    y = np.full((N, C, Ho, Wo), -np.inf, dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            y = np.maximum(y, xp[:, :, i:i + sh * Ho:sh, j:j + sw * Wo:sw])
    return y


def _slice(x, starts, ends, axes, steps):
    sl = [slice(None)] * x.ndim
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a % x.ndim
        n = x.shape[a]
        s, e = int(s), int(e)
        # clamp like ONNX (ends may be INT64_MAX / INT64_MIN)
        s = max(-n - 1, min(n, s))
        e = max(-n - 1, min(n, e))
        if st < 0 and e < -n:
            e = None
        sl[a] = slice(s, e, int(st))
    return x[tuple(sl)]


def _topk(x, k, axis, largest, sorted_):
    # stable order (lower index first among equal values), like PyTorch's CPU
    # topk in practice; ties only matter for values that are exactly equal.
    key = -x if largest else x
    idx = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _scatter_elements(data, idx, upd, axis, reduction):
    y = data.copy()
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    grid = list(np.indices(idx.shape, sparse=False))
    grid[axis] = idx
    key = tuple(grid)
    if reduction in (None, "", "none"):
        y[key] = upd
    elif reduction == "add":
        np.add.at(y, key, upd)
    elif reduction == "mul":
        np.multiply.at(y, key, upd)
    elif reduction == "max":
        np.maximum.at(y, key, upd)
    elif reduction == "min":
        np.minimum.at(y, key, upd)
    else:
        raise NotImplementedError("ScatterElements reduction %s" % reduction)
    return y


_NP_FROM_ONNX = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32,
                 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def _run_node(n, x, attrs, opset):
    op = n.op_type
    b = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power,
         "Equal": np.equal, "Less": np.less, "Greater": np.greater,
         "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
         "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
         "Max": np.maximum, "Min": np.minimum}
    u = {"Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Tanh": np.tanh,
         "Neg": np.negative, "Abs": np.abs, "Sin": np.sin, "Cos": np.cos,
         "Reciprocal": lambda a: 1.0 / a, "Not": np.logical_not,
         "Relu": lambda a: np.maximum(a, 0), "Erf": _erf,
         "Sigmoid": lambda a: 1.0 / (1.0 + np.exp(-a)),
         "Floor": np.floor, "Ceil": np.ceil, "Identity": lambda a: a.copy()}
    if op in b:
        if op in ("Max", "Min") and len(x) > 2:
            y = x[0]
            for z in x[1:]:
                y = b[op](y, z)
            return [y]
        y = b[op](x[0], x[1])
        if op == "Pow":
            y = y.astype(x[0].dtype)
        return [y]
    if op in u:
        return [u[op](x[0])]
    if op == "Div":
        if x[0].dtype.kind in "iu":
            q = np.trunc(x[0] / x[1]).astype(x[0].dtype)  # ONNX integer Div truncates
            return [q]
        return [x[0] / x[1]]
    if op == "Mod":
        return [np.fmod(x[0], x[1]) if attrs.get("fmod", 0) else np.mod(x[0], x[1])]
    if op == "MatMul":
        return [np.matmul(x[0], x[1])]
    if op == "Gemm":
        a, bb = x[0], x[1]
        if attrs.get("transA", 0):
            a = a.T
        if attrs.get("transB", 0):
            bb = bb.T
        y = attrs.get("alpha", 1.0) * (a @ bb)
        if len(x) > 2 and x[2] is not None:
            y = y + attrs.get("beta", 1.0) * x[2]
        return [y]
    if op == "Einsum":
        return [np.einsum(attrs["equation"].decode() if isinstance(attrs["equation"], bytes)
                          else attrs["equation"], *x)]
    if op == "Softmax" or op == "LogSoftmax":
        ax = attrs.get("axis", -1)
        e = np.exp(x[0] - x[0].max(axis=ax, keepdims=True))
        s = e / e.sum(axis=ax, keepdims=True)
        return [s if op == "Softmax" else np.log(s)]
    if op == "LayerNormalization":
        ax = attrs.get("axis", -1) % x[0].ndim
        axes = tuple(range(ax, x[0].ndim))
        mu = x[0].mean(axis=axes, keepdims=True)
        var = ((x[0] - mu) ** 2).mean(axis=axes, keepdims=True)
        y = (x[0] - mu) / np.sqrt(var + attrs.get("epsilon", 1e-5)) * x[1]
        if len(x) > 2 and x[2] is not None:
            y = y + x[2]
        return [y]
    if op == "BatchNormalization":
        xx, s, bb, mean, var = x[:5]
        sh = (1, -1) + (1,) * (xx.ndim - 2)
        y = (xx - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + attrs.get("epsilon", 1e-5))
        return [y * s.reshape(sh) + bb.reshape(sh)]
    if op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        # ReduceSum takes axes as an input from opset 13, the others from 18.
        axes = _axes_arg(x, attrs) if op == "ReduceSum" else attrs.get("axes")
        keep = bool(attrs.get("keepdims", 1))
        if axes is None or len(axes) == 0:
            if attrs.get("noop_with_empty_axes", 0):
                return [x[0]]
            axes = None
        else:
            axes = tuple(a % x[0].ndim for a in axes)
        f = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max,
             "ReduceMin": np.min, "ReduceProd": np.prod}[op]
        return [f(x[0], axis=axes, keepdims=keep)]
    if op == "Constant":
        from onnx import numpy_helper
        if "value" in attrs:
            return [numpy_helper.to_array(attrs["value"])]
        for k, dt in (("value_float", np.float32), ("value_int", np.int64)):
            if k in attrs:
                return [np.array(attrs[k], dtype=dt)]
        for k, dt in (("value_floats", np.float32), ("value_ints", np.int64)):
            if k in attrs:
                return [np.array(list(attrs[k]), dtype=dt)]
        raise NotImplementedError("Constant %s" % list(attrs))
    if op == "ConstantOfShape":
        from onnx import numpy_helper
        v = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
        return [np.full([int(s) for s in x[0]], v.reshape(-1)[0], dtype=v.dtype)]
    if op == "Shape":
        shape = np.array(x[0].shape, dtype=np.int64)
        start, end = attrs.get("start", 0), attrs.get("end", None)
        return [shape[start:end]]
    if op == "Size":
        return [np.array(x[0].size, dtype=np.int64)]
    if op == "Cast":
        return [x[0].astype(_NP_FROM_ONNX[attrs["to"]])]
    if op == "CastLike":
        return [x[0].astype(x[1].dtype)]
    if op == "Reshape":
        shape = [int(s) for s in x[1]]
        if not attrs.get("allowzero", 0):
            shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return [x[0].reshape(shape)]
    if op == "Flatten":
        ax = attrs.get("axis", 1) % max(x[0].ndim, 1)
        return [x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)]
    if op == "Transpose":
        return [np.transpose(x[0], attrs.get("perm"))]
    if op == "Unsqueeze":
        axes = sorted(a % (x[0].ndim + len(_axes_arg(x, attrs))) for a in _axes_arg(x, attrs))
        y = x[0]
        for a in axes:
            y = np.expand_dims(y, a)
        return [y]
    if op == "Squeeze":
        axes = _axes_arg(x, attrs)
        if axes is None:
            return [np.squeeze(x[0])]
        return [np.squeeze(x[0], axis=tuple(a % x[0].ndim for a in axes))]
    if op == "Concat":
        return [np.concatenate(x, axis=attrs["axis"])]
    if op == "Split":
        ax = attrs.get("axis", 0)
        if len(x) > 1 and x[1] is not None:
            sizes = [int(s) for s in x[1]]
        elif "split" in attrs:
            sizes = list(attrs["split"])
        else:
            k = len(n.output)
            sizes = [x[0].shape[ax] // k] * k
        return np.split(x[0], np.cumsum(sizes)[:-1], axis=ax)
    if op == "Slice":
        axes = [int(a) for a in x[3]] if len(x) > 3 and x[3] is not None else None
        steps = [int(a) for a in x[4]] if len(x) > 4 and x[4] is not None else None
        return [_slice(x[0], list(x[1]), list(x[2]), axes, steps)]
    if op == "Gather":
        idx = x[1]
        ax = attrs.get("axis", 0)
        idx = np.where(idx < 0, idx + x[0].shape[ax], idx)
        return [np.take(x[0], idx, axis=ax)]
    if op == "GatherElements":
        ax = attrs.get("axis", 0)
        idx = np.where(x[1] < 0, x[1] + x[0].shape[ax], x[1])
        return [np.take_along_axis(x[0], idx, axis=ax)]
    if op == "ScatterElements":
        return [_scatter_elements(x[0], x[1], x[2], attrs.get("axis", 0) % x[0].ndim,
                                  attrs.get("reduction", b"none").decode()
                                  if isinstance(attrs.get("reduction", b"none"), bytes)
                                  else attrs.get("reduction"))]
    if op == "Expand":
        shape = np.broadcast_shapes(x[0].shape, tuple(int(s) for s in x[1]))
        return [np.broadcast_to(x[0], shape).copy()]
    if op == "Tile":
        return [np.tile(x[0], [int(r) for r in x[1]])]
    if op == "Where":
        return [np.where(x[0], x[1], x[2])]
    if op == "Range":
        return [np.arange(x[0], x[1], x[2]).astype(x[0].dtype)]
    if op == "Trilu":
        k = int(x[1]) if len(x) > 1 and x[1] is not None else 0
        return [np.triu(x[0], k) if attrs.get("upper", 1) else np.tril(x[0], k)]
    if op == "TopK":
        k = int(np.asarray(x[1]).reshape(-1)[0])
        v, i = _topk(x[0], k, attrs.get("axis", -1), attrs.get("largest", 1), 1)
        return [v, i]
    if op == "Conv":
        return [_conv(x[0], x[1], x[2] if len(x) > 2 else None, attrs)]
    if op == "MaxPool":
        return [_maxpool(x[0], attrs)]
    if op == "GlobalAveragePool":
        return [x[0].mean(axis=tuple(range(2, x[0].ndim)), keepdims=True)]
    if op == "OneHot":
        depth = int(np.asarray(x[1]).reshape(-1)[0])
        off, on = x[2][0], x[2][1]
        idx = np.where(x[0] < 0, x[0] + depth, x[0])
        ax = attrs.get("axis", -1)
        y = (np.expand_dims(idx, -1) == np.arange(depth)).astype(x[2].dtype)
        y = np.where(y != 0, on, off)
        return [np.moveaxis(y, -1, ax)]
    if op == "CumSum":
        return [np.cumsum(x[0], axis=int(x[1]))]
    if op == "ArgMax":
        ax = attrs.get("axis", 0)
        y = np.argmax(x[0], axis=ax)
        return [np.expand_dims(y, ax) if attrs.get("keepdims", 1) else y]
    raise NotImplementedError("eval_onnx: op %s (%s)" % (op, n.name))


def eval_onnx(m, inputs):
    """Evaluate ModelProto m (top-level graph) on {input name: array}.
    Float tensors are computed in float64. Returns {output name: array}."""
    import onnx
    from onnx import numpy_helper

    def up(a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype.kind == "f" else a

    opset = {(op.domain or "ai.onnx"): op.version for op in m.opset_import}["ai.onnx"]
    env = {t.name: up(numpy_helper.to_array(t)) for t in m.graph.initializer}
    for k, v in inputs.items():
        env[k] = up(v)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for n in m.graph.node:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            x = [env[i] if i else None for i in n.input]
            ys = _run_node(n, x, attrs, opset)
            for name, y in zip(n.output, ys):
                if name:
                    env[name] = up(y)
    return {o.name: env[o.name] for o in m.graph.output}


# ---------------------------------------------------------------------------
# Running every family (used by run_all.py)

FAMILIES = ["gpt2", "bert", "llama", "transformer_encoder", "vit", "resnet18", "moe"]
