#!/usr/bin/env bash
# What a synchronisation mode's bytes cost in learning: validation loss against tokens, per mode,
# on the same fixed validation batches, four workers from scratch, on two corpora that Debian
# packages ship (the demo's KJV Bible + fortunes, and FOLDOC, the Free On-line Dictionary of
# Computing, which no test uses). Per mode and corpus it prints the final validation loss, its
# gap to per-step averaging, the token efficiency (the tokens per-step needed to reach this
# mode's final loss over the tokens this mode used: 1.00 is parity) and the bytes each worker
# uploads per token; it draws every curve into one PNG and writes the efficiencies to
# token_efficiency.json (what `gradbox simulate --token-efficiency` reads).
#
#   scripts/bench/quality_bench.sh                              # the default modes on both corpora
#   MODES="per-step diloco-h20-fp16 diloco-h20-int4 diloco-h20-r30-o19-p1-int4" scripts/bench/quality_bench.sh
#   CORPORA=kjv MODES="per-step emulated-diloco-h30" scripts/bench/quality_bench.sh
#   MODES="per-step emulated-diloco-h30-olr0.4 emulated-diloco-h30-olr0.8" scripts/bench/quality_bench.sh
#
# Modes (names are their settings, so a sweep is a list of names):
#   per-step                                one process emulating the workers (--emulate-workers):
#                                           per-step fp32 all-gather's arithmetic, bit for bit
#   emulated-[wu<steps>-]diloco-h<H>[-olr<outer lr>][-om<outer momentum>][-ils<inner lr scale>]
#            [-f<fragments>][-o<overlap steps>][-delayed|-eager]
#                                           DiLoCo's fp32 arithmetic in one process (loss only);
#                                           overlapped rounds take --late-outer-step's default, delayed
#   diloco-h<H>[-f<fragments>][-o<overlap steps>][-r<round seconds>][-p<partial every>]-<codec>
#                                           a real cluster (scripts/cluster.sh) through the
#                                           cloud-folder simulator: bytes and loss
# Any mode also takes -lr<peak lr>, -mb<per-worker micro-batch> (steps scaled to equal tokens)
# and -s<seed>. Emulated modes report the fp32 payload each worker would upload per token (params x 4 / tokens
# per round), cluster modes the bytes their round files really took (stats.json).
#
# The model: MODEL (a preset or a JSON model config; default gpt2-tiny, 366k parameters at the
# 4096-token vocabulary, 6 minutes a mode on one core here), trained for TOKENS_PER_PARAM (20, the Chinchilla ratio the
# DiLoCo scaling-laws paper uses) tokens per parameter unless STEPS is given. The binaries are
# copied first, so a rebuild during the run does not change them.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The two executables (not the tests), and the text packages the corpora come from.
scripts/setup.sh --no-tests >/dev/null
for pkg in bible-kjv fortunes dict-foldoc; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get install -y -qq "$pkg" >/dev/null || { echo "quality_bench: cannot install $pkg" >&2; exit 2; }; }
done

OUT=${OUT:-out/quality_bench}
CORPORA=${CORPORA:-"kjv foldoc"}
WORKER_COUNT=${WORKER_COUNT:-4}
MICRO=${MICRO:-8}
BLOCK=${BLOCK:-64}
VOCAB=${VOCAB:-4096}
TOKENS_PER_PARAM=${TOKENS_PER_PARAM:-20}
LR=${LR:-2e-3}
EVAL_POINTS=${EVAL_POINTS:-25}   # validation points per curve
EVAL_BATCHES=${EVAL_BATCHES:-64}
JOBS=${JOBS:-2}            # emulated modes at once (one thread each)
# The defaults: per-step, DiLoCo's round lengths, the outer lr and momentum around their defaults,
# overlapped rounds (a few steps, and τ = H - 1) and streaming fragments; ~75 minutes on 2 cores
# for both corpora.
# Cluster modes (codecs, time boxes, partial deltas) are named in MODES; they take 8 processes.
MODES=${MODES:-"per-step emulated-diloco-h10 emulated-diloco-h20 emulated-diloco-h30 emulated-diloco-h50
                emulated-diloco-h30-olr0.4 emulated-diloco-h30-om0.8 emulated-diloco-h20-o4
                emulated-diloco-h30-o29 emulated-diloco-h30-f3-o5"}
mkdir -p "$OUT/bin"
[ -n "${TABLE_ONLY:-}" ] || cp build/bin/gradbox build/bin/gradbox-sync "$OUT/bin/"
GRADBOX="$OUT/bin/gradbox"
PY=.venv/bin/python

prepare_corpus() {
  local corpus=$1 dir="$OUT/$1"
  [ -f "$dir/data/meta.json" ] && return
  mkdir -p "$dir"
  case $corpus in
    kjv)  # the demo's corpus: one verse per line without references, and the fortune files
      bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$dir/kjv.txt"
      "$GRADBOX" --log-level warn prepare --force --out "$dir/data" --tokenizer bpe --vocab-size "$VOCAB" \
        --input "$dir/kjv.txt" /usr/share/games/fortunes ;;
    foldoc)  # Debian's dict-foldoc: definitions of computing terms, one paragraph a line
      [ -f /usr/share/dictd/foldoc.dict.dz ] || { echo "foldoc: install Debian's dict-foldoc" >&2; exit 2; }
      zcat /usr/share/dictd/foldoc.dict.dz | sed -E 's/^ +//' | awk 'NF { line = line (line ? " " : "") $0; next }
        { if (line) print line; line = "" } END { if (line) print line }' > "$dir/foldoc.txt"
      "$GRADBOX" --log-level warn prepare --force --out "$dir/data" --tokenizer bpe --vocab-size "$VOCAB" \
        --input "$dir/foldoc.txt" ;;
    *) echo "unknown corpus $corpus (kjv, foldoc)" >&2; exit 2 ;;
  esac
}

MODEL=${MODEL:-gpt2-tiny}
for corpus in $CORPORA; do prepare_corpus "$corpus"; done
# The model's parameters at this vocabulary, as gradbox counts them (a one-step run).
PARAMS=$("$GRADBOX" train --data "$OUT/${CORPORA%% *}/data" --out "$OUT/count" --model "$MODEL" --block-size "$BLOCK" \
           --max-steps 1 --threads 1 --checkpoint-interval 0 2>&1 | sed -nE 's/.*\(([0-9]+) parameters\).*/\1/p')
rm -rf "$OUT/count"
[ -n "$PARAMS" ] || { echo "quality_bench: cannot count the parameters of $MODEL" >&2; exit 1; }
TOKENS_PER_STEP=$((WORKER_COUNT * MICRO * BLOCK))
STEPS=${STEPS:-$(( (TOKENS_PER_PARAM * PARAMS + TOKENS_PER_STEP - 1) / TOKENS_PER_STEP ))}
echo "quality_bench: $PARAMS parameters, $WORKER_COUNT workers x $MICRO x $BLOCK tokens, $STEPS steps" \
     "($(( STEPS * TOKENS_PER_STEP / PARAMS )) tokens per parameter), corpora: $CORPORA"


run_mode() {
  local corpus=$1 name=$2 data="$OUT/$1/data" run="$OUT/$1/$2" start=$SECONDS
  local h=1 flags=() cluster=0 codec=fp16 micro=$MICRO lr=$LR part parts
  IFS=- read -ra parts <<< "$name"
  case ${parts[0]} in
    per) parts=("${parts[@]:2}") ;;                   # per-step[-<part>...]
    emulated) parts=("${parts[@]:1}") ;;              # emulated-diloco-...
    diloco) cluster=1 ;;                              # diloco-...
    *) echo "unknown mode $name" >&2; exit 2 ;;
  esac
  for part in "${parts[@]}"; do
    case $part in
      diloco) flags+=(--sync diloco) ;;
      wu[0-9]*) flags+=(--sync-warmup-steps "${part#wu}") ;;
      h[0-9]*) h=${part#h}; flags+=(--inner-steps "$h") ;;
      olr*) flags+=(--outer-lr "${part#olr}") ;;
      om*) flags+=(--outer-momentum "${part#om}") ;;
      ils*) flags+=(--inner-lr-scale "${part#ils}") ;;
      lr*) lr=${part#lr} ;;
      mb[0-9]*) micro=${part#mb} ;;     # a per-worker micro-batch other than MICRO, at equal tokens
      s[0-9]*) flags+=(--seed "${part#s}") ;;
      f[0-9]*) flags+=(--fragments "${part#f}") ;;
      delayed | eager) flags+=(--late-outer-step "$part") ;;  # how overlapped rounds bridge the late step
      o[0-9]*) flags+=(--overlap-steps "${part#o}") ;;
      r[0-9]*) flags+=(--round-seconds "${part#r}") ;;
      # An owner waits a deadline more for partials: the failover must exceed two deadlines.
      p[0-9]*) flags+=(--partial-every "${part#p}" --failover-timeout 90) ;;
      fp16 | bf16 | int8 | int4 | fp32) codec=$part ;;
      *) echo "unknown part $part of mode $name" >&2; exit 2 ;;
    esac
  done
  local steps=$(( STEPS * MICRO / micro ))
  local every=$(( (steps + EVAL_POINTS - 1) / EVAL_POINTS ))
  every=$(( (every + h - 1) / h * h ))  # validation at a round's end
  local workers
  workers=$(for i in $(seq 1 "$WORKER_COUNT"); do printf '%s%s:%s' "$([ "$i" -gt 1 ] && echo ,)" "w$i" "$micro"; done)
  local common=(--eval-interval "$every" --lr "$lr" --min-lr "$("$PY" -c "print($lr / 10)")"
                --warmup-steps $((steps / 50 + 1)) --threads 1 --eval-batches "$EVAL_BATCHES" --log-interval 1000
                --checkpoint-interval 0)
  rm -rf "$run"
  if ((cluster)); then
    # A fast folder: bytes do not depend on the lag, and rounds would otherwise wait on it.
    WORKERS=$workers STEPS=$steps MODEL=$MODEL BLOCK=$BLOCK CODEC=$codec EXCHANGE=sharded GRADBOX="$GRADBOX" \
    SIM_ARGS="--poll-ms 10 --sim-delay-median-ms 10 --sim-delay-p90-ms 40" \
      scripts/cluster.sh "$data" "$run" "${common[@]}" "${flags[@]}" \
      > "$run.log" 2>&1 || { echo "$corpus/$name failed: see $run.log" >&2; return 1; }
  else
    mkdir -p "$run"
    "$GRADBOX" train --data "$data" --out "$run/w1" --model "$MODEL" --block-size "$BLOCK" --micro-batch "$micro" \
      --max-steps "$steps" --emulate-workers "$workers" "${common[@]}" "${flags[@]}" \
      > "$run.log" 2>&1 || { echo "$corpus/$name failed: see $run.log" >&2; return 1; }
  fi
  echo "$corpus/$name: $((SECONDS - start)) s"
}

# Emulated modes run JOBS at a time, one thread each; a cluster (several processes) runs alone.
if [ -z "${TABLE_ONLY:-}" ]; then
  failed=0
  for corpus in $CORPORA; do
    for mode in $MODES; do
      if [[ $mode == diloco-* ]]; then
        wait || failed=1
        run_mode "$corpus" "$mode" || failed=1
      else
        while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || failed=1; done
        run_mode "$corpus" "$mode" &
      fi
    done
  done
  while (( $(jobs -rp | wc -l) > 0 )); do wait -n || failed=1; done
  ((failed == 0)) || { echo "quality_bench: a mode failed (see above)" >&2; exit 1; }
fi
"$PY" scripts/bench/quality_report.py --out "$OUT" --params "$PARAMS" --corpora $CORPORA --modes $MODES
