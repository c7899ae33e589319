#!/usr/bin/env bash
# The sanitizer build (test/fuzz: clang-14 with ASan and UBSan) in
# build-fuzz/: builds the runtime, its unit tests and the libFuzzer targets,
# runs the unit tests (one rank, then the collectives on 4 ranks) and then
# each fuzz target for SECONDS (default 20) from its seed corpus in
# test/fuzz/corpus/<target>. New inputs go to build-fuzz/corpus/<target>;
# a crash leaves build-fuzz/crash-* and fails the script.
#
#   scripts/fuzz.sh 10           # CI (ctest's fuzz test): unit tests, then 10 s per target
#   scripts/fuzz.sh 3600         # an hour per target (docs/Hardening.md)
#   scripts/fuzz.sh 600 onnx     # one target, no unit tests
#   scripts/fuzz.sh 0 unit       # the unit tests only
#   FUZZ_SEED=0 scripts/fuzz.sh 3600   # a random seed (default 1: CI repeats itself)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
only=${2:-}
targets="onnx plan npy checkpoint cluster annotation train"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/shoal-ccache}
cmake -S test/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > build-fuzz.log 2>&1 \
  || { tail -30 build-fuzz.log; exit 1; }
ninja -C build-fuzz shoal-runtime-tests shoal-schedule-tests \
  $(for t in $targets; do echo fuzz-$t; done) >> build-fuzz.log 2>&1 \
  || { grep -B2 -A10 "error:\|FAILED" build-fuzz.log | tail -40; exit 1; }
export ASAN_OPTIONS=detect_leaks=0 OPENBLAS_NUM_THREADS=1
status=0
if [ -z "$only" ] || [ "$only" = unit ]; then
  echo "fuzz.sh: unit tests under ASan and UBSan"
  bin=build-fuzz/shoal/bin
  "$bin/shoal-schedule-tests" --gtest_brief=1 2>&1 | tail -3 || status=1
  "$bin/shoal-runtime-tests" --gtest_brief=1 2>&1 | tail -3 || status=1
  OMPI_MCA_mpi_yield_when_idle=1 mpiexec --allow-run-as-root --oversubscribe \
    -np 4 -x ASAN_OPTIONS -x OPENBLAS_NUM_THREADS "$bin/shoal-runtime-tests" \
    --gtest_filter='Collective*' --gtest_brief=1 > build-fuzz/mpi-tests.log 2>&1 \
    || { tail -30 build-fuzz/mpi-tests.log; status=1; }
  echo "fuzz.sh: collective tests passed on $(grep -c PASSED build-fuzz/mpi-tests.log || :) of 4 ranks"
fi
for target in $targets; do
  [ -n "$only" ] && [ "$only" != "$target" ] && continue
  mkdir -p "build-fuzz/corpus/$target"
  echo "fuzz.sh: fuzz-$target for ${seconds} s"
  (cd build-fuzz && ./fuzz-$target \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -seed="${FUZZ_SEED:-1}" \
        -print_final_stats=1 "corpus/$target" "../test/fuzz/corpus/$target" \
        2>&1 | grep -E "^stat::number_of_executed_units|^stat::peak_rss|ERROR|SUMMARY|crash-|Done") || :
  if ls build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* > /dev/null 2>&1; then
    echo "fuzz.sh: fuzz-$target found a failure:"; ls build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* 2>/dev/null
    status=1
  fi
done
exit $status
