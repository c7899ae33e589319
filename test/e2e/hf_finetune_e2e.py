#!/usr/bin/python3
"""Fine-tuning a Hugging Face model with shoal (docs/HuggingFace.md):
pretrained weights in (--init-from), trained model out (--export-hf).

    test/e2e/hf_finetune_e2e.py --bin BUILD/bin --work DIR --model gpt2|llama
        [--layouts dp2,tp2dp2] [--steps 20] [--mpirun mpirun]

  (a) transformers builds a tiny model from its config (GPT2Config: 2
      layers, n_embd 64, 4 heads, vocabulary 128, 32 positions; LlamaConfig:
      2 layers, hidden 64, 4 heads, 2 key/value heads, intermediate 128,
      vocabulary 128; eager attention, no dropout) with random weights A,
      saves it (save_pretrained DIR/src) and exports it to ONNX for training
      (torch.onnx.export, training=TRAINING, do_constant_folding=False, opset
      17: every parameter an initializer under its name, here
      `hf.<state_dict key>` since a wrapper module takes input_ids and
      returns the logits). The same config with other random weights B is
      saved to DIR/init: the checkpoint to fine-tune from.
  (b) shoal-compile --train (cross_entropy on the logits, AdamW lr 1e-3,
      eps 1e-5, no weight decay, clip_norm 1.0) per layout (dp2: replicate
      over 2 ranks; tp2dp2: split(2) on 4 ranks, DP2 x TP2), then
      `shoal-run --init-from DIR/init --steps K --data tokens.npy
      --export-hf OUT/hf --export-onnx OUT/onnx/model.onnx`.
  (c) PyTorch: from_pretrained(DIR/init), the same K steps (step s takes
      rows (s*B + i) mod N of tokens.npy; AdamW and clipping as above; loss
      F.cross_entropy over every position). Every step's loss of every
      layout within --rtol (1e-5, relative) of PyTorch's; step 1's loss
      must differ from the one weights A give (the weights came from B).
  (d) from_pretrained(OUT/hf): no missing or unexpected keys and no
      "newly initialized" warning from transformers (a control run on a
      copy without one tensor must show that warning); its logits on a
      batch, those of the exported ONNX model in onnxruntime, and the
      PyTorch-trained model's agree within --rtol (max|a-b| / max|b|).

Needs transformers, safetensors and onnxruntime: the script re-runs itself
under ${SHOAL_VENV:-~/.cache/shoal-venv}/bin/python (scripts/install-deps.sh)
when they are missing, and exits 77 (skip) when they are missing there too.
Exit status: 0 pass, 1 fail, 77 skip.
"""

import argparse
import json
import logging
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402  (examples/common.py)

SKIP = 77
MODULES = ["numpy", "torch", "onnx", "transformers", "safetensors", "onnxruntime"]
VOCAB, SEQ, BATCH, ROWS = 128, 16, 4, 24
TRAIN_CONFIG = """version: 1
loss: {kind: cross_entropy, output: logits, labels: labels}
optimizer: {kind: adamw, lr: 1.0e-3, eps: 1.0e-5, weight_decay: 0.0, clip_norm: 1.0}
"""
SPECS = {
    "dp2": (2, "version: 1\nscopes:\n  - {replicate: 2, name: model, nodes: [\"*\"]}\n"),
    # split(2) on 4 ranks: DP2 x TP2 (examples/gpt/spec_tp.yaml).
    "tp2dp2": (4, "version: 1\ndefault: replicate\nscopes:\n"
                  "  - {split: 2, name: model, nodes: [\"*\"]}\n"),
}


FAILURES = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        FAILURES.append(what)


def make_config(transformers, model):
    if model == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2, n_head=4,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    cfg._attn_implementation = "eager"
    return cfg


def model_class(transformers, model):
    return transformers.GPT2LMHeadModel if model == "gpt2" else transformers.LlamaForCausalLM


def from_pretrained(transformers, model, folder, **kw):
    cls = model_class(transformers, model)
    try:
        return cls.from_pretrained(folder, attn_implementation="eager", **kw)
    except TypeError:  # a transformers without attn_implementation
        return cls.from_pretrained(folder, **kw)


def random_model(torch, transformers, model, seed):
    """The model with every parameter drawn from `seed` (HF's init makes
    every bias 0 and every norm weight 1, the same in any two models)."""
    torch.manual_seed(seed)
    m = model_class(transformers, model)(make_config(transformers, model))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1, generator=g)
            elif name.endswith("weight"):
                p.uniform_(0.7, 1.3, generator=g)
            else:
                p.normal_(0.0, 0.05, generator=g)
    return m.eval()


def export_onnx(torch, hf, path):
    import warnings

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    ids = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapper(), (ids,), path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)


def batch(tokens, s):
    rows = [(s * BATCH + i) % len(tokens) for i in range(BATCH)]
    return tokens[rows, :SEQ], tokens[rows, 1:]


def loss_of(torch, m, ids, labels):
    logits = m(input_ids=torch.from_numpy(ids), use_cache=False).logits
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.from_numpy(labels).reshape(-1))


def torch_finetune(torch, m, tokens, steps):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, eps=1e-5, weight_decay=0.0)
    losses = []
    for s in range(steps):
        ids, labels = batch(tokens, s)
        opt.zero_grad()
        loss = loss_of(torch, m, ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(m.parameters()), 1.0)
        opt.step()
        losses.append(float(loss))
    return losses


class LoadLog(logging.Handler):
    """transformers' warnings while loading."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def load_checked(transformers, model, folder):
    """from_pretrained(folder), its loading info and transformers' warnings."""
    log = LoadLog()
    logger = logging.getLogger("transformers")
    logger.addHandler(log)
    try:
        m, info = from_pretrained(transformers, model, folder, output_loading_info=True)
    finally:
        logger.removeHandler(log)
    return m.eval(), info, "\n".join(log.lines)


def step_losses(stdout):
    return [float(x) for x in re.findall(r"^step \d+/\d+ loss ([-\d.einf]+)", stdout, re.M)]


def other_sources(args, work, plan, world, losses):
    """The same weights B as a sharded save_pretrained folder and as a
    torch.save'd state dict converted by scripts/torch_to_safetensors.py:
    the first 2 steps' losses equal those from DIR/init."""
    import torch
    import transformers
    b = random_model(torch, transformers, args.model, seed=2)
    sharded = os.path.join(work, "init_sharded")
    b.save_pretrained(sharded, max_shard_size="100KB")
    torch.save(b.state_dict(), os.path.join(work, "init.bin"))
    common.run_cmd([sys.executable, os.path.join(REPO, "scripts", "torch_to_safetensors.py"),
                    os.path.join(work, "init.bin"), os.path.join(work, "init.safetensors")])
    shards = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors"))
    for source, what in ((sharded, "a sharded folder (%d files)" % len(shards)),
                         (os.path.join(work, "init.safetensors"),
                          "torch_to_safetensors.py's file")):
        res = common.run_cmd(common.mpirun_cmd(args.mpirun, world, [
            os.path.join(args.bin, "shoal-run"), plan, "--steps", 2,
            "--data", os.path.join(work, "tokens.npy"), "--init-from", source]))
        got = step_losses(res.stdout)
        check(got == losses[:2], "--init-from %s: the losses of steps 1-2 equal those "
              "from the save_pretrained folder (%s)" % (what, got))
    check(len(shards) > 1, "save_pretrained(max_shard_size=100KB) wrote %d shards" % len(shards))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--layouts", default="dp2,tp2dp2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()

    missing = common.missing_modules(MODULES)
    vpy = common.venv_python()
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(
        os.path.dirname(os.path.dirname(vpy)))
    if missing and os.path.isfile(vpy) and not in_venv:
        print("%s missing here: running under %s" % (", ".join(missing), vpy), flush=True)
        os.execv(vpy, [vpy, os.path.abspath(__file__)] + sys.argv[1:])
    if missing:
        print("SKIP: %s cannot import %s (scripts/install-deps.sh installs them into %s)"
              % (sys.executable, ", ".join(missing), os.path.dirname(os.path.dirname(vpy))))
        return SKIP

    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_warning()

    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = FAILURES

    # (a) The source model (weights A) exported to ONNX; the checkpoint to
    # fine-tune from (weights B).
    src = random_model(torch, transformers, args.model, seed=1)
    src.save_pretrained(os.path.join(work, "src"))
    onnx_path = os.path.join(work, "model.onnx")
    export_onnx(torch, src, onnx_path)
    init_dir = os.path.join(work, "init")
    random_model(torch, transformers, args.model, seed=2).save_pretrained(init_dir)
    tokens = np.random.default_rng(3).integers(0, VOCAB, size=(ROWS, SEQ + 1)).astype(np.int64)
    np.save(os.path.join(work, "tokens.npy"), tokens)
    with open(os.path.join(work, "train.yaml"), "w") as f:
        f.write(TRAIN_CONFIG)

    # (c) PyTorch's fine-tune of the checkpoint.
    ref = from_pretrained(transformers, args.model, init_dir).eval()
    ref_losses = torch_finetune(torch, ref, tokens, args.steps)
    with torch.no_grad():
        ids0, labels0 = batch(tokens, 0)
        loss_a = float(loss_of(torch, src, ids0, labels0))
    check(abs(loss_a - ref_losses[0]) > 1e-3,
          "step 1's loss from weights B (%.6f) differs from weights A's (%.6f)"
          % (ref_losses[0], loss_a))
    eval_ids = tokens[-BATCH:, :SEQ]
    with torch.no_grad():
        ref_logits = ref(input_ids=torch.from_numpy(eval_ids), use_cache=False).logits.numpy()

    bin_ = args.bin
    for layout in args.layouts.split(","):
        world, spec = SPECS[layout]
        d = os.path.join(work, layout)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec)
        plan = os.path.join(d, "model.plan")
        common.run_cmd([os.path.join(bin_, "shoal-compile"), onnx_path, "--train",
                        os.path.join(work, "train.yaml"), "--annotate",
                        os.path.join(d, "spec.yaml"), "--world-size", world, "-o", plan])
        hf_dir = os.path.join(d, "hf")
        res = common.run_cmd(common.mpirun_cmd(args.mpirun, world, [
            os.path.join(bin_, "shoal-run"), plan, "--steps", args.steps,
            "--data", os.path.join(work, "tokens.npy"), "--init-from", init_dir,
            "--export-hf", hf_dir, "--export-onnx", os.path.join(d, "onnx", "model.onnx")]))
        losses = step_losses(res.stdout)
        if layout == args.layouts.split(",")[0]:
            other_sources(args, work, plan, world, losses)
        m = re.search(r"--init-from .*: (\d+) of the model's (\d+) weights", res.stdout)
        check(m is not None and m.group(1) == m.group(2),
              "%s: every weight from --init-from (%s)" % (layout, m and m.group(0)))
        check(len(losses) == args.steps, "%s: %d step losses" % (layout, len(losses)))
        worst = max((abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)), default=1.0)
        check(worst <= args.rtol,
              "%s: %d step losses vs PyTorch's: max rel diff %.3g (first %.6f vs %.6f, "
              "last %.6f vs %.6f)" % (layout, len(losses), worst, losses[0], ref_losses[0],
                                      losses[-1], ref_losses[-1]))

        # (d) The exported model, as Hugging Face loads it.
        check(sorted(os.listdir(hf_dir)) == ["config.json", "generation_config.json",
                                             "model.safetensors"],
              "%s: --export-hf wrote %s" % (layout, sorted(os.listdir(hf_dir))))
        tuned, info, log = load_checked(transformers, args.model, hf_dir)
        problems = {k: v for k, v in info.items() if v}
        check(not problems and "newly initialized" not in log,
              "%s: from_pretrained: no missing, unexpected or mismatched keys, no "
              "'newly initialized' warning%s" % (layout, (": %s %s" % (problems, log))
                                                 if problems or log else ""))
        names = sorted(load_file(os.path.join(hf_dir, "model.safetensors")))
        saved = sorted(load_file(os.path.join(init_dir, "model.safetensors")))
        check(names == saved, "%s: model.safetensors holds the %d tensors save_pretrained "
              "writes, under its names" % (layout, len(saved)))
        with torch.no_grad():
            logits = tuned(input_ids=torch.from_numpy(eval_ids), use_cache=False).logits.numpy()
        err = common.rel_error(logits, ref_logits)
        check(err <= args.rtol, "%s: from_pretrained(--export-hf) logits vs PyTorch's "
              "fine-tuned model: %.3g" % (layout, err))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(os.path.join(d, "onnx", "model.onnx"), so,
                                    providers=["CPUExecutionProvider"])
        ort_logits = sess.run(["logits"], {"input_ids": eval_ids})[0]
        err = common.rel_error(ort_logits, ref_logits)
        check(err <= args.rtol, "%s: --export-onnx in onnxruntime vs PyTorch's fine-tuned "
              "model: %.3g" % (layout, err))
        err = common.rel_error(ort_logits, logits)
        check(err <= args.rtol, "%s: --export-onnx in onnxruntime vs "
              "from_pretrained(--export-hf): %.3g" % (layout, err))

    # The control: the warning shows when a tensor is missing.
    control = os.path.join(work, "control")
    first = os.path.join(work, args.layouts.split(",")[0], "hf")
    shutil.copytree(first, control)
    tensors = load_file(os.path.join(control, "model.safetensors"))
    dropped = sorted(tensors)[-1]
    del tensors[dropped]
    save_file(tensors, os.path.join(control, "model.safetensors"), metadata={"format": "pt"})
    _, info, log = load_checked(transformers, args.model, control)
    check("newly initialized" in log and dropped in info["missing_keys"],
          "control: without '%s', from_pretrained warns of newly initialized weights"
          % dropped)

    summary = {"model": args.model, "steps": args.steps, "failures": failures,
               "torch_losses": ref_losses}
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if failures:
        print("FAIL: %d checks failed" % len(failures))
        return 1
    print("PASS: %s fine-tuned from a save_pretrained checkpoint over %d steps (%s) "
          "matches PyTorch, and its --export-hf loads with from_pretrained"
          % (args.model, args.steps, args.layouts))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except common.CommandError as e:
        print("FAIL: %s" % e)
        sys.exit(1)
