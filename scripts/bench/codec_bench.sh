#!/usr/bin/env bash
# The gradient codec on real GPT-2 124M gradients: ratio, error and GB/s per mode
# (see tests/codec/codec_bench.cpp). Arguments go to the bench, e.g.
#   scripts/bench/codec_bench.sh --warmup-steps 0 --repeats 7
# BUILD_DIR (default build) must be a configured build folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" -j2 --target codec_bench
"$BUILD_DIR/tests/codec/codec_bench" "$@"
