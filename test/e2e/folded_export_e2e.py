#!/usr/bin/python3
"""Training an ONNX export of a GPT with a tied LM head, against PyTorch.

    /usr/bin/python3 test/e2e/folded_export_e2e.py --bin BUILD/bin --work DIR \
        --export eval|train [--spec SPEC --world-size N] [--steps K] [--layers L]

(a) builds the GPT of examples/gpt/make_model.py with L layers (6), its LM
    head tied to the embedding (lm_head.weight = wte.weight) and PyTorch's
    own initialization (LayerNorm weights 1, biases 0) with the Linear
    biases zero and the embedding N(0, 0.02), as a GPT-2 starts: many parameters of equal value;
(b) exports it with torch.onnx.export, `--export eval`: eval mode,
    do_constant_folding=True (the exporter's defaults: equal initializers
    merged and read through Identity nodes, the tied head a folded
    transposed copy), or `--export train`: training=TRAINING,
    do_constant_folding=False (every nn.Linear as MatMul(x, Transpose(W)));
(c) shoal-compile --train (AdamW, lr --lr, eps 1e-5 as test/e2e/train_adamw.yaml
    explains, no weight decay or clipping) on
    one rank, and under --spec on --world-size ranks; the one-rank plan
    must train one tensor per PyTorch parameter (its shoal.adamw ops);
(d) shoal-run K steps of each (the N-rank one under mpirun) with the same
    batch every step, and PyTorch's K steps of the model itself; every
    step's loss within --rtol (1e-5) of PyTorch's. A parameter trained as
    the merged tensor shows from the second step on.
(e) --export-check: the N-rank run also writes --export-onnx: it must pass
    onnx.checker and hold every parameter PyTorch's model has under its
    name, with PyTorch's trained value (the Linear weights of an eval
    export stay the exporter's transposed onnx::MatMul_* initializers).
--expect-all-reduces F,B: the N-rank training plan's forward holds F
all_reduce ops over tp and its backward B, besides the vocabulary-parallel
embedding's and loss's (Megatron: 2 per layer forward, 2 per layer and the
LM head's input gradient backward);
--report-check: every block weight (h.*.attn/mlp.*.weight) of the N-rank
plan is split over tp, and its --report has no "split no weight" or "no
weight or input is split" warning.
--no-restore compiles with the plan on stdout (-o -), where the importer
cannot write a restored model: the check that the test fails without it.
Exit status 0 on a match, 1 otherwise.
"""

import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, os.path.join(REPO, "examples", "gpt"))
import common  # noqa: E402

import numpy as np  # noqa: E402

STEP_RE = re.compile(r"^(?:\[rank 0\] )?step\s+(\d+)/(\d+)\s+loss\s+(\S+)", re.M)
ONE_RANK_SPEC = os.path.join(HERE, "spec_one_rank.yaml")


def build_model(layers):
    import torch
    import torch.nn as nn
    import make_model

    torch.manual_seed(0)
    model = make_model.GPT(L=layers)
    nn.init.normal_(model.wte.weight, 0.0, 0.02)
    model.lm_head.weight = model.wte.weight
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def export(model, kind, path, ids):
    import torch
    if kind == "eval":
        model.eval()
        with torch.no_grad():
            torch.onnx.export(model, (ids,), path, opset_version=17,
                              input_names=["input_ids"], output_names=["logits"],
                              do_constant_folding=True)
    else:
        model.train()
        torch.onnx.export(model, (ids,), path, opset_version=17,
                          input_names=["input_ids"], output_names=["logits"],
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)


def torch_losses(model, ids, labels, steps, lr):
    import torch
    import torch.nn.functional as F
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-5,
                            weight_decay=0.0)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--export", choices=["eval", "train"], required=True)
    ap.add_argument("--spec", default=ONE_RANK_SPEC)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--export-check", action="store_true")
    ap.add_argument("--expect-all-reduces", default=None, help="FWD,BWD")
    ap.add_argument("--report-check", action="store_true")
    ap.add_argument("--no-restore", action="store_true")
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args(argv)

    import torch
    import make_model

    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "inputs"))
    spec = a.spec if os.path.isabs(a.spec) or os.path.isfile(a.spec) else os.path.join(
        REPO, "examples", "gpt", a.spec)
    compile_ = common.find_tool(a.bin, "shoal-compile")
    run = common.find_tool(a.bin, "shoal-run")

    model = build_model(a.layers)
    nparams = len(list(model.parameters()))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, make_model.VOCAB, size=(make_model.BATCH, make_model.SEQ))
    labels = rng.integers(0, make_model.VOCAB, size=ids.shape)
    np.save(os.path.join(work, "inputs", "input_ids.npy"), ids.astype(np.int64))
    np.save(os.path.join(work, "inputs", "labels.npy"), labels.astype(np.int64))
    onnx_path = os.path.join(work, "model.onnx")
    export(model, a.export, onnx_path, torch.from_numpy(ids))
    print("model: %s (%s export, %d layers, %d parameters)" % (
        onnx_path, a.export, a.layers, nparams))
    config = os.path.join(work, "train.yaml")
    with open(config, "w") as f:
        f.write("version: 1\nloss: {kind: cross_entropy, output: logits, labels: labels}\n"
                "optimizer: {kind: adamw, lr: %r, eps: 1.0e-5, weight_decay: 0.0}\n"
                "frozen: [mask]\n" % a.lr)

    failures = []

    def compile_plan(spec_path, world, name, extra=()):
        plan = os.path.join(work, name + ".plan")
        mlir = os.path.join(work, name + ".mlir")
        argv = [compile_, onnx_path, "--annotate", spec_path, "--world-size", world,
                "--train", config, "--emit-mlir", mlir] + list(extra)
        if a.no_restore:
            import subprocess
            raw = subprocess.run([str(x) for x in argv + ["-o", "-"]], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, timeout=a.timeout, check=True,
                                 cwd=work)
            with open(plan, "wb") as f:
                f.write(raw.stdout)
            res = argparse.Namespace(stdout="", stderr=raw.stderr.decode(errors="replace"))
        else:
            res = common.run_cmd(argv + ["-o", plan], timeout=a.timeout)
        sys.stdout.write(res.stderr or "")
        return plan, mlir, res

    base, base_mlir, _ = compile_plan(ONE_RANK_SPEC, 1, "base")
    with open(base_mlir) as f:
        trained = len(re.findall(r"\bshoal\.adamw\b", f.read()))
    print("trained tensors: %d (PyTorch parameters: %d)" % (trained, nparams))
    if trained != nparams:
        failures.append("the one-rank plan trains %d tensors, PyTorch %d parameters"
                        % (trained, nparams))
    par, par_mlir, par_res = (base, base_mlir, None)
    if a.world_size > 1 or a.spec != ONE_RANK_SPEC:
        par, par_mlir, par_res = compile_plan(spec, a.world_size, "par", ["--report"])
        report = par_res.stdout if not a.no_restore else ""
        if a.report_check:
            with open(par_mlir) as f:
                ir = f.read()
            blocks = set(re.findall(
                r'shoal\.weight "(h\.\d+\.(?:attn|mlp)\.\w+\.weight)" \{[^}]*sharding<([^>]*)>', ir))
            whole = sorted(n for n, sh in blocks if '"tp"' not in sh)
            print("block weights: %d, split over tp: %d" % (
                len({n for n, _ in blocks}), len({n for n, _ in blocks}) - len(whole)))
            if whole or not blocks:
                failures.append("block weights left whole: %s" % whole[:6])
            for line in report.splitlines():
                if "warning" in line:
                    print("  report: " + line.strip())
                if "split no weight" in line or "no weight or input is split" in line:
                    failures.append("report: " + line.strip())
    if a.expect_all_reduces is not None:
        # The partitioned program in order: the all_reduces after the loss's
        # are the backward's. The vocabulary-parallel embedding's and loss's
        # (shoal.reason "vocabulary-parallel ...") are not counted.
        with open(par_mlir) as f:
            ir = f.read()
        fwd = bwd = 0
        backward = False
        for line in ir.splitlines():
            if "shoal.all_reduce" not in line or '"tp"' not in line:
                continue
            if "vocabulary-parallel cross-entropy" in line:
                backward = True
            if "vocabulary-parallel" in line:
                continue
            if backward:
                bwd += 1
            else:
                fwd += 1
        want = [int(x) for x in a.expect_all_reduces.split(",")]
        print("all_reduce over tp: %d forward, %d backward (expected %d, %d)"
              % (fwd, bwd, want[0], want[1]))
        if [fwd, bwd] != want:
            failures.append("all_reduce over tp: %d forward, %d backward, expected %d, %d"
                            % (fwd, bwd, want[0], want[1]))

    ref = torch_losses(build_model(a.layers), torch.from_numpy(ids),
                       torch.from_numpy(labels), a.steps, a.lr)
    runs = [("one-rank", base, 1, [])]
    if par != base:
        runs.append(("%d-rank" % a.world_size, par, a.world_size, []))
    if a.export_check:
        exported = os.path.join(work, "export", "trained.onnx")
        os.makedirs(os.path.dirname(exported), exist_ok=True)
        runs[-1][3].extend(["--export-onnx", exported])
    for label, plan, world, extra in runs:
        argv = [run, plan, "--steps", a.steps, "--inputs", os.path.join(work, "inputs")] + extra
        env = None
        if world > 1:
            argv = common.mpirun_cmd(a.mpirun, world, argv)
            env = common.MPI_ENV
        res = common.run_cmd(argv, env_extra=env, timeout=a.timeout)
        got = [(int(m.group(1)), float(m.group(3))) for m in STEP_RE.finditer(res.stdout)]
        if len(got) != a.steps:
            failures.append("%s: %d progress lines, expected %d" % (label, len(got), a.steps))
            continue
        worst = 0.0
        for (s, x), y in zip(got, ref):
            err = abs(x - y) / max(abs(y), 1e-12)
            worst = max(worst, err)
            print("  %s step %d: loss %.6f, PyTorch %.6f, error %.2e" % (label, s, x, y, err))
            if err > a.rtol:
                failures.append("%s step %d: loss %.6f vs PyTorch %.6f (error %.2e > %.0e)"
                                % (label, s, x, y, err, a.rtol))
        print("%s: largest loss error %.2e over %d steps" % (label, worst, a.steps))

    if a.export_check:
        import onnx
        from onnx import numpy_helper
        m = onnx.load(exported)
        try:
            onnx.checker.check_model(exported)
        except Exception as e:  # noqa: BLE001
            failures.append("the exported model fails onnx.checker: %s" % e)
        inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        trained_model = build_model(a.layers)
        torch_losses(trained_model, torch.from_numpy(ids), torch.from_numpy(labels),
                     a.steps, a.lr)
        checked = 0
        for name, p in trained_model.named_parameters():
            if name not in inits:
                if a.export == "eval" and re.search(r"\.(q|k|v|proj|fc)\.weight$", name):
                    continue  # a folded onnx::MatMul_* initializer
                failures.append("the exported model has no initializer %s" % name)
                continue
            if name.endswith("attn.k.bias"):
                # Its gradient is zero in exact arithmetic (softmax ignores a
                # shift shared by all keys): Adam moves it by rounding noise.
                continue
            want = p.detach().numpy()
            err = np.max(np.abs(inits[name] - want)) / max(np.max(np.abs(want)), 1e-12)
            checked += 1
            if err > 1e-4:
                failures.append("exported %s differs from PyTorch's: %.2e" % (name, err))
        print("export: %d parameters by name match PyTorch's trained values" % checked)

    for f in failures:
        print("FAIL: " + f)
    print("PASS" if not failures else "FAILED (%d)" % len(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
