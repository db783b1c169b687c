#!/usr/bin/env bash
# Takes a fresh Debian 12 machine to a built gradbox: Debian packages, LibTorch from the torch
# wheel on the Python package index (as Colab and Kaggle ship it), and the build. Idempotent:
# a second run only rebuilds what changed.
#
#   scripts/setup.sh                       the development machine: a .venv with pinned torch, all tests
#   scripts/setup.sh --python python3 --no-tests
#                                          a notebook session: the torch that image already has (any
#                                          version from MIN_TORCH on), only the two executables
#   scripts/setup.sh --packages-only       the Debian packages a cached build needs to run, nothing else
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=""     # empty: make .venv with PIP_PACKAGES
TESTS=1
PACKAGES_ONLY=0
while (($#)); do
  case $1 in
    --python) PYTHON=$2; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --packages-only) PACKAGES_ONLY=1; TESTS=0; shift ;;
    *) echo "setup: unknown option $1 (--python PATH, --no-tests, --packages-only)" >&2; exit 2 ;;
  esac
done

# Test text (fortunes, bible-kjv) is only needed for the tests and the demo.
APT_PACKAGES=(
  cmake ninja-build g++ pkg-config python3 python3-venv
  libboost-filesystem-dev libboost-context-dev libzstd-dev libxxhash-dev libpcre2-dev
  libprotobuf-dev protobuf-compiler libspdlog-dev libfmt-dev
  libcli11-dev nlohmann-json3-dev libsentencepiece-dev libssl-dev rclone
)
# util-linux (unshare) and mount: the full-disk tests give a worker a small tmpfs of its own.
((TESTS)) && APT_PACKAGES+=(libgtest-dev fortunes fortunes-ru bible-kjv bible-kjv-text util-linux mount)
# torch 2.15.0's Linux wheel is built for CUDA 13, the toolkit these machines carry; on a
# CPU-only machine it runs on the CPU. transformers only checks our Hugging Face exports;
# matplotlib draws `gradbox plot`; tensorboard's reader checks our event files; nbclient,
# ipykernel and nbformat run the notebooks headlessly in the tests.
PIP_PACKAGES=(torch==2.15.0 numpy==2.4.6 transformers==5.24.0 safetensors==0.8.0
              matplotlib==3.11.2 tensorboard==2.21.0 nbclient==0.11.0 ipykernel==7.4.0 nbformat==5.11.1)
MIN_TORCH=2.1   # LibTorch's C++ API gradbox uses (torch::nn, autocast, c10d headers) is there from 2.1

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Gloo's headers, for the c10d transport (torch's wheel carries Gloo's code but not its headers).
# Optional: where the distribution has no libgloo-dev, gradbox builds without --transport c10d.
if ! dpkg-query -W -f='${Status}' libgloo-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev >/dev/null 2>&1 ||
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libgloo-dev >/dev/null 2>&1; }; } ||
    echo "setup: libgloo-dev is not available here: gradbox builds without the c10d transport"
fi
((PACKAGES_ONLY)) && exit 0

if [ -z "$PYTHON" ]; then
  if [ ! -x .venv/bin/python ] ||
     ! .venv/bin/python -c "import torch, transformers, matplotlib, tensorboard, nbclient, ipykernel" 2>/dev/null; then
    # pip fails half-way with "No space left on device" otherwise: the .venv takes ~5.8 GB, and
    # the downloaded wheels (~3.5 GB) sit in TMPDIR until installed.
    free_mb() { df -Pm "$1" | awk 'NR==2 {print $4}'; }
    tmp=${TMPDIR:-/tmp}
    if [ "$(df -P . | awk 'NR==2 {print $1}')" = "$(df -P "$tmp" | awk 'NR==2 {print $1}')" ]; then
      need=(. 8500)
    else
      need=(. 6000 "$tmp" 3000)
    fi
    for ((i = 0; i < ${#need[@]}; i += 2)); do
      if (($(free_mb "${need[i]}") < need[i + 1])); then
        echo "setup: $(cd "${need[i]}" && pwd) has $(free_mb "${need[i]}") MB free; installing torch into .venv" \
             "needs about ${need[i + 1]} MB there (free some, or point TMPDIR elsewhere)" >&2
        exit 1
      fi
    done
    echo "setup: installing ${PIP_PACKAGES[*]} into .venv (about 5.8 GB, 1-2 minutes)"
    python3 -m venv .venv
    # No wheel cache: it would hold a second copy (~3.5 GB) of what the .venv already has.
    .venv/bin/pip install -q --no-cache-dir "${PIP_PACKAGES[@]}"
  fi
  PYTHON="$PWD/.venv/bin/python"
else
  PYTHON=$(command -v "$PYTHON") || { echo "setup: --python: no interpreter $PYTHON" >&2; exit 2; }
  version=$("$PYTHON" -c "import torch; print(torch.__version__)" 2>/dev/null) ||
    { echo "setup: --python $PYTHON: cannot import torch" >&2; exit 2; }
  if ! "$PYTHON" -c "import sys; v = tuple(int(x) for x in '${version}'.split('+')[0].split('.')[:2]);
sys.exit(v < tuple(int(x) for x in '${MIN_TORCH}'.split('.')))"; then
    echo "setup: --python $PYTHON has torch $version; gradbox needs torch >= $MIN_TORCH" >&2; exit 2
  fi
  echo "setup: building against torch $version of $PYTHON"
fi

# Ubuntu 22.04 (Colab, Kaggle) ships cmake 3.22; the build needs 3.25: take one from the index.
if ! cmake --version | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 25)) }'; then
  echo "setup: cmake $(cmake --version | awk 'NR==1 {print $3}') is older than 3.25; installing one with pip"
  "$PYTHON" -m pip install -q "cmake>=3.25"
  hash -r
fi

if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADBOX_PYTHON="$PYTHON" \
        -DGRADBOX_BUILD_TESTS=$( ((TESTS)) && echo ON || echo OFF) >/dev/null
fi
# Each LibTorch translation unit takes ~1 GB of compiler memory; 2 jobs fit any machine here.
if ((TESTS)); then
  cmake --build build -j "${GRADBOX_BUILD_JOBS:-2}"
else
  cmake --build build -j "${GRADBOX_BUILD_JOBS:-2}" --target gradbox gradbox-sync
fi
