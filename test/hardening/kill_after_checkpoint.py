"""Runs a command; as rank 1 of torchrun's first attempt, kills it (SIGKILL)
as soon as its job has written a first checkpoint, as a crash mid-run would.

Usage: kill_after_checkpoint.py CKPT_DIR MARKER -- COMMAND...
MARKER is written when the kill happened (the test checks that the restart
it tests took place)."""
import os
import signal
import subprocess
import sys
import time

ckpt, marker, sep, *command = sys.argv[1:]
assert sep == "--" and command, __doc__
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
if os.environ.get("RANK") != "1" or not first_attempt:
    os.execvp(command[0], command)
child = subprocess.Popen(command)
deadline = time.monotonic() + 120
while child.poll() is None and time.monotonic() < deadline:
    if os.path.exists(os.path.join(ckpt, "latest")):
        child.send_signal(signal.SIGKILL)
        child.wait()
        with open(marker, "w") as f:
            f.write("killed rank 1\n")
        sys.exit(137)
    time.sleep(0.002)
sys.exit(child.wait())
