#!/usr/bin/env bash
# Configures and builds shoal into ./build (compiler, runtime and tests).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SHOAL_BUILD_DIR:-$root/build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/shoal-ccache}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
    -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld "$@"
fi
ninja -C "$build" -j"${SHOAL_JOBS:-$(nproc)}"
