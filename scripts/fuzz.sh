#!/usr/bin/env bash
# Fuzzes every decoder of outside bytes (Note [Fuzzing] in tests/fuzz/fuzz_target.h): builds the
# torch-free libraries and the fuzz targets with clang, libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, then runs each target for SECONDS (default 300) on
# its saved corpus plus the seeds (fuzz_seeds), and merges what it found into the corpus
# (tests/fuzz/corpus/<target>/, replayed by the test suite). Prints executions, exec/s, corpus
# size and findings per target; exits 1 on any crash or sanitizer report (inputs kept in
# build-fuzz/findings/<target>/).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: envelope codec control_json
#                                             checkpoint_manifest model_config gpt2_tokenizer
#                                             safetensors
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-300}
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(envelope codec control_json checkpoint_manifest model_config gpt2_tokenizer safetensors)
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${GRADBOX_BUILD_JOBS:-2}

CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DGRADBOX_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzz_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}")
rm -rf "$BUILD/seeds" && "$BUILD/tests/fuzz/fuzz_seeds" "$BUILD/seeds"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
printf '%-20s %12s %10s %8s %s\n' target executions exec/s corpus findings
for t in "${TARGETS[@]}"; do
  corpus=tests/fuzz/corpus/$t
  work=$BUILD/work/$t findings=$BUILD/findings/$t
  mkdir -p "$corpus" "$work" "$findings"
  log=$BUILD/fuzz-$t.log
  set +e
  "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix="$findings/" "$work" "$corpus" "$BUILD/seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  # Keep the smallest set of inputs that covers what the runs reached, and the regressions.
  merged=$BUILD/merged/$t
  rm -rf "$merged" && mkdir -p "$merged"
  # Edges only (no hit counts): a JSON parser otherwise keeps thousands of near-copies.
  "$BUILD/tests/fuzz/fuzz_$t" -merge=1 -use_counters=0 "$merged" "$corpus" "$work" >/dev/null 2>&1 || true
  cp "$corpus"/regression-* "$merged"/ 2>/dev/null || true
  rm -rf "$corpus" && mv "$merged" "$corpus"
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  found=$(find "$findings" -type f | wc -l)
  printf '%-20s %12s %10s %8s %s\n' "$t" "$execs" "$rate" "$(ls "$corpus" | wc -l)" "$found"
  if ((rc != 0 || found > 0)); then
    status=1
    echo "  $t: exit $rc; see $log and $findings/" >&2
  fi
done
exit $status
