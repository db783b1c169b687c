#!/usr/bin/env bash
# Thousands of random schedules of the folder protocol (Note [Random schedules] in
# src/sim/schedule.h), in virtual time, split over the machine's cores.
#   scripts/schedules.sh [COUNT] [FIRST_SEED]      (default 2000 seeds from 1)
# A failing seed replays exactly: build/tests/exchange/random_schedules --from SEED --count 1
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-2000}
first=${2:-1}
jobs=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target random_schedules >/dev/null
per=$(( (count + jobs - 1) / jobs ))
pids=()
for ((j = 0; j < jobs; ++j)); do
  from=$(( first + j * per ))
  n=$(( count - j * per < per ? count - j * per : per ))
  (( n > 0 )) || break
  "$BUILD_DIR/tests/exchange/random_schedules" --from "$from" --count "$n" --quiet 2>/dev/null > "/tmp/schedules.$$.$j" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat /tmp/schedules.$$.*
rm -f /tmp/schedules.$$.*
exit $status
