#!/usr/bin/env python3
"""Checks from a shoal-run Chrome trace that communication overlapped compute.

Usage: check_overlap.py TRACE.json

shoal-run --trace writes one process per rank with a compute track (tid 0:
one event per task run, and inside it one event per op) and a communication
track (tid 1: one event per collective or transfer, from its start to the
moment the rank saw it complete). A gradient all-reduce overlaps backward
when some op event on the same rank starts after the all-reduce started and
before it completed: the rank computed while the reduction was in flight.
Exits 0 when some rank shows that, 1 otherwise, and prints what it found.
"""
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def check(path):
    events = [e for e in load(path) if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in events})
    found = 0
    reductions = 0
    for rank in ranks:
        mine = [e for e in events if e["pid"] == rank]
        comm = [e for e in mine if e["tid"] == 1 and e["name"].startswith("AllReduce")]
        # Op events, not the task events that enclose them.
        ops = [e for e in mine if e["tid"] == 0 and "op" in e.get("args", {})]
        reductions += len(comm)
        for c in comm:
            start, end = c["ts"], c["ts"] + c["dur"]
            inside = [o for o in ops if start <= o["ts"] < end]
            if inside:
                found += 1
                if found <= 3:
                    print("rank %s: %s [%.1f, %.1f] us overlaps %d op(s), first %s at %.1f us"
                          % (rank, c["name"], start, end, len(inside), inside[0]["name"],
                             inside[0]["ts"]))
    print("%d all-reduce event(s) on %d rank(s); %d overlap compute"
          % (reductions, len(ranks), found))
    if reductions == 0:
        print("FAIL: the trace has no all-reduce events")
        return False
    if found == 0:
        print("FAIL: no all-reduce overlaps an op on its rank")
        return False
    return True


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(0 if check(sys.argv[1]) else 1)
