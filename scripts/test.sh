#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: lit tests of the dialect,
# passes, importer and tools; runtime unit tests; end-to-end runs under
# mpirun compared with PyTorch and the one-rank run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
export OMPI_MCA_mpi_yield_when_idle=1
ctest --test-dir "${SHOAL_BUILD_DIR:-$root/build}" --output-on-failure "$@"
