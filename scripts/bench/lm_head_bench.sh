#!/usr/bin/env bash
# The chunked LM head (Note [Chunked LM head] in src/model/chunked_lm_loss.h) against the
# unchunked one, side by side in one run: `gradbox train` tokens/s (median step time after the
# warm-up) and peak RSS (/usr/bin/time), the two alternated REPEATS times, medians and ratios.
# At GPT-2's 50,257-token vocabulary, where the head's logits are the largest tensors of a step.
#   scripts/bench/lm_head_bench.sh            (needs ../shared/data/gpt2 or GPT2_DIR)
# Environment: CHUNK (128 rows), REPEATS (3), THREADS (nproc), BENCH_DIR (a temp folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
G=build/bin/gradbox
PY=.venv/bin/python
GPT2_DIR=${GPT2_DIR:-../shared/data/gpt2}
CHUNK=${CHUNK:-128}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-$(nproc)}
W=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$W"
if [ ! -f "$W/gpt2/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$W/kjv.txt"
  "$G" --log-level warn prepare --force --input "$W/kjv.txt" --out "$W/gpt2" --tokenizer gpt2 --gpt2-dir "$GPT2_DIR"
fi

# name preset block batch timed warmup
CONFIGS=("tiny-50k gpt2-tiny 64 8 30 5"
         "124M gpt2 256 4 5 2")
[ -n "${ONLY:-}" ] && CONFIGS=("${CONFIGS[@]:$ONLY:1}")
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-9s %-6s %-6s | %-22s | %-22s | %s\n' config block batch "tokens/s full  chunked" "peak RSS MB full chunked" "chunked/full"
for config in "${CONFIGS[@]}"; do
  read -r name preset block batch timed warmup <<<"$config"
  : > "$W/$name.full"; : > "$W/$name.chunked"
  for rep in $(seq "$REPEATS"); do
    for variant in full chunked; do
      run="$W/run_${name}_${variant}_$rep"; rm -rf "$run"
      extra=(); [ "$variant" = chunked ] && extra=(--lm-head-chunk "$CHUNK")
      /usr/bin/time -f "%M" -o "$W/rss" "$G" --log-level warn train --data "$W/gpt2" --out "$run" --model "$preset" \
        --block-size "$block" --micro-batch "$batch" --max-steps $((timed + warmup)) --warmup-steps 10 \
        --eval-interval 0 --checkpoint-interval -1 --threads "$THREADS" --dropout 0 "${extra[@]}"
      tps=$("$PY" -c "
import json, statistics
s = [json.loads(l)['step_seconds'] for l in open('$run/metrics.jsonl') if 'step_seconds' in l][$warmup:]
print($batch * $block / statistics.median(s))")
      echo "$tps $(( $(cat "$W/rss") / 1024 ))" >> "$W/$name.$variant"
    done
  done
  f_tps=$(cut -d' ' -f1 "$W/$name.full" | median); f_rss=$(cut -d' ' -f2 "$W/$name.full" | median)
  c_tps=$(cut -d' ' -f1 "$W/$name.chunked" | median); c_rss=$(cut -d' ' -f2 "$W/$name.chunked" | median)
  printf '%-9s %-6s %-6s | %9.0f %12.0f | %9s %12s | tokens/s %.2fx, peak RSS %.2fx\n' "$name" "$block" "$batch" \
    "$f_tps" "$c_tps" "$f_rss" "$c_rss" "$(echo "$c_tps / $f_tps" | bc -l)" "$(echo "$c_rss / $f_rss" | bc -l)"
done
