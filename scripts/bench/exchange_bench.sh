#!/usr/bin/env bash
# The folder exchange on a local folder with real syncer engines and a real GPT-2 124M gradient:
# all_reduce time per round and bytes per worker per round, per pattern x codec
# (see tests/exchange/exchange_bench.cpp). Arguments go to the bench, e.g.
#   scripts/bench/exchange_bench.sh --rounds 3 --codecs fp16,int8
# BUILD_DIR (default build): the build folder (configured here when it is not yet).
# GRAD (default /tmp/gradbox_gpt2_124m_grad.bin): the dumped gradient, made once by
#   codec_bench --dump and reused while it exists.
# BENCH_DIR (default /tmp/gradbox_exchange_bench): the round folders, removed after each
#   configuration; needs about 15 GB free at the default --gc-window 2.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
GRAD=${GRAD:-/tmp/gradbox_gpt2_124m_grad.bin}
BENCH_DIR=${BENCH_DIR:-/tmp/gradbox_exchange_bench}
if [[ ! -f "$BUILD_DIR/build.ninja" && ! -f "$BUILD_DIR/Makefile" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja
fi
cmake --build "$BUILD_DIR" -j2 --target codec_bench exchange_bench
if [[ ! -s "$GRAD" ]]; then
  echo "dumping a GPT-2 124M gradient to $GRAD (codec_bench --dump)"
  "$BUILD_DIR/tests/codec/codec_bench" --dump "$GRAD"
fi
mkdir -p "$BENCH_DIR"
df -h "$BENCH_DIR"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# Two rounds per configuration by default: on a 2-core machine an fp32 round takes about a
# minute, and the whole run should stay near 10 minutes. A later --rounds wins.
"$BUILD_DIR/tests/exchange/exchange_bench" --grad "$GRAD" --dir "$BENCH_DIR" --rounds 2 "$@" | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo
sed -n '/^SUMMARY/,$p' "$log"
exit "$rc"
