#!/usr/bin/env bash
# AdamW's moments in fp32 against 8-bit moments (Note [8-bit moments] in src/kernels/adamw_q8.h),
# side by side in one run: the optimizer step alone (optimizer_bench: ns a parameter, one
# thread), then the same model, data and seeds trained both ways: the final validation loss and
# its gap, the median step time and its ratio, and the moments' bytes from --memory-report.
#   scripts/bench/moments_bench.sh
# Environment: MODEL (gpt2-mini), STEPS (600), SEEDS ("1 2"), THREADS (nproc), BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
G=build/bin/gradbox
PY=.venv/bin/python
MODEL=${MODEL:-gpt2-mini}
STEPS=${STEPS:-600}
SEEDS=${SEEDS:-"1 2"}
THREADS=${THREADS:-$(nproc)}
W=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$W"
cmake --build build --target optimizer_bench >/dev/null
build/tests/worker/optimizer_bench
echo

if [ ! -f "$W/data/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$W/kjv.txt"
  "$G" --log-level warn prepare --force --out "$W/data" --tokenizer bpe --vocab-size 4096 \
    --input "$W/kjv.txt" /usr/share/games/fortunes
fi

# Prints "final-val-loss median-step-seconds" of one run's metrics.
summary() {
  "$PY" - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [r["val_loss"] for r in rows if "val_loss" in r]
steps = [r["step_seconds"] for r in rows if "step_seconds" in r][20:]
print(val[-1], statistics.median(steps))
PY
}

printf '%-5s | %-21s | %-21s | %s\n' seed "val loss fp32  int8" "step ms fp32  int8" "int8 vs fp32"
for seed in $SEEDS; do
  for moments in fp32 int8; do
    run="$W/run_${seed}_$moments"; rm -rf "$run"
    "$G" --log-level warn train --data "$W/data" --out "$run" --model "$MODEL" --block-size 128 \
      --micro-batch 8 --max-steps "$STEPS" --warmup-steps 30 --lr 2e-3 --min-lr 2e-4 --seed "$seed" \
      --eval-interval "$STEPS" --eval-batches 32 --checkpoint-interval -1 --threads "$THREADS" \
      --moments "$moments"
    summary "$run" > "$W/$seed.$moments"
  done
  read -r f_loss f_s < "$W/$seed.fp32"
  read -r q_loss q_s < "$W/$seed.int8"
  printf '%-5s | %9.4f %10.4f | %9.1f %10.1f | loss %+.2f%%, step time %.2fx\n' "$seed" "$f_loss" "$q_loss" \
    "$(echo "$f_s * 1000" | bc -l)" "$(echo "$q_s * 1000" | bc -l)" \
    "$(echo "($q_loss - $f_loss) / $f_loss * 100" | bc -l)" "$(echo "$q_s / $f_s" | bc -l)"
done
"$G" train --data "$W/data" --model "$MODEL" --block-size 128 --micro-batch 8 --memory-report 2>&1 | grep -i "moment" || true
"$G" train --data "$W/data" --model "$MODEL" --block-size 128 --micro-batch 8 --memory-report --moments int8 2>&1 | grep -i "moment" || true
