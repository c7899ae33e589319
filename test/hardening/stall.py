#!/usr/bin/python3
"""A stalled rank ends the job: runs a 2-rank plan under mpirun with
--stall-timeout SECONDS, stops rank 1 with SIGSTOP once the job runs, and
checks that mpirun exits non-zero within a minute with the watchdog's error
naming the waiting rank and what it waits in. Prints what it saw; exits 1 on
any failure.

  stall.py MPIRUN SHOAL_RUN PLAN INPUTS OUTPUTS SECONDS
"""
import os
import signal
import subprocess
import sys
import time

mpirun, shoal_run, plan, inputs, outputs, seconds = sys.argv[1:7]
env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
cmd = mpirun.split() + ["-np", "2", shoal_run, plan, "--inputs", inputs,
                        "--outputs", outputs, "--steps", "100000000",
                        "--stall-timeout", seconds]
job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, text=True)


def rank_pids():
    """pid -> MPI rank of the shoal-run processes running PLAN."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if os.path.abspath(plan).encode() not in [
                    os.path.abspath(a.decode(errors="replace")).encode()
                    for a in argv[1:2]] or not argv[0].endswith(b"shoal-run"):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                for var in f.read().split(b"\0"):
                    if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                        found[int(pid)] = int(var.split(b"=")[1])
        except OSError:
            continue
    return found


stopped = None
deadline = time.time() + 60
while time.time() < deadline and job.poll() is None:
    ranks = rank_pids()
    if len(ranks) == 2:
        time.sleep(2)  # loaded and stepping
        stopped = [p for p, r in ranks.items() if r == 1][0]
        os.kill(stopped, signal.SIGSTOP)
        break
    time.sleep(0.2)
if stopped is None:
    job.kill()
    print("stall.py: the two ranks never started")
    sys.exit(1)
start = time.time()
try:
    out, err = job.communicate(timeout=60)
except subprocess.TimeoutExpired:
    job.kill()
    for pid in rank_pids():
        os.kill(pid, signal.SIGKILL)
    print("stall.py: the job still ran 60 s after rank 1 stopped")
    sys.exit(1)
took = time.time() - start
for pid in rank_pids():  # nothing may be left behind
    os.kill(pid, signal.SIGKILL)
    print(f"stall.py: process {pid} was left running")
    sys.exit(1)
print(err)
print(f"stall.py: exit {job.returncode} {took:.1f} s after rank 1 stopped")
sys.exit(0 if job.returncode != 0 and took < 60 else 1)
