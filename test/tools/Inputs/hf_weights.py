"""Safetensors files and renamed ONNX models for shoal-run-init-from.test.

    hf_weights.py write MODEL.onnx OUT.safetensors [--drop K] [--extra 1]
        [--dtype bf16|f16|i32] [--reshape NAME] [--select REGEX --sub REPL]
        [--scale X]
    hf_weights.py prefix MODEL.onnx OUT.onnx PREFIX
    hf_weights.py names FILE.safetensors

write: every float initializer of MODEL (sorted by name) as a tensor of the
same name (less the last K with --drop; one more, 'extra.weight', with
--extra; NAME flattened with --reshape; only those whose name matches REGEX,
renamed by re.sub(REGEX, REPL), with --select), times X with --scale.
prefix: MODEL with every initializer renamed PREFIX + name (what the export
of a wrapper module writes). names: the header's tensors, one per line.
"""

import json
import re
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def write(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, a in tensors:
        if dtype == "bf16":
            raw = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
            kind = "BF16"
        elif dtype == "f16":
            raw, kind = a.astype(np.float16).tobytes(), "F16"
        elif dtype == "i32":
            raw, kind = a.astype(np.int32).tobytes(), "I32"
        else:
            raw, kind = a.astype(np.float32).tobytes(), "F32"
        header[name] = {"dtype": kind, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(argv):
    mode = argv[0]
    if mode == "names":
        with open(argv[1], "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name in sorted(k for k in header if k != "__metadata__"):
            print(name, header[name]["dtype"], header[name]["shape"])
        return
    m = onnx.load(argv[1])
    if mode == "prefix":
        prefix = argv[3]
        names = {t.name for t in m.graph.initializer}
        for t in m.graph.initializer:
            t.name = prefix + t.name
        for node in m.graph.node:
            for i, x in enumerate(node.input):
                if x in names:
                    node.input[i] = prefix + x
        onnx.save(m, argv[2])
        return
    opts = dict(zip(argv[3::2], argv[4::2]))
    tensors = sorted((t.name, numpy_helper.to_array(t)) for t in m.graph.initializer
                     if t.data_type == onnx.TensorProto.FLOAT)
    tensors = [(n, a * float(opts.get("--scale", 1))) for n, a in tensors]
    if "--drop" in opts:
        tensors = tensors[:-int(opts["--drop"])]
    if "--reshape" in opts:
        tensors = [(n, a.reshape(-1) if n == opts["--reshape"] else a) for n, a in tensors]
    if "--select" in opts:
        seen, picked = set(), []
        for n, a in tensors:
            if re.fullmatch(opts["--select"], n):
                n = re.sub(opts["--select"], opts["--sub"], n)
                if n not in seen:
                    seen.add(n)
                    picked.append((n, a))
        tensors = picked
    if "--extra" in opts:
        tensors.append(("extra.weight", np.zeros((2, 2), np.float32)))
    write(argv[2], tensors, opts.get("--dtype", "f32"))


if __name__ == "__main__":
    main(sys.argv[1:])
