#!/usr/bin/python3
"""End-to-end test of shoal on one example model and one annotation spec.

    /usr/bin/python3 test/e2e/run_e2e.py --bin BUILD/bin --model {gpt,mlp} \
        --spec NAME.yaml --world-size N --work DIR [--mpirun mpirun]

Steps:
  (a) generate the model into DIR (examples/<model>/make_model.py): model.onnx,
      inputs/*.npy and PyTorch's outputs in reference/*.npy;
  (b) one-rank run of the unsharded model:
        shoal-compile DIR/model.onnx --world-size 1 -o DIR/base.plan
        shoal-run DIR/base.plan --inputs DIR/inputs --outputs DIR/base_out
  (c) sharded run:
        shoal-compile DIR/model.onnx --annotate SPEC --world-size N -o DIR/par.plan
        mpirun --allow-run-as-root --oversubscribe -np N \
            shoal-run DIR/par.plan --inputs DIR/inputs --outputs DIR/par_out
  (d) compare par_out against base_out and reference, and base_out against
      reference: relative error max|a-b| / max(max|b|, 1e-12) must be at most
      --rtol (1e-5); shapes and dtypes must agree; no NaN/Inf; no missing file.

--expect-error SUBSTRING: bad-input mode. Only (a) and the sharded compile of
(c) run; the test passes when shoal-compile exits non-zero (not by a signal)
and its stderr contains SUBSTRING.

--spec is a file name in examples/<model>/ or a path to a spec file.
--onnx PATH (with --expect-error only): compile this ONNX file instead of the
generated model (for bad-model tests); it is copied to DIR/model.onnx.
Exit status: 0 pass, 1 fail, 2 usage error.
"""

import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))
import common  # noqa: E402


def check_trace(path, world, stdout):
    """The Chrome trace has compute work on every rank's track, and a
    pipeline run printed its measured and theoretical bubble."""
    import json
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        print("trace %s unreadable: %s" % (path, e))
        return False
    work = {}
    for e in events:
        if e.get("ph") == "X" and e.get("tid") == 0:
            work[e.get("pid")] = work.get(e.get("pid"), 0) + 1
    missing = [r for r in range(world) if not work.get(r)]
    if missing:
        print("trace %s: no compute events for ranks %s" % (path, missing))
        return False
    print("trace: %d events, compute events per rank %s" % (len(events), work))
    if "bubble measured" not in stdout:
        print("shoal-run printed no pipeline bubble report")
        return False
    return True


def resolve_spec(model, spec):
    """examples/<model>/<spec> if it exists there, else spec as a path."""
    cand = os.path.join(common.EXAMPLES_DIR, model, spec)
    if os.path.isfile(cand):
        return cand
    if os.path.isfile(spec):
        return os.path.abspath(spec)
    return None


def describe_spec(spec_path, model_path):
    """Print each scope of the spec and how many ONNX nodes its patterns
    match (information only; the compiler is the judge of the spec)."""
    try:
        import fnmatch
        import yaml
        import onnx
        with open(spec_path) as f:
            spec = yaml.safe_load(f)
        names = [n.name for n in onnx.load(model_path).graph.node]
    except Exception as e:  # missing module, unparsable file: not our call
        print("spec %s: (not described: %s)" % (spec_path, e))
        return
    print("spec %s: default %s" % (spec_path, spec.get("default") if isinstance(spec, dict) else "?"))
    if not isinstance(spec, dict):
        return
    claimed = set()
    for sc in spec.get("scopes") or []:
        if not isinstance(sc, dict):
            continue
        pats = sc.get("nodes") or []
        hit = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
        claimed.update(hit)
        strat = ", ".join("%s(%s)" % (k, sc[k]) for k in ("replicate", "split") if k in sc)
        print("  scope %-8s %-14s patterns %s: %d of %d nodes"
              % (sc.get("name", "?"), strat, pats, len(hit), len(names)))
    print("  nodes in no scope: %d" % (len(names) - len(claimed)))


# Exit status of a test that cannot run here (ctest SKIP_RETURN_CODE).
SKIP = 77


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="shoal end-to-end test: sharded run vs one-rank run vs PyTorch")
    ap.add_argument("--bin", required=True, help="BUILD/bin with shoal-compile and shoal-run")
    ap.add_argument("--model", required=True,
                    help="gpt, mlp, or a model family of examples/families")
    ap.add_argument("--spec", required=True, help="annotation spec (name in examples/<model>/ or path)")
    ap.add_argument("--world-size", type=int, required=True, help="number of MPI ranks")
    ap.add_argument("--work", required=True, help="work folder (emptied first)")
    ap.add_argument("--mpirun", default="mpirun", help="mpirun executable (Open MPI)")
    ap.add_argument("--rtol", type=float, default=common.DEFAULT_RTOL,
                    help="bound on the relative error (default %(default)g)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the model generator")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds allowed to each command (default %(default)g)")
    ap.add_argument("--expect-error", metavar="SUBSTRING", default=None,
                    help="bad-input mode: the sharded compile must fail with "
                         "SUBSTRING in its stderr")
    ap.add_argument("--onnx", metavar="PATH", default=None,
                    help="with --expect-error: compile this ONNX file instead "
                         "of the generated model")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu",
                    help="backend of the sharded run (the one-rank run is on the CPU)")
    ap.add_argument("--precision", default="fp32",
                    help="shoal-run --precision for the sharded run on cuda")
    ap.add_argument("--cluster", metavar="SPEC", default=None,
                    help="cluster spec for shoal-compile --cluster (shoal-plan); "
                         "with --spec none the planner searches the layout")
    ap.add_argument("--expect-shares", metavar="COUNTS", default=None,
                    help="with --cluster: the batch shares that shoal-plan --explain must "
                         "report (micro-batches per replica, or samples per batch "
                         "block, e.g. 5/1/1/1)")
    ap.add_argument("--batch-shares", choices=("blocks", "micro-batches"), default="blocks",
                    help="with --cluster: shoal-compile --batch-shares; --expect-shares "
                         "then names samples per block or micro-batches per replica")
    ap.add_argument("--expect-shards", metavar="WEIGHTS", default=None,
                    help="with --cluster: the shards by speed that shoal-plan --explain "
                         "must report and shoal-partition compile (e.g. 500/167 (x3))")
    ap.add_argument("--shard-multiple", type=int, default=None,
                    help="with --cluster: shoal-compile --shard-multiple (e.g. the head size)")
    ap.add_argument("--trace", action="store_true",
                    help="also write a Chrome trace of the sharded run and check "
                         "it has a track with work for every rank, and that a "
                         "pipeline reports its bubble")
    ap.add_argument("--expect-collectives", metavar="KIND=N", action="append", default=[],
                    help="bound on the collectives of the sharded plan's partitioned "
                         "program (KIND=N or KIND<=N, KIND: all_gather, all_reduce, "
                         "all_to_all, local_slice); repeatable")
    common.add_launch_phase_args(ap)
    args = ap.parse_args(argv)

    if args.world_size < 1:
        ap.error("--world-size must be at least 1")
    if args.rtol < 0:
        ap.error("--rtol must be non-negative")
    if args.phase != "all" and args.expect_error is not None:
        ap.error("--phase is for runs, not --expect-error tests")
    if args.onnx is not None and args.expect_error is None:
        ap.error("--onnx is only for --expect-error tests")
    if args.onnx is not None and not os.path.isfile(args.onnx):
        print("FAIL: --onnx %s not found" % args.onnx)
        return 1
    spec = None if args.spec == "none" else resolve_spec(args.model, args.spec)
    if spec is None and args.spec != "none":
        print("FAIL: spec %s not found (neither in %s nor as a path)"
              % (args.spec, os.path.join(common.EXAMPLES_DIR, args.model)))
        return 1

    work = os.path.abspath(args.work)
    title = "e2e %s %s world %d%s" % (args.model, os.path.basename(spec or "search"),
                                     args.world_size,
                                     " (expect error)" if args.expect_error is not None else "")
    print("== " + title)
    try:
        prepare, run_only = args.phase == "prepare", args.phase == "run"
        compile_ = None if run_only else common.find_tool(args.bin, "shoal-compile")
        run = (None if args.expect_error is not None or prepare
               else common.find_tool(args.bin, "shoal-run"))
        if (run is not None and args.launch == "mpirun" and args.world_size > 1
                and shutil.which(args.mpirun) is None):
            raise common.CommandError("mpirun not found: %s" % args.mpirun)

        model = os.path.join(work, "model.onnx")
        inputs = os.path.join(work, "inputs")
        reference = os.path.join(work, "reference")
        if run_only:
            # What --phase prepare left: run outputs are removed, so that
            # stale ones never make a test pass.
            for f in ("model.onnx", "base.plan", "par.plan", "inputs", "reference"):
                if not os.path.exists(os.path.join(work, f)):
                    raise common.CommandError("--phase run: %s lacks %s (run --phase "
                                              "prepare first)" % (work, f))
            for d in ("base_out", "par_out", "probe"):
                shutil.rmtree(os.path.join(work, d), ignore_errors=True)
        else:
            # Fresh work folder: stale outputs must never make a test pass.
            if os.path.isdir(work):
                shutil.rmtree(work)
            os.makedirs(work)

        if run_only:
            pass  # the model, inputs and reference are prepare's
        elif args.onnx is not None:
            print("-- (a) use %s" % args.onnx)
            shutil.copyfile(args.onnx, model)
        else:
            print("-- (a) generate the %s model" % args.model)
            res = common.generate_model(args.model, work, seed=args.seed,
                                        timeout=args.timeout)
            sys.stdout.write(res.stdout)

        par_plan = os.path.join(work, "par.plan")
        par_compile = [compile_, model, "--world-size", args.world_size, "-o", par_plan]
        par_mlir = os.path.join(work, "par.mlir")
        if args.expect_collectives:
            par_compile += ["--emit-mlir", par_mlir]
        if spec is not None:
            par_compile += ["--annotate", spec]
        if args.cluster is not None:
            par_compile += ["--cluster", args.cluster, "--explain"]
            if args.shard_multiple:
                par_compile += ["--shard-multiple", str(args.shard_multiple)]
            par_compile += ["--batch-shares", args.batch_shares]

        if args.expect_error is not None:
            print("-- sharded compile, expecting an error containing %r" % args.expect_error)
            res = common.run_cmd(par_compile, check=False, timeout=args.timeout)
            sys.stdout.write(res.stderr)
            if res.returncode == 0:
                print("FAIL: shoal-compile succeeded, expected an error containing %r"
                      % args.expect_error)
                return 1
            if res.returncode < 0:
                print("FAIL: shoal-compile was %s (a crash, not a diagnostic)"
                      % common.describe_returncode(res.returncode))
                return 1
            if args.expect_error not in res.stderr:
                print("FAIL: shoal-compile failed (%s) but its stderr lacks %r"
                      % (common.describe_returncode(res.returncode), args.expect_error))
                print("--- stdout ---\n" + res.stdout)
                return 1
            print("PASS: shoal-compile failed as expected (%s)"
                  % common.describe_returncode(res.returncode))
            return 0

        if spec is not None:
            describe_spec(spec, model)

        base_plan = os.path.join(work, "base.plan")
        base_out = os.path.join(work, "base_out")
        if not run_only:
            common.run_cmd([compile_, model, "--world-size", 1, "-o", base_plan],
                           timeout=args.timeout)
        if prepare:
            common.run_cmd(par_compile, timeout=args.timeout)
            print("PREPARED: %s (--phase run runs it)" % work)
            return 0
        print("-- (b) one-rank run of the unsharded model")
        common.run_cmd([run, base_plan, "--inputs", inputs, "--outputs", base_out],
                       timeout=args.timeout)

        backend_flags = []
        if args.backend == "cuda":
            backend_flags = ["--backend", "cuda", "--precision", args.precision]
            probe = common.run_cmd([run, base_plan, "--inputs", inputs, "--outputs",
                                    os.path.join(work, "probe")] + backend_flags,
                                   check=False, timeout=args.timeout)
            if "no CUDA device" in probe.stderr:
                print("SKIP: %s" % probe.stderr.strip())
                return SKIP
        print("-- (c) sharded run on %d ranks (%s)" % (args.world_size, args.backend))
        par_out = os.path.join(work, "par_out")
        if not run_only:
            res = common.run_cmd(par_compile, timeout=args.timeout)
            sys.stdout.write(res.stderr if args.cluster is not None else "")
            if args.expect_shares is not None:
                m = re.search(r"\((per replica|batch blocks) ([\d/]+)\)", res.stderr)
                want = "batch blocks" if args.batch_shares == "blocks" else "per replica"
                if not m or m.group(2) != args.expect_shares or m.group(1) != want:
                    print("FAIL: expected batch shares %s (micro-batches per replica or "
                          "samples per block), shoal-plan --explain says %s"
                          % (args.expect_shares, m.group(0) if m else "no batch shares"))
                    return 1
                if "are not compiled" in res.stderr:
                    print("FAIL: the batch blocks were not compiled")
                    return 1
            if args.expect_shards is not None:
                m = re.search(r"shards by speed per device (.*?) \(per mille", res.stderr)
                if not m or m.group(1) != args.expect_shards:
                    print("FAIL: expected shards by speed %s, shoal-plan --explain says %s"
                          % (args.expect_shards, m.group(1) if m else "none"))
                    return 1
                if "are not compiled" in res.stderr:
                    print("FAIL: the shards by speed were not compiled")
                    return 1
        if os.path.isfile(par_plan):
            print("plan: %s (%s)" % (par_plan, common.human_size(os.path.getsize(par_plan))))
        if args.expect_collectives:
            bad = common.check_collectives(par_mlir, args.expect_collectives)
            if bad:
                print("\n".join(bad))
                print("FAIL: " + title)
                return 1
        trace = os.path.join(work, "trace.json")
        trace_flags = ["--trace", trace] if args.trace else []
        par_run = ([run, par_plan, "--inputs", inputs, "--outputs", par_out]
                   + backend_flags + trace_flags)
        if args.launch == "env":
            res = common.run_cmd(common.launch_env_cmd(args.world_size, args.timeout, par_run),
                                 timeout=args.timeout + 30)
        else:
            res = common.run_cmd(common.mpirun_cmd(args.mpirun, args.world_size, par_run),
                                 env_extra=common.MPI_ENV, timeout=args.timeout)
        sys.stdout.write(res.stdout)
        if args.trace and not check_trace(trace, args.world_size, res.stdout):
            print("FAIL: " + title)
            return 1
    except common.CommandError as e:
        print(str(e))
        print("FAIL: " + title)
        return 1

    print("-- (d) compare")
    # The reference folder names every output the model has.
    names = common.npy_names(reference)
    for folder in (base_out, par_out):
        extra = sorted(set(common.npy_names(folder)) - set(names))
        if extra:
            print("note: %s has files that are not model outputs: %s" % (folder, extra))
    rows = []
    rows += common.compare_dirs(par_out, base_out, names, args.rtol, "sharded vs one-rank")
    rows += common.compare_dirs(par_out, reference, names, args.rtol, "sharded vs PyTorch")
    rows += common.compare_dirs(base_out, reference, names, args.rtol, "one-rank vs PyTorch")
    ok = common.print_table(rows, args.rtol)
    print(("PASS: " if ok else "FAIL: ") + title)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
