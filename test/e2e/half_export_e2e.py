#!/usr/bin/python3
"""A model stored in bf16 (or f16) trains, and as the float32 export does.

    python3 test/e2e/half_export_e2e.py --bin build/bin --work DIR
        [--dtype bf16] [--spec spec_dp.yaml --world-size 2] [--steps 5]

(a) examples/gpt/make_model.py writes the GPT example in float32; (b) every
float32 tensor of it (initializers, Constant nodes, graph inputs, outputs and
value_info, Cast targets) is converted to --dtype with ONNX's own helpers, so
the model is what a bf16 export holds (the float32 values rounded to bf16);
(c) both are compiled with the same training config (`precision: bf16`,
AdamW) and trained --steps steps on --world-size ranks; (d) shoal-compile
made float32 master copies of the bf16 model's weights (its checkpoint holds
float32 weights and Adam moments), and the two runs' losses and weights
agree within --rtol (3e-2 of each tensor's largest value, the bound of the
mixed-precision tests), starting from the bf16-rounded weights.
"""

import argparse
import glob
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

TYPES = {"bf16": TensorProto.BFLOAT16, "fp16": TensorProto.FLOAT16}


def to_half_tensor(t, dtype):
    """A FLOAT TensorProto as `dtype` (bf16: round to nearest even)."""
    a = numpy_helper.to_array(t).astype(np.float32)
    if dtype == TensorProto.FLOAT16:
        out = numpy_helper.from_array(a.astype(np.float16), t.name)
        return out
    bits = np.ascontiguousarray(a).reshape(-1).view(np.uint32).astype(np.int64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    out = TensorProto()
    out.name = t.name
    out.data_type = TensorProto.BFLOAT16
    out.dims.extend(t.dims)
    out.raw_data = rounded.tobytes()
    return out


def convert(src, dst, dtype):
    m = onnx.load(src)
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(to_half_tensor(t, dtype))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(to_half_tensor(a.t, dtype))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = dtype
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        if tt.elem_type == TensorProto.FLOAT:
            tt.elem_type = dtype
    onnx.checker.check_model(m)
    onnx.save(m, dst)


def read_ckpt(folder, step):
    """{name: array} of a checkpoint's step folder (shards concatenated)."""
    d = os.path.join(folder, "step-%08d" % step)
    parts = {}
    for f in sorted(glob.glob(os.path.join(d, "*.npy"))):
        name, idx = os.path.basename(f)[:-4].rsplit(".", 1)
        parts.setdefault(name, []).append((int(idx), np.load(f)))
    return {n: [a for _, a in sorted(p)] for n, p in parts.items()}


def losses(stdout):
    return [float(x) for x in re.findall(r"^step \d+/\d+ loss ([0-9.e+-]+)", stdout, re.M)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--dtype", choices=sorted(TYPES), default="bf16")
    ap.add_argument("--spec", default="spec_dp.yaml", help="examples/gpt spec")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rtol", type=float, default=3e-2)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args(argv)
    w = os.path.abspath(args.work)
    os.makedirs(w, exist_ok=True)
    run = lambda cmd, **kw: common.run_cmd(cmd, **kw)  # noqa: E731

    print("-- (a) the GPT example in float32")
    run([sys.executable, os.path.join(REPO, "examples", "gpt", "make_model.py"), "--out", w])
    print("-- (b) converted to %s" % args.dtype)
    half = os.path.join(w, "model_%s.onnx" % args.dtype)
    convert(os.path.join(w, "model.onnx"), half, TYPES[args.dtype])
    config = os.path.join(w, "train.yaml")
    with open(os.path.join(HERE, "train_adamw.yaml")) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text + "precision: %s\n" % args.dtype)
    # The inputs: token ids and labels (labels as run_train_e2e.py makes them).
    inputs = os.path.join(w, "inputs")
    ids = np.load(os.path.join(inputs, "input_ids.npy"))
    rng = np.random.default_rng(1)
    np.save(os.path.join(inputs, "labels.npy"),
            rng.integers(0, 96, size=ids.shape).astype(np.int64))
    spec = os.path.join(REPO, "examples", "gpt", args.spec)
    results = {}
    for label, model in (("f32 export", os.path.join(w, "model.onnx")), (args.dtype + " export", half)):
        tag = label.split()[0]
        plan = os.path.join(w, tag + ".plan")
        print("-- (c) %s: compile and train %d steps on %d ranks" % (label, args.steps, args.world_size))
        run([os.path.join(args.bin, "shoal-compile"), model, "--annotate", spec,
             "--world-size", str(args.world_size), "--train", config, "-o", plan])
        ckpt = os.path.join(w, "ckpt_" + tag)
        cmd = [os.path.join(args.bin, "shoal-run"), plan, "--steps", str(args.steps),
               "--inputs", inputs, "--save", ckpt]
        env = None
        if args.world_size > 1:
            cmd = common.mpirun_cmd(args.mpirun, args.world_size, cmd)
            env = common.MPI_ENV
        res = run(cmd, env_extra=env)
        results[tag] = (losses(res.stdout), read_ckpt(ckpt, args.steps))
    (l32, c32), (lh, ch) = results["f32"], results[args.dtype]
    ok = True
    print("-- (d) compare")
    print("losses: f32 export %s" % ["%.5f" % x for x in l32])
    print("        %s export %s" % (args.dtype, ["%.5f" % x for x in lh]))
    if len(l32) != args.steps or len(lh) != args.steps:
        print("FAIL: expected %d losses from each run" % args.steps)
        ok = False
    for a, b in zip(l32, lh):
        if abs(a - b) > args.rtol * abs(a):
            print("FAIL: loss %.6f vs %.6f" % (a, b))
            ok = False
    if sorted(c32) != sorted(ch):
        print("FAIL: the checkpoints hold different tensors: %s" % sorted(set(c32) ^ set(ch)))
        ok = False
    worst = (0.0, "")
    for name in sorted(set(c32) & set(ch)):
        for a, b in zip(c32[name], ch[name]):
            if b.dtype != np.float32:
                print("FAIL: %s is %s in the %s run's checkpoint, expected float32 "
                      "(master weights)" % (name, b.dtype, args.dtype))
                ok = False
            if name.startswith("adam."):
                continue
            scale = max(float(np.abs(a).max()), 1e-6)
            err = float(np.abs(a.astype(np.float64) - b).max()) / scale
            worst = max(worst, (err, name))
    print("weights: largest difference %.3e of the tensor's largest value (%s), bound %.0e"
          % (worst[0], worst[1], args.rtol))
    if worst[0] > args.rtol:
        print("FAIL: weights differ by more than %g" % args.rtol)
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
