#!/usr/bin/env bash
# Projected speed-up plots (Note [Speed-up projection] in src/sim/projection.h), from
# `gradbox simulate` sweeps: speed-up against worker count for each mode, and utilisation
# against the folder's lag. Sessions never die unless LIFE says how they do (that costs minutes
# per point). Writes $OUT/speedup.csv, $OUT/speedup_vs_workers.png and $OUT/utilisation_vs_lag.png.
#   OUT=out/speedup WORKERS=1,2,4,8,16 HOURS=12 scripts/bench/speedup_plots.sh
#   LIFE="--session-mean-hours 4 --setup-minutes 10" HOURS=24 scripts/bench/speedup_plots.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/speedup}
WORKERS=${WORKERS:-1,2,4,8,16}
HOURS=${HOURS:-12}
LINKS=(--upload-mbps 20 --download-mbps 60)
read -ra LIFE_FLAGS <<< "${LIFE:-}"
G=build/bin/gradbox
cmake --build build --target gradbox >/dev/null
mkdir -p "$OUT"
csv="$OUT/speedup.csv"
# PLOT_ONLY=1: the plots again from $OUT/speedup.csv, no sweeps.
if [ -z "${PLOT_ONLY:-}" ]; then
echo "sweep,mode,lag_median_s,workers,seconds_per_round,contributors,tokens_per_s,speedup,utilisation" > "$csv"

# Rows of the table `gradbox simulate` prints, as CSV lines after the given prefix.
rows() {
  local prefix=$1; shift
  "$G" simulate "$@" 2>/dev/null | awk -v p="$prefix" '$1 ~ /^[0-9]+$/ {
    gsub("x", "", $5); gsub("%", "", $6); print p "," $1 "," $2 "," $3 "," $4 "," $5 "," $6 / 100 }' >> "$csv"
}

MODES=("source scheme|--source-scheme"
       "per-step sharded fp16|--mode per-step-sharded --codec fp16"
       "DiLoCo H=10 int4|--mode diloco --inner-steps 10 --codec int4"
       "DiLoCo int4 in overlapped 2430 s boxes with partial deltas|--mode diloco --inner-steps 20 --overlap-steps 19 --round-seconds 2430 --partial-every 1 --codec int4")
for entry in "${MODES[@]}"; do
  name=${entry%%|*}; flags=${entry#*|}
  echo "workers: $name"
  # shellcheck disable=SC2086
  rows "workers,$name,20" $flags --workers "$WORKERS" --hours "$HOURS" "${LINKS[@]}" "${LIFE_FLAGS[@]}"
done
for entry in "${MODES[@]:1}"; do
  name=${entry%%|*}; flags=${entry#*|}
  for lag in 5 10 20 40 80; do
    echo "lag $lag s: $name"
    # shellcheck disable=SC2086
    rows "lag,$name,$lag" $flags --workers 5 --hours "$HOURS" --lag-median "$lag" --lag-p90 $((lag * 6)) "${LINKS[@]}" \
      "${LIFE_FLAGS[@]}"
  done
done
fi

.venv/bin/python -c "import matplotlib" 2>/dev/null || .venv/bin/pip install -q matplotlib
.venv/bin/python - "$csv" "$OUT" "${LIFE:-}" <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FormatStrFormatter, NullFormatter
rows = list(csv.DictReader(open(sys.argv[1])))
out = sys.argv[2]
def series(sweep, x):
    by = {}
    for r in rows:
        if r["sweep"] == sweep:
            by.setdefault(r["mode"], []).append((float(r[x]), r))
    return by
fig, ax = plt.subplots(figsize=(7, 4.5))
for mode, pts in series("workers", "workers").items():
    pts.sort(key=lambda p: p[0])
    ax.plot([p[0] for p in pts], [float(p[1]["speedup"]) for p in pts], marker="o", label=mode)
top = max(float(r["workers"]) for r in rows)
ax.plot([1, top], [1, top], color="grey", linestyle=":", label="linear")
ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
# Plain numbers at the powers of two, no labels at the minor ticks (they printed as 2^4 twice).
for axis in (ax.xaxis, ax.yaxis):
    axis.set_major_formatter(FormatStrFormatter("%g")); axis.set_minor_formatter(NullFormatter())
ax.set_xlabel("workers (T4, GPT-2-Large)"); ax.set_ylabel("speed-up over one worker")
ax.set_title("Projected speed-up through Drive (lag median 20 s, p90 2 min)" +
             (f"\nsessions: {sys.argv[3]}" if sys.argv[3] else ""), fontsize=10)
ax.legend(); ax.grid(True, which="both", alpha=0.3)
fig.tight_layout(); fig.savefig(f"{out}/speedup_vs_workers.png", dpi=110)
fig, ax = plt.subplots(figsize=(7, 4.5))
for mode, pts in series("lag", "lag_median_s").items():
    pts.sort(key=lambda p: p[0])
    ax.plot([p[0] for p in pts], [100 * float(p[1]["utilisation"]) for p in pts], marker="o", label=mode)
ax.set_xscale("log", base=2)
ax.xaxis.set_major_formatter(FormatStrFormatter("%g")); ax.xaxis.set_minor_formatter(NullFormatter())
ax.set_xticks(sorted({float(r["lag_median_s"]) for r in rows if r["sweep"] == "lag"}))
ax.set_xlabel("folder lag, median seconds (p90 = 6x)"); ax.set_ylabel("compute utilisation, %")
ax.set_title("5 workers: utilisation against the folder's lag")
ax.set_ylim(0, 100); ax.legend(); ax.grid(True, which="both", alpha=0.3)
fig.tight_layout(); fig.savefig(f"{out}/utilisation_vs_lag.png", dpi=110)
print(f"wrote {out}/speedup_vs_workers.png and {out}/utilisation_vs_lag.png")
PY
column -s, -t "$csv"
