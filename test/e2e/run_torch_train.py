#!/usr/bin/python3
"""Training steps of a torch.nn model under a layout, against PyTorch.

    /usr/bin/python3 test/e2e/run_torch_train.py --bin BUILD/bin --work DIR \
        --family transformer_encoder --spec SPEC --world-size N [--steps K] \
        [--data-batches K]

(a) builds the model of examples/families/FAMILY.py (its build(torch);
    every parameter perturbed so that deep-copied layers differ), random
    float inputs and labels of the output's shape, and exports it to ONNX
    (opset 17, eval mode, grad enabled so that nn.TransformerEncoder takes
    its traceable path);
(b) shoal-compile --train with an MSE loss and AdamW (lr 1e-3), and
    shoal-run K steps on N ranks under mpirun with the same batch every step
    (--inputs DIR), or new ones (f);
(c) PyTorch: the same K steps (torch.optim.AdamW, weight decay 0). When
    the spec has M micro-batches (`pipeline: num_micro_batch`), each step
    runs forward and backward on the M consecutive chunks of the batch
    with the loss of chunk j scaled by 1 / M (shoal's loss is the mean over
    the whole batch) and accumulates the gradients before the update, as
    a pipeline does; train-mode BatchNorm then takes its statistics per
    micro-batch (GPipe's and torch.distributed.pipelining's semantics);
(d) compares the loss of every step (relative error <= --rtol). The loss of
    step k > 1 depends on every weight after k - 1 updates, so it checks the
    gradients and the optimizer of every weight as well as the forward.
(e) with TRAIN_MODE, shoal-run also saves a checkpoint (--save) and the
    BatchNorm running statistics in it (running_mean, running_var) are
    compared with PyTorch's buffers after the same steps (largest
    difference relative to the buffer's largest magnitude <= --rtol);
(f) with --data-batches K, the batch of every step is new: K different
    batches (inputs and labels; the first is (a)'s) go into a data
    folder, one .npy [K * B, ...] per input, which shoal-run reads with
    --data DIR (step s takes rows (s * B + i) mod (K * B), so batch s mod K),
    and PyTorch's step s takes batch s mod K too.

The model takes float inputs (the family's make_inputs(rng); else one
"src" of the family's INPUT_SHAPE, or [BATCH, SEQ, D_MODEL]) and gives one
float output (families: transformer_encoder, transformer, small_cnn). With
TRAIN_MODE = True the model is exported and trained in train mode
(training=TRAINING, constant folding off: BatchNormalization with batch
statistics), which PyTorch's reference steps use too. With
--expect-collectives KIND=N (or KIND<=N) the training plan's partitioned
program (--emit-mlir) must hold that many collectives of the kind. Exit
status 0 on a match, 1 otherwise.
"""

import argparse
import importlib.util
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402

import numpy as np  # noqa: E402

CONFIG = """version: 1
loss: {kind: mse, output: out, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-3, eps: 1.0e-8, weight_decay: 0.0}
"""


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FAMILIES = os.path.join(REPO, "examples", "families")
# examples/families/common.py (the exporter settings the families use).
family_common = load_module(os.path.join(FAMILIES, "common.py"), "family_common")


def load_family(name):
    return load_module(os.path.join(FAMILIES, name + ".py"), "family_" + name)


def micro_batches(spec_path):
    """The spec's `pipeline: num_micro_batch` (1 without one)."""
    import yaml
    with open(spec_path) as f:
        spec = yaml.safe_load(f) or {}
    return int((spec.get("pipeline") or {}).get("num_micro_batch", 1))


def batch_dims_of(spec_path, names):
    """The batch dimension of each input (the spec's `inputs:`, else 0)."""
    import yaml
    with open(spec_path) as f:
        spec = yaml.safe_load(f) or {}
    given = spec.get("inputs") or {}
    return [int((given.get(n) or {}).get("batch_dim", 0)) for n in names]


def check_running_stats(model, ckpt, steps, world, rtol):
    """(e) BatchNorm's running statistics in shoal's checkpoint after the
    steps against PyTorch's buffers after the same steps."""
    from run_train_e2e import Failure, read_checkpoint
    try:
        _, saved = read_checkpoint(ckpt, steps, world)
    except Failure as e:
        print("FAIL: checkpoint: %s" % e)
        return False
    ok = True
    names = [n for n, _ in model.named_buffers()
             if n.endswith(".running_mean") or n.endswith(".running_var")]
    for name, buf in model.named_buffers():
        if name not in names:
            continue
        want = buf.detach().numpy().astype(np.float64)
        if name not in saved:
            print("%s: not in the checkpoint (it has %s) FAIL" % (name, sorted(saved)))
            ok = False
            continue
        got = saved[name].astype(np.float64)
        if got.shape != want.shape:
            print("%s: checkpoint shape %s, expected %s FAIL"
                  % (name, list(got.shape), list(want.shape)))
            ok = False
            continue
        err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-12))
        good = err <= rtol
        ok &= good
        print("%s after %d steps: max rel. error %.2e %s"
              % (name, steps, err, "ok" if good else "FAIL"))
    if not names:
        print("FAIL: the model has no BatchNorm running statistics")
        ok = False
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--data-batches", type=int, default=0, metavar="K",
                    help="K different batches in a --data folder, step s taking batch "
                         "s mod K (0: --inputs, the same batch every step)")
    ap.add_argument("--expect-collectives", metavar="KIND=N", action="append", default=[],
                    help="bound on the collectives of the training plan's partitioned "
                         "program (KIND=N or KIND<=N); repeatable")
    args = ap.parse_args(argv)

    import torch
    torch.manual_seed(0)
    fam = load_family(args.family)
    model = fam.build(torch)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    train_mode = getattr(fam, "TRAIN_MODE", False)
    # Dropout off (shoal's training plans have no dropout), unless the
    # family trains in train mode (BatchNorm's batch statistics; such a
    # family has no dropout).
    model.train(train_mode)
    rng = np.random.default_rng(2)
    # Float inputs: the family's make_inputs(rng) (name -> array, in the
    # order of forward's arguments), else one "src" of INPUT_SHAPE or
    # [BATCH, SEQ, D_MODEL].
    def make_inputs():
        if hasattr(fam, "make_inputs"):
            return fam.make_inputs(rng)
        shape = getattr(fam, "INPUT_SHAPE", (getattr(fam, "BATCH", 0), getattr(fam, "SEQ", 0),
                                             getattr(fam, "D_MODEL", 0)))
        return {"src": rng.standard_normal(shape).astype(np.float32)}

    inputs = make_inputs()
    xs = tuple(torch.from_numpy(v) for v in inputs.values())
    with torch.no_grad():
        y_shape = model(*xs).shape
    labels = rng.standard_normal(tuple(y_shape)).astype(np.float32)
    # (f) The batches of the steps: (inputs, labels), the first the one above.
    batches = [(inputs, labels)]
    for _ in range(1, args.data_batches):
        more = make_inputs()
        batches.append((more, rng.standard_normal(tuple(y_shape)).astype(np.float32)))

    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "inputs"))
    onnx_path = os.path.join(work, "model.onnx")
    if train_mode:
        family_common.export_onnx(model, xs, onnx_path, list(inputs), ["out"], 17,
                                  do_constant_folding=False,
                                  training=torch.onnx.TrainingMode.TRAINING)
    else:
        family_common.export_onnx(model, xs, onnx_path, list(inputs), ["out"], 17)
    if train_mode:
        # Train-mode forwards (the one above, the exporter's trace) moved
        # BatchNorm's running statistics; both runs start from the values
        # the exported file holds.
        import onnx
        from onnx import numpy_helper
        held = {t.name: numpy_helper.to_array(t)
                for t in onnx.load(onnx_path).graph.initializer}
        with torch.no_grad():
            for name, buf in model.named_buffers():
                if name in held and buf.dtype.is_floating_point:
                    buf.copy_(torch.from_numpy(held[name].copy()))
    for name, v in inputs.items():
        np.save(os.path.join(work, "inputs", name + ".npy"), v)
    np.save(os.path.join(work, "inputs", "labels.npy"), labels)
    data_dir = os.path.join(work, "data")
    if args.data_batches > 0:
        # One .npy per input, the K batches one after the other along
        # dimension 0 (shoal-run --data DIR slices every input there).
        os.makedirs(data_dir)
        for name in inputs:
            np.save(os.path.join(data_dir, name + ".npy"),
                    np.concatenate([b[0][name] for b in batches], axis=0))
        np.save(os.path.join(data_dir, "labels.npy"),
                np.concatenate([b[1] for b in batches], axis=0))
    with open(os.path.join(work, "train.yaml"), "w") as f:
        f.write(CONFIG)

    # (c) PyTorch first: the weights are still the exported ones.
    spec = args.spec if os.path.isfile(args.spec) else os.path.join(FAMILIES, args.spec)
    micro = micro_batches(spec)
    batch_dims = batch_dims_of(spec, list(inputs))
    if args.data_batches > 0 and any(batch_dims):
        print("FAIL: --data-batches needs every input's batch on dimension 0 "
              "(shoal-run --data DIR slices there); the spec gives %s" % batch_dims)
        return 1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.0)
    ref = []
    for step in range(args.steps):
        if args.data_batches > 0:
            step_inputs, step_labels = batches[step % args.data_batches]
            xs = tuple(torch.from_numpy(v) for v in step_inputs.values())
        else:
            step_labels = labels
        lt = torch.from_numpy(step_labels)
        opt.zero_grad()
        total = 0.0
        chunks = [torch.chunk(x, micro, dim=d) for x, d in zip(xs, batch_dims)]
        for j, lj in enumerate(torch.chunk(lt, micro, dim=batch_dims[0])):
            loss = ((model(*(c[j] for c in chunks)) - lj) ** 2).mean() / micro
            loss.backward()
            total += float(loss)
        opt.step()
        ref.append(total)

    # (b) shoal.
    plan = os.path.join(work, "train.plan")
    mlir = os.path.join(work, "train.mlir")
    common.run_cmd([os.path.join(args.bin, "shoal-compile"), onnx_path, "--annotate", spec,
                    "--world-size", args.world_size, "--train",
                    os.path.join(work, "train.yaml"), "-o", plan, "--emit-mlir", mlir],
                   timeout=args.timeout)
    bad = common.check_collectives(mlir, args.expect_collectives)
    if bad:
        print("\n".join(bad) + "\nFAIL: %s, %s on %d ranks: collectives"
              % (args.family, os.path.basename(spec), args.world_size))
        return 1
    argv_run = [os.path.join(args.bin, "shoal-run"), plan, "--steps", args.steps]
    if args.data_batches > 0:
        argv_run += ["--data", data_dir]
    else:
        argv_run += ["--inputs", os.path.join(work, "inputs")]
    ckpt = os.path.join(work, "ckpt")
    if train_mode:
        argv_run += ["--save", ckpt]
    if args.world_size > 1:
        argv_run = common.mpirun_cmd(args.mpirun, args.world_size, argv_run)
    res = common.run_cmd(argv_run, env_extra=common.MPI_ENV, timeout=args.timeout)
    got = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", res.stdout, re.M)]

    ok = len(got) == len(ref)
    for k, (g, r) in enumerate(zip(got, ref)):
        err = abs(g - r) / max(abs(r), 1e-12)
        good = err <= args.rtol
        ok &= good
        print("step %d: shoal %.7f  PyTorch %.7f  rel. error %.2e %s"
              % (k + 1, g, r, err, "ok" if good else "FAIL"))
    if len(got) != len(ref):
        print("shoal printed %d step losses, expected %d:\n%s" % (len(got), len(ref), res.stdout))
    if train_mode:
        ok &= check_running_stats(model, ckpt, args.steps, args.world_size, args.rtol)
    print(("PASS" if ok else "FAIL") + ": %s, %s on %d ranks, %d steps%s"
          % (args.family, os.path.basename(spec), args.world_size, args.steps,
             ", %d batches (--data)" % args.data_batches if args.data_batches else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
