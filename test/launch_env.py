#!/usr/bin/env python3
"""Starts N processes of one command as torchrun does, without MPI.

    launch_env.py --np N [--timeout S] [--env K=V ...] [--slurm] -- COMMAND ...

Every process gets RANK, LOCAL_RANK (0 .. N-1), WORLD_SIZE=N,
MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port), and no MPI launcher
variable. With --slurm, the variables srun gives the tasks of a step
instead (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_LOCALID,
SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST=localhost) and none of
torchrun's: the job id is chosen so that the port shoal derives from it is
free. Their output is printed with a "[rank R]" prefix once all have
finished. The exit status is 0 if every process exited with 0, else the
first non-zero status (1 for a signal or a timeout); on a timeout or a
failure of one process the others are killed after a grace period.
"""

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_store_port(job, step):
    """shoal's rendezvous port of a Slurm step (slurmStorePort)."""
    return 20000 + (32 * (job % 40000) + step % 32) % 40000


def port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--grace", type=float, default=30,
                    help="seconds the others get to fail on their own after "
                         "one process failed")
    ap.add_argument("--slurm", action="store_true",
                    help="give the processes srun's variables, not torchrun's")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI", "PMIX_", "HYDRA_"))}
    if args.slurm:
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT"):
            env.pop(k, None)
        job = random.randrange(1, 10**6)
        while not port_is_free(slurm_store_port(job, 0)):
            job = random.randrange(1, 10**6)
        env.update({"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0",
                    "SLURM_STEP_NUM_TASKS": str(args.np),
                    "SLURM_NTASKS": str(args.np),
                    "SLURM_STEP_NODELIST": "localhost",
                    "SLURM_JOB_NODELIST": "localhost"})
    else:
        env.update({"WORLD_SIZE": str(args.np), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(free_port())})
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    procs, logs = [], []
    for r in range(args.np):
        if args.slurm:
            e = dict(env, SLURM_PROCID=str(r), SLURM_LOCALID=str(r))
        else:
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        # Files, not pipes: a chatty rank must never block on a full pipe.
        logs.append(tempfile.TemporaryFile())
        procs.append(subprocess.Popen(cmd, env=e, stdout=logs[-1],
                                      stderr=subprocess.STDOUT))
    deadline = time.time() + args.timeout
    failed_at = None
    timed_out = False
    while any(p.poll() is None for p in procs):
        now = time.time()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + args.grace):
            timed_out = now > deadline
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.05)
    status = 0
    for r, p in enumerate(procs):
        p.wait()
        logs[r].seek(0)
        out = logs[r].read().decode("utf-8", "replace")
        for line in out.splitlines():
            print("[rank %d] %s" % (r, line))
        code = p.returncode
        if code != 0 and status == 0:
            status = code if code > 0 else 1
    if timed_out:
        print("launch_env.py: timed out after %g s" % args.timeout)
        status = status or 1
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
