#!/usr/bin/env bash
# Checks the runtime's layers (docs/Design.md, "Layers"); run by ctest as
# `layers` and by hand: scripts/check-layers.sh [BUILD_DIR].
#  1. under lib/Runtime, only cpu/ includes cpu/ headers and only cuda/
#     includes cuda/ headers; only tooling/ includes the tooling's headers
#     (tooling/, shoal/Runtime/Runtime.h);
#  2. the scheduler and the engine (Executor, MemoryPlan, PlanLoader, Comm,
#     Watchdog) name no backend;
#  3. no library or tool outside lib/Runtime includes a lib/Runtime header,
#     and no CMakeLists.txt outside lib/Runtime adds lib/Runtime to an
#     include path (the runtime's own tests, benches and fuzzers use the
#     ShoalRuntimeInternals target);
#  4. the core runtime has no CUDA conditionals and, in BUILD_DIR, does not
#     link the CUDA backend;
#  5. the schema (include/shoal/Schema, lib/Schema) includes nothing of the
#     compiler or the runtime.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${SHOAL_BUILD_DIR:-$root/build}}"
cd "$root"
fail=0
report() { echo "check-layers: $1" >&2; fail=1; }

# Code lines only: comments may name backends.
code() { grep -n "$@" | grep -v -E '^[^:]+:[0-9]+:\s*(//|\*)' || true; }

# 1. Backend headers stay in their backend.
for dir in cpu cuda; do
  hits=$(cd lib/Runtime && find . -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \) \
           ! -path "./$dir/*" -print0 | xargs -0 grep -n "#include \"$dir/" || true)
  [ -z "$hits" ] || report "files outside lib/Runtime/$dir include its headers:
$hits"
done

# The engine and the backends stay below the tooling: only tooling/ (and
# the backend initialization, which defines registerAllBackends) includes
# the tooling's headers.
hits=$(cd lib/Runtime && find . -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \) \
         ! -path './tooling/*' ! -path './backends/*' -print0 |
       xargs -0 grep -n -e '#include "tooling/' -e '#include "shoal/Runtime/Runtime.h"' || true)
[ -z "$hits" ] || report "the engine or a backend includes the tooling:
$hits"

# 2. The scheduler names no backend.
engine=(lib/Runtime/Executor.h lib/Runtime/Executor.cpp lib/Runtime/MemoryPlan.h
        lib/Runtime/MemoryPlan.cpp lib/Runtime/PlanLoader.h lib/Runtime/PlanLoader.cpp
        lib/Runtime/Comm.h lib/Runtime/Comm.cpp lib/Runtime/Watchdog.cpp
        lib/Runtime/Device.h lib/Runtime/Device.cpp lib/Runtime/Updates.cpp
        lib/Runtime/BackendRegistry.cpp)
hits=$(code -E 'cpu::|cuda::|BackendKind::(CPU|CUDA)|[Nn]ccl|NCCL|registerCpu|registerCuda|makeCpu|makeCuda|Cuda[A-Z]|SHOAL_HAVE_CUDA' "${engine[@]}")
[ -z "$hits" ] || report "the engine names a backend:
$hits"

# 3. Nothing outside lib/Runtime reaches into it.
mapfile -t private < <(cd lib/Runtime && find . -type f -name '*.h' | sed 's|^\./||')
pattern=$(printf '#include "%s"\n' "${private[@]}")
hits=$(find lib include tools -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \) \
         ! -path 'lib/Runtime/*' -print0 | xargs -0 grep -n -F "$pattern" || true)
[ -z "$hits" ] || report "files outside lib/Runtime include its private headers:
$hits"
hits=$(find . -name CMakeLists.txt ! -path './lib/Runtime/*' ! -path './build*' \
         -print0 | xargs -0 grep -n 'lib/Runtime' | grep -v -E ':\s*#' || true)
[ -z "$hits" ] || report "CMake files outside lib/Runtime name lib/Runtime:
$hits"

# 4. The core runtime builds without CUDA and does not link it.
hits=$(grep -rn 'SHOAL_HAVE_CUDA' lib/Runtime --include='*.cpp' --include='*.h' \
         | grep -v '^lib/Runtime/backends/' || true)
[ -z "$hits" ] || report "CUDA conditionals outside lib/Runtime/backends:
$hits"
links="$build/layers/ShoalRuntime.links"
if [ -f "$links" ]; then
  if grep -q 'ShoalRuntimeCUDA\|ShoalRuntimeCPU\|ShoalRuntimeBackends\|ShoalRuntimeTooling' "$links"; then
    report "ShoalRuntime links a backend library: $(cat "$links")"
  fi
else
  report "$links is missing (configure the build first)"
fi

# 5. The schema includes nothing of either side.
hits=$(grep -rn '#include "' include/shoal/Schema lib/Schema \
         | grep -v -E '#include "(shoal/Schema/|plan\.pb\.h)' || true)
[ -z "$hits" ] || report "the schema includes another layer:
$hits"

[ "$fail" = 0 ] && echo "check-layers: ok"
exit "$fail"
