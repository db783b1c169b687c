#!/usr/bin/env bash
# The chaos test at length: four workers through the cloud-folder simulator (lag and faults on),
# a random one killed with SIGKILL every CHAOS_KILL_EVERY rounds and restarted after a pause;
# then the same rounds without kills. It checks that every replica ends identical, that no loss
# is NaN, that no partial file was used, and that the loss stays within 10% of the calm run, and
# prints both losses. The small version runs in the test suite.
#
#   CHAOS_ROUNDS=200 CHAOS_KILL_EVERY=10 CHAOS_SEED=3 scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target elastic_test gradbox gradbox-sync
export CHAOS_ROUNDS=${CHAOS_ROUNDS:-200} CHAOS_KILL_EVERY=${CHAOS_KILL_EVERY:-10} CHAOS_SEED=${CHAOS_SEED:-3}
echo "== chaos: $CHAOS_ROUNDS rounds, a kill every $CHAOS_KILL_EVERY rounds, seed $CHAOS_SEED =="
"$BUILD_DIR/tests/cli/elastic_test" --gtest_filter='*Chaos*'
