#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz, clang-14 with ASan and UBSan) in
# build-fuzz/ and runs each for SECONDS (default 20) from its seed corpus in
# test/fuzz/corpus/<target>. New inputs go to build-fuzz/corpus/<target>;
# a crash leaves build-fuzz/crash-* and fails the script.
#
#   scripts/fuzz.sh            # CI: 20 s per target
#   scripts/fuzz.sh 3600       # an hour per target (docs/Hardening.md)
#   scripts/fuzz.sh 600 onnx   # one target
#   FUZZ_SEED=0 scripts/fuzz.sh 3600   # a random seed (default 1: CI repeats itself)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
only=${2:-}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/shoal-ccache}
cmake -S test/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > /dev/null
ninja -C build-fuzz > build-fuzz.log 2>&1 || { tail -30 build-fuzz.log; exit 1; }
status=0
for target in onnx npy cluster; do
  [ -n "$only" ] && [ "$only" != "$target" ] && continue
  mkdir -p "build-fuzz/corpus/$target"
  echo "fuzz.sh: fuzz-$target for ${seconds} s"
  if ! (cd build-fuzz && ASAN_OPTIONS=detect_leaks=0 ./fuzz-$target \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -seed="${FUZZ_SEED:-1}" \
        -print_final_stats=1 "corpus/$target" "../test/fuzz/corpus/$target" \
        2>&1 | grep -E "^stat::number_of_executed_units|^stat::peak_rss|ERROR|SUMMARY|crash-|Done"); then
    :
  fi
  if ls build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* > /dev/null 2>&1; then
    echo "fuzz.sh: fuzz-$target found a failure:"; ls build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* 2>/dev/null
    status=1
  fi
done
exit $status
