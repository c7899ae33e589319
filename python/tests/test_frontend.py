"""The Python front end (python/shoal): the GPT of examples/python/train_gpt.py
annotated with scopes and trained under DP2 x PP2 x TP2 equals the YAML
path bit for bit and PyTorch within 1e-5; load_weights gives the model
shoal runs; the error paths.

    SHOAL_BIN=build/bin /usr/bin/python3 -m pytest -q python/tests
"""

import copy
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "examples", "python"),
                os.path.join(REPO, "examples", "gpt")]

import shoal  # noqa: E402
import train_gpt  # noqa: E402
from make_model import BATCH, SEQ, VOCAB, init_weights  # noqa: E402

STEPS = 5
LOSS = {"kind": "cross_entropy", "output": "logits", "labels": "labels"}
ADAMW = {"kind": "adamw", "lr": 1e-3, "weight_decay": 0.0}


@pytest.fixture(autouse=True)
def fresh_config():
    shoal.reset()
    yield
    shoal.reset()


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(cmd), proc.stdout)
    return proc.stdout


def rel_diff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def pytorch_steps(model, tokens, steps):
    """AdamW steps as docs/Training.md defines them: step s takes rows
    (s * B + i) mod N; the loss is the mean token cross entropy."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    n = tokens.shape[0]
    for s in range(steps):
        rows = tokens[[(s * BATCH + i) % n for i in range(BATCH)]]
        ids = torch.from_numpy(rows[:, :SEQ])
        labels = torch.from_numpy(rows[:, 1:])
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_gpt_dp2_pp2_tp2_equals_yaml_path_and_pytorch(tmp_path):
    work = str(tmp_path)
    torch.manual_seed(0)
    # The script a user writes (examples/python/train_gpt.py), 8 ranks.
    assert train_gpt.main(["--work", work, "--world-size", "8", "--steps", str(STEPS)]) == 0
    spec = open(os.path.join(work, "gpt.spec.yaml")).read()
    assert "nodes: [/wte/*, /Add, /h.0/*]" in spec
    assert "nodes: [/h.1/*, /ln_f/*, /lm_head/*]" in spec
    assert "num_micro_batch: 2" in spec
    trained = shoal.read_weights(os.path.join(work, "trained"))

    # The YAML path: the hand-written spec of examples/gpt and a training
    # config, shoal-compile and mpirun by hand, on the same export.
    train_yaml = os.path.join(work, "hand.train.yaml")
    with open(train_yaml, "w") as f:
        f.write("version: 1\nloss: {kind: cross_entropy, output: logits, labels: labels}\n"
                "optimizer: {kind: adamw, lr: 1.0e-3, weight_decay: 0.0}\nfrozen: [mask]\n")
    hand_plan = os.path.join(work, "hand.plan")
    run([shoal.tools.tool("shoal-compile"), os.path.join(work, "gpt.onnx"),
         "--annotate", os.path.join(REPO, "examples", "gpt", "spec_pp2_tp2.yaml"),
         "--world-size", "8", "--train", train_yaml, "-o", hand_plan])
    hand = shoal.train(hand_plan, ranks=8, steps=STEPS,
                       data=os.path.join(work, "tokens.npy"),
                       export_safetensors=os.path.join(work, "hand"), on_line=lambda l: None)
    hand_weights = shoal.read_weights(os.path.join(work, "hand"))

    # The Python path's run again, to compare its losses with the YAML's.
    shoal.config({"pipeline.num_micro_batch": 2}, loss=LOSS, optimizer=ADAMW)
    plan = shoal.compile(os.path.join(work, "gpt.onnx"), world_size=8,
                         out=os.path.join(work, "again.plan"))
    py = shoal.train(plan, steps=STEPS, data=os.path.join(work, "tokens.npy"),
                     on_line=lambda l: None)
    assert len(py.losses) == STEPS
    assert py.losses == hand.losses  # bit for bit
    assert sorted(trained) == sorted(hand_weights)
    for name in trained:
        assert np.array_equal(trained[name], hand_weights[name]), name

    # PyTorch: the same model, init and data.
    torch.manual_seed(0)
    ref = train_gpt.GPT()
    init_weights(ref, 0)
    tokens = np.load(os.path.join(work, "tokens.npy"))
    ref_losses = pytorch_steps(ref, tokens, STEPS)
    assert rel_diff(py.losses, ref_losses) <= 1e-5, (py.losses, ref_losses)
    for name, p in ref.named_parameters():
        if name.endswith("attn.k.bias"):
            # Its gradient is zero in exact arithmetic (softmax ignores a
            # shift shared by all keys): rounding noise, which Adam scales
            # to steps of up to lr in any direction. Bounded, not compared.
            assert np.max(np.abs(trained[name] - p.detach().numpy())) <= 2e-3 * STEPS
            continue
        assert rel_diff(trained[name], p.detach().numpy()) <= 1e-5, name


def test_load_weights_gives_the_model_shoal_runs(tmp_path):
    work = str(tmp_path)
    torch.manual_seed(0)
    shoal.config(loss=LOSS, optimizer=ADAMW)
    model = train_gpt.GPT()
    init_weights(model, 0)
    ids = torch.from_numpy(np.random.default_rng(1).integers(
        0, VOCAB, size=(BATCH, SEQ), dtype=np.int64))
    tokens = os.path.join(work, "tokens.npy")
    np.save(tokens, np.random.default_rng(2).integers(0, VOCAB, size=(8, SEQ + 1)))
    path = shoal.export(model, (ids,), os.path.join(work, "gpt.onnx"),
                        input_names=["input_ids"], output_names=["logits"])
    plan = shoal.compile(path, world_size=4)  # split(2) stages: PP2 x TP2
    shoal.train(plan, steps=3, data=tokens, export_onnx=os.path.join(work, "trained.onnx"),
                export_safetensors=os.path.join(work, "trained"), on_line=lambda l: None)
    before = copy.deepcopy(model)
    loaded = shoal.load_weights(model, os.path.join(work, "trained"))
    assert "h.0.attn.q.weight" in loaded and "wpe" in loaded
    assert not torch.equal(model.lm_head.weight, before.lm_head.weight)
    # shoal's one-rank forward of the trained model.
    one = shoal.compile(os.path.join(work, "trained.onnx"), world_size=1, train=False,
                        out=os.path.join(work, "one.plan"))
    os.makedirs(os.path.join(work, "in"), exist_ok=True)
    np.save(os.path.join(work, "in", "input_ids.npy"), ids.numpy())
    shoal.train(one, ranks=1, steps=1, inputs=os.path.join(work, "in"),
                outputs=os.path.join(work, "out"), on_line=lambda l: None)
    shoal_logits = np.load(os.path.join(work, "out", "logits.npy"))
    with torch.no_grad():
        torch_logits = model(ids).numpy()
    assert rel_diff(torch_logits, shoal_logits) <= 1e-6
    # The ONNX export loads the same weights.
    again = copy.deepcopy(before)
    shoal.load_weights(again, os.path.join(work, "trained.onnx"))
    for (n, a), (_, b) in zip(again.named_parameters(), model.named_parameters()):
        assert torch.equal(a, b), n


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        with shoal.replicate(2, name="all"):
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(self.emb(ids))


def _export_tied(tmp_path, batch=2):
    """A Tied model exported with `batch` rows of 3 ids: (model, path)."""
    model = Tied()
    path = shoal.export(model, (torch.zeros(batch, 3, dtype=torch.int64),),
                        str(tmp_path / "tied.onnx"), input_names=["ids"],
                        output_names=["logits"])
    return model, path


def test_tied_weights_are_exported_and_loaded_once(tmp_path):
    model = Tied()
    ids = torch.zeros(2, 3, dtype=torch.int64)
    shoal.export(model, (ids,), str(tmp_path / "tied.onnx"), input_names=["ids"],
                 output_names=["logits"])
    import onnx
    names = [i.name for i in onnx.load(str(tmp_path / "tied.onnx")).graph.initializer]
    assert names.count("emb.weight") + names.count("out.weight") == 1
    fresh = Tied()
    loaded = shoal.load_weights(fresh, str(tmp_path / "tied.onnx"))
    assert sorted(loaded) == ["emb.weight", "out.weight"]
    assert torch.equal(fresh.emb.weight, model.emb.weight)


def test_nested_scopes_are_refused():
    with pytest.raises(shoal.ShoalError, match=r"nested scopes: split\(2\) .* is inside "
                                               r"replicate\(2\) 'outer'"):
        with shoal.replicate(2, name="outer"):
            with shoal.split(2):
                pass


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        with shoal.split(2, name="used"):
            self.a = nn.Linear(4, 4)
        with shoal.split(2, name="never_called"):
            self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x)


def test_a_scope_that_matches_nothing_is_an_error(tmp_path):
    with pytest.raises(shoal.ShoalError, match=r"scope split\(2\) 'never_called' at "
                                               r".*test_frontend.py:\d+ matches no node"):
        shoal.export(Unused(), (torch.zeros(2, 4),), str(tmp_path / "u.onnx"))


def test_a_scope_that_builds_no_module_is_an_error(tmp_path):
    with shoal.split(2, name="empty"):
        pass
    with pytest.raises(shoal.ShoalError, match=r"scope split\(2\) 'empty' .* built no "
                                               r"nn.Module"):
        shoal.export(nn.Linear(4, 4), (torch.zeros(2, 4),), str(tmp_path / "l.onnx"))


def test_tool_failures_are_exceptions_with_the_tools_message(tmp_path):
    _, path = _export_tied(tmp_path)
    with pytest.raises(shoal.ShoalError, match="needs a loss"):
        shoal.compile(path, world_size=2)
    shoal.config(loss={"kind": "mse", "output": "nope", "labels": "y"}, optimizer=ADAMW)
    with pytest.raises(shoal.ShoalError) as e:
        shoal.compile(path, world_size=2)
    assert "shoal-compile failed" in str(e.value) and "nope" in str(e.value)
    assert e.value.returncode != 0 and e.value.command[0].endswith("shoal-compile")
    plan = shoal.compile(path, world_size=2, train=False)
    with pytest.raises(shoal.ShoalError, match=r"shoal-run failed .*missing.npy"):
        shoal.train(plan, steps=1, inputs=str(tmp_path / "missing.npy"),
                    outputs=str(tmp_path / "out"), on_line=lambda l: None)


def test_config_takes_epl_and_training_names():
    c = shoal.config({"pipeline.num_micro_batch": 4, "pipeline.strategy": "PreferBackward",
                      "zero.level": "v1", "gradient_checkpoint.type": "collection",
                      "amp.level": "O1"}, precision="bf16")
    assert c["pipeline"] == {"num_micro_batch": 4, "schedule": "1f1b"}
    assert c["zero"] == 1 and c["recompute"] == "full" and c["precision"] == "bf16"
    assert shoal.config({"pipeline.schedule": "interleaved"})["pipeline"]["schedule"] == \
        "interleaved"
    optimizer = {"kind": "adamw"}
    shoal.config(optimizer=optimizer)
    assert shoal.config(optimizer={"lr": 0.5})["optimizer"] == {"kind": "adamw", "lr": 0.5}
    assert optimizer == {"kind": "adamw"}  # the caller's dict is not changed
    with pytest.raises(shoal.ShoalError, match="unknown option 'pipline'"):
        shoal.config(pipline={"num_micro_batch": 2})
    with pytest.raises(shoal.ShoalError, match=r"zero.level='v9' is not one of"):
        shoal.config({"zero.level": "v9"})
    with pytest.raises(shoal.ShoalError, match="device_count must be a positive integer"):
        shoal.split(0)


def test_load_weights_refuses_checkpoints_and_other_shapes(tmp_path):
    ck = tmp_path / "ck"
    (ck / "step-00000001").mkdir(parents=True)
    with pytest.raises(shoal.ShoalError, match="is a checkpoint"):
        shoal.load_weights(nn.Linear(2, 2), str(ck))
    model = Tied()
    path = shoal.export(model, (torch.zeros(2, 3, dtype=torch.int64),),
                        str(tmp_path / "tied.onnx"), input_names=["ids"])
    with pytest.raises(shoal.ShoalError, match=r"emb.weight is \[10, 4\] in the file but "
                                               r"\[10, 5\] in the module"):
        shoal.load_weights(nn.ModuleDict({"emb": nn.Embedding(10, 5)}), path)
    # Tensors of a safetensors export that the module lacks (a renamed
    # layer); an ONNX model's other initializers are its constants.
    two = shoal.export(Frozen(), (torch.zeros(2, 4),), str(tmp_path / "two.onnx"),
                       input_names=["x"], output_names=["y"])
    shoal.config(loss={"kind": "mse", "output": "y", "labels": "t"}, optimizer=ADAMW)
    os.makedirs(str(tmp_path / "in"))
    np.save(str(tmp_path / "in" / "x.npy"), np.ones((2, 4), np.float32))
    np.save(str(tmp_path / "in" / "t.npy"), np.zeros((2, 4), np.float32))
    shoal.train(shoal.compile(two, world_size=2), steps=1, inputs=str(tmp_path / "in"),
                export_safetensors=str(tmp_path / "st"), on_line=lambda l: None)
    with pytest.raises(shoal.ShoalError, match=r"st holds b.bias, b.weight, which "
                                               r"ModuleDict has no parameter or buffer"):
        shoal.load_weights(nn.ModuleDict({"a": nn.Linear(4, 4)}), str(tmp_path / "st"))
    assert sorted(shoal.load_weights(nn.ModuleDict({"a": nn.Linear(4, 4)}),
                                     str(tmp_path / "st"), strict=False)) == \
        ["a.bias", "a.weight"]
    assert sorted(shoal.load_weights(nn.ModuleDict({"a": nn.Linear(4, 4)}), two)) == \
        ["a.bias", "a.weight"]


def test_hugging_face_gpt2_with_a_split_scope_over_its_blocks(tmp_path):
    """A model from a library: Hugging Face's GPT-2 (tied embeddings), the
    README's pattern (a replicate default, split(2) over the blocks,
    applied to the built model), 2 ranks: the block weights are split (no
    replicated-work warning) and 3 AdamW steps match PyTorch's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2,
                                  n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, initializer_range=0.1)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = transformers.GPT2LMHeadModel(cfg)

        def forward(self, input_ids):
            return self.hf(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    torch.manual_seed(0)
    model = LM()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # biases and norms that differ, so that a bad split shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    assert model.hf.lm_head.weight is model.hf.transformer.wte.weight
    reference = copy.deepcopy(model)
    shoal.split(2, name="blocks").apply(model.hf.transformer.h)
    shoal.config(loss=LOSS, optimizer=ADAMW)
    ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    if int(transformers.__version__.split(".")[0]) >= 5:
        # Its GPT-2 exports only with the dynamo exporter, whose unoptimized
        # graph (optimize=False keeps the weights' names) gathers with a
        # computed GatherND, which shoal's importer does not take.
        pytest.skip("transformers %s: GatherND with computed indices"
                    % transformers.__version__)
    path = shoal.export(model, (ids,), str(tmp_path / "gpt2.onnx"),
                        input_names=["input_ids"], output_names=["logits"])
    plan = shoal.compile(path, world_size=2)
    spec = open(plan.spec).read()
    assert "/hf/transformer/h.0/*" in spec and "/hf/transformer/h.1/*" in spec, spec
    assert "replicated work" not in plan.report, plan.report
    assert "all_reduce over tp" in plan.report
    tokens = np.random.default_rng(4).integers(0, VOCAB, size=(8, SEQ + 1))
    np.save(str(tmp_path / "tokens.npy"), tokens)
    run = shoal.train(plan, steps=3, data=str(tmp_path / "tokens.npy"),
                      export_safetensors=str(tmp_path / "trained"), on_line=lambda l: None)
    ref_losses = pytorch_steps(reference, tokens, 3)
    assert rel_diff(run.losses, ref_losses) <= 1e-5, (run.losses, ref_losses)
    loaded = shoal.load_weights(model, str(tmp_path / "trained"))
    assert "hf.lm_head.weight" in loaded and "hf.transformer.wte.weight" in loaded
    assert model.hf.lm_head.weight is model.hf.transformer.wte.weight
    ref = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        a, b = p.detach().numpy(), ref[name].detach().numpy()
        if name.endswith("c_attn.bias"):  # its key third: zero gradient, see above
            assert np.max(np.abs(a - b)) <= 2e-3 * 3, name
            continue
        # 1e-4: Adam's step is about lr * sign(gradient) where the gradient
        # is near zero, so rounding differences there move single elements
        # by up to ~lr (seen: 1.1e-5 on a c_proj weight).
        assert rel_diff(a, b) <= 1e-4, name


@pytest.mark.skipif(not hasattr(torch.onnx, "ONNXProgram"),
                    reason="torch 2's dynamo exporter (scripts/install-deps.sh --torch2)")
def test_dynamo_export_gives_the_same_spec_and_trains_as_pytorch(tmp_path):
    """torch.onnx.export(dynamo=True) names nodes node_*: the spec's names
    come from shoal-compile --list-nodes (rebuilt from the module path
    metadata), and are the TorchScript export's."""
    pytest.importorskip("onnxscript")
    work = str(tmp_path)
    torch.manual_seed(0)
    shoal.config({"pipeline.num_micro_batch": 2}, loss=LOSS, optimizer=ADAMW)
    model = train_gpt.GPT()
    init_weights(model, 0)
    reference = copy.deepcopy(model)
    ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    path = shoal.export(model, (ids,), os.path.join(work, "gpt.onnx"), opset=18,
                        input_names=["input_ids"], output_names=["logits"], dynamo=True)
    plan = shoal.compile(path, world_size=8)
    spec = open(plan.spec).read()
    assert "nodes: [/wte/*, /Add, /h.0/*]" in spec, spec
    assert "nodes: [/h.1/*, /ln_f/*, /lm_head/*]" in spec, spec
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=(4 * BATCH, SEQ + 1))
    np.save(os.path.join(work, "tokens.npy"), tokens)
    run = shoal.train(plan, steps=STEPS, data=os.path.join(work, "tokens.npy"),
                      export_safetensors=os.path.join(work, "trained"), on_line=lambda l: None)
    ref_losses = pytorch_steps(reference, tokens, STEPS)
    assert rel_diff(run.losses, ref_losses) <= 1e-5, (run.losses, ref_losses)
    shoal.load_weights(model, os.path.join(work, "trained"))
    ref = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        if name.endswith("attn.k.bias"):
            continue  # zero gradient in exact arithmetic (see above)
        assert rel_diff(p.detach().numpy(), ref[name].detach().numpy()) <= 1e-5, name


def _working_torchrun():
    """The torchrun next to this Python when it starts workers (torch 2's;
    Debian's torch 1.13 torchrun fails under Python 3.11)."""
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.access(path, os.X_OK):
        return None
    try:
        probe = subprocess.run([path, "--standalone", "--nproc_per_node", "1",
                                "--no-python", "true"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if probe.returncode == 0 else None


@pytest.mark.skipif(_working_torchrun() is None,
                    reason="a working torchrun next to this Python (torch 2 venv)")
def test_train_under_torchrun_equals_mpirun(tmp_path):
    shoal.config(loss={"kind": "cross_entropy", "output": "logits", "labels": "labels"},
                 optimizer=ADAMW)
    _, path = _export_tied(tmp_path)
    plan = shoal.compile(path, world_size=2)
    np.save(str(tmp_path / "tokens.npy"), np.arange(8 * 4).reshape(8, 4) % 10)
    lines = []
    a = shoal.train(plan, steps=3, data=str(tmp_path / "tokens.npy"), on_line=lines.append)
    b = shoal.train(plan, steps=3, data=str(tmp_path / "tokens.npy"), launcher="torchrun",
                    on_line=lambda l: None)
    assert any(l.startswith("step 3/3") for l in lines)
    assert len(a.losses) == 3 and a.losses == b.losses


def _spec_of(module, example, tmp_path, name="m.onnx"):
    import json
    path = shoal.export(module, example, str(tmp_path / name))
    return json.load(open(path + ".shoal.json"))["scopes"]


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        with shoal.split(2, name="s1"):
            self.head = nn.Linear(4, 4)


class CalledByTheRoot(nn.Module):
    """A module called by the root, not by its parent: torch names its
    nodes by its own name (`/head/Gemm`), not its path."""

    def __init__(self):
        super().__init__()
        with shoal.split(2, name="s0"):
            self.emb = nn.Linear(4, 4)
        self.body = Body()

    def forward(self, x):
        return self.body.head(self.emb(x))


def test_modules_called_by_another_module_than_their_parent(tmp_path):
    scopes = _spec_of(CalledByTheRoot(), (torch.zeros(2, 4),), tmp_path)
    assert scopes == [{"split": 2, "name": "s0", "nodes": ["/emb/*"]},
                      {"split": 2, "name": "s1", "nodes": ["/head/*"]}]


class SharedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        with shoal.split(2, name="mlp"):
            self.mlp = nn.Linear(4, 4)

    def forward(self, x):
        return self.mlp(self.pre(x))


class TwiceApplied(nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = SharedBlock()

    def forward(self, x):
        return self.blk(self.blk(x))


def test_a_block_applied_twice_keeps_both_calls_in_their_scope(tmp_path):
    # torch names the second call's nodes /blk/mlp_1/Gemm.
    scopes = _spec_of(TwiceApplied(), (torch.zeros(2, 4),), tmp_path)
    assert scopes == [{"split": 2, "name": "mlp", "nodes": ["/blk/mlp/*", "/blk/mlp_1/*"]}]


class SameNames(nn.Module):
    """Two modules that torch names alike (`/head`, `/head_1`) in two
    scopes: which call made which node cannot be read from the names."""

    def __init__(self):
        super().__init__()
        with shoal.split(2, name="a"):
            self.a = nn.ModuleDict({"head": nn.Linear(4, 4)})
        with shoal.split(2, name="b"):
            self.b = nn.ModuleDict({"head": nn.Linear(4, 4)})

    def forward(self, x):
        return self.b["head"](self.a["head"](x))


def test_modules_the_names_cannot_tell_apart_are_an_error(tmp_path):
    with pytest.raises(shoal.ShoalError, match=r"node /head/Gemm may come from any of "
                                               r"the modules a.head, b.head, which are in "
                                               r"different scopes"):
        shoal.export(SameNames(), (torch.zeros(2, 4),), str(tmp_path / "s.onnx"))


class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        with shoal.replicate(2, name="all"):
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)
        self.a.weight.requires_grad_(False)

    def forward(self, x):
        return self.b(self.a(x))


def test_parameters_without_grad_are_frozen(tmp_path):
    path = shoal.export(Frozen(), (torch.zeros(2, 4),), str(tmp_path / "f.onnx"),
                        input_names=["x"], output_names=["y"])
    shoal.config(loss={"kind": "mse", "output": "y", "labels": "t"}, optimizer=ADAMW)
    plan = shoal.compile(path, world_size=2)
    assert "frozen: [a.weight]" in open(plan.train_config).read()


def test_simulate_predicts_a_step_and_names_a_mismatch(tmp_path):
    shoal.config(loss={"kind": "cross_entropy", "output": "logits", "labels": "labels"},
                 optimizer=ADAMW)
    _, path = _export_tied(tmp_path, batch=4)
    cluster = os.path.join(REPO, "test", "Inputs", "cluster_cpu2.yaml")
    text = shoal.simulate(shoal.compile(path, world_size=2), cluster)
    assert re.search(r"on 2 devices .*: predicted step [0-9.]+ ms", text), text
    with pytest.raises(shoal.ShoalError, match="the plan is for 4 ranks but the cluster "
                                               "has 2 devices"):
        shoal.simulate(shoal.compile(path, world_size=4, out=str(tmp_path / "four.plan")),
                       cluster)
