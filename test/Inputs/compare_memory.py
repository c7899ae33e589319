"""Reads two `shoal-run --report-memory=ranks` outputs and checks that the
first one's activations (the largest over its ranks) are at most RATIO
times the second's.

    python compare_memory.py A.txt B.txt RATIO

Prints both figures; exit status 1 if the bound fails or a report is
missing.
"""

import re
import sys

RE = re.compile(r"memory of rank \d+: weights [\d.]+ MiB, grads [\d.]+ MiB, optimizer [\d.]+ MiB, "
                r"activations ([\d.]+) MiB")


def activations(path):
    with open(path) as f:
        found = [float(m.group(1)) for m in RE.finditer(f.read())]
    if not found:
        sys.exit("error: %s has no memory report of a rank (--report-memory=ranks)" % path)
    return max(found)


a, b, ratio = activations(sys.argv[1]), activations(sys.argv[2]), float(sys.argv[3])
print("activations %.3f MiB vs %.3f MiB: ratio %.2f (bound %.2f)" % (a, b, a / b, ratio))
sys.exit(0 if a <= ratio * b else 1)
