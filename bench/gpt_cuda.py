#!/usr/bin/env python3
"""GPT forward pass on one GPU: shoal-run (CUDA backend) vs PyTorch eager.

A GPT-style decoder at a realistic size (default: hidden 2048, 24 layers,
16 heads, sequence 1024, batch 8, vocabulary 50304), the same weights and
inputs for both, side by side in one run. Prints tokens/s of each, their
ratio, shoal's model FLOPs utilization (MFU), and the relative error between
the two outputs.

Two steps, because the compiler (MLIR) lives on the build machine and the GPU
on another:

  # on the build machine: the graph (no weight data) and the plan
  /usr/bin/python3 bench/gpt_cuda.py prepare --bin build/bin --out build/bench-out
  # on the GPU machine, with a runtime-only build (-DSHOAL_BUILD_COMPILER=OFF)
  python3 bench/gpt_cuda.py run --bin build-rt/bin --out build/bench-out

`prepare` writes model.onnx whose initializers point into weights.bin as ONNX
external data, without writing weights.bin (the compiler never reads
weights); `run` writes weights.bin and the inputs from a fixed seed with
numpy, so nothing large travels between the machines. `--small` shrinks the
model (2 layers, hidden 256, sequence 128) to check the script itself on a
CPU (`run --backend cpu`).
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np


def config(small):
    if small:
        return dict(vocab=512, hidden=256, heads=4, layers=2, seq=128, batch=2)
    return dict(vocab=50304, hidden=2048, heads=16, layers=24, seq=1024, batch=8)


def weight_list(cfg):
    """(name, shape) of every weight, in the order they are stored."""
    c, v, t = cfg["hidden"], cfg["vocab"], cfg["seq"]
    out = [("wte", (v, c)), ("wpe", (t, c)), ("mask", (t, t))]
    for i in range(cfg["layers"]):
        p = "h.%d." % i
        out += [(p + "ln_1.weight", (c,)), (p + "ln_1.bias", (c,))]
        for n in ("q", "k", "v", "proj"):
            out += [(p + n + ".weight", (c, c)), (p + n + ".bias", (c,))]
        out += [(p + "ln_2.weight", (c,)), (p + "ln_2.bias", (c,)),
                (p + "fc.weight", (c, 4 * c)), (p + "fc.bias", (4 * c,)),
                (p + "fc2.weight", (4 * c, c)), (p + "fc2.bias", (c,))]
    out += [("ln_f.weight", (c,)), ("ln_f.bias", (c,)), ("lm_head", (c, v))]
    return out


def make_weights(cfg, seed):
    """The weights as numpy float32 arrays (GPT-2 style initialization)."""
    rng = np.random.default_rng(seed)
    t = cfg["seq"]
    w = {}
    for name, shape in weight_list(cfg):
        if name == "mask":
            w[name] = np.triu(np.full((t, t), -1e9, np.float32), k=1)
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            w[name] = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            w[name] = np.zeros(shape, np.float32)
        else:
            w[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    return w


def build_graph(cfg, path):
    """The ONNX graph, as torch.onnx.export writes a GPT (MatMul + Add
    linears, erf GELU, causal mask added to the scores), with every
    initializer in weights.bin as external data."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    b, t, c, h = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["heads"]
    d = c // h
    nodes, inits = [], []
    offset = 0
    for name, shape in weight_list(cfg):
        tensor = TensorProto()
        tensor.name = name
        tensor.data_type = TensorProto.FLOAT
        tensor.dims.extend(shape)
        tensor.data_location = TensorProto.EXTERNAL
        length = 4 * int(np.prod(shape))
        for k, val in (("location", "weights.bin"), ("offset", str(offset)),
                       ("length", str(length))):
            e = tensor.external_data.add()
            e.key, e.value = k, val
        offset += length
        inits.append(tensor)

    def const(name, value, dtype=np.float32):
        arr = np.array(value, dtype=dtype)
        nodes.append(helper.make_node("Constant", [], [name], name="/" + name,
                                      value=numpy_helper.from_array(arr, name)))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    const("c_sqrt2", math.sqrt(2.0))
    const("c_one", 1.0)
    const("c_half", 0.5)
    const("c_scale", math.sqrt(d))
    const("shape_bthd", [b, t, h, d], np.int64)
    const("shape_btc", [b, t, c], np.int64)

    x = node("Gather", ["wte", "input_ids"], "/wte/Gather")
    x = node("Add", [x, "wpe"], "/Add")
    for i in range(cfg["layers"]):
        p = "/h.%d/" % i
        w = "h.%d." % i
        a = node("LayerNormalization", [x, w + "ln_1.weight", w + "ln_1.bias"],
                 p + "ln_1/LayerNormalization", axis=-1, epsilon=1e-5)
        heads = {}
        for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            y = node("MatMul", [a, w + n + ".weight"], p + "attn/%s/MatMul" % n)
            y = node("Add", [w + n + ".bias", y], p + "attn/%s/Add" % n)
            y = node("Reshape", [y, "shape_bthd"], p + "attn/%s/Reshape" % n)
            heads[n] = node("Transpose", [y], p + "attn/%s/Transpose" % n, perm=perm)
        s = node("MatMul", [heads["q"], heads["k"]], p + "attn/MatMul")
        s = node("Div", [s, "c_scale"], p + "attn/Div")
        s = node("Add", [s, "mask"], p + "attn/Add")
        s = node("Softmax", [s], p + "attn/Softmax", axis=-1)
        o = node("MatMul", [s, heads["v"]], p + "attn/MatMul_1")
        o = node("Transpose", [o], p + "attn/Transpose_3", perm=[0, 2, 1, 3])
        o = node("Reshape", [o, "shape_btc"], p + "attn/Reshape_3")
        o = node("MatMul", [o, w + "proj.weight"], p + "attn/proj/MatMul")
        o = node("Add", [w + "proj.bias", o], p + "attn/proj/Add")
        x = node("Add", [x, o], p + "Add")
        m = node("LayerNormalization", [x, w + "ln_2.weight", w + "ln_2.bias"],
                 p + "ln_2/LayerNormalization", axis=-1, epsilon=1e-5)
        m = node("MatMul", [m, w + "fc.weight"], p + "mlp/fc/MatMul")
        m = node("Add", [w + "fc.bias", m], p + "mlp/fc/Add")
        g = node("Div", [m, "c_sqrt2"], p + "mlp/act/Div")
        g = node("Erf", [g], p + "mlp/act/Erf")
        g = node("Add", [g, "c_one"], p + "mlp/act/Add")
        g = node("Mul", [m, g], p + "mlp/act/Mul")
        g = node("Mul", [g, "c_half"], p + "mlp/act/Mul_1")
        m = node("MatMul", [g, w + "fc2.weight"], p + "mlp/proj/MatMul")
        m = node("Add", [w + "fc2.bias", m], p + "mlp/proj/Add")
        x = node("Add", [x, m], p + "Add_1")
    x = node("LayerNormalization", [x, "ln_f.weight", "ln_f.bias"],
             "/ln_f/LayerNormalization", axis=-1, epsilon=1e-5)
    nodes.append(helper.make_node("MatMul", [x, "lm_head"], ["logits"],
                                  name="/lm_head/MatMul"))
    graph = helper.make_graph(
        nodes, "gpt",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, t])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, t, cfg["vocab"]])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def flops_per_step(cfg):
    """Matrix-product FLOPs of one forward step (what shoal-run counts)."""
    b, t, c, v, n = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["vocab"], cfg["layers"]
    per_layer = 2 * b * t * (4 * c * c + 2 * 4 * c * c) + 2 * 2 * b * t * t * c
    return n * per_layer + 2 * b * t * c * v


def prepare(args):
    cfg = config(args.small)
    os.makedirs(args.out, exist_ok=True)
    model = os.path.join(args.out, "model.onnx")
    build_graph(cfg, model)
    # The importer's ONNX checker looks for the external file; an empty one
    # is enough, since the compiler never reads weights.
    open(os.path.join(args.out, "weights.bin"), "wb").close()
    plan = os.path.join(args.out, "gpt.plan")
    subprocess.run([os.path.join(args.bin, "shoal-compile"), model, "--device", "cuda",
                    "-o", plan], check=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(cfg, small=args.small, seed=args.seed), f)
    print("prepared %s (%d bytes) and %s for %s" % (
        plan, os.path.getsize(plan), model, cfg))


def torch_forward(cfg, w, ids, steps, warmup, dtype_name, dev, compiled=False):
    """PyTorch's forward of the same model (torch.compile'd when `compiled`):
    (logits, seconds per step)."""
    import torch
    import torch.nn.functional as F
    dtype = dict(bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32,
                 tf32=torch.float32)[dtype_name]
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    tw = {k: torch.from_numpy(v).to(dev, dtype) for k, v in w.items()}
    x_ids = torch.from_numpy(ids).to(dev)
    b, t, c, h = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["heads"]
    d = c // h

    def forward():
        x = tw["wte"][x_ids] + tw["wpe"]
        for i in range(cfg["layers"]):
            p = "h.%d." % i
            a = F.layer_norm(x, (c,), tw[p + "ln_1.weight"], tw[p + "ln_1.bias"], 1e-5)
            q = (a @ tw[p + "q.weight"] + tw[p + "q.bias"]).view(b, t, h, d).transpose(1, 2)
            k = (a @ tw[p + "k.weight"] + tw[p + "k.bias"]).view(b, t, h, d).transpose(1, 2)
            v = (a @ tw[p + "v.weight"] + tw[p + "v.bias"]).view(b, t, h, d).transpose(1, 2)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d) + tw["mask"]
            o = torch.softmax(s, dim=-1) @ v
            o = o.transpose(1, 2).reshape(b, t, c) @ tw[p + "proj.weight"] + tw[p + "proj.bias"]
            x = x + o
            m = F.layer_norm(x, (c,), tw[p + "ln_2.weight"], tw[p + "ln_2.bias"], 1e-5)
            m = F.gelu(m @ tw[p + "fc.weight"] + tw[p + "fc.bias"])
            x = x + (m @ tw[p + "fc2.weight"] + tw[p + "fc2.bias"])
        x = F.layer_norm(x, (c,), tw["ln_f.weight"], tw["ln_f.bias"], 1e-5)
        return x @ tw["lm_head"]

    if compiled:
        forward = torch.compile(forward)
    with torch.no_grad():
        for _ in range(warmup):
            forward()
        if dev == "cpu":
            begin = time.perf_counter()
            for _ in range(steps):
                out = forward()
            seconds = (time.perf_counter() - begin) / steps
        else:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                out = forward()
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / steps
    return out.float().cpu().numpy(), seconds


def run(args):
    with open(os.path.join(args.out, "config.json")) as f:
        cfg = json.load(f)
    w = make_weights(cfg, cfg["seed"])
    with open(os.path.join(args.out, "weights.bin"), "wb") as f:
        for name, _ in weight_list(cfg):
            f.write(np.ascontiguousarray(w[name], np.float32).tobytes())
    rng = np.random.default_rng(cfg["seed"] + 1)
    ids = rng.integers(0, cfg["vocab"], size=(cfg["batch"], cfg["seq"]), dtype=np.int64)
    inputs = os.path.join(args.out, "inputs")
    os.makedirs(inputs, exist_ok=True)
    np.save(os.path.join(inputs, "input_ids.npy"), ids)

    cmd = [os.path.join(args.bin, "shoal-run"), os.path.join(args.out, "gpt.plan"),
           "--inputs", inputs, "--outputs", os.path.join(args.out, "shoal_out"),
           "--backend", args.backend, "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    if args.backend == "cuda":
        cmd += ["--precision", args.precision]
    print("$ " + " ".join(cmd))
    res = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        sys.exit("shoal-run failed")
    if args.profile:
        # A separate run: the profile synchronizes after every op.
        pcmd = list(cmd)
        pcmd[pcmd.index("--steps") + 1] = "3"
        pcmd[pcmd.index("--warmup") + 1] = "1"
        prof = subprocess.run(pcmd + ["--profile", args.profile],
            capture_output=True, text=True)
        if prof.returncode != 0:
            sys.stderr.write(prof.stderr)
            sys.exit("shoal-run --profile failed")
        subprocess.run([sys.executable, os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "profile_summary.py"), args.profile])
    m = re.search(r"([0-9.]+) ms/step.*?([0-9.]+) tokens/s(?:.*MFU ([0-9.]+)%)?",
                  res.stdout)
    if not m:
        sys.exit("no step report in shoal-run's output")
    shoal_ms, shoal_tps = float(m.group(1)), float(m.group(2))
    mfu = m.group(3)
    tokens = cfg["batch"] * cfg["seq"]
    print("model: %s; matrix-product FLOPs per step: %.3e" % (
        {k: cfg[k] for k in ("layers", "hidden", "heads", "seq", "batch", "vocab")},
        flops_per_step(cfg)))
    print("shoal-run  : %10.1f tokens/s  (%.2f ms/step, MFU %s)" % (
        shoal_tps, shoal_ms, (mfu + "%") if mfu else "n/a"))
    precision = args.precision if args.backend == "cuda" else "fp32"
    ref, seconds = torch_forward(cfg, w, ids, args.steps, args.warmup, precision,
                               "cuda" if args.backend == "cuda" else "cpu")
    print("PyTorch    : %10.1f tokens/s  (%.2f ms/step, eager, %s)" % (
        tokens / seconds, seconds * 1e3, precision))
    print("ratio shoal/PyTorch: %.2f" % (shoal_tps / (tokens / seconds)))
    compiled_tps = None
    if args.backend == "cuda" and not args.no_compile:
        _, cseconds = torch_forward(cfg, w, ids, args.steps, args.warmup, precision, "cuda",
                                  compiled=True)
        compiled_tps = tokens / cseconds
        print("PyTorch    : %10.1f tokens/s  (%.2f ms/step, torch.compile, %s)" % (
            compiled_tps, cseconds * 1e3, precision))
        print("ratio shoal/torch.compile: %.2f" % (shoal_tps / compiled_tps))
    out = np.load(os.path.join(args.out, "shoal_out", "logits.npy"))
    err = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
    print("relative error shoal vs PyTorch (%s): %.2e%s" % (
        precision, err, "  NaN!" if np.isnan(out).any() else ""))
    if args.record:
        record_result(args, cfg, precision, shoal_tps, tokens / seconds, compiled_tps,
                      mfu, err)


def record_result(args, cfg, precision, shoal_tps, eager_tps, compiled_tps, mfu, err):
    """Appends one JSON record to args.record (bench/results/ layout of issue
    18). Training fields are null here: this bench runs the forward only."""
    import datetime
    device = "cpu"
    if args.backend == "cuda":
        import torch
        device = torch.cuda.get_device_name(0)
    commit = os.environ.get("SHOAL_COMMIT")  # set where the copy has no .git
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                                     "rev-parse", "HEAD"], capture_output=True,
                                    text=True).stdout.strip() or None
        except OSError:
            commit = None
    rec = {
        "device": device,
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "model": "gpt_cuda %s" % {k: cfg[k] for k in ("layers", "hidden", "heads", "seq",
                                                      "batch", "vocab")},
        "precision": precision,
        "shoal_fwd_tokens_per_s": shoal_tps,
        "torch_eager_fwd_tokens_per_s": eager_tps,
        "torch_compile_fwd_tokens_per_s": compiled_tps,
        "shoal_fwd_mfu": float(mfu) / 100 if mfu else None,
        "fwd_rel_error_vs_torch": err,
        "shoal_train_tokens_per_s": None,
        "torch_eager_train_tokens_per_s": None,
        "torch_compile_train_tokens_per_s": None,
        "shoal_train_mfu": None,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.record)), exist_ok=True)
    with open(args.record, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("record appended to %s" % args.record)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="write the graph and compile the plan")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--small", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="write weights and inputs, run both, compare")
    r.add_argument("--bin", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    r.add_argument("--precision", default="bf16", choices=["fp32", "tf32", "bf16", "fp16"])
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--profile", metavar="FILE", default=None,
                   help="also write shoal-run's per-op profile (bench/profile_summary.py)")
    r.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile run (cuda)")
    r.add_argument("--record", metavar="FILE.jsonl", default=None,
                   help="append a JSON record (bench/results/ fields) to FILE")
    args = ap.parse_args()
    prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    main()
