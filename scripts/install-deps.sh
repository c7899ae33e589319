#!/usr/bin/env bash
# Installs the Debian 12 packages shoal needs to build, test and run, and the
# test references from PyPI (test/zoo/requirements.txt: transformers,
# onnxruntime) into a virtual environment outside the source tree,
# ${SHOAL_VENV:-$HOME/.cache/shoal-venv}, reused when its requirements are
# already installed. SHOAL_NO_VENV=1 skips the virtual environment (the
# model-zoo tests then report SKIP).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
packages=(
  cmake ninja-build g++ ccache lld
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libonnx-dev python3-onnx libonnx-testdata libprotobuf-dev protobuf-compiler
  libfmt-dev libgtest-dev libyaml-cpp-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libgloo-dev
  python3-torch python3-torchvision python3-numpy python3-yaml python3-venv
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

# Test references from PyPI, next to Debian's torch (--system-site-packages).
[ "${SHOAL_NO_VENV:-0}" = 1 ] && exit 0
venv="${SHOAL_VENV:-$HOME/.cache/shoal-venv}"
req="$root/test/zoo/requirements.txt"
stamp="$venv/.shoal-requirements"
if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  exit 0
fi
start=$(date +%s)
if { [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"; } &&
   "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"; then
  cp "$req" "$stamp"
  echo "install-deps: test references in $venv ($(( $(date +%s) - start )) s)"
else
  echo "install-deps: WARNING: could not install $req into $venv;" \
       "the model-zoo tests will be skipped" >&2
fi
