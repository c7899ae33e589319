#!/usr/bin/python3
"""shoal's main example: a small GPT, DP2 x TP2 on 4 MPI ranks.

    /usr/bin/python3 examples/run_example.py --bin build/bin [--np 4]

1. builds the GPT example (examples/gpt/make_model.py) into examples/gpt/out/:
   model.onnx, inputs/input_ids.npy and PyTorch's logits in reference/;
2. compiles it with examples/gpt/spec_tp.yaml (the whole model split(2)) for
   --np ranks: with 4 ranks the data-parallel degree is 4 / 2 = 2, so DP2 x TP2;
3. runs the plan with `mpirun -np 4 shoal-run`;
4. compiles and runs the unsharded model on one rank;
5. compares the sharded outputs with the one-rank outputs and with PyTorch's,
   and prints PASS or FAIL (exit status 1 on FAIL).

--model mlp and --spec NAME choose another example/spec.
"""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def step(n, text):
    print("\n[%d] %s" % (n, text), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run shoal's GPT example (DP2 x TP2 on 4 ranks).")
    ap.add_argument("--bin", required=True, help="BUILD/bin with shoal-compile and shoal-run")
    ap.add_argument("--np", type=int, default=4, help="MPI ranks (default %(default)s)")
    ap.add_argument("--model", default="gpt", choices=["gpt", "mlp"])
    ap.add_argument("--spec", default="spec_tp.yaml",
                    help="annotation spec in examples/<model>/ (default %(default)s)")
    ap.add_argument("--out", default=None, help="work folder (default examples/<model>/out)")
    ap.add_argument("--mpirun", default="mpirun", help="mpirun executable (Open MPI)")
    ap.add_argument("--rtol", type=float, default=common.DEFAULT_RTOL,
                    help="bound on the relative error (default %(default)g)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.np < 1:
        ap.error("--np must be at least 1")

    out = os.path.abspath(args.out or os.path.join(common.EXAMPLES_DIR, args.model, "out"))
    spec = os.path.join(common.EXAMPLES_DIR, args.model, args.spec)
    if not os.path.isfile(spec):
        spec = os.path.abspath(args.spec)
    model = os.path.join(out, "model.onnx")
    inputs = os.path.join(out, "inputs")
    reference = os.path.join(out, "reference")
    par_plan = os.path.join(out, "par.plan")
    base_plan = os.path.join(out, "base.plan")
    par_out = os.path.join(out, "par_out")
    base_out = os.path.join(out, "base_out")

    try:
        if not os.path.isfile(spec):
            raise common.CommandError("spec %s not found" % args.spec)
        compile_ = common.find_tool(args.bin, "shoal-compile")
        run = common.find_tool(args.bin, "shoal-run")
        if shutil.which(args.mpirun) is None:
            raise common.CommandError("mpirun not found: %s" % args.mpirun)

        step(1, "Build the %s example into %s" % (args.model, out))
        for d in (inputs, reference, par_out, base_out):
            shutil.rmtree(d, ignore_errors=True)
        for f in (model, par_plan, base_plan):
            if os.path.exists(f):
                os.remove(f)
        os.makedirs(out, exist_ok=True)
        res = common.generate_model(args.model, out, seed=args.seed)
        sys.stdout.write(res.stdout)
        nodes, ops, nweights = common.onnx_summary(model)
        print("model.onnx: %s, %d nodes, %d weight values in initializers"
              % (common.human_size(os.path.getsize(model)), nodes, nweights))

        step(2, "Compile for %d ranks with %s" % (args.np, os.path.relpath(spec, common.REPO_ROOT)))
        with open(spec) as f:
            print("".join("    " + line for line in f if not line.lstrip().startswith("#")), end="")
        common.run_cmd([compile_, model, "--annotate", spec, "--world-size", args.np,
                        "-o", par_plan])
        print("plan: %s (%s)" % (par_plan, common.human_size(os.path.getsize(par_plan))))

        step(3, "Run the sharded plan on %d ranks" % args.np)
        res = common.run_cmd(common.mpirun_cmd(args.mpirun, args.np,
                                               [run, par_plan, "--inputs", inputs,
                                                "--outputs", par_out]),
                             env_extra=common.MPI_ENV)
        print("took %.2f s" % res.elapsed)

        step(4, "Compile and run the unsharded model on one rank")
        common.run_cmd([compile_, model, "--world-size", 1, "-o", base_plan])
        print("plan: %s (%s)" % (base_plan, common.human_size(os.path.getsize(base_plan))))
        res = common.run_cmd([run, base_plan, "--inputs", inputs, "--outputs", base_out])
        print("took %.2f s" % res.elapsed)
    except common.CommandError as e:
        print(str(e))
        print("\nFAIL")
        return 1

    step(5, "Compare")
    names = common.npy_names(reference)
    vs_base = common.compare_dirs(par_out, base_out, names, args.rtol, "%d ranks vs one rank" % args.np)
    vs_torch = common.compare_dirs(par_out, reference, names, args.rtol, "%d ranks vs PyTorch" % args.np)
    base_torch = common.compare_dirs(base_out, reference, names, args.rtol, "one rank vs PyTorch")
    ok = common.print_table(vs_base + vs_torch + base_torch, args.rtol)
    for label, rows in (("vs the one-rank run", vs_base), ("vs PyTorch", vs_torch)):
        e = common.max_error(rows)
        print("max relative error of the %d-rank run %s: %s"
              % (args.np, label, "%.3e" % e if e is not None else "n/a"))
    print("\n" + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
