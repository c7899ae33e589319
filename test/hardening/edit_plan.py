#!/usr/bin/python3
"""Hand-edits a plan the way a user (or a bad disk) might: decodes IN with
protoc into protobuf text, replaces text, encodes OUT.

  edit_plan.py PROTO_DIR IN OUT [--after TEXT] OLD NEW [OLD NEW ...] [--all]
               [--keep-fingerprint]

Each OLD is replaced by NEW once (every time with --all), at its first
occurrence after TEXT (the start of the file without --after); a missing
OLD is an error, so that an edit cannot silently do nothing. The plan's
fingerprint of its contents (content_sha256) is dropped, as in a
hand-written plan, so that the runtime's other checks are what the edit
meets; with --keep-fingerprint it stays (and no longer matches)."""
import re
import subprocess
import sys

args = sys.argv[1:]
proto_dir, src, dst = args[:3]
args = args[3:]
every = "--all" in args
keep = "--keep-fingerprint" in args
args = [a for a in args if a not in ("--all", "--keep-fingerprint")]
start_text = None
if args and args[0] == "--after":
    start_text, args = args[1], args[2:]
if not args or len(args) % 2:
    sys.exit("edit_plan.py: give OLD NEW pairs")
decode = ["protoc", f"--proto_path={proto_dir}", "plan.proto"]
with open(src, "rb") as f:
    text = subprocess.run(decode + ["--decode=shoal.plan.Plan"], stdin=f,
                          capture_output=True, check=True).stdout.decode()
start = 0
if start_text is not None:
    start = text.index(start_text)
if not keep:
    text = re.sub(r"(?m)^content_sha256: .*\n", "", text)
    start = text.index(start_text) if start_text is not None else 0
head, tail = text[:start], text[start:]
for old, new in zip(args[::2], args[1::2]):
    old, new = old.encode().decode("unicode_escape"), \
        new.encode().decode("unicode_escape")
    if old not in tail:
        sys.exit(f"edit_plan.py: '{old}' not found")
    tail = tail.replace(old, new, -1 if every else 1)
with open(dst, "wb") as f:
    f.write(subprocess.run(decode + ["--encode=shoal.plan.Plan"],
                           input=(head + tail).encode(), capture_output=True,
                           check=True).stdout)
