#!/usr/bin/env bash
# tokens/s and peak RSS of `gradbox train` against the same GPT-2, batch, AdamW and thread count
# in a plain Python PyTorch loop (scripts/bench/train_python.py, same torch), run side by side
# and alternated REPEATS times; prints medians and C++/Python ratios.
#   scripts/bench/train_vs_python.sh            (needs ../shared/data/gpt2 or GPT2_DIR)
#   GRADBOX_FLAGS="--lm-head-chunk 128" ONLY=1 scripts/bench/train_vs_python.sh   (extra gradbox flags)
set -euo pipefail
cd "$(dirname "$0")/../.."
G=build/bin/gradbox
PY=.venv/bin/python
GPT2_DIR=${GPT2_DIR:-../shared/data/gpt2}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-$(nproc)}
W=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$W"

# The KJV Bible, twice: GPT-2 tokens (vocabulary 50257, so the 124M config is exactly GPT-2
# small) and a 4096-token BPE for the tiny config, where framework overhead is visible.
if [ ! -f "$W/gpt2/meta.json" ] || [ ! -f "$W/bpe4k/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$W/kjv.txt"
  "$G" --log-level warn prepare --force --input "$W/kjv.txt" --out "$W/gpt2" --tokenizer gpt2 --gpt2-dir "$GPT2_DIR"
  "$G" --log-level warn prepare --force --input "$W/kjv.txt" --out "$W/bpe4k" --tokenizer bpe --vocab-size 4096
fi

# name data vocab preset layers heads embd block batch timed warmup
CONFIGS=("tiny bpe4k 4096 gpt2-tiny 2 2 64 64 8 60 10"
         "tiny-gpt2vocab gpt2 50257 gpt2-tiny 2 2 64 64 8 40 5"
         "124M gpt2 50257 gpt2 12 12 768 64 4 8 2")
[ -n "${ONLY:-}" ] && CONFIGS=("${CONFIGS[@]:$ONLY:1}")  # ONLY=N runs config N alone

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

for config in "${CONFIGS[@]}"; do
  read -r name data vocab preset layers heads embd block batch timed warmup <<<"$config"
  : > "$W/$name.cpp" ; : > "$W/$name.py" ; : > "$W/$name.pyfused"
  for rep in $(seq "$REPEATS"); do
    run="$W/run_${name}_$rep"; rm -rf "$run"
    /usr/bin/time -f "%M" -o "$W/rss" "$G" --log-level warn train --data "$W/$data" --out "$run" --model "$preset" \
      --block-size "$block" --micro-batch "$batch" --max-steps $((timed + warmup)) --warmup-steps 10 \
      --eval-interval 0 --checkpoint-interval -1 --threads "$THREADS" ${GRADBOX_FLAGS:-}
    tps=$("$PY" -c "
import json, statistics, sys
s = [json.loads(l)['step_seconds'] for l in open('$run/metrics.jsonl') if 'step_seconds' in l][$warmup:]
print($batch * $block / statistics.median(s))")
    echo "$tps $(( $(cat "$W/rss") / 1024 ))" >> "$W/$name.cpp"
    for variant in py pyfused; do
      flag=""; [ "$variant" = pyfused ] && flag="--fused"
      OMP_WAIT_POLICY=PASSIVE "$PY" scripts/bench/train_python.py --data "$W/$data" --layers "$layers" --heads "$heads" \
        --embd "$embd" --vocab "$vocab" --block "$block" --batch "$batch" --steps "$timed" --warmup "$warmup" \
        --threads "$THREADS" $flag | "$PY" -c "import json,sys; r=json.load(sys.stdin); print(r['tokens_per_s'], int(r['peak_rss_mb']))" \
        >> "$W/$name.$variant"
    done
  done
  cpp_tps=$(cut -d' ' -f1 "$W/$name.cpp" | median); cpp_rss=$(cut -d' ' -f2 "$W/$name.cpp" | median)
  py_tps=$(cut -d' ' -f1 "$W/$name.py" | median); py_rss=$(cut -d' ' -f2 "$W/$name.py" | median)
  pf_tps=$(cut -d' ' -f1 "$W/$name.pyfused" | median); pf_rss=$(cut -d' ' -f2 "$W/$name.pyfused" | median)
  printf '%-5s block %-4s batch %-2s threads %s | tokens/s  C++ %8.0f  Python %8.0f  Python(fused AdamW) %8.0f | C++/Python %.2fx  C++/fused %.2fx | peak RSS MB  C++ %s  Python %s  fused %s\n' \
    "$name" "$block" "$batch" "$THREADS" "$cpp_tps" "$py_tps" "$pf_tps" \
    "$(echo "$cpp_tps / $py_tps" | bc -l)" "$(echo "$cpp_tps / $pf_tps" | bc -l)" "$cpp_rss" "$py_rss" "$pf_rss"
done
