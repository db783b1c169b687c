#!/usr/bin/env bash
# What the thermometers (Note [Thermometers] in src/model/thermometer.h) cost: `gradbox train`
# tokens/s with --thermometer-interval 0 (off), 10 and 1 (every step), alternated REPEATS times,
# medians of the step times after the warm-up, and each one's ratio to off.
# Environment: MODEL (gpt2-mini), BLOCK (256), MICRO (8), STEPS (30), WARMUP (5), REPEATS (3).
set -euo pipefail
cd "$(dirname "$0")/../.."
G=build/bin/gradbox
PY=.venv/bin/python
MODEL=${MODEL:-gpt2-mini}; BLOCK=${BLOCK:-256}; MICRO=${MICRO:-8}; STEPS=${STEPS:-30}; WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$W/kjv.txt"
"$G" --log-level warn prepare --force --input "$W/kjv.txt" --out "$W/data" --tokenizer bpe --vocab-size 8192
for rep in $(seq "$REPEATS"); do
  for interval in 0 10 1; do
    run="$W/run_${interval}_$rep"
    "$G" --log-level warn train --data "$W/data" --out "$run" --model "$MODEL" --block-size "$BLOCK" \
      --micro-batch "$MICRO" --max-steps "$STEPS" --eval-interval 0 --checkpoint-interval -1 \
      --thermometer-interval "$interval"
    "$PY" -c "
import json, statistics
s = [json.loads(l)['step_seconds'] for l in open('$run/metrics.jsonl') if 'step_seconds' in l][$WARMUP:]
print(sum(s) / len(s))" >> "$W/interval_$interval"
  done
done
"$PY" - "$W" "$MICRO" "$BLOCK" <<'PY'
import statistics, sys
w, micro, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seconds = {i: statistics.median(float(l) for l in open(f"{w}/interval_{i}")) for i in (0, 10, 1)}
for i, s in seconds.items():
    label = "off" if i == 0 else f"every {i} step" + ("s" if i > 1 else "")
    print(f"thermometers {label:<14} {micro * block / s:8.0f} tokens/s  {s / seconds[0]:.3f}x the step time of off")
PY
