#!/usr/bin/env python3
"""Text to a Megatron indexed dataset (PREFIX.bin, PREFIX.idx) for
`shoal-run --data PREFIX` (docs/Data.md, "Preprocessing").

Inputs: plain text files (one document per file, or per line with
--lines), JSONL files (.jsonl or .json: one JSON object per line, the
document its --json-key, default "text"), or folders of them (every file,
sorted, recursively). Empty documents are skipped.

Tokens: UTF-8 bytes (ids 0-255; --append-eod adds the id 256), or a local
Hugging Face tokenizer folder (--tokenizer DIR: transformers' AutoTokenizer,
files only, no hub access; --append-eod adds its eos token). The token dtype
is Megatron's choice: uint16 for a vocabulary under 65500 ids, else int32
(uint8 for byte-level tokens without the end-of-document id).

The files are exactly Megatron-Core's IndexedDataset
(megatron/core/datasets/indexed_dataset.py): each document one sequence.

  /usr/bin/python3 scripts/preprocess_data.py --input corpus/ \\
      --output-prefix data/corpus --append-eod
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

INDEX_HEADER = b"MMIDIDX\x00\x00"
# Megatron's DType codes.
DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
               np.float64: 6, np.float32: 7, np.uint16: 8}


def fail(message):
    sys.exit("preprocess_data.py: error: " + message)


def input_files(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(root, n) for n in names
                          if not n.startswith(".")]
            files += sorted(found)
        elif os.path.isfile(path):
            files.append(path)
        else:
            fail("no file or folder %s" % path)
    if not files:
        fail("no input files in %s" % ", ".join(paths))
    return files


def documents(files, key, lines):
    """Yields (text, where) of every document."""
    for path in files:
        jsonl = path.endswith(".jsonl") or path.endswith(".json")
        with open(path, encoding="utf-8") as f:
            if not jsonl and not lines:
                yield f.read(), path
                continue
            for number, line in enumerate(f, 1):
                where = "%s:%d" % (path, number)
                if not jsonl:
                    yield line.rstrip("\r\n"), where
                    continue
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    fail("%s: not JSON: %s" % (where, e))
                if not isinstance(record, dict) or key not in record:
                    fail("%s: no key '%s' (set --json-key)" % (where, key))
                if not isinstance(record[key], str):
                    fail("%s: '%s' is not a string" % (where, key))
                yield record[key], where


class ByteTokenizer:
    """UTF-8 bytes; 256 ends a document."""

    def __init__(self, eod):
        self.vocab_size = 257 if eod else 256
        self.eod = 256 if eod else None

    def encode(self, text):
        return list(text.encode("utf-8"))


class HFTokenizer:
    def __init__(self, folder, eod):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            fail("--tokenizer needs the transformers package (a Python that "
                 "has it, e.g. ~/.cache/shoal-venv/bin/python)")
        if not os.path.isdir(folder):
            fail("--tokenizer %s is no folder (a local tokenizer folder: "
                 "tokenizer.json or vocab files)" % folder)
        try:
            self.tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as e:  # transformers raises many kinds
            fail("cannot load the tokenizer in %s: %s" % (folder, e))
        self.vocab_size = len(self.tok)
        self.eod = None
        if eod:
            self.eod = self.tok.eos_token_id
            if self.eod is None:
                fail("--append-eod: the tokenizer in %s has no eos token" % folder)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False)


def token_dtype(tokenizer):
    if isinstance(tokenizer, ByteTokenizer) and tokenizer.eod is None:
        return np.uint8
    # megatron DType.optimal_dtype(vocab size).
    return np.uint16 if tokenizer.vocab_size < 65500 else np.int32


def write_index(path, dtype, lengths):
    """As Megatron's _IndexWriter: one sequence per document."""
    itemsize = np.dtype(dtype).itemsize
    lengths = np.array(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * itemsize
    doc_indices = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(path, "wb") as f:
        f.write(INDEX_HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_indices)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(doc_indices.tobytes(order="C"))


def main():
    ap = argparse.ArgumentParser(
        description="Text, JSONL or folders of them to a Megatron .bin/.idx "
                    "pair (docs/Data.md).")
    ap.add_argument("--input", nargs="+", required=True,
                    help="text or JSONL files, or folders of them")
    ap.add_argument("--output-prefix", required=True,
                    help="writes PREFIX.bin and PREFIX.idx")
    ap.add_argument("--json-key", default="text",
                    help="the document's key in JSONL records (default text)")
    ap.add_argument("--lines", action="store_true",
                    help="each line of a text file is a document")
    ap.add_argument("--tokenizer", metavar="DIR",
                    help="a local Hugging Face tokenizer folder (default: "
                         "UTF-8 bytes)")
    ap.add_argument("--append-eod", action="store_true",
                    help="end each document with the end-of-document token")
    args = ap.parse_args()

    tokenizer = (HFTokenizer(args.tokenizer, args.append_eod) if args.tokenizer
                 else ByteTokenizer(args.append_eod))
    dtype = token_dtype(tokenizer)
    info = np.iinfo(dtype)
    files = input_files(args.input)
    folder = os.path.dirname(os.path.abspath(args.output_prefix))
    os.makedirs(folder, exist_ok=True)
    lengths, skipped = [], 0
    with open(args.output_prefix + ".bin", "wb") as bin_file:
        for text, where in documents(files, args.json_key, args.lines):
            ids = tokenizer.encode(text)
            if not ids:
                skipped += 1
                continue
            if tokenizer.eod is not None:
                ids = list(ids) + [tokenizer.eod]
            array = np.array(ids, dtype=np.int64)
            if array.min() < info.min or array.max() > info.max:
                fail("%s: token ids outside %s" % (where, np.dtype(dtype).name))
            bin_file.write(array.astype(dtype).tobytes(order="C"))
            lengths.append(len(ids))
    if not lengths:
        fail("no non-empty document in %s" % ", ".join(args.input))
    write_index(args.output_prefix + ".idx", dtype, lengths)
    print("preprocess_data.py: %d documents (%d empty skipped), %d tokens of %s "
          "(vocabulary %d) to %s.bin and .idx" % (
              len(lengths), skipped, sum(lengths), np.dtype(dtype).name,
              tokenizer.vocab_size, args.output_prefix))


if __name__ == "__main__":
    main()
