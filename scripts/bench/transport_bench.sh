#!/usr/bin/env bash
# The network transport against its references, side by side in one run:
#   1. gradbox's all-reduce (NetworkExchange) of a 124M-element fp32 buffer against a bare c10d
#      allreduce of the same buffer, 2 ranks over Gloo on loopback, measured alternately
#      (tests/transport/transport_bench.cpp; target: within 1.2x of the bare time);
#   2. training tokens/s of the cluster: 1 worker alone, 2 workers over Gloo (--transport c10d)
#      with the gradient's buckets all-reduced as backward makes them (the default) and sent
#      whole after backward (--c10d-overlap-backward false), 2 workers through a local folder (mounted backend, gradbox-sync sidecars), repeated
#      REPEATS times in turn; tokens/s from metrics.jsonl (all workers' tokens per step over the
#      step's seconds, the first SKIP steps left out), medians and ratios printed.
# On this 2-core machine each worker computes on one core (THREADS=1), so 2 workers can at best
# double one; the folder's workers also share the cores with their syncers.
#
#   scripts/bench/transport_bench.sh [extra gradbox train flags...]
#
# Environment: MODEL (gpt2: GPT-2 124M's shape on the data's 4096-token vocabulary), BLOCK (128),
# MICRO (4), STEPS (8), SKIP (2), REPEATS (2), CODEC (fp16, the folder's), ELEMENTS (124000000),
# OUT (/tmp/gradbox_transport_bench), GRADBOX (build/bin/gradbox).
set -euo pipefail
cd "$(dirname "$0")/../.."
GRADBOX=${GRADBOX:-build/bin/gradbox}
MODEL=${MODEL:-gpt2}
BLOCK=${BLOCK:-128}
MICRO=${MICRO:-4}
STEPS=${STEPS:-8}
SKIP=${SKIP:-2}
REPEATS=${REPEATS:-2}
CODEC=${CODEC:-fp16}
ELEMENTS=${ELEMENTS:-124000000}
OUT=${OUT:-/tmp/gradbox_transport_bench}
[ -x "$GRADBOX" ] || { echo "transport_bench: $GRADBOX is not built (scripts/setup.sh)" >&2; exit 2; }
ninja -C build transport_bench > /dev/null

echo "== 1. all-reduce: gradbox against bare c10d =="
build/tests/transport/transport_bench --elements "$ELEMENTS" --reps 5 --ranks 2 2>/dev/null

mkdir -p "$OUT"
if [ ! -f "$OUT/data/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$OUT/kjv.txt"
  "$GRADBOX" --log-level warn prepare --force --out "$OUT/data" --tokenizer bpe --vocab-size 4096 --input "$OUT/kjv.txt"
fi
common=(--data "$OUT/data" --model "$MODEL" --block-size "$BLOCK" --micro-batch "$MICRO" --max-steps "$STEPS"
        --seed 1 --log-interval 1 --eval-interval 0 --checkpoint-interval 0 --threads 1 "$@")
run_workers() {  # run_workers NAME N [flags...]: N workers w0.. at once
  local name=$1 n=$2 pids=() peers w
  shift 2
  rm -rf "$OUT/$name"
  mkdir -p "$OUT/$name/shared"
  peers=$(seq -s, -f "w%g" 0 $((n - 1)))
  for w in $(seq 0 $((n - 1))); do
    local extra=()
    ((n > 1)) && extra=(--shared "$OUT/$name/shared" --worker "w$w" --peers "$peers")
    "$GRADBOX" --log-level warn train "${common[@]}" --out "$OUT/$name/w$w" "${extra[@]}" "$@" \
      > "$OUT/$name/w$w.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { echo "transport_bench: $name failed; see $OUT/$name" >&2; exit 1; }
  done
  # Only metrics.jsonl is read: the checkpoints (GBs at 124M, per worker and run) go.
  rm -rf "$OUT/$name"/w*/checkpoints "$OUT/$name"/w*/sync "$OUT/$name/shared"
}
echo "== 2. training tokens/s: $MODEL, block $BLOCK, micro-batch $MICRO per worker, $STEPS steps =="
for i in $(seq 1 "$REPEATS"); do
  run_workers "alone-$i" 1
  run_workers "gloo-$i" 2 --transport c10d --c10d-interface lo
  run_workers "whole-$i" 2 --transport c10d --c10d-interface lo --c10d-overlap-backward false
  run_workers "folder-$i" 2 --codec "$CODEC" --sync-backend mounted --sync-args "--poll-ms 20"
  echo "repeat $i of $REPEATS done"
done

.venv/bin/python - "$OUT" "$REPEATS" "$SKIP" "$CODEC" <<'PY'
import json, statistics, sys
out, repeats, skip, codec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def steps_of(run):
    return [json.loads(l) for l in open(f"{out}/{run}/w0/metrics.jsonl") if '"step_seconds"' in l][skip:]
def tokens_per_second(run):
    steps = steps_of(run)
    tokens = steps[-1]["tokens"] - steps[0]["tokens"]
    return tokens / sum(s["step_seconds"] for s in steps[1:])
def exposed_wait(run):  # seconds per step blocked on the exchange after the step's compute
    return statistics.median(s.get("exchange_wait_seconds", 0.0) for s in steps_of(run))
names = ("alone", "gloo", "whole", "folder")
runs = {name: [f"{name}-{i}" for i in range(1, repeats + 1)] for name in names}
rows = {name: statistics.median(tokens_per_second(r) for r in runs[name]) for name in names}
waits = {name: statistics.median(exposed_wait(r) for r in runs[name]) for name in names}
print(f"{'configuration':<58}{'tokens/s':>10}{'vs 1 worker':>13}{'wait s/step':>13}")
labels = {"alone": "1 worker", "gloo": "2 workers, c10d (Gloo, loopback), overlapping backward",
          "whole": "2 workers, c10d (Gloo, loopback), sent after backward",
          "folder": f"2 workers, local folder ({codec}+zstd)"}
for name, tps in rows.items():
    print(f"{labels[name]:<58}{tps:>10.0f}{tps / rows['alone']:>12.2f}x{waits[name]:>13.3f}")
print(f"c10d overlapping backward over c10d after backward: {rows['gloo'] / rows['whole']:.2f}x")
print(f"c10d over the folder: {rows['gloo'] / rows['folder']:.2f}x")
PY
