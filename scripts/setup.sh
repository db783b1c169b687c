#!/usr/bin/env bash
# Takes a fresh Debian 12 machine to a built gradbox: Debian packages, LibTorch from the torch
# wheel on the Python package index (as Colab and Kaggle ship it), and the build. Idempotent:
# a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build g++ pkg-config python3 python3-venv
  libboost-filesystem-dev libboost-context-dev libzstd-dev libxxhash-dev libpcre2-dev
  libprotobuf-dev protobuf-compiler libspdlog-dev libfmt-dev libgtest-dev
  libcli11-dev nlohmann-json3-dev libsentencepiece-dev rclone
  fortunes fortunes-ru bible-kjv bible-kjv-text
)
# torch 2.15.0's Linux wheel is built for CUDA 13, the toolkit these machines carry; on a
# CPU-only machine it runs on the CPU. transformers only checks our Hugging Face exports.
PIP_PACKAGES=(torch==2.15.0 numpy==2.4.6 transformers==5.24.0 safetensors==0.8.0)

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

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import torch, transformers" 2>/dev/null; then
  echo "setup: installing ${PIP_PACKAGES[*]} into .venv (about 5.5 GB, 1-2 minutes)"
  python3 -m venv .venv
  .venv/bin/pip install -q "${PIP_PACKAGES[@]}"
fi

if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADBOX_PYTHON="$PWD/.venv/bin/python" >/dev/null
fi
# Each LibTorch translation unit takes ~1 GB of compiler memory; 2 jobs fit any machine here.
cmake --build build -j "${GRADBOX_BUILD_JOBS:-2}"
