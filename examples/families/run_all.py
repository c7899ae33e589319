#!/usr/bin/python3
"""Generate every model family and summarize the ONNX op types they use.

    /usr/bin/python3 examples/families/run_all.py --out DIR [--seed S]
        [--markdown FILE] [--determinism] [--only NAME ...] [--chains NAME]

Runs each generator (examples/families/<family>.py) into DIR/<family>/ at
opset 17, and gpt2 a second time at opset 13 into DIR/gpt2_opset13/, printing
each one's time. Then reads the ops.json files and prints (or writes to
--markdown FILE) the op tables: per family, and the union of all op types
with the families that use each, the attribute sets each op type is used
with, and the foldable (shape-computation) nodes of one family (--chains,
default llama). --determinism runs every generator a second
time into DIR/<name>.again/ and checks that all written files are identical.
Exit status 1 if a generator fails or a check fails.
"""

import argparse
import collections
import filecmp
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def jobs(only):
    out = [(f, f, []) for f in common.FAMILIES]
    out.insert(1, ("gpt2_opset13", "gpt2", ["--opset", "13"]))
    if only:
        out = [j for j in out if j[0] in only or j[1] in only]
    return out


def run(script, out, seed, extra):
    cmd = [common.PYTHON, os.path.join(common.FAMILIES_DIR, script + ".py"),
           "--out", out, "--seed", str(seed)] + extra
    t0 = time.time()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    return res, time.time() - t0


def same_tree(a, b):
    """List of files that differ between folders a and b (recursive)."""
    diffs = []
    cmp = filecmp.dircmp(a, b)
    diffs += [os.path.join(a, f) for f in cmp.left_only + cmp.right_only + cmp.funny_files]
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    diffs += [os.path.join(a, f) for f in mismatch + errors]
    for d in cmp.common_dirs:
        diffs += same_tree(os.path.join(a, d), os.path.join(b, d))
    return diffs


def markdown(infos, chains=None):
    """Markdown tables from {job name: ops.json dict}; with chains=NAME, also
    the foldable (shape-computation) nodes of that job, the nodes of later
    layers (names with "layers.N"/"h.N"/"layer.N"/"blocks.N", N > 0) left out."""
    import re
    lines = []
    lines.append("### Summary")
    lines.append("")
    lines.append("| family | opset | nodes | Constant nodes | other foldable nodes | "
                 "Shape nodes | op types |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, info in infos.items():
        lines.append("| %s | %d | %d | %d | %d | %d | %d |" % (
            name, info["opset"], info["num_nodes"], info["op_counts"].get("Constant", 0),
            len(info["foldable_nodes"]), info["op_counts"].get("Shape", 0),
            len(info["op_counts"])))
    lines.append("")
    for name, info in infos.items():
        lines.append("### %s (opset %d)" % (name, info["opset"]))
        lines.append("")
        lines.append("%d nodes (%d Constant), %d parameters. Inputs: %s. Outputs: %s." % (
            info["num_nodes"], info["op_counts"].get("Constant", 0), info["parameters"],
            ", ".join("`%s` %s %s" % (k, v["dtype"], v["shape"])
                      for k, v in info["inputs"].items()),
            ", ".join("`%s` %s %s" % (k, v["dtype"], v["shape"])
                      for k, v in info["outputs"].items())))
        lines.append("")
        lines.append("| op | count | of which foldable |")
        lines.append("| --- | ---: | ---: |")
        for op, c in info["op_counts"].items():
            lines.append("| %s | %d | %s |" % (
                op, c, info["foldable_op_counts"].get(op, 0) or ""))
        lines.append("")
    users = collections.defaultdict(list)
    runtime = collections.defaultdict(list)
    for name, info in infos.items():
        for op, c in info["op_counts"].items():
            users[op].append("%s (%d)" % (name, c))
            if c > info["foldable_op_counts"].get(op, 0):
                runtime[op].append(name)
    lines.append("### Union of op types")
    lines.append("")
    lines.append("\"runtime in\": the families where some node of that type does not fold "
                 "to a constant (an empty cell: the op only ever appears in "
                 "subgraphs that fold, given static input shapes).")
    lines.append("")
    lines.append("| op | families (count) | runtime in |")
    lines.append("| --- | --- | --- |")
    for op in sorted(users):
        lines.append("| %s | %s | %s |" % (op, ", ".join(users[op]), ", ".join(runtime[op])))
    lines.append("")

    variants = collections.defaultdict(lambda: collections.defaultdict(set))
    for name, info in infos.items():
        for op, av in info.get("attributes", {}).items():
            for a in av:
                variants[op][a].add(name)
    lines.append("### Attributes each op type is used with")
    lines.append("")
    lines.append("Constant's value is left out; `-` means no attributes.")
    lines.append("")
    lines.append("| op | attributes | families |")
    lines.append("| --- | --- | --- |")
    for op in sorted(variants):
        if op == "Constant":
            continue
        for a in sorted(variants[op]):
            lines.append("| %s | %s | %s |" % (op, a.replace("|", "\\|"),
                                              ", ".join(n for n in infos
                                                        if n in variants[op][a])))
    lines.append("")

    if chains and chains in infos:
        later = re.compile(r"/(layers|h|layer|blocks)\.([1-9][0-9]*)/")
        nodes = [n for n in infos[chains]["foldable_nodes"] if not later.search(n["name"])]
        lines.append("### Foldable nodes of %s (first layer and top level)" % chains)
        lines.append("")
        lines.append("| node | op | inputs | used by (not foldable) |")
        lines.append("| --- | --- | --- | --- |")
        for n in nodes:
            lines.append("| `%s` | %s | %s | %s |" % (
                n["name"], n["op"], ", ".join("`%s`" % i for i in n["inputs"]),
                ", ".join("`%s`" % u for u in n["used_by"])))
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", help="write the op tables to this file")
    ap.add_argument("--determinism", action="store_true",
                    help="run each generator twice and compare the outputs")
    ap.add_argument("--only", nargs="*", help="job names (gpt2, gpt2_opset13, ...)")
    ap.add_argument("--chains", default="llama",
                    help="list the foldable nodes of this job (default llama)")
    args = ap.parse_args(argv)

    ok = True
    infos = collections.OrderedDict()
    for name, script, extra in jobs(args.only):
        out = os.path.join(args.out, name)
        res, dt = run(script, out, args.seed, extra)
        status = "ok" if res.returncode == 0 else "FAILED (exit %d)" % res.returncode
        if res.returncode == 0 and args.determinism:
            res2, dt2 = run(script, out + ".again", args.seed, extra)
            diffs = same_tree(out, out + ".again") if res2.returncode == 0 else ["(rerun failed)"]
            status += ", rerun %.1f s %s" % (
                dt2, "identical" if not diffs else "DIFFERS: " + ", ".join(diffs))
            ok = ok and not diffs
        print("%-22s %5.1f s  %s" % (name, dt, status), flush=True)
        if res.returncode != 0:
            ok = False
            print(res.stdout)
            continue
        with open(os.path.join(out, "ops.json")) as f:
            infos[name] = json.load(f)

    md = markdown(infos, args.chains)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
        print("wrote " + args.markdown)
    else:
        print()
        print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
