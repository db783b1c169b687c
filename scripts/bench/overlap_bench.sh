#!/usr/bin/env bash
# What the exchange costs a training step when it overlaps the next one: one worker trains
#   (a) alone, with no exchange;
#   (b) through a local folder (mounted backend, its gradbox-sync sidecar), rounds in order;
#   (c) the same with --overlap (round r's exchange runs while step r+1 computes);
# side by side in one run, on the same data, model and seed, repeated REPEATS times in turn
# (a b c a b c ...), and prints the median step time of each and the ratios (c)/(a) (target
# <= 1.10) and (b)/(a). Step times come from metrics.jsonl (step_seconds), the first SKIP steps
# of each run (warm-up, first-touch of the buffers) left out.
#
#   scripts/bench/overlap_bench.sh [extra gradbox train flags...]
#
# Environment: MODEL (gpt2: GPT-2 124M's shape on the data's 4096-token vocabulary, 89M
# parameters), BLOCK (128), MICRO (4), STEPS (24), SKIP (4), REPEATS (2), THREADS (1),
# CODEC (fp16), EXCHANGE (all-gather: with one worker, sharded would also publish the reduced
# shard, twice the bytes), OUT (/tmp/gradbox_overlap_bench), GRADBOX (build/bin/gradbox).
# THREADS=1 computes on one core and leaves the other to the exchange and the syncer, as a GPU
# worker's step leaves its host's CPU to them; THREADS=2 on this 2-core machine makes compute
# and exchange share both cores, where overlap can hide waiting but not CPU work.
set -euo pipefail
cd "$(dirname "$0")/../.."
GRADBOX=${GRADBOX:-build/bin/gradbox}
MODEL=${MODEL:-gpt2}
BLOCK=${BLOCK:-128}
MICRO=${MICRO:-4}
STEPS=${STEPS:-24}
SKIP=${SKIP:-4}
REPEATS=${REPEATS:-2}
CODEC=${CODEC:-fp16}
EXCHANGE=${EXCHANGE:-all-gather}
THREADS=${THREADS:-1}
OUT=${OUT:-/tmp/gradbox_overlap_bench}
[ -x "$GRADBOX" ] || { echo "overlap_bench: $GRADBOX is not built (scripts/setup.sh)" >&2; exit 2; }

mkdir -p "$OUT"
if [ ! -f "$OUT/data/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$OUT/kjv.txt"
  "$GRADBOX" --log-level warn prepare --force --out "$OUT/data" --tokenizer bpe --vocab-size 4096 --input "$OUT/kjv.txt"
fi

common=(--data "$OUT/data" --model "$MODEL" --block-size "$BLOCK" --micro-batch "$MICRO" --max-steps "$STEPS"
        --seed 1 --log-interval 1 --eval-interval 0 --checkpoint-interval 0 --threads "$THREADS" "$@")
run() {  # run NAME [flags...]
  local name=$1
  shift
  rm -rf "$OUT/$name"
  "$GRADBOX" --log-level warn train "${common[@]}" --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 ||
    { echo "overlap_bench: $name failed; see $OUT/$name.log" >&2; tail -20 "$OUT/$name.log" >&2; exit 1; }
}
folder=(--shared "$OUT/shared" --worker w0 --peers w0 --codec "$CODEC" --exchange "$EXCHANGE" --sync-backend mounted
        --sync-args "--poll-ms 20")
for i in $(seq 1 "$REPEATS"); do
  run "alone-$i"
  rm -rf "$OUT/shared"; run "folder-$i" "${folder[@]}"
  rm -rf "$OUT/shared"; run "overlap-$i" "${folder[@]}" --overlap
  echo "repeat $i of $REPEATS done"
done

.venv/bin/python - "$OUT" "$REPEATS" "$SKIP" "$MODEL" "$BLOCK" "$MICRO" "$CODEC" "$EXCHANGE" "$THREADS" <<'PY'
import json, statistics, sys
out, repeats, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model, block, micro, codec, exchange, threads = sys.argv[4:10]
def steps(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    rows = [r for r in rows if "step_seconds" in r and r["step"] > skip]
    return [r["step_seconds"] for r in rows], [r.get("exchange_wait_seconds", 0.0) for r in rows]
med = {}
print(f"{model}, block {block}, micro-batch {micro}, {threads} compute thread(s); {codec}+zstd {exchange}; "
      f"{repeats} runs each, steps after {skip}")
print(f"{'run':10} {'steps':>6} {'median step s':>14} {'min':>7} {'max':>7} {'median wait s':>14}")
for kind in ("alone", "folder", "overlap"):
    times, waits = [], []
    for i in range(1, repeats + 1):
        t, w = steps(f"{kind}-{i}")
        times += t
        waits += w
    med[kind] = statistics.median(times)
    print(f"{kind:10} {len(times):6d} {med[kind]:14.3f} {min(times):7.3f} {max(times):7.3f} {statistics.median(waits):14.3f}")
print(f"overlap / alone: {med['overlap'] / med['alone']:.3f}x (target <= 1.10); "
      f"folder (no overlap) / alone: {med['folder'] / med['alone']:.3f}x")
PY
