#!/usr/bin/env bash
# The GPU checks that a machine without a GPU cannot run, as one script within 10 minutes on one
# GPU (issue 14). It runs three kinds of check:
#   1. the CUDA kernels against their CPU references (`ctest -L gpu`) and the CUDA tests inside
#      the CPU suites, which skip without a device;
#   2. short training runs on the device that must learn: the last 20 steps' mean loss must be
#      at most 80% of the first 20's. It runs fp32, bf16, fp16 with loss scaling (a T4's), and
#      fp16 with 8-bit moments (the fused CUDA kernel);
#   3. the tokens/s of each run, side by side.
# It needs a build with CUDA (scripts/setup.sh on Colab or Kaggle, or a build folder carried in
# BUILD). DEVICE=cpu runs the same pipeline on the CPU, fp32 only, to check the script itself.
#   scripts/gpu_check.sh
# Environment: BUILD (build), DEVICE (cuda), STEPS (200), OUT (a temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-200}
OUT=${OUT:-$(mktemp -d)}
G="$BUILD/bin/gradbox"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
fail() { echo "gpu_check: $*" >&2; exit 1; }

[ -x "$G" ] || fail "$G is missing: build first (scripts/setup.sh, or cmake -S . -B $BUILD -G Ninja && cmake --build $BUILD)"
if [ "$DEVICE" = cuda ]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    fail "no CUDA device here (DEVICE=cpu checks the script on the CPU)"
  "$PY" -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"device: {p.name}, {p.total_memory / 2**30:.0f} GiB, sm {p.major}.{p.minor}")'
fi

echo "== 1. kernels against their CPU references"
cmake --build "$BUILD" --target gradbox worker_test >/dev/null
if [ "$DEVICE" = cuda ]; then
  grep -q '^CMAKE_CUDA_COMPILER:FILEPATH=.\+' "$BUILD/CMakeCache.txt" ||
    fail "$BUILD was configured without a CUDA compiler: the CUDA kernels are not built"
  cmake --build "$BUILD" --target kernels_gpu_test >/dev/null
  ctest --test-dir "$BUILD" -L gpu --output-on-failure
fi
# The CUDA tests inside the CPU suites (they skip without a device; here they must run).
"$BUILD/tests/worker/worker_test" --gtest_filter='*Cuda*:*CUDA*' --gtest_brief=1

echo "== 2. short runs that must learn"
mkdir -p "$OUT"
# The repository's own prose is the corpus: there on any machine, no download.
"$G" --log-level warn prepare --force --out "$OUT/data" --tokenizer bpe --vocab-size 1024 \
  --format paragraphs --min-stopwords 0 --input README.md

if [ "$DEVICE" = cuda ]; then
  RUNS=("fp32:fp32" "bf16:fp32" "fp16:fp32" "fp16:int8")
else
  RUNS=("fp32:fp32" "fp32:int8")
fi
printf '%-16s | %-10s | %-10s | %-10s | %s\n' "precision:moments" "loss first" "loss last" "tokens/s" verdict
status=0
for run in "${RUNS[@]}"; do
  precision=${run%%:*}
  moments=${run##*:}
  dir="$OUT/run_${precision}_$moments"
  rm -rf "$dir"
  if ! "$G" --log-level warn train --data "$OUT/data" --out "$dir" --model gpt2-tiny --block-size 64 --micro-batch 16 \
      --max-steps "$STEPS" --warmup-steps 20 --lr 2e-3 --min-lr 2e-4 --eval-interval 0 --checkpoint-interval -1 \
      --device "$DEVICE" --precision "$precision" --moments "$moments" > "$dir.log" 2>&1; then
    printf '%-16s | %s\n' "$run" "FAILED: $(tail -1 "$dir.log")"
    status=1
    continue
  fi
  read -r first last tps < <("$PY" - "$dir/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step_seconds" in r]
losses = [r["loss"] for r in steps]
tokens = statistics.median(r["tokens"] / r["step"] for r in steps)
seconds = statistics.median(r["step_seconds"] for r in steps[20:])
print(f"{statistics.mean(losses[:20]):.4f} {statistics.mean(losses[-20:]):.4f} {tokens / seconds:.0f}")
PY
  )
  verdict=$("$PY" -c "print('learns' if $last <= 0.8 * $first else 'DOES NOT LEARN')")
  [ "$verdict" = learns ] || status=1
  printf '%-16s | %-10s | %-10s | %-10s | %s\n' "$run" "$first" "$last" "$tps" "$verdict"
done
exit $status
