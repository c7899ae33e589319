#!/usr/bin/env python3
"""Where a step's time goes: a `shoal-run --profile FILE` summarized by op kind.

    python3 bench/profile_summary.py PROFILE.json [--rank R] [--top N]

Prints, per op kind of one rank, the number of ops, their summed median
time, its share of the summed op time, and the achieved TFLOP/s and GB/s
(from the profile's flops and bytes), largest first. The per-op times come
with a device synchronization after each op, so their sum can exceed the
unsynchronized step time that shoal-run reports.
"""

import argparse
import collections
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    with open(args.profile) as f:
        prof = json.load(f)
    ranks = [r for r in prof["ranks"] if r["rank"] == args.rank]
    if not ranks:
        sys.exit("%s has no rank %d" % (args.profile, args.rank))
    by_kind = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for op in ranks[0]["ops"]:
        k = by_kind[op["kind"]]
        k[0] += 1
        k[1] += op["seconds"]
        k[2] += op.get("flops", 0)
        k[3] += op.get("bytes", 0)
    total = sum(k[1] for k in by_kind.values())
    print("%s on %s (%s), step %.3f ms, ops sum %.3f ms" % (
        prof.get("plan"), prof.get("device_name"), prof.get("precision"),
        prof["step_seconds"] * 1e3, total * 1e3))
    print("%-28s %5s %10s %6s %9s %9s" % ("kind", "ops", "ms", "share", "TFLOP/s", "GB/s"))
    for kind, (n, sec, flops, nbytes) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])[
            :args.top]:
        print("%-28s %5d %10.3f %5.1f%% %9.2f %9.1f" % (
            kind, n, sec * 1e3, 100 * sec / total if total else 0,
            flops / sec / 1e12 if sec else 0, nbytes / sec / 1e9 if sec else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
