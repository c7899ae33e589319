#!/usr/bin/env bash
# Builds the core runtime alone (-DSHOAL_BUILD_COMPILER=OFF
# -DSHOAL_ENABLE_CUDA=OFF: no MLIR, no CUDA) into DIR and runs its unit
# tests there, as a GPU cluster node without the compiler would build it.
#   scripts/build-runtime-only.sh [DIR]   (default build-runtime-only/)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-runtime-only}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/shoal-ccache}"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DSHOAL_BUILD_COMPILER=OFF -DSHOAL_ENABLE_CUDA=OFF \
  -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
ninja -C "$build" -j"${SHOAL_JOBS:-$(nproc)}" shoal-run shoal-runtime-tests
# ShoalRuntime must not link the CUDA backend, which this build lacks.
"$root/scripts/check-layers.sh" "$build"
export OMPI_MCA_mpi_yield_when_idle=1
ctest --test-dir "$build" -L unit -E '^layers$' --output-on-failure -j"$(nproc)"
