#!/usr/bin/python3
"""The CPU kernels against this machine's roofline.

    python3 bench/kernel_roofline.py [--bin build/bin] [--threads 1,all]
        [--repetitions 3]

Runs shoal-kernel-bench (bench/kernels/KernelBench.cpp, Google Benchmark)
once per thread count and prints:
  the roofline   memory bandwidth (the better of copy and triad over 256 MiB
                 arrays, bytes read + written per second) and the BLAS peak
                 (a 2048^3 sgemm, FLOP/s);
  each kernel    its time, its bytes/s (each operand read or written once)
                 and that as a share of the measured bandwidth; for attention
                 also its FLOP/s as a share of the sgemm peak.
A memory-bound kernel at the roofline reads and writes its operands once at
the machine's bandwidth; below it, it is compute-bound (exp, erf) or loses
time elsewhere.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, threads, repetitions):
    env = dict(os.environ)
    for k in ("SHOAL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    p = subprocess.run([binary, "--benchmark_format=json",
                        "--benchmark_repetitions=%d" % repetitions,
                        "--benchmark_report_aggregates_only=true"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("%s failed:\n%s" % (binary, p.stderr))
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        out[b["run_name"].split("/")[0]] = b
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--threads", default="1,all")
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args()
    binary = os.path.join(args.bin, "shoal-kernel-bench")
    if not os.path.exists(binary):
        sys.exit("%s is missing: install libbenchmark-dev and rebuild" % binary)
    cores = os.cpu_count()
    for th in sorted({cores if t == "all" else int(t) for t in args.threads.split(",")}):
        r = run(binary, th, args.repetitions)
        bw = max(r["BM_RooflineCopy"]["bytes_per_s"], r["BM_RooflineTriad"]["bytes_per_s"])
        peak = r["BM_RooflineSgemm"]["flop_per_s"]
        print("%d thread%s: bandwidth %.1f GB/s (copy %.1f, triad %.1f), sgemm peak %.1f GFLOP/s"
              % (th, "" if th == 1 else "s", bw / 1e9, r["BM_RooflineCopy"]["bytes_per_s"] / 1e9,
                 r["BM_RooflineTriad"]["bytes_per_s"] / 1e9, peak / 1e9))
        print("  %-32s %10s %10s %10s %10s %10s" % ("kernel", "ms", "GB/s", "of BW", "GFLOP/s",
                                                   "of peak"))
        for name, b in r.items():
            if name.startswith("BM_Roofline"):
                continue
            gbs = b.get("bytes_per_s", 0) / 1e9
            fl = b.get("flop_per_s")
            print("  %-32s %10.3f %10.1f %9.0f%% %10s %10s"
                  % (name[3:], b["real_time"], gbs, 100 * gbs * 1e9 / bw,
                     "%.1f" % (fl / 1e9) if fl else "-",
                     "%.0f%%" % (100 * fl / peak) if fl else "-"))


if __name__ == "__main__":
    main()
