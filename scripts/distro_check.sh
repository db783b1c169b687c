#!/usr/bin/env bash
# Proves the build on another Debian release, the nearest this machine gets to Colab's and
# Kaggle's Ubuntu 22.04: Debian 11 (bullseye: gcc 10, cmake 3.18, protobuf 3.12, spdlog 1.8,
# fmt 7, Python 3.9) is at or below it on every library gradbox links but CLI11, which bullseye
# does not package (bookworm's 2.1.2, Ubuntu 22.04's version, is taken); Debian 13 (trixie)
# covers newer compilers and libraries.
#
#   sudo scripts/distro_check.sh bullseye|trixie
#
# In a debootstrap chroot (kept under $GRADBOX_DISTRO_ROOT, default /var/tmp/gradbox-distro, so a
# second run skips what is done), from this checkout's HEAD: pip's newest torch for that Python
# in a venv, then `scripts/setup.sh --python ... --no-tests` exactly as a notebook session runs
# it, then a short subset: the protocol, codec, syncer, wire and tokenizer tests, `gradbox prepare` with
# both tokenizers (GPT-2's, and a BPE trained with SentencePiece, whose bundled protobuf must
# not meet ours) and `train` for a few steps. Not part of the test command (20-30 minutes and
# ~10 GB a release). Exits non-zero at the first step that fails, naming it; the log is
# <root>/<release>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

DIST=${1:-}
case $DIST in
  bullseye|bookworm|trixie) ;;
  *) echo "distro_check: usage: $0 bullseye|bookworm|trixie" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "distro_check: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "distro_check: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }
MIRROR=${GRADBOX_DISTRO_MIRROR:-http://deb.debian.org/debian}
BASE=${GRADBOX_DISTRO_ROOT:-/var/tmp/gradbox-distro}
ROOT=$BASE/$DIST
LOG=$BASE/$DIST.log
mkdir -p "$BASE"
: > "$LOG"

step() { echo "distro_check $DIST: $*" | tee -a "$LOG"; }
fail() { echo "distro_check $DIST: FAILED: $1 (log: $LOG)" >&2; tail -n 30 "$LOG" >&2; exit 1; }
in_root() { chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                   LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive bash -euo pipefail -c "$1" >> "$LOG" 2>&1; }

if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  step "debootstrap into $ROOT"
  debootstrap --variant=minbase "$DIST" "$ROOT" "$MIRROR" >> "$LOG" 2>&1 || fail "debootstrap $DIST from $MIRROR"
fi
# The host's CUDA toolkit, read-only, as Colab's and Kaggle's images carry one: gradbox's
# kernels need nvcc, and a CUDA build of torch needs the toolkit to configure against.
CUDA=$(readlink -f /usr/local/cuda 2>/dev/null || true)
cleanup() {
  for m in ${CUDA:+${CUDA#/}} dev/pts dev proc; do mountpoint -q "$ROOT/$m" && umount -l "$ROOT/$m"; done
  true
}
trap cleanup EXIT
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
mountpoint -q "$ROOT/dev/pts" || mount --bind /dev/pts "$ROOT/dev/pts"
if [ -n "$CUDA" ] && [ -d "$CUDA" ]; then
  mkdir -p "$ROOT$CUDA"
  mountpoint -q "$ROOT$CUDA" || { mount --bind "$CUDA" "$ROOT$CUDA" && mount -o remount,bind,ro "$ROOT$CUDA"; }
  ln -sfn "$CUDA" "$ROOT/usr/local/cuda"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true

step "copying HEAD ($(git rev-parse --short HEAD)) to /gradbox"
# Only the files that changed are written (build/ kept), so a second run rebuilds only those.
fresh=$(mktemp -d)
git archive HEAD | tar -x -C "$fresh"
mkdir -p "$ROOT/gradbox"
(cd "$fresh" && find . -type f) | while read -r f; do
  cmp -s "$fresh/$f" "$ROOT/gradbox/$f" || { mkdir -p "$ROOT/gradbox/$(dirname "$f")"; cp "$fresh/$f" "$ROOT/gradbox/$f"; }
done
(cd "$ROOT/gradbox" && find . -path ./build -prune -o -type f -print) | while read -r f; do
  [ -e "$fresh/$f" ] || rm -f "$ROOT/gradbox/$f"
done
rm -rf "$fresh"
git rev-parse HEAD > "$ROOT/gradbox/.distro-check-commit"

step "python3, venv, git (the image's own)"
in_root "apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip git ca-certificates >/dev/null" ||
  fail "installing python3"
# The host's extra certificate authorities and pip settings (a proxy that re-signs TLS), so the
# chroot reaches the package index as the host does.
if [ -d /usr/local/share/ca-certificates ]; then
  cp -r /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
  in_root "update-ca-certificates >/dev/null" || fail "update-ca-certificates"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
if [ "$DIST" = bullseye ]; then
  # bullseye packages no CLI11 (Ubuntu 22.04 has 2.1.2): bookworm's header-only 2.1.2, the same
  # version, pinned low so that nothing else comes from bookworm.
  echo "deb $MIRROR bookworm main" > "$ROOT/etc/apt/sources.list.d/bookworm.list"
  printf 'Package: *\nPin: release n=bookworm\nPin-Priority: 100\n' > "$ROOT/etc/apt/preferences.d/bookworm"
  in_root "apt-get update -qq && apt-get install -y -qq libcli11-dev >/dev/null" || fail "CLI11 from bookworm"
fi
if [ ! -x "$ROOT/opt/venv/bin/python" ] || ! in_root "/opt/venv/bin/python -c 'import torch'"; then
  step "pip: the newest torch for $(chroot "$ROOT" python3 --version 2>&1)"
  in_root "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --upgrade pip && /opt/venv/bin/pip install -q torch numpy" ||
    fail "pip install torch"
fi
step "torch $(chroot "$ROOT" /opt/venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null)"

step "scripts/setup.sh --python /opt/venv/bin/python --no-tests (as a notebook session)"
started=$(date +%s)
# A build folder kept from an earlier run has the tests switched on: off again, as a session's.
[ -f "$ROOT/gradbox/build/CMakeCache.txt" ] && { in_root "cd /gradbox && cmake -S . -B build -DGRADBOX_BUILD_TESTS=OFF >/dev/null" ||
                                                 fail "reconfiguring the kept build folder"; }
in_root "cd /gradbox && scripts/setup.sh --python /opt/venv/bin/python --no-tests" || fail "setup.sh (packages or build)"
step "built gradbox and gradbox-sync in $(( $(date +%s) - started )) s"
in_root "cd /gradbox && build/bin/gradbox --help >/dev/null && build/bin/gradbox-sync --help >/dev/null" || fail "running the executables"

step "a short subset of the tests"
in_root "apt-get install -y -qq libgtest-dev libgmock-dev fortunes fortunes-ru bible-kjv >/dev/null" || fail "installing the test packages"
in_root "cd /gradbox && cmake -S . -B build -DGRADBOX_BUILD_TESTS=ON >/dev/null &&
         cmake --build build -j 2 --target exchange_test codec_test syncer_test wire_test tokenizer_test" || fail "building the test subset"
in_root "cd /gradbox/build && for t in tests/exchange/exchange_test tests/codec/codec_test tests/syncer/syncer_test tests/wire/wire_test tests/tokenizer/tokenizer_test; do \$t; done" ||
  fail "the test subset"
in_root "cd /tmp && rm -rf check && mkdir check && bible -f Gen1:1-Rev22:21 | sed -E 's/^[^ ]+ //' > check/kjv.txt &&
         /gradbox/build/bin/gradbox prepare --input check/kjv.txt --out check/data --tokenizer gpt2 &&
         /gradbox/build/bin/gradbox prepare --input check/kjv.txt --out check/data-bpe --tokenizer bpe --vocab-size 2000 &&
         /gradbox/build/bin/gradbox train --data check/data --out check/run --model gpt2-tiny --max-steps 20 --block-size 64 --micro-batch 4 --eval-interval 20" ||
  fail "gradbox prepare and train"
step "passed: $(grep -c '^\[  PASSED  \]' "$LOG") test binaries; $(grep 'done: steps' "$LOG" | tail -1)"
