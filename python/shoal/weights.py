"""shoal.load_weights: a trained model's weights back into the module."""

import json
import os
import struct

import numpy as np

from .errors import ShoalError

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
           "I64": np.int64, "I32": np.int32, "I8": np.int8, "U8": np.uint8,
           "BOOL": np.bool_}


def _read_safetensors(path):
    """The tensors of a .safetensors file, by name (safetensors' own reader
    when it is installed; the format is an 8-byte header length, a JSON
    header, then the data)."""
    try:
        from safetensors.numpy import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ShoalError("%s is not a safetensors file (too short)" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ShoalError("%s is not a safetensors file: %s" % (path, e)) from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ShoalError("%s: %s is %s, which load_weights does not read"
                             % (path, name, info["dtype"]))
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end],
                                  dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def _read_onnx(path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path, load_external_data=True)
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def read_weights(source):
    """The tensors of a trained model: a folder or file that shoal-run's
    --export-safetensors wrote, or its --export-onnx model."""
    source = os.fspath(source)
    if os.path.isdir(source):
        if os.path.exists(os.path.join(source, "manifest.json")) or \
                any(d.startswith("step-") for d in os.listdir(source)):
            raise ShoalError(
                "%s is a checkpoint (shards per rank): export the weights with "
                "shoal.train(..., export_safetensors=DIR) or shoal-run --resume "
                "CK --export-safetensors DIR, and load DIR" % source)
        path = os.path.join(source, "model.safetensors")
        if not os.path.exists(path):
            raise ShoalError("%s holds no model.safetensors" % source)
        return _read_safetensors(path)
    if not os.path.exists(source):
        raise ShoalError("%s does not exist" % source)
    if source.endswith(".onnx"):
        return _read_onnx(source)
    return _read_safetensors(source)


def load_weights(module, source, strict=True):
    """Copies the trained weights of `source` (see read_weights) into
    `module`'s parameters and buffers, by their state_dict names (the
    names shoal.export gives the initializers); tied weights, which the
    export keeps once, are loaded once. Returns the names loaded. A
    parameter the file lacks, or a shape that differs, is an error; so is,
    with `strict` (as torch's load_state_dict), a tensor of a safetensors
    export that the module does not have (an ONNX model's initializers
    also hold the graph's constants, which are not the module's)."""
    import torch

    tensors = read_weights(source)
    state = module.state_dict(keep_vars=True)
    groups = {}
    for name, t in state.items():
        groups.setdefault(id(t), []).append(name)
    params = {id(p) for p in module.parameters()}
    if strict and not os.fspath(source).endswith(".onnx"):
        extra = sorted(n for n in tensors if n not in state)
        if extra:
            raise ShoalError(
                "%s holds %s, which %s has no parameter or buffer of that name "
                "(strict=False loads the rest)"
                % (source, ", ".join(extra[:8]) + (", ..." if len(extra) > 8 else ""),
                   type(module).__name__))
    loaded = []
    with torch.no_grad():
        for key, names in groups.items():
            name = next((n for n in names if n in tensors), None)
            t = state[names[0]]
            if name is None:
                if key in params and t.requires_grad:
                    raise ShoalError(
                        "%s has no weight for %s (it has %s%s)"
                        % (source, " = ".join(names), ", ".join(sorted(tensors)[:8]),
                           ", ..." if len(tensors) > 8 else ""))
                continue
            value = torch.from_numpy(np.array(tensors[name]))
            if tuple(value.shape) != tuple(t.shape):
                raise ShoalError("%s: %s is %s in the file but %s in the module"
                                 % (source, name, list(value.shape), list(t.shape)))
            t.copy_(value.to(t.dtype))
            loaded += names
    return loaded
