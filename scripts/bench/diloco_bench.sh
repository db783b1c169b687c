#!/usr/bin/env bash
# DiLoCo rounds against per-step averaging, one run, side by side: four workers (micro-batch 8,
# block 64, gpt2-tiny, AdamW 2e-3 with cosine) train on the demo corpus through the cloud-folder
# simulator at equal tokens, and the table gives, per configuration, the bytes of the rounds'
# files (contributions, agreements, reduced shards) each worker uploaded and downloaded per
# million tokens the run trained (not heartbeats, nor the step-0 checkpoint the founders fetch), the ratio to per-step fp32 all-gather, and the final validation loss
# with its gap to per-step.
#
#   scripts/bench/diloco_bench.sh                     # all configurations, 2,000 steps each
#   STEPS=400 CONFIGS="per-step-fp16 diloco-h50-int4" scripts/bench/diloco_bench.sh
#
# Per-step rounds through the simulated folder take ~2 s each on 2 cores (eight processes), so
# the per-step cluster runs are SHORT_STEPS (200) steps, for their bytes only: a per-step round
# always carries one gradient, so its bytes per token do not depend on the run's length. The
# per-step loss baseline is one process emulating the four workers (--emulate-workers), which
# is per-step fp32 all-gather's arithmetic bit for bit (tests/cli/cluster_test.cpp). DiLoCo runs
# are whole clusters for bytes and loss; emulated-diloco-h20 and emulated-warmup-diloco-h20 are
# their fp32 arithmetic in one process, for the loss alone (the warm-up's 500 per-step rounds
# through the folder would take ~15 min). The binaries are copied first, so a rebuild during
# the run does not change them.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null

OUT=${OUT:-out/diloco_bench}
STEPS=${STEPS:-2000}
SHORT_STEPS=${SHORT_STEPS:-200}
WARMUP=${WARMUP:-500}
CONFIGS=${CONFIGS:-"per-step-fp32-allgather per-step-fp16 per-step-emulated diloco-h10-fp16 diloco-h20-fp16 diloco-h50-fp16 diloco-h50-int8 diloco-h50-int4 diloco-h48-f4-o2-fp16 warmup-diloco-h20-fp16"}
mkdir -p "$OUT/bin"
[ -n "${TABLE_ONLY:-}" ] || cp build/bin/gradbox build/bin/gradbox-sync "$OUT/bin/"
GRADBOX="$OUT/bin/gradbox"

if [ ! -f "$OUT/data/meta.json" ]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$OUT/kjv.txt"
  "$GRADBOX" --log-level warn prepare --force --out "$OUT/data" --tokenizer bpe --vocab-size 4096 \
    --input "$OUT/kjv.txt" /usr/share/games/fortunes
fi

# A fast folder (lag in tens of milliseconds): the bytes do not depend on the lag, and per-step
# rounds would otherwise spend the benchmark waiting.
SIM_ARGS="--poll-ms 10 --sim-delay-median-ms 10 --sim-delay-p90-ms 40"

TRAIN_FLAGS=(--lr 2e-3 --min-lr 2e-4 --warmup-steps 50 --threads 1 --eval-batches 32 --log-interval 500
             --checkpoint-interval 0)

# One process emulating the four workers (--emulate-workers): their cluster's fp32 arithmetic.
emulate() {
  local name=$1 start=$SECONDS
  shift
  rm -rf "$OUT/$name"
  "$GRADBOX" train --data "$OUT/data" --out "$OUT/$name/a" --model gpt2-tiny --block-size 64 --micro-batch 8 \
    --max-steps "$STEPS" --emulate-workers a:8,b:8,c:8,d:8 --eval-interval "$STEPS" "${TRAIN_FLAGS[@]}" "$@" \
    > "$OUT/$name.log" 2>&1 || { echo "$name failed: see $OUT/$name.log" >&2; exit 1; }
  echo "$name: $((SECONDS - start)) s"
}

run_config() {
  local name=$1 steps=$STEPS codec=fp16 exchange=sharded sync=()
  case $name in
    per-step-fp32-allgather) steps=$SHORT_STEPS codec=fp32 exchange=all-gather ;;
    per-step-fp16) steps=$SHORT_STEPS ;;
    per-step-emulated) emulate "$name"; return ;;
    # The cluster's fp32 arithmetic in one process (loss only): cheap rows where the folder
    # would only cost time, such as hundreds of per-step warm-up rounds.
    # emulated-[warmup-|wu<steps>-]diloco-h<H>[-olr<outer lr>][-om<outer momentum>][-ils<inner lr scale>], e.g.
    # emulated-warmup-diloco-h20-olr0.5-om0.8: the outer step's sweep; wu1000: a warm-up of
    # 1,000 per-step rounds instead of WARMUP.
    emulated-*diloco-h*)
      local flags=(--sync diloco) part parts
      IFS=- read -ra parts <<< "${name#emulated-}"
      for part in "${parts[@]}"; do
        case $part in
          diloco) ;;
          warmup) flags+=(--sync-warmup-steps "$WARMUP") ;;
          wu[0-9]*) flags+=(--sync-warmup-steps "${part#wu}") ;;
          h*) flags+=(--inner-steps "${part#h}") ;;
          olr*) flags+=(--outer-lr "${part#olr}") ;;
          ils*) flags+=(--inner-lr-scale "${part#ils}") ;;
          om*) flags+=(--outer-momentum "${part#om}") ;;
          *) echo "unknown part $part of configuration $name" >&2; exit 2 ;;
        esac
      done
      emulate "$name" "${flags[@]}"; return ;;
    # [warmup-]diloco-h<H>[-f<fragments>][-o<overlap steps>][-r<round seconds>][-p<partial every>]-<codec>,
    # e.g. diloco-h50-int4, diloco-h48-f4-o2-fp16 (streaming: four fragments, each round
    # overlapped with two steps) or warmup-diloco-h20-r30-o19-p1-int4 (the headline's
    # overlapped time boxes with partial deltas; a box long enough here for its H steps).
    diloco-* | warmup-diloco-*)
      local part parts
      sync=(--sync diloco)
      IFS=- read -ra parts <<< "$name"
      for part in "${parts[@]}"; do
        case $part in
          diloco) ;;
          warmup) sync+=(--sync-warmup-steps "$WARMUP") ;;
          h[0-9]*) sync+=(--inner-steps "${part#h}") ;;
          f[0-9]*) sync+=(--fragments "${part#f}") ;;
          o[0-9]*) sync+=(--overlap-steps "${part#o}") ;;
          r[0-9]*) sync+=(--round-seconds "${part#r}") ;;
          # An owner waits a deadline more for partials: the failover must exceed two deadlines.
          p[0-9]*) sync+=(--partial-every "${part#p}" --failover-timeout 90) ;;
          fp16 | bf16 | int8 | int4 | fp32) codec=$part ;;
          *) echo "unknown part $part of configuration $name" >&2; exit 2 ;;
        esac
      done ;;
    *) echo "unknown configuration $name" >&2; exit 2 ;;
  esac
  local start=$SECONDS
  WORKERS=a:8,b:8,c:8,d:8 STEPS=$steps MODEL=gpt2-tiny BLOCK=64 CODEC=$codec EXCHANGE=$exchange \
  GRADBOX="$GRADBOX" SIM_ARGS="$SIM_ARGS" \
    scripts/cluster.sh "$OUT/data" "$OUT/$name" --eval-interval "$steps" "${TRAIN_FLAGS[@]}" "${sync[@]}" \
    > "$OUT/$name.log" 2>&1 || { echo "$name failed: see $OUT/$name.log" >&2; exit 1; }
  echo "$name: $((SECONDS - start)) s"
}

# TABLE_ONLY=1: the table over runs already in $OUT (for example ones made by several calls).
[ -n "${TABLE_ONLY:-}" ] || for config in $CONFIGS; do run_config "$config"; done

.venv/bin/python - "$OUT" $CONFIGS <<'PY'
import json, os, sys
out, configs = sys.argv[1], sys.argv[2:]
rows = {}
for name in configs:
    run = os.path.join(out, name)
    workers = sorted(w for w in os.listdir(run) if os.path.isdir(os.path.join(run, w, "sync")))
    up = down = 0.0
    for w in workers:
        s = json.load(open(os.path.join(run, w, "sync", "exchange", "stats.json")))
        up += s["round_bytes_written"]
        down += s["round_bytes_read"]  # each round file once
    workers = workers or ["(one process)"]
    metrics = [json.loads(l) for l in open(os.path.join(run, "a", "metrics.jsonl"))]
    tokens = max(r["tokens"] for r in metrics if "tokens" in r)  # all workers' tokens behind a's state
    val = [r["val_loss"] for r in metrics if "val_loss" in r]
    steps = max(r["step"] for r in metrics if "loss" in r)  # training steps (a closed box's round record names the next)
    rounds = max((r["round"] for r in metrics if "round" in r), default=steps)
    rows[name] = dict(up=up / len(workers) / (tokens / 1e6), down=down / len(workers) / (tokens / 1e6),
                      per_round=up / len(workers) / max(rounds, 1),
                      val=val[-1] if val else float("nan"), steps=steps, tokens=tokens)
base = rows.get("per-step-fp32-allgather")
ref = rows.get("per-step-emulated")
width = max(len(name) for name in configs)
print(f"\n{'configuration':{width}s} {'steps':>6s} {'up MB/Mtok':>11s} {'down MB/Mtok':>13s} {'up KB/round':>12s} {'vs fp32 AG':>11s} {'val loss':>9s} {'vs per-step':>12s}")
for name in configs:
    r = rows[name]
    moved = r["up"] + r["down"]
    if name.endswith("emulated") or name.startswith("emulated-"):
        up, down, per_round, ratio = "-", "-", "-", "(no folder)"
    else:
        up, down, per_round = f"{r['up'] / 1e6:.3f}", f"{r['down'] / 1e6:.3f}", f"{r['per_round'] / 1e3:.1f}"
        ratio = f"{(base['up'] + base['down']) / moved:.0f}x less" if base and name != "per-step-fp32-allgather" else "1x"
    if ref and r["steps"] == ref["steps"]:
        val, gap = f"{r['val']:.4f}", f"{100 * (r['val'] / ref['val'] - 1):+.1f}%"
    else:
        val, gap = "-", "(bytes only)"
    print(f"{name:{width}s} {r['steps']:6d} {up:>11s} {down:>13s} {per_round:>12s} {ratio:>11s} {val:>9s} {gap:>12s}")
PY
