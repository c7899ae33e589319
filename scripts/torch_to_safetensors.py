#!/usr/bin/python3
"""Converts a torch.save'd state dict (pytorch_model.bin, model.pt) to a
.safetensors file that `shoal-run --init-from` reads (docs/HuggingFace.md).

    scripts/torch_to_safetensors.py IN.bin OUT.safetensors [--key model]

IN is loaded on the CPU (torch.load, map_location="cpu"); when it is not a
mapping of names to tensors, --key K picks IN[K] (e.g. a training
checkpoint's "model" or "state_dict" entry; tried by default when IN has one
of those). Every tensor is written under its name, in its own dtype (float32,
float16, bfloat16, float64, int64, int32, int8, uint8, bool), contiguous; a
tensor shared by two names (tied weights) is written under both. Entries
that are not tensors are skipped with a note. Needs torch only (the file is
written without the safetensors package).
"""

import argparse
import json
import struct
import sys

DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
          "int64": "I64", "int32": "I32", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def state_dict_of(obj, key):
    if key is not None:
        return obj[key]
    if isinstance(obj, dict) and not any(hasattr(v, "shape") for v in obj.values()):
        for k in ("state_dict", "model", "module"):
            if isinstance(obj.get(k), dict):
                return obj[k]
    return obj


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--key", help="the entry of IN that holds the state dict")
    args = ap.parse_args()
    import torch
    sd = state_dict_of(torch.load(args.input, map_location="cpu"), args.key)
    header, blobs, offset = {}, [], 0
    for name in sorted(sd):
        t = sd[name]
        if not isinstance(t, torch.Tensor):
            print("note: %s is a %s, not a tensor: skipped" % (name, type(t).__name__),
                  file=sys.stderr)
            continue
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            sys.exit("error: %s is %s, which safetensors files for shoal do not hold"
                     % (name, dtype))
        t = t.detach().contiguous()
        # bfloat16 has no numpy type: its bits as int16.
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": DTYPES[dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(args.output, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    print("%s: %d tensors, %d bytes of data" % (args.output, len(blobs), offset))


if __name__ == "__main__":
    main()
