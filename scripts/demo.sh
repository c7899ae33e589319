#!/usr/bin/env bash
# The main job on the bundled example: installs what is needed, builds shoal,
# then compiles the GPT-style model in examples/gpt for 4 ranks (2-way data
# parallel x 2-way tensor parallel), runs it with `mpirun -np 4 shoal-run`,
# and checks it against the one-rank run of the unsharded model and PyTorch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
export OMPI_MCA_mpi_yield_when_idle=1
exec /usr/bin/python3 "$root/examples/run_example.py" \
  --bin "${SHOAL_BUILD_DIR:-$root/build}/bin" "$@"
