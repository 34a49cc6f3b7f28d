#!/usr/bin/env bash
# Builds the importer fuzzers (preset `fuzz`, clang) and runs each for
# SECONDS (default 10; CI) on the seeds here plus ../shared/data when present.
# Prints the executions each ran; exits non-zero on the first crash (the
# reproducer is left in $OUT/crash-*).
#   src/importers/fuzz/run_fuzzers.sh 600      # longer, by hand
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds="${1:-10}"
out="${OUT:-/tmp/pitstop-fuzz}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
# A tree already configured with the fuzzers (CI's ASan tree, preset `asan`)
# is used as it is; otherwise $build is configured for the fuzzers alone.
if ! grep -qs '^PITSTOP_BUILD_FUZZERS:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPITSTOP_BUILD_FUZZERS=ON -DPITSTOP_BUILD_TESTS=OFF \
    -DPITSTOP_BUILD_BENCHMARKS=OFF > /dev/null
fi
cmake --build "$build" -j 2 --target pickle_fuzzer flight_recorder_fuzzer \
  kineto_fuzzer inspector_fuzzer
seeds=src/importers/fuzz/seeds
data=../shared/data
mkdir -p "$out"/{fr,kineto,inspector}
cp "$seeds"/fr_small.* "$out/fr/"
cp "$seeds"/kineto_small.json "$out/kineto/"
cp "$seeds"/inspector_small.log "$out/inspector/"
if [[ -d "$data/flight-recorder" ]]; then
  for d in "$data"/flight-recorder/*/; do
    for f in "$d"_dump_*; do cp "$f" "$out/fr/$(basename "$d")$(basename "$f")"; done
  done
fi
run() {
  local name="$1" corpus="$2"
  shift 2
  if ! "$build/src/importers/fuzz/$name" "$corpus" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -artifact_prefix="$out/" "$@" 2> "$out/$name.log"; then
    echo "$name: FAILED; the end of $out/$name.log:" >&2
    tail -n 30 "$out/$name.log" >&2
    return 1
  fi
  echo "$name: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$out/$name.log")"
}
run pickle_fuzzer "$out/fr"
run flight_recorder_fuzzer "$out/fr"
run kineto_fuzzer "$out/kineto" -max_len=65536
run inspector_fuzzer "$out/inspector" -max_len=65536
