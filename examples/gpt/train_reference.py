#!/usr/bin/python3
"""PyTorch reference for shoal's training plans on the GPT example.

    /usr/bin/python3 examples/gpt/train_reference.py --model DIR/model.onnx \
        --config train.yaml --steps K (--inputs DIR | --data tokens.npy) \
        --out OUT [--seed S] [--dtype float32|float64]

Builds the GPT of make_model.py (same seed, same init), then loads the
initial weights from the ONNX model's initializers, so that the reference
starts from exactly the weights shoal starts from. Each torch parameter is
mapped to one initializer: by name where the exporter kept it (wte.weight,
h.0.ln_1.bias, ...), else by value (the exporter stores Linear weights as
`onnx::MatMul_NNN`, transposed to [in, out]). A missing or ambiguous
mapping, an initializer that is neither a parameter nor frozen, or a frozen
initializer that is not the buffer it names, is an error.

It then runs K optimizer steps as docs/Training.md specifies:
  loss    cross_entropy: sum over positions with label != ignore_index of
          the token loss, / number of positions (F.cross_entropy's mean
          when nothing is ignored); mse: mean((output - labels)^2)
  clip    torch.nn.utils.clip_grad_norm_(params, clip_norm) when > 0
  lr      warmup / cosine schedule of docs/Training.md, set on the
          parameter group before each step
  update  torch.optim.AdamW or torch.optim.SGD, every trained weight, in
          two groups: weight decay on the weights of two or more dimensions
          not named *bias, none on biases and norms (the config's no_decay
          list replaces that rule)
--autocast bf16 runs the forward under torch.autocast("cpu", bfloat16) (the
reference curve of `precision: bf16`; the loss is computed in float32).
Data: --inputs DIR (input_ids.npy, labels.npy) is the batch of every step;
--data FILE.npy [N, T+1]: step s uses rows (s*B + i) mod N, i < B, row[:T]
as input_ids and row[1:] as labels.

Writes, in OUT:
  weights/<file>.npy   every trained initializer after K steps, in ONNX
                       layout (Linear weights transposed back), float32
                       (float64 with --dtype float64)
  state/<file>.npy     optimizer state, under the checkpoint's names
                       (adam.m/<name>, adam.v/<name>, sgd.momentum/<name>)
  index.json           {"weights": {initializer: file}, "state": {...},
                        "params": {parameter: [initializer, transposed]},
                        "losses": [...], "grad_norms": [...], "lrs": [...],
                        "eval": [[step, loss], ...] (--eval-at),
                        "steps": K, "dtype": ...}
  losses.npy           float64 [K]: loss of each step (before its update)
  logits.npy           with --logits: the trained model's output on the
                       first batch's input_ids (after the K steps)
File names replace characters outside [A-Za-z0-9._-] by '_', like shoal.
"""

import argparse
import fnmatch
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def load_config(path):
    """train.yaml with docs/Training.md's defaults filled in."""
    import yaml
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    if "loss" not in cfg:
        raise SystemExit("error: %s has no `loss`" % path)
    loss = dict(cfg["loss"])
    loss.setdefault("ignore_index", -100)
    opt = dict(cfg.get("optimizer") or {})
    opt.setdefault("kind", "adamw")
    opt.setdefault("lr", 1.0e-3)
    opt.setdefault("betas", [0.9, 0.999])
    opt.setdefault("eps", 1.0e-8)
    opt.setdefault("momentum", 0.0)
    opt.setdefault("weight_decay", 0.01 if opt["kind"] == "adamw" else 0.0)
    opt.setdefault("clip_norm", 0.0)
    opt.setdefault("warmup_steps", 0)
    opt.setdefault("total_steps", 0)
    opt.setdefault("min_lr", 0.0)
    opt.setdefault("lr_schedule", "cosine")
    opt.setdefault("no_decay", "default")
    if opt["kind"] not in ("adamw", "sgd"):
        raise SystemExit("error: optimizer kind %r" % opt["kind"])
    frozen = list(cfg.get("frozen") or [])
    return {"loss": loss, "optimizer": opt, "frozen": frozen}


def lr_at(opt, t):
    """Learning rate of step t (1-based), docs/Training.md."""
    lr, warm, total, min_lr = (float(opt["lr"]), int(opt["warmup_steps"]),
                               int(opt["total_steps"]), float(opt["min_lr"]))
    s = t - 1
    if s < warm:
        return lr * (s + 1) / warm
    if total > warm and opt.get("lr_schedule", "cosine") != "constant":
        if s >= total:
            return min_lr
        progress = (s - warm) / (total - warm)
        if opt.get("lr_schedule") == "linear":
            return lr + (min_lr - lr) * progress
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))
    return lr


def decays(opt, name, ndim):
    """Weight decay applies to the initializer `name` of `ndim` dimensions
    (docs/Training.md, "no_decay"): by default not to biases and norms (one
    dimension, or a name ending in bias); a no_decay list names the weights
    without it instead."""
    nd = opt.get("no_decay", "default")
    if nd == "default":
        return ndim > 1 and not name.endswith("bias")
    return not any(fnmatch.fnmatchcase(name, p) for p in nd)


def is_frozen(name, patterns):
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def map_initializers(model, onnx_path, frozen):
    """{param name: (initializer name, transposed)} for every torch
    parameter, checked exhaustively. Also returns the ONNX arrays."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    float_inits = {k: v for k, v in inits.items() if v.dtype.kind == "f"}
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    mapping = {}
    used = {}
    errors = []
    for pname, p in params.items():
        val = p.detach().cpu().numpy()
        if pname in float_inits:
            if float_inits[pname].shape != val.shape or not np.array_equal(float_inits[pname], val):
                errors.append("initializer %s has the parameter's name but not its value" % pname)
                continue
            mapping[pname] = (pname, False)
            used.setdefault(pname, []).append(pname)
            continue
        hits = []
        for iname, arr in float_inits.items():
            if iname in params:
                continue  # a named initializer belongs to its own parameter
            if arr.shape == val.shape and np.array_equal(arr, val):
                hits.append((iname, False))
            if val.ndim == 2 and arr.shape == val.T.shape and np.array_equal(arr, val.T):
                hits.append((iname, True))
        if len(hits) != 1:
            errors.append("parameter %s %s: %s" % (
                pname, list(val.shape),
                "no initializer has its value" if not hits else
                "ambiguous, matches %s" % ", ".join("%s%s" % (h[0], " (transposed)" if h[1] else "")
                                                    for h in hits)))
            continue
        mapping[pname] = hits[0]
        used.setdefault(hits[0][0], []).append(pname)
    for iname, users in used.items():
        if len(users) > 1:
            errors.append("initializer %s is mapped to several parameters: %s" % (iname, users))
    for iname, arr in float_inits.items():
        if iname in used:
            if is_frozen(iname, frozen):
                errors.append("initializer %s is a trained parameter (%s) but the "
                              "config freezes it" % (iname, used[iname][0]))
            continue
        if iname in buffers:
            if not np.array_equal(buffers[iname].cpu().numpy(), arr):
                errors.append("initializer %s differs from the buffer %s" % (iname, iname))
            if not is_frozen(iname, frozen):
                errors.append("initializer %s is a buffer, not a parameter, but the "
                              "config does not freeze it (frozen: %s)" % (iname, frozen))
            continue
        errors.append("initializer %s %s is neither a parameter nor a buffer"
                      % (iname, list(arr.shape)))
    if errors:
        raise SystemExit("error: cannot map %s onto the PyTorch GPT:\n  %s"
                         % (onnx_path, "\n  ".join(errors)))
    return mapping, float_inits


def batches(args, B, T):
    """Yields (input_ids, labels) int64 arrays for step s = 0, 1, ..."""
    if args.data:
        rows = np.load(args.data)
        if rows.ndim != 2 or rows.shape[1] != T + 1 or rows.dtype.kind not in "iu":
            raise SystemExit("error: --data %s must be an integer array [N, %d], is %s %s"
                             % (args.data, T + 1, rows.dtype, list(rows.shape)))
        rows = rows.astype(np.int64)
        n = rows.shape[0]
        s = 0
        while True:
            idx = [(s * B + i) % n for i in range(B)]
            blk = rows[idx]
            yield blk[:, :T], blk[:, 1:]
            s += 1
    else:
        ids = np.load(os.path.join(args.inputs, "input_ids.npy")).astype(np.int64)
        labels = np.load(os.path.join(args.inputs, "labels.npy")).astype(np.int64)
        if ids.shape != (B, T) or labels.shape != (B, T):
            raise SystemExit("error: input_ids %s / labels %s, expected [%d, %d]"
                             % (list(ids.shape), list(labels.shape), B, T))
        while True:
            yield ids, labels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model.onnx written by make_model.py")
    ap.add_argument("--config", required=True, help="train.yaml")
    ap.add_argument("--steps", type=int, required=True, help="optimizer steps")
    ap.add_argument("--inputs", help="folder with input_ids.npy and labels.npy")
    ap.add_argument("--data", help="token rows [N, T+1] (.npy)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="make_model.py's seed")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    ap.add_argument("--autocast", choices=["bf16"], default=None,
                    help="run the forward under torch.autocast (CPU: bfloat16), the "
                    "reference of a `precision: bf16` run's loss curve; the loss and "
                    "the weights stay float32")
    ap.add_argument("--eval-data", default=None,
                    help="token rows [N, T+1] (.npy) evaluated as shoal-run --eval-data does: "
                    "the mean over the first --eval-steps batches (rows (k*B + i) mod N) of "
                    "the loss of a forward pass (no update)")
    ap.add_argument("--eval-steps", type=int, default=1)
    ap.add_argument("--eval-at", default="",
                    help="comma-separated steps after which to evaluate (0: before the "
                    "first); written to index.json as \"eval\": [[step, loss], ...]")
    ap.add_argument("--logits", action="store_true",
                    help="also write OUT/logits.npy: the trained model's output on the "
                    "first batch's input_ids")
    args = ap.parse_args(argv)
    if (args.inputs is None) == (args.data is None):
        ap.error("give exactly one of --inputs and --data")
    if args.steps < 0:
        ap.error("--steps must be >= 0")

    import torch
    import torch.nn.functional as F
    import make_model

    cfg = load_config(args.config)
    opt_cfg, loss_cfg = cfg["optimizer"], cfg["loss"]
    if loss_cfg.get("kind", "cross_entropy") != "cross_entropy":
        raise SystemExit("error: the GPT reference supports cross_entropy only")

    torch.manual_seed(args.seed)
    model = make_model.GPT()
    make_model.init_weights(model, args.seed)
    mapping, inits = map_initializers(model, args.model, cfg["frozen"])
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    with torch.no_grad():
        for pname, p in model.named_parameters():
            iname, tr = mapping[pname]
            a = inits[iname].T if tr else inits[iname]
            p.copy_(torch.from_numpy(np.array(a, copy=True)))
    model = model.to(dtype)
    model.train()  # no dropout in this model; train() for form's sake
    params = [p for _, p in model.named_parameters()]
    # Two groups, as Megatron-LM and the Hugging Face Trainer make them.
    wd = float(opt_cfg["weight_decay"])
    groups = [{"params": [], "weight_decay": wd}, {"params": [], "weight_decay": 0.0}]
    for pname, p in model.named_parameters():
        iname = mapping[pname][0]
        groups[0 if decays(opt_cfg, iname, inits[iname].ndim) else 1]["params"].append(p)
    groups = [g for g in groups if g["params"]]

    if opt_cfg["kind"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=float(opt_cfg["lr"]),
                                betas=tuple(float(b) for b in opt_cfg["betas"]),
                                eps=float(opt_cfg["eps"]))
    else:
        opt = torch.optim.SGD(groups, lr=float(opt_cfg["lr"]),
                              momentum=float(opt_cfg["momentum"]))

    B, T, V = make_model.BATCH, make_model.SEQ, make_model.VOCAB
    ignore = int(loss_cfg["ignore_index"])
    clip = float(opt_cfg["clip_norm"])
    losses, norms, lrs = [], [], []
    data = batches(args, B, T)

    def step_loss(ids, labels):
        ids_t = torch.from_numpy(np.ascontiguousarray(ids))
        lab_t = torch.from_numpy(np.ascontiguousarray(labels)).view(-1)
        if args.autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(ids_t)
            logits = logits.float()
        else:
            logits = model(ids_t)
        if (lab_t == ignore).any():
            # docs/Training.md: divide by every position, not the valid ones.
            return F.cross_entropy(logits.view(-1, V), lab_t, ignore_index=ignore,
                                   reduction="sum") / lab_t.numel()
        return F.cross_entropy(logits.view(-1, V), lab_t)

    eval_at = {int(x) for x in args.eval_at.split(",") if x.strip()}
    evals = []

    def evaluate(step):
        if step not in eval_at:
            return
        if not args.eval_data:
            raise SystemExit("error: --eval-at needs --eval-data")
        ev = batches(argparse.Namespace(data=args.eval_data, inputs=None), B, T)
        with torch.no_grad():
            total = sum(float(step_loss(*next(ev))) for _ in range(args.eval_steps))
        evals.append([step, total / args.eval_steps])

    evaluate(0)
    for s in range(args.steps):
        ids, labels = next(data)
        opt.zero_grad(set_to_none=True)
        loss = step_loss(ids, labels)
        loss.backward()
        if clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        else:
            norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))
        lr = lr_at(opt_cfg, s + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(float(loss))
        norms.append(norm)
        lrs.append(lr)
        if not args.quiet:
            print("step %d/%d loss %.6f grad_norm %.6f lr %.6g"
                  % (s + 1, args.steps, float(loss), norm, lr))
        evaluate(s + 1)

    wdir = os.path.join(args.out, "weights")
    sdir = os.path.join(args.out, "state")
    os.makedirs(wdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    npdt = np.float64 if args.dtype == "float64" else np.float32

    def onnx_layout(pname, t):
        a = t.detach().cpu().numpy().astype(npdt)
        return np.ascontiguousarray(a.T if mapping[pname][1] else a)

    index = {"weights": {}, "state": {}, "losses": losses, "grad_norms": norms,
             "lrs": lrs, "steps": args.steps, "dtype": args.dtype,
             "optimizer": opt_cfg["kind"], "eval": evals,
             "params": {p: [i, bool(t)] for p, (i, t) in mapping.items()}}
    for pname, p in model.named_parameters():
        iname = mapping[pname][0]
        f = safe_name(iname) + ".npy"
        np.save(os.path.join(wdir, f), onnx_layout(pname, p))
        index["weights"][iname] = f
        st = opt.state.get(p, {})
        keys = ({"adam.m/": "exp_avg", "adam.v/": "exp_avg_sq"} if opt_cfg["kind"] == "adamw"
                else {"sgd.momentum/": "momentum_buffer"})
        for prefix, key in keys.items():
            if st.get(key) is not None:
                sname = prefix + iname
                f = safe_name(sname) + ".npy"
                np.save(os.path.join(sdir, f), onnx_layout(pname, st[key]))
                index["state"][sname] = f
    np.save(os.path.join(args.out, "losses.npy"), np.array(losses, dtype=np.float64))
    if args.logits:
        ids, _ = next(batches(args, B, T))
        model.eval()
        with torch.no_grad():
            logits = model(torch.from_numpy(np.ascontiguousarray(ids)))
        np.save(os.path.join(args.out, "logits.npy"), logits.cpu().numpy().astype(npdt))
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    print("reference: %d steps (%s, %s), %d trained weights, first loss %s, last loss %s"
          % (args.steps, opt_cfg["kind"], args.dtype, len(index["weights"]),
             "%.6f" % losses[0] if losses else "-", "%.6f" % losses[-1] if losses else "-"))
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
