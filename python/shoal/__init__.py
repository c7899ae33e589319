"""shoal from Python: annotate a PyTorch model with the two primitives,
compile, train, and get the weights back (docs/Python.md).

    import shoal
    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            with shoal.split(2, name="stage0"):
                self.wte = nn.Embedding(V, C)
                ...
    shoal.config(pipeline={"num_micro_batch": 2},
                 loss={"kind": "cross_entropy", "output": "logits", "labels": "labels"},
                 optimizer={"kind": "adamw", "lr": 1e-3})
    model = GPT()
    shoal.export(model, (ids,), "work/gpt.onnx", input_names=["input_ids"],
                 output_names=["logits"])
    plan = shoal.compile("work/gpt.onnx", world_size=8)
    run = shoal.train(plan, steps=10, data="tokens.npy",
                      export_safetensors="work/trained")
    shoal.load_weights(model, "work/trained")

The package writes the annotation spec and the training config and runs
shoal-compile, shoal-sim and shoal-run; it holds no compiler logic.
"""

from .errors import ShoalError
from .onnx_export import export
from .scopes import config, replicate, reset, split
from .tools import CompileResult, TrainResult, compile, launch_command, simulate, train
from .weights import load_weights, read_weights

__all__ = ["ShoalError", "replicate", "split", "config", "reset", "export",
           "compile", "simulate", "train", "load_weights", "read_weights",
           "CompileResult", "TrainResult", "launch_command"]
