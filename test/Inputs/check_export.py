"""Checks what shoal-run --export-onnx and --export-safetensors wrote.

    check_export.py MODEL.onnx MODEL.safetensors CHECKPOINT_STEP_DIR SOURCE.onnx

Reads the files with onnx and numpy only (no onnxruntime or safetensors
package: shoal-run-export.test runs under /usr/bin/python3), against a
one-rank checkpoint of the same step (one shard per tensor) and the source
model: the exported graph's inputs, outputs and nodes are the source's;
each initializer that the checkpoint holds has its value, the others the
source's; initializers of 1024 bytes or more are in the external data
file; the safetensors header is padded with spaces to a multiple of 8, its
tensors tile the data in order and equal the exported model's. Prints
summary lines for FileCheck; exits 1 with the reason on a mismatch.
"""

import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_checkpoint(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        man = json.load(f)
    out = {}
    for name, t in man["tensors"].items():
        if len(t["shards"]) != 1:
            fail("%s has %d shards (a one-rank checkpoint has one)" % (name, len(t["shards"])))
        out[name] = np.load(os.path.join(folder, t["shards"][0]["file"]))
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8 or len(data) < 8 + n:
        fail("header length %d (file of %d bytes)" % (n, len(data)))
    text = data[8:8 + n].decode("utf-8")
    if not text.rstrip(" ").endswith("}"):
        fail("the header is not a JSON object padded with spaces: %r" % text[-16:])
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    end = 0
    tensors = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = t["data_offsets"]
        if b != end:
            fail("%s starts at %d, the previous tensor ends at %d" % (name, b, end))
        dtype = np.dtype(DTYPES[t["dtype"]])
        a = np.frombuffer(body[b:e], dtype=dtype)
        if a.size != int(np.prod(t["shape"], dtype=np.int64)):
            fail("%s: %d bytes for shape %s" % (name, e - b, t["shape"]))
        tensors[name] = a.reshape(t["shape"])
        end = e
    if end != len(body):
        fail("the tensors end at %d, the data at %d" % (end, len(body)))
    return tensors, meta


def main(model_path, st_path, ckpt_dir, source_path):
    ckpt = read_checkpoint(ckpt_dir)
    source = onnx.load(source_path)
    initial = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer}
    model = onnx.load(model_path)
    raw = onnx.load(model_path, load_external_data=False)
    if [n.op_type for n in model.graph.node] != [n.op_type for n in source.graph.node]:
        fail("the exported graph's nodes are not the source's")
    print("onnx: inputs %s outputs %s metadata %s" % (
        [i.name for i in model.graph.input], [o.name for o in model.graph.output],
        {p.key: p.value for p in model.metadata_props}))
    exported = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if sorted(exported) != sorted(initial):
        fail("initializers %s, the source has %s" % (sorted(exported), sorted(initial)))
    trained = frozen = external = 0
    location = os.path.basename(model_path) + ".data"
    for t in raw.graph.initializer:
        is_ext = t.data_location == onnx.TensorProto.EXTERNAL
        if is_ext != (initial[t.name].nbytes >= 1024):
            fail("%s (%d bytes) external: %s" % (t.name, initial[t.name].nbytes, is_ext))
        if is_ext:
            entries = {e.key: e.value for e in t.external_data}
            if entries.get("location") != location:
                fail("%s: external data %s" % (t.name, entries))
            external += 1
    for name, a in exported.items():
        if name not in ckpt:
            fail("the checkpoint has no %s" % name)
        if a.dtype != ckpt[name].dtype or not np.array_equal(a, ckpt[name]):
            fail("%s differs from the checkpoint's" % name)
        if np.array_equal(a, initial[name]):
            frozen += 1
        else:
            trained += 1
    print("onnx: %d initializers, %d external, %d trained equal to the checkpoint, "
          "%d frozen unchanged" % (len(exported), external, trained, frozen))
    st, meta = read_safetensors(st_path)
    if sorted(st) != sorted(exported):
        fail("safetensors names %s, the model's %s" % (sorted(st), sorted(exported)))
    for name, a in st.items():
        if a.dtype != exported[name].dtype or not np.array_equal(a, exported[name]):
            fail("safetensors %s differs from the exported model's" % name)
    print("safetensors: %d tensors equal to the exported model's, header padded, "
          "metadata %s" % (len(st), dict(sorted(meta.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
