#!/usr/bin/env bash
# The demo: real text that Debian packages ship (the King James Bible and the fortune files),
# cleaned and tokenized with a BPE trained on it, then a small GPT trained for a few minutes by
# three workers that share nothing but a folder (the cloud-folder simulator, with lag and faults),
# each with its own batch size; the loss falls, the replicas end identical, and the model writes
# a sample.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

GRADBOX=build/bin/gradbox
OUT=${GRADBOX_DEMO_DIR:-out/demo}
STEPS=${GRADBOX_DEMO_STEPS:-150}
mkdir -p "$OUT"

# One verse per line, without the "Ge1:1" references.
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$OUT/kjv.txt"

"$GRADBOX" prepare --force --out "$OUT/data" --tokenizer bpe --vocab-size 4096 \
  --input "$OUT/kjv.txt" /usr/share/games/fortunes

# Three workers (micro-batches 8, 4 and 6) and their syncers; lag scaled down from Drive's.
WORKERS=a:8,b:4,c:6 STEPS="$STEPS" MODEL=gpt2-mini BLOCK=128 GRADBOX="$GRADBOX" \
SIM_ARGS="--poll-ms 50 --sim-delay-median-ms 50 --sim-delay-p90-ms 300 --sim-placeholder-prob 0.1 --sim-truncate-prob 0.1 --sim-corrupt-prob 0.02 --sim-stale-list-prob 0.05 --sim-missing-prob 0.05 --sim-duplicate-prob 0.05" \
  scripts/cluster.sh "$OUT/data" "$OUT/cluster" --lr 2e-3 --min-lr 2e-4 --warmup-steps 20 \
  --eval-interval 50 --eval-batches 4 --log-interval 10
rm -rf "$OUT/run" && ln -s cluster/a "$OUT/run"

echo
echo "== loss (from $OUT/run/metrics.jsonl) =="
.venv/bin/python - "$OUT/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
val = [r for r in rows if "val_loss" in r]
for r in train[:: max(1, len(train) // 10)] + [train[-1]]:
    print(f"step {r['step']:5d}  train loss {r['loss']:.3f}")
for r in val:
    print(f"step {r['step']:5d}  val loss   {r['val_loss']:.3f}")
PY

echo
echo "== a sample of 300 tokens (a verse is a document: each end of text starts a new line) =="
"$GRADBOX" --log-level warn sample --from "$OUT/cluster/a" --prompt "And God said" --temperature 0.8 --top-k 50 --max-new-tokens 300 --past-end-of-text
