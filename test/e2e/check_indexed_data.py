#!/usr/bin/env python3
"""What shoal-run's --data feeds at each step, against docs/Data.md.

Writes Megatron indexed datasets (.bin/.idx) with this file's own writer,
which follows the layout of Megatron-Core's IndexedDatasetBuilder and
_IndexWriter (megatron/core/datasets/indexed_dataset.py), runs
shoal-data-dump (unittests/Runtime/DataDump.cpp: it opens --data as
shoal-run does and prints the token input and labels of each step) and
compares every step with this file's own implementation of docs/Data.md:
splitmix64 streams, per-epoch sequence and sample shuffles, overlapping
samples of T + 1 tokens, the greedy blend. Also: the .npy token rows
(uint16, uint32) and their N < B error, the errors of bad indexed data,
and scripts/preprocess_data.py's output read back.

Needs numpy only:
  check_indexed_data.py --bin build/bin --work /tmp/w
  check_indexed_data.py --write PREFIX [--dtype uint16 --vocab 96 ...]
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

# Megatron's DType enum (indexed_dataset.py).
CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
         np.float64: 6, np.float32: 7, np.uint16: 8}


# --- An independent writer of Megatron's layout ---------------------------

def write_megatron(prefix, documents, dtype, modes=False, code=None):
    """documents: a list of documents, each a list of sequences (lists of
    token ids). As IndexedDatasetBuilder.add_document + finalize."""
    lengths, doc_indices = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(np.array(seq, dtype=dtype).tobytes(order="C"))
                lengths.append(len(seq))
            doc_indices.append(len(lengths))
    itemsize = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) \
        * itemsize if lengths else np.zeros(0, np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code if code is not None else CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_indices)))
        f.write(np.array(lengths, dtype=np.int32).tobytes(order="C"))
        f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
        f.write(np.array(doc_indices, dtype=np.int64).tobytes(order="C"))
        if modes:
            f.write(np.zeros(len(lengths), dtype=np.int8).tobytes(order="C"))
    return [seq for doc in documents for seq in doc]


def read_megatron(prefix):
    """As _IndexReader: the sequences of a .bin/.idx pair."""
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    assert raw[:9] == b"MMIDIDX\x00\x00", prefix
    assert struct.unpack("<Q", raw[9:17])[0] == 1
    code = raw[17]
    dtype = {v: k for k, v in CODES.items()}[code]
    s, d = struct.unpack("<QQ", raw[18:34])
    lengths = np.frombuffer(raw, np.int32, s, 34)
    pointers = np.frombuffer(raw, np.int64, s, 34 + 4 * s)
    docs = np.frombuffer(raw, np.int64, d, 34 + 12 * s)
    assert len(raw) == 34 + 12 * s + 8 * d, prefix
    data = np.fromfile(prefix + ".bin", dtype=np.uint8)
    seqs = [np.frombuffer(data, dtype, int(n), int(p)).tolist()
            for n, p in zip(lengths, pointers)]
    return dtype, seqs, docs.tolist()


# --- docs/Data.md ---------------------------------------------------------

def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class Stream:
    def __init__(self, seed, d, e, p):
        h = seed & MASK
        for w in (d, e, p):
            h = mix((h + GOLDEN * (w + 1)) & MASK)
        self.state = h

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        return mix(self.state)


def permutation(n, stream):
    a = list(range(n))
    for i in range(n - 1, 0, -1):
        j = stream.next() % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a


class Dataset:
    def __init__(self, seqs, T, seed, d):
        self.seqs, self.T, self.seed, self.d = seqs, T, seed, d
        self.L = sum(len(s) for s in seqs)
        assert self.L >= T + 1
        self.n = (self.L - 1) // T
        self.epochs = {}

    def epoch(self, e):
        if e not in self.epochs:
            order = permutation(len(self.seqs), Stream(self.seed, self.d, e, 0))
            concat = [t for i in order for t in self.seqs[i]]
            samples = permutation(self.n, Stream(self.seed, self.d, e, 1))
            self.epochs[e] = (concat, samples)
        return self.epochs[e]

    def sample(self, k):
        concat, order = self.epoch(k // self.n)
        c = order[k % self.n]
        return concat[c * self.T: c * self.T + self.T + 1]


def blend_sources(weights, count):
    total = 0.0
    for w in weights:
        total += w
    w = [x / total for x in weights]
    counts = [0] * len(w)
    out = []
    for k in range(count):
        best, best_error = 0, None
        for d in range(len(w)):
            error = w[d] * float(k + 1) - float(counts[d])
            if best_error is None or error > best_error:
                best, best_error = d, error
        out.append((best, counts[best]))
        counts[best] += 1
    return out


def expected_steps(datasets, weights, B, steps):
    """Each step's (token rows, label rows, sources) by docs/Data.md."""
    n = B * steps
    sources = blend_sources(weights, n) if weights else [(0, k) for k in range(n)]
    out = []
    for s in range(steps):
        rows = [datasets[d].sample(own) for d, own in sources[s * B:(s + 1) * B]]
        out.append(([r[:-1] for r in rows], [r[1:] for r in rows],
                    [list(x) for x in sources[s * B:(s + 1) * B]]))
    return out


# --- Running shoal-data-dump ----------------------------------------------

class Checker:
    def __init__(self, bin_dir):
        self.tool = os.path.join(bin_dir, "shoal-data-dump")
        self.failures = 0

    def run(self, spec, B, T, steps, seed=None, dtype=None, flag=None,
            start=0):
        cmd = [self.tool, "--data", spec, "--batch", str(B), "--seq", str(T),
               "--steps", str(steps), "--from", str(start)]
        if seed is not None:
            cmd += ["--seed", str(seed)]
        if dtype:
            cmd += ["--dtype", dtype]
        if flag:
            cmd += ["--flag", flag]
        return subprocess.run(cmd, capture_output=True, text=True)

    def check(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
        if not ok:
            self.failures += 1

    def dump(self, spec, B, T, steps, **kw):
        r = self.run(spec, B, T, steps, **kw)
        if r.returncode != 0:
            raise SystemExit("shoal-data-dump failed:\n" + r.stderr)
        return json.loads(r.stdout)["steps"]

    def compare(self, what, spec, seqs_list, weights, B, T, steps, seed=1234,
                dtype=None):
        got = self.dump(spec, B, T, steps, seed=seed, dtype=dtype)
        datasets = [Dataset(seqs, T, seed, d) for d, seqs in enumerate(seqs_list)]
        want = expected_steps(datasets, weights, B, steps)
        bad = [s for s in range(steps)
               if (got[s]["tokens"], got[s]["labels"], got[s]["sources"])
               != want[s]]
        epochs = max(own for _, _, src in want for _, own in src) // \
            min(d.n for d in datasets)
        self.check("%s: %d steps (B %d, T %d, %d+ epochs, %s)" % (
            what, steps, B, T, epochs + 1,
            ", ".join("%d samples/epoch" % d.n for d in datasets)),
            not bad, "first differing step %s: got %s, want %s" % (
                bad[0], got[bad[0]], want[bad[0]]) if bad else "")
        return epochs

    def error(self, what, spec, B, T, expected, **kw):
        r = self.run(spec, B, T, 1, **kw)
        self.check(what, r.returncode == 1 and expected in r.stderr,
                   "rc %d, stderr %r, expected %r" % (r.returncode, r.stderr,
                                                      expected))


def random_documents(rng, count, max_seqs, max_len, vocab):
    docs = []
    for _ in range(count):
        doc = []
        for _ in range(int(rng.integers(1, max_seqs + 1))):
            doc.append(rng.integers(0, vocab, int(rng.integers(0, max_len + 1))).tolist())
        docs.append(doc)
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--work")
    # Only write one random dataset (for test/tools/shoal-run-indexed-data.test).
    ap.add_argument("--write", metavar="PREFIX")
    ap.add_argument("--dtype", default="uint16")
    ap.add_argument("--vocab", type=int, default=96)
    ap.add_argument("--documents", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hf-python", default=os.path.expanduser(
        "~/.cache/shoal-venv/bin/python"),
        help="a Python with transformers, for preprocess_data.py --tokenizer")
    args = ap.parse_args()
    if args.write:
        rng = np.random.default_rng(args.seed)
        dtype = getattr(np, args.dtype)
        write_megatron(args.write, random_documents(rng, args.documents, 2, 40,
                                                    args.vocab), dtype)
        return 0
    if not args.bin or not args.work:
        ap.error("needs --bin and --work (or --write)")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    w = lambda name: os.path.join(args.work, name)
    c = Checker(args.bin)
    rng = np.random.default_rng(0)

    # uint16, several sequences per document, empty sequences among them.
    a = write_megatron(w("a"), random_documents(rng, 23, 3, 30, 60000), np.uint16)
    # int32, one sequence per document, ids over uint16's range.
    b = write_megatron(w("b"), [[s] for s in rng.integers(0, 1 << 30, (9, 17)).tolist()],
                       np.int32)
    # uint8 with the multimodal modes at the end of the index.
    m = write_megatron(w("m"), random_documents(rng, 5, 2, 12, 256), np.uint8, modes=True)

    epochs = c.compare("one uint16 dataset", w("a"), [a], None, 4, 16, 40)
    c.check("the single dataset run reaches a second epoch", epochs >= 1,
            "only epoch 0")
    c.compare("the same by its .bin path, another seed", w("a") + ".bin", [a],
              None, 3, 7, 30, seed=99)
    c.compare("by its .idx path, int32 inputs", w("a") + ".idx", [a], None, 2, 5,
              10, seed=5, dtype="i32")
    c.compare("int32 tokens", w("b"), [b], None, 3, 8, 30, seed=7)
    c.compare("uint8 with modes", w("m"), [m], None, 2, 4, 20, seed=3)
    epochs = c.compare("a blend of two (0.3, 0.7)", "0.3 %s 0.7 %s" % (w("a"), w("b")),
                       [a, b], [0.3, 0.7], 4, 8, 40, seed=11)
    c.check("the blend reaches a second epoch of a dataset", epochs >= 1,
            "only epoch 0")
    c.compare("a blend of three, newlines and a zero weight",
              "2 %s\n0 %s\t1.5 %s" % (w("b"), w("m"), w("a")), [b, m, a],
              [2.0, 0.0, 1.5], 5, 6, 20, seed=0)

    # A resumed run (a fresh process from step s) reads the same samples:
    # steps are independent of what was read before.
    for spec in (w("a"), "0.3 %s 0.7 %s" % (w("a"), w("b"))):
        full = c.dump(spec, 4, 8, 12)
        tail = c.dump(spec, 4, 8, 4, start=8)
        c.check("steps 8-11 of %s read alone are those of steps 0-11" % spec,
                full[8:] == tail)

    # .npy token rows: uint16 and uint32, (s * B + i) mod N.
    for dtype in (np.uint16, np.uint32, np.int32, np.int64):
        rows = rng.integers(0, 50000, (7, 6)).astype(dtype)
        path = w("rows_%s.npy" % np.dtype(dtype).name)
        np.save(path, rows)
        got = c.dump(path, 3, 5, 5)
        want = [[rows[(s * 3 + i) % 7].tolist() for i in range(3)] for s in range(5)]
        c.check(".npy %s token rows" % np.dtype(dtype).name,
                [g["tokens"] for g in got] == [[r[:5] for r in x] for x in want] and
                [g["labels"] for g in got] == [[r[1:] for r in x] for x in want])
    big = np.array([[1, 2, 3], [4, 5, 0xFFFFFFFF]], dtype=np.uint32)
    np.save(w("big.npy"), big)
    c.error("uint32 id over int32", w("big.npy"), 2, 2,
            "--data %s: token 4294967295 at row 1, column 2 does not fit the "
            "labels 'labels' (i32[2, 2])" % w("big.npy"), dtype="i32")
    c.error(".npy N < B", w("rows_uint16.npy"), 8, 5,
            "error: --data %s holds N = 7 token rows, fewer than the batch B = 8 "
            "of the token input 'tokens' (i64[8, 5]): every step would repeat "
            "rows; give at least 8 rows" % w("rows_uint16.npy"))
    os.makedirs(w("dir"))
    np.save(w("dir/tokens.npy"), np.zeros((5, 4), np.int64))
    np.save(w("dir/labels.npy"), np.zeros((5, 4), np.int64))
    c.error("DIR N < B", w("dir"), 6, 4,
            "error: --data %s: %s holds N = 5 samples, fewer than the batch "
            "B = 6 of the input 'tokens' (i64[6, 4]): every step would repeat "
            "samples; give at least 6" % (w("dir"), w("dir/tokens.npy")))
    c.error(".npy wrong width, the flag named", w("rows_uint32.npy"), 2, 4,
            "error: --eval-data %s is u32[7, 6]; expected an int32 or int64 "
            "array [N, 5] of token rows" % w("rows_uint32.npy"), flag="--eval-data")

    # Bad indexed data.
    write_megatron(w("f"), [[[1.0, 2.0, 3.0]]], np.float32)
    c.error("float32 tokens", w("f"), 1, 2,
            "--data %s: %s.idx: the tokens are float32 (dtype code 7)" % (w("f"), w("f")))
    write_megatron(w("neg"), [[[1, 2]], [[3, -4, 5]]], np.int16)
    c.error("a negative token", w("neg"), 1, 4,
            "--data %s: %s.bin: token -4 at position 1 of sequence 1 (document 1) "
            "is negative" % (w("neg"), w("neg")))
    write_megatron(w("wide"), [[[1, 2, 1 << 40]]], np.int64)
    c.error("an int64 token over an int32 input", w("wide"), 1, 2,
            "token 1099511627776 at position 2 of sequence 0 (document 0) does "
            "not fit the token input's int32", dtype="i32")
    c.error("too short", w("neg"), 1, 5,
            "%s holds 5 tokens in 2 sequences; a sample takes T + 1 = 6 tokens"
            % w("neg"))
    with open(w("a.idx"), "rb") as f:
        raw = f.read()
    shutil.copy(w("a.bin"), w("cut.bin"))
    with open(w("cut.idx"), "wb") as f:
        f.write(raw[:100])
    c.error("a truncated index", w("cut"), 1, 2, "%s.idx: truncated Megatron index"
            % w("cut"))
    with open(w("cut.bin"), "r+b") as f:
        f.truncate(10)
    shutil.copy(w("a.idx"), w("cut.idx"))
    c.error("a .bin too short", w("cut"), 1, 2, "ends past the end of %s.bin"
            % w("cut"))
    c.error("odd blend", "1 %s 2" % w("a"), 1, 2, "3 words; a blend is "
            "weight-prefix pairs")
    c.error("negative weight", "1 %s -1 %s" % (w("a"), w("b")), 1, 2,
            "the weight -1 of %s is negative" % w("b"))
    c.error("zero weights", "0 %s 0 %s" % (w("a"), w("b")), 1, 2,
            "the weights sum to 0")

    # scripts/preprocess_data.py, byte-level, read back with the reader above.
    os.makedirs(w("corpus/sub"))
    texts = {"corpus/one.txt": "Hello, world.\n", "corpus/sub/two.txt": "Zwei\u00e4\n",
             "corpus/empty.txt": ""}
    for name, text in texts.items():
        with open(w(name), "w", encoding="utf-8") as f:
            f.write(text)
    with open(w("docs.jsonl"), "w") as f:
        for t in ["first doc", "", "third \u2603"]:
            f.write(json.dumps({"body": t, "id": 1}) + "\n")
    pre = os.path.join(ROOT, "scripts", "preprocess_data.py")
    for name, what, cmd, want_dtype, want_docs in [
            ("pre_dir", "folder, byte-level", ["--input", w("corpus")], np.uint8,
             [b"Hello, world.\n", "Zwei\u00e4\n".encode()]),
            ("pre_jsonl", "JSONL with --json-key and --append-eod",
             ["--input", w("docs.jsonl"), "--json-key", "body", "--append-eod"],
             np.uint16, [b"first doc", "third \u2603".encode()]),
            ("pre_lines", "text lines", ["--input", w("corpus/one.txt"), w("corpus/sub/two.txt"),
                            "--lines"], np.uint8,
             [b"Hello, world.", "Zwei\u00e4".encode()])]:
        out = w(name)
        r = subprocess.run([sys.executable, pre, "--output-prefix", out] + cmd,
                           capture_output=True, text=True)
        if r.returncode != 0:
            c.check("preprocess_data.py " + what, False, r.stderr)
            continue
        dtype, seqs, docs = read_megatron(out)
        eod = [256] if "--append-eod" in cmd else []
        c.check("preprocess_data.py " + what, dtype == want_dtype and
                seqs == [list(d) + eod for d in want_docs] and
                docs == list(range(len(want_docs) + 1)),
                "got %s %s %s" % (dtype, seqs, docs))
    c.compare("preprocessed data through --data", w("pre_jsonl"),
              [read_megatron(w("pre_jsonl"))[1]], None, 2, 3, 6)

    # --tokenizer: a tiny BPE tokenizer folder made here, where a Python
    # with transformers is at hand.
    if args.hf_python and os.path.exists(args.hf_python):
        make = (
            "import sys, json\n"
            "from tokenizers import Tokenizer, models, trainers, pre_tokenizers\n"
            "from transformers import PreTrainedTokenizerFast\n"
            "t = Tokenizer(models.BPE(unk_token='<unk>'))\n"
            "t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)\n"
            "t.train_from_iterator(['hello world, the quick brown fox'] * 20,\n"
            "    trainers.BpeTrainer(vocab_size=300, special_tokens=['<unk>', '<eos>']))\n"
            "f = PreTrainedTokenizerFast(tokenizer_object=t, eos_token='<eos>', unk_token='<unk>')\n"
            "f.save_pretrained(sys.argv[1])\n"
            "print(json.dumps([f.encode(x, add_special_tokens=False) + [f.eos_token_id]\n"
            "                  for x in sys.argv[2:]]))\n")
        docs = ["hello fox", "the world, quick"]
        r = subprocess.run([args.hf_python, "-c", make, w("tok")] + docs,
                           capture_output=True, text=True)
        if r.returncode != 0:
            c.check("a tokenizer folder made", False, r.stderr)
        else:
            want = json.loads(r.stdout.strip().splitlines()[-1])
            with open(w("hf.jsonl"), "w") as f:
                for d in docs:
                    f.write(json.dumps({"text": d}) + "\n")
            r = subprocess.run([args.hf_python, pre, "--input", w("hf.jsonl"),
                                "--tokenizer", w("tok"), "--append-eod",
                                "--output-prefix", w("pre_hf")],
                               capture_output=True, text=True)
            ok = r.returncode == 0
            if ok:
                dtype, seqs, docs_idx = read_megatron(w("pre_hf"))
                ok = dtype == np.uint16 and seqs == want
            c.check("preprocess_data.py --tokenizer", ok,
                    r.stderr if r.returncode else "got %s, want %s" % (seqs, want))
    else:
        print("skip preprocess_data.py --tokenizer (no --hf-python with "
              "transformers)")

    print("%d failures" % c.failures)
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
