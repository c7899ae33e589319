#!/usr/bin/env bash
# Installs the Debian 12 packages shoal needs to build, test and run.
set -euo pipefail
packages=(
  cmake ninja-build g++ ccache lld
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libonnx-dev python3-onnx libonnx-testdata libprotobuf-dev protobuf-compiler
  libfmt-dev libgtest-dev libyaml-cpp-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libgloo-dev
  python3-torch python3-numpy python3-yaml
  graphviz
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
