#!/usr/bin/env bash
# A local cluster: N gradbox workers on this machine, each with its gradbox-sync sidecar, training
# one model through one shared folder. By default the folder is the cloud-folder simulator: each
# worker sees it with its own Drive-like lag (scaled down) and with faults (0-byte placeholders,
# truncated and corrupt copies, stale and incomplete listings).
#
#   scripts/cluster.sh DATA_DIR OUT_DIR [extra gradbox train flags...]
#
# Environment: WORKERS="a:8,b:4,c:6" (name:micro_batch; different sizes are fine, averages are
# token-weighted), STEPS, MODEL, BLOCK, CODEC, EXCHANGE (all-gather|sharded), BACKEND (sim|mounted),
# SIM_ARGS (simulator flags), GRADBOX (the binary).
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${1:?usage: scripts/cluster.sh DATA_DIR OUT_DIR [train flags...]}
OUT=${2:?usage: scripts/cluster.sh DATA_DIR OUT_DIR [train flags...]}
shift 2
GRADBOX=${GRADBOX:-build/bin/gradbox}
WORKERS=${WORKERS:-a:8,b:4,c:6}
STEPS=${STEPS:-300}
MODEL=${MODEL:-gpt2-mini}
BLOCK=${BLOCK:-128}
CODEC=${CODEC:-fp16}
EXCHANGE=${EXCHANGE:-sharded}
BACKEND=${BACKEND:-sim}
# Drive: ~20 s median, ~2 min p90 to see another session's file; here 100x faster.
SIM_ARGS=${SIM_ARGS:---poll-ms 50 --sim-delay-median-ms 200 --sim-delay-p90-ms 1200 --sim-placeholder-prob 0.1 --sim-truncate-prob 0.1 --sim-corrupt-prob 0.02 --sim-stale-list-prob 0.05 --sim-missing-prob 0.05 --sim-duplicate-prob 0.05}

IFS=, read -ra SPECS <<< "$WORKERS"
NAMES=()
for spec in "${SPECS[@]}"; do NAMES+=("${spec%%:*}"); done
PEERS=$(IFS=,; echo "${NAMES[*]}")

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== $((${#NAMES[@]})) workers ($WORKERS) on $BACKEND folder $OUT/shared: $MODEL, $STEPS rounds, $EXCHANGE exchange, $CODEC+zstd =="
pids=()
for spec in "${SPECS[@]}"; do
  name=${spec%%:*}
  micro=${spec##*:}
  sync_args=$([ "$BACKEND" = sim ] && echo "$SIM_ARGS --sim-seed ${#name}$RANDOM --sim-log $OUT/$name/sim-faults.jsonl" || echo "--poll-ms 50")
  mkdir -p "$OUT/$name"
  "$GRADBOX" train --data "$DATA" --out "$OUT/$name" --model "$MODEL" --block-size "$BLOCK" \
    --micro-batch "$micro" --max-steps "$STEPS" --local-workers "${#NAMES[@]}" \
    --shared "$OUT/shared" --worker "$name" --peers "$PEERS" --codec "$CODEC" --exchange "$EXCHANGE" \
    --sync-backend "$BACKEND" --sync-args "$sync_args" --checkpoint-interval 50 "$@" 2>&1 |
    sed -u "s/^/[$name] /" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ $status -eq 0 ] || { echo "a worker failed; logs above and in $OUT/*/sync/syncer.log" >&2; exit 1; }

echo
echo "== replicas (final model.safetensors) =="
for name in "${NAMES[@]}"; do
  ckpt=$(ls -d "$OUT/$name"/checkpoints/step_* | tail -1)
  echo "$name  $(md5sum < "$ckpt/model.safetensors" | cut -c1-16)  $ckpt"
done
echo
echo "== per worker: exchange and syncer counters =="
.venv/bin/python - "$OUT" "$STEPS" "${NAMES[@]}" <<'PY'
import json, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'worker':8} {'up MB/round':>12} {'down MB/round':>14} {'wait s/round':>13} {'left out':>9} {'failovers':>10} {'fp checks':>10} {'faults injected':>16} {'partial seen':>13} {'rejected':>9}")
for n in names:
    s = json.load(open(f"{out}/{n}/sync/syncer/stats.json"))
    e = json.load(open(f"{out}/{n}/sync/exchange/stats.json"))
    faults = sum(v for k, v in s.get("sim_faults", {}).items() if k != "delay")
    print(f"{n:8} {s['bytes_uploaded']/rounds/1e6:12.2f} {s['bytes_downloaded']/rounds/1e6:14.2f} {e['wait_seconds']/rounds:13.2f} "
          f"{e['contributions_left_out']:9d} {e['failovers']:10d} {e['fingerprints_checked']:10d} {faults:16d} "
          f"{s['incomplete_seen'] + s['corrupt_seen']:13d} {e['rejected_files']:9d}")
PY
