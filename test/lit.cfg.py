# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "shoal"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".onnxtext"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "e2e"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.shoal_obj_root, "test")
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
config.environment["OMPI_MCA_mpi_yield_when_idle"] = "1"

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.shoal_tools_dir, append_path=True)

config.substitutions.append(("%torchpy", config.python_torch))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
if config.mpiexec and os.path.exists(config.mpiexec):
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", config.mpiexec + " --allow-run-as-root --oversubscribe"))

# The test venv of scripts/install-deps.sh (transformers, onnxruntime,
# tensorboardX), for the tests of the scripts that use it.
venv_py = os.path.join(os.environ.get("SHOAL_VENV", os.path.expanduser("~/.cache/shoal-venv")),
                       "bin", "python")
import subprocess
if os.path.exists(venv_py) and subprocess.run(
        [venv_py, "-c", "import tensorboardX"], capture_output=True).returncode == 0:
    config.available_features.add("tensorboardx")
    config.substitutions.append(("%venvpy", venv_py))
if subprocess.run([config.python_torch, "-c", "import matplotlib"],
                  capture_output=True).returncode == 0:
    config.available_features.add("matplotlib")
config.substitutions.append(("%scripts", os.path.join(os.path.dirname(config.test_source_root),
                                                      "scripts")))

# A usable NVIDIA GPU (the CUDA backend's tests need one; elsewhere they are
# unsupported, never failed).
import shutil, subprocess
smi = shutil.which("nvidia-smi")
if smi:
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and "GPU" in out.stdout:
            config.available_features.add("cuda-gpu")
    except Exception:
        pass

# Runs a command as a user whom file permissions bind (root ignores them):
# as nobody when the tests run as root and may switch user, else as is.
if os.getuid() != 0:
    config.available_features.add("unprivileged")
    config.substitutions.append(("%unprivileged", ""))
else:
    setpriv = shutil.which("setpriv")
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] if setpriv else None
    if drop and subprocess.run(drop + ["true"], capture_output=True).returncode == 0:
        config.available_features.add("unprivileged")
        # Open MPI's session folder goes under TMPDIR, which lit makes
        # private to root.
        config.substitutions.append(("%unprivileged", "env TMPDIR=/tmp " + " ".join(drop)))

# torchrun of the torch 2 venv (scripts/install-deps.sh --torch2; Debian's
# torch 1.13 torchrun fails under Python 3.11), for the launch tests.
torchrun = os.path.join(os.environ.get("SHOAL_VENV_TORCH2",
                                       os.path.expanduser("~/.cache/shoal-venv-torch2")),
                        "bin", "torchrun")
if os.path.exists(torchrun):
    config.available_features.add("torchrun")
    # A free port per run (--master-port 0 is not accepted by every
    # version): the standalone rendezvous picks one.
    config.substitutions.append(("%torchrun", torchrun + " --standalone"))

# A Slurm cluster this machine can submit to (scripts/local-slurm.sh starts
# a one-node one), for the srun tests: an idle node within 5 s.
if shutil.which("srun") and shutil.which("sinfo"):
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True,
                                text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        states = []
    if any(s.startswith(("idle", "mix")) for s in states):
        config.available_features.add("slurm")

# A build with the CUDA backend (its module; no GPU needed to load it).
if os.path.exists(os.path.join(config.shoal_obj_root, "lib", "libshoal_cuda_backend.so")):
    config.available_features.add("cuda-backend")

# Graphviz, to check that --report-dot writes a picture dot can read.
if shutil.which("dot"):
    config.available_features.add("graphviz")

tool_dirs = [config.shoal_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(
    ["shoal-opt", "shoal-translate", "shoal-compile", "shoal-run", "shoal-sim"], tool_dirs)
