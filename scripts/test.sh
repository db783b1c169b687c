#!/usr/bin/env bash
# The whole test suite: set up (idempotent), build, and run every CPU test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -L cpu -j 2 --timeout 600
