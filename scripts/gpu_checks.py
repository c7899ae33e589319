#!/usr/bin/python3
"""The GPU checks (ctest label cuda-gpu, and bench/gpt_cuda.py) on a machine
that has a GPU but not the compiler.

A GPU machine of this project's workplace has CUDA, PyTorch and Python, but no
MLIR, OpenMPI, protobuf or OpenBLAS. So the work is split in two:

    # here, on the build machine (has MLIR; the build has SHOAL_ENABLE_CUDA=ON)
    /usr/bin/python3 scripts/gpu_checks.py prepare --bin build/bin --out .gpu
    # there, in a copy of the checkout that has .gpu/ (any Python with torch)
    python3 scripts/gpu_checks.py run --dir .gpu --out RESULTS_DIR

`prepare` copies shoal-run and the CUDA kernel tests with the shared
libraries they need that a CUDA machine lacks (not glibc, not CUDA's own),
and, for every test of the label cuda-gpu, runs its command (read from
`ctest --show-only=json-v1`) with `--phase prepare`: the model, inputs,
PyTorch reference and compiled plans land in .gpu/work/TEST. It also compiles
the plans of bench/gpt_cuda.py (full size and --small).

`run` runs the kernel tests, then each test's command with `--phase run`
(N-rank runs started as torchrun does, `--launch env`: no MPI there), then
the benchmark, and prints a table of results; logs go to RESULTS_DIR.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Libraries a CUDA machine has itself (glibc's, the compiler runtime's and
# CUDA's): never copied.
SYSTEM_LIBS = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so",
               "ld-linux", "linux-vdso", "libstdc++.so", "libgcc_s.so",
               "libcuda.so", "libcudart.so", "libcublas.so", "libcublasLt.so",
               "libnccl.so", "libcudnn")
BINARIES = ("shoal-run", "shoal-cuda-kernels-tests")


def sh(argv, **kw):
    print("$ " + " ".join(str(a) for a in argv), flush=True)
    return subprocess.run([str(a) for a in argv], **kw)


def needed_libs(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            name = parts[0]
            if not name.startswith(SYSTEM_LIBS):
                libs[name] = os.path.realpath(parts[2])
    return libs


def relocate(argv):
    """A ctest command without its interpreter, --bin, --work and --mpirun
    (the caller gives its own), paths made relative to the checkout."""
    out = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("--bin", "--work", "--mpirun"):
            skip = True
            continue
        if i == 0:  # the interpreter
            continue
        out.append(os.path.relpath(a, REPO) if a.startswith(REPO + "/") else a)
    return out


def prepare(args):
    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "bin"))
    os.makedirs(os.path.join(out, "lib"))
    libs = {}
    for b in BINARIES:
        src = os.path.join(args.bin, b)
        if not os.path.isfile(src):
            sys.exit("%s is missing: build with CUDA (SHOAL_ENABLE_CUDA=ON)" % src)
        shutil.copy2(src, os.path.join(out, "bin", b))
        libs.update(needed_libs(src))
    # The CUDA backend is a module that shoal-run loads from ../lib.
    module = os.path.join(os.path.dirname(os.path.abspath(args.bin)), "lib",
                          "libshoal_cuda_backend.so")
    if not os.path.isfile(module):
        sys.exit("%s is missing: build with CUDA (SHOAL_ENABLE_CUDA=ON)" % module)
    libs.update(needed_libs(module))
    libs[os.path.basename(module)] = module
    for name, path in sorted(libs.items()):
        shutil.copy2(path, os.path.join(out, "lib", name))
    sh(["strip", "--strip-unneeded"] + [os.path.join(out, "lib", n) for n in libs]
       + [os.path.join(out, "bin", b) for b in BINARIES], check=True)

    # Packed: OpenBLAS alone is 35 MiB (every CPU's kernels), and the device
    # tool carries 64 MiB at most.
    sh(["tar", "cJf", os.path.join(out, "lib.tar.xz"), "-C", out, "lib"], check=True)
    shutil.rmtree(os.path.join(out, "lib"))

    build = os.path.dirname(os.path.abspath(args.bin))
    listing = subprocess.run(["ctest", "--test-dir", build, "-L", "cuda-gpu",
                              "--show-only=json-v1"], capture_output=True, text=True,
                             check=True).stdout
    tests = []
    for t in json.loads(listing)["tests"]:
        cmd = t["command"]
        if not cmd[0].endswith("python3"):
            continue  # the kernel tests: a binary, run as it is
        argv = relocate(cmd)
        work = os.path.join(out, "work", t["name"])
        world = int(argv[argv.index("--world-size") + 1])
        launch = ["--launch", "env"] if world > 1 else []
        res = sh([sys.executable] + argv + ["--bin", args.bin, "--work", work,
                                            "--phase", "prepare"] + launch,
                 cwd=REPO, capture_output=True, text=True)
        if res.returncode != 0:
            sys.stdout.write(res.stdout + res.stderr)
            sys.exit("prepare of %s failed" % t["name"])
        # The test's ENVIRONMENT property (SHOAL_FILL_UNINITIALIZED=1), which
        # ctest would set and the run below sets the same way.
        test_env = {}
        for prop in t.get("properties", []):
            if prop.get("name") == "ENVIRONMENT":
                for kv in prop.get("value", []):
                    k, _, v = kv.partition("=")
                    test_env[k] = v
        tests.append({"name": t["name"], "argv": argv + launch,
                      "work": os.path.relpath(work, REPO), "env": test_env})
    for name, small in (("bench", False), ("bench-small", True)):
        sh([sys.executable, os.path.join(REPO, "bench", "gpt_cuda.py"), "prepare",
            "--bin", args.bin, "--out", os.path.join(out, name)]
           + (["--small"] if small else []), check=True)
    with open(os.path.join(out, "tests.json"), "w") as f:
        json.dump({"tests": tests, "binaries": list(BINARIES)}, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print("prepared %s: %d tests, %.1f MiB" % (out, len(tests), size / 2**20))


def run(args):
    d = os.path.abspath(args.dir)
    res_dir = os.path.abspath(args.out)
    os.makedirs(res_dir, exist_ok=True)
    with open(os.path.join(d, "tests.json")) as f:
        spec = json.load(f)
    if not os.path.isdir(os.path.join(d, "lib")):
        subprocess.run(["tar", "xJf", os.path.join(d, "lib.tar.xz"), "-C", d], check=True)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(
        [os.path.join(d, "lib")] + args.cuda_lib + [env.get("LD_LIBRARY_PATH", "")])
    env["SHOAL_TEST_PYTHON"] = sys.executable
    # One-rank runs start as torchrun's would (no MPI launcher there).
    env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"})
    env["PYTHONUNBUFFERED"] = "1"
    bin_dir = os.path.join(d, "bin")
    rows = []

    def step(name, argv, timeout, extra_env=None):
        if args.only and not any(o in name for o in args.only):
            return
        begin = time.time()
        log = os.path.join(res_dir, name.replace("/", "_") + ".log")
        with open(log, "w") as f:
            try:
                r = subprocess.run([str(a) for a in argv], cwd=REPO,
                                   env=dict(env, **(extra_env or {})), stdout=f,
                                   stderr=subprocess.STDOUT, timeout=timeout)
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        with open(log) as f:
            text = f.read()
        tail = [ln for ln in text.splitlines() if ln.strip()][-args.tail:]
        status = {0: "PASS", 77: "SKIP"}.get(rc, "FAIL(%s)" % rc)
        rows.append((name, status, time.time() - begin))
        print("==== %s: %s (%.1f s)\n%s" % (name, status, time.time() - begin,
                                            "\n".join(tail)), flush=True)

    step("shoal-cuda-kernels-tests", [os.path.join(bin_dir, "shoal-cuda-kernels-tests")], 300)
    for t in spec["tests"]:
        step(t["name"], [sys.executable] + t["argv"] + [
            "--bin", bin_dir, "--work", os.path.join(REPO, t["work"]), "--phase", "run"],
             args.timeout, t.get("env"))
    if not args.no_bench:
        for name in ("bench-small", "bench"):
            for prec in args.bench_precision:
                step("%s.%s" % (name, prec), [
                    sys.executable, os.path.join(REPO, "bench", "gpt_cuda.py"), "run",
                    "--bin", bin_dir, "--out", os.path.join(d, name), "--precision", prec]
                    + args.bench_arg, args.timeout)
    print("\n%-40s %-10s %s" % ("check", "result", "seconds"))
    for name, status, sec in rows:
        print("%-40s %-10s %.1f" % (name, status, sec))
    with open(os.path.join(res_dir, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0 if all(s in ("PASS", "SKIP") for _, s, _ in rows) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="on the build machine: binaries, libraries, plans")
    p.add_argument("--bin", required=True, help="BUILD/bin of a build with CUDA")
    p.add_argument("--out", required=True, help="folder to write (emptied first)")
    r = sub.add_parser("run", help="on the GPU machine: run and compare")
    r.add_argument("--dir", required=True, help="the folder prepare wrote")
    r.add_argument("--out", required=True, help="folder for the logs")
    r.add_argument("--cuda-lib", action="append", default=[],
                   help="folder with libcudart/libcublas/libnccl if the loader "
                        "does not find them")
    r.add_argument("--only", action="append", default=[],
                   help="run only checks whose name contains this (repeat)")
    r.add_argument("--no-bench", action="store_true")
    r.add_argument("--bench-precision", action="append", default=None)
    r.add_argument("--bench-arg", action="append", default=[])
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--tail", type=int, default=12, help="log lines printed per check")
    args = ap.parse_args()
    if args.step == "prepare":
        prepare(args)
        return 0
    if args.bench_precision is None:
        args.bench_precision = ["bf16"]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
