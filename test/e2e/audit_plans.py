#!/usr/bin/python3
"""The plan audit (`shoal-run PLAN --backend cuda --comm nccl --audit`,
docs/CUDA.md "Plan audit") on the GPT example's training plans.

    /usr/bin/python3 test/e2e/audit_plans.py --bin BUILD/bin --work DIR [--verbose]

For one rank, DP2 with ZeRO-1 and ZeRO-3, TP2 with sequence parallelism and
PP2, each in float32 and in bf16 (`precision: bf16`): compiles the training
plan, audits it for the CUDA backend with NCCL and prints one line per plan
(ops that would run on the CPU, collectives and transfers through host
buffers), and with --verbose each audit's table. Checks, without a GPU:

- every op of every program is in the audit exactly once (the table's
  counts against the plan's ops, read with protoc's decoder when present);
- matrix products run on the device (cuBLAS) in float32 and in bf16 (the
  f32 kernels take 16-bit operands widened on the device): what the
  kernels' own checks say, not a list kept here;
- `--backend cpu` audits clean (nothing leaves a host device);
- `--strict --audit` exits 1 naming the counts when anything leaves the
  device, `--audit` with `--inputs` is a usage error, and a missing plan is
  an error naming it.

The counts are printed, not fixed: they fall as the CUDA backend gains
kernels (issue 46's "zero host fallbacks" is the end state).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, "train_adamw.yaml")

LAYOUTS = [
    ("1", os.path.join(HERE, "spec_one_rank.yaml"), 1, ""),
    ("dp2-zero1", os.path.join(REPO, "examples", "gpt", "spec_dp.yaml"), 2, "zero: 1\n"),
    ("dp2-zero3", os.path.join(REPO, "examples", "gpt", "spec_dp.yaml"), 2, "zero: 3\n"),
    ("tp2-sp", os.path.join(REPO, "examples", "gpt", "spec_tp_sp.yaml"), 2, ""),
    ("pp2", os.path.join(REPO, "examples", "gpt", "spec_pp2.yaml"), 2, ""),
]
ROW = re.compile(r"^\| (.+?) \| (.+?) \| (\d+) \|$")
TOTALS = re.compile(r"host fallbacks: (\d+); host-staged collectives and transfers: (\d+)")
# Rows the audit adds besides the plan's ops (one op may add one of these).
EXTRA = {"ZeRO weight gather", "clip norm"}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def audit(bin_dir, plan, backend="cuda", comm="nccl", extra=()):
    cmd = [os.path.join(bin_dir, "shoal-run"), plan, "--backend", backend, "--audit"]
    if comm:
        cmd += ["--comm", comm]
    return run(cmd + list(extra))


def parse(text):
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m and m.group(1) != "op":
            rows[(m.group(1), m.group(2))] = int(m.group(3))
    t = TOTALS.search(text)
    if not t:
        raise SystemExit("no totals line in the audit:\n" + text)
    return rows, int(t.group(1)), int(t.group(2))


def plan_op_count(plan):
    """Ops over the plan's programs, one rank of each: None without protoc."""
    protoc = shutil.which("protoc")
    if not protoc:
        return None
    with open(plan, "rb") as f:
        res = subprocess.run([protoc, "--proto_path=" + os.path.join(REPO, "proto"),
                              "--decode=shoal.plan.Plan", "plan.proto"],
                             stdin=f, capture_output=True)
    if res.returncode != 0:
        return None
    # Top-level `programs {` blocks, each with its `ops {` blocks at depth 2.
    depth, count = 0, 0
    for line in res.stdout.decode().splitlines():
        s = line.strip()
        if s.endswith("{"):
            if depth == 1 and s == "ops {":
                count += 1
            depth += 1
        elif s == "}":
            depth -= 1
    return count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with PyTorch, for the example's model")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "model.onnx")
    if not os.path.exists(model):
        subprocess.run([a.python, os.path.join(REPO, "examples", "gpt", "make_model.py"),
                        "--out", a.work], check=True, capture_output=True)
    failures = []
    print("| plan | ops | on the CPU | through host buffers |")
    print("| --- | ---: | ---: | ---: |")
    for name, spec, world, zero in LAYOUTS:
        for precision in ("fp32", "bf16"):
            tag = "%s-%s" % (name, precision)
            train = os.path.join(a.work, tag + ".yaml")
            with open(TRAIN) as f, open(train, "w") as g:
                g.write(f.read() + zero + ("precision: bf16\n" if precision == "bf16" else ""))
            plan = os.path.join(a.work, tag + ".plan")
            res = run([os.path.join(a.bin, "shoal-compile"), model, "--annotate", spec,
                       "--world-size", str(world), "--train", train, "-o", plan])
            if res.returncode != 0:
                failures.append("%s: compile failed: %s" % (tag, res.stderr.strip()[-300:]))
                continue
            res = audit(a.bin, plan)
            if "has no cuda backend" in res.stderr:
                print("skipped: this build has no CUDA backend (SHOAL_ENABLE_CUDA)")
                return 77
            if res.returncode != 0:
                failures.append("%s: --audit exited %d: %s" % (tag, res.returncode,
                                                              res.stderr.strip()))
                continue
            rows, host, staged = parse(res.stdout)
            if a.verbose:
                print(res.stdout)
            ops = sum(n for (kind, _), n in rows.items() if kind not in EXTRA)
            print("| %s | %d | %d | %d |" % (tag, ops, host, staged))
            expected = plan_op_count(plan)
            if expected is not None and ops != expected:
                failures.append("%s: the audit counts %d ops, the plan has %d"
                                % (tag, ops, expected))
            counted = sum(n for (_, where), n in rows.items() if where.startswith("host:"))
            if counted != host:
                failures.append("%s: %d host rows but %d host fallbacks" % (tag, counted, host))
            for kind in ("Gemm", "MatMul"):
                places = {where for (k, where) in rows if k == kind}
                if places and not all(p.startswith("device") for p in places):
                    failures.append("%s: %s %s not on the device: %s"
                                    % (tag, precision, kind, sorted(places)))
            cpu = audit(a.bin, plan, backend="cpu", comm="")
            if cpu.returncode != 0:
                failures.append("%s: --backend cpu --audit exited %d: %s"
                                % (tag, cpu.returncode, cpu.stderr.strip()))
            else:
                _, h, s = parse(cpu.stdout)
                if h or s:
                    failures.append("%s: --backend cpu audit: %d on the CPU, %d staged"
                                    % (tag, h, s))
            if host + staged:
                strict = audit(a.bin, plan, extra=("--strict",))
                if strict.returncode != 1 or "--strict --audit: %d ops" % host not in strict.stderr:
                    failures.append("%s: --strict --audit exited %d: %s"
                                    % (tag, strict.returncode, strict.stderr.strip()))
    # Bad input: clear errors.
    plan = os.path.join(a.work, "1-fp32.plan")
    res = audit(a.bin, plan, extra=("--inputs", a.work))
    if res.returncode != 1 or "--audit runs nothing" not in res.stderr:
        failures.append("--audit --inputs: exit %d, %s" % (res.returncode, res.stderr[:200]))
    missing = os.path.join(a.work, "missing.plan")
    res = audit(a.bin, missing)
    if res.returncode != 1 or "missing.plan" not in res.stderr:
        failures.append("a missing plan: exit %d, %s" % (res.returncode, res.stderr[:200]))
    for f in failures:
        print("FAIL: " + f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
