#!/usr/bin/env bash
# Installs the Debian 12 packages shoal needs to build, test and run, and the
# test references from PyPI (test/zoo/requirements.txt: transformers,
# onnxruntime) into a virtual environment outside the source tree,
# ${SHOAL_VENV:-$HOME/.cache/shoal-venv}, reused when its requirements are
# already installed. SHOAL_NO_VENV=1 skips the virtual environment (the
# model-zoo tests then report SKIP).
#
# --torch2 (or SHOAL_TORCH2=1), opt-in: also a second, plain virtual
# environment with a current PyTorch for the exports of torch 2.x
# (test/zoo/requirements-torch2.txt: torch, torchvision, onnxscript, onnx,
# transformers), ${SHOAL_VENV_TORCH2:-$HOME/.cache/shoal-venv-torch2}, reused
# when its requirements are installed. PyPI's torch wheel pulls the CUDA
# libraries: about 2-3 minutes and 5.8 GB on the project's machines. Without
# it the `torch2` ctest label reports SKIP.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
torch2="${SHOAL_TORCH2:-0}"
for arg in "$@"; do
  case "$arg" in
    --torch2) torch2=1 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (known: --torch2)" >&2; exit 2 ;;
  esac
done
packages=(
  cmake ninja-build g++ ccache lld
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libonnx-dev python3-onnx libonnx-testdata libprotobuf-dev protobuf-compiler
  libfmt-dev libgtest-dev libyaml-cpp-dev libssl-dev zlib1g-dev
  clang-14 libclang-rt-14-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-openmp-dev libgloo-dev libbenchmark-dev
  python3-torch python3-torchvision python3-numpy python3-yaml python3-venv
  python3-matplotlib python3-pytest
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

[ "${SHOAL_NO_VENV:-0}" = 1 ] && exit 0

# install_venv DIR REQUIREMENTS VENV-OPTIONS...: a virtual environment made
# from /usr/bin/python3 with REQUIREMENTS installed, kept when its stamp says
# they already are. A failure is a warning: the tests that need it skip.
install_venv() {
  local venv="$1" req="$2"
  shift 2
  local stamp="$venv/.shoal-requirements"
  if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
    return 0
  fi
  local start
  start=$(date +%s)
  if { [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$@" "$venv"; } &&
     "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"; then
    cp "$req" "$stamp"
    echo "install-deps: $(basename "$req") in $venv ($(( $(date +%s) - start )) s," \
         "$(du -sh "$venv" | cut -f1))"
  else
    echo "install-deps: WARNING: could not install $req into $venv;" \
         "the tests that need it will be skipped" >&2
  fi
}

# Test references from PyPI, next to Debian's torch (--system-site-packages).
install_venv "${SHOAL_VENV:-$HOME/.cache/shoal-venv}" "$root/test/zoo/requirements.txt" \
  --system-site-packages

# shoal's Python package (python/shoal), editable, into the same venv.
venv="${SHOAL_VENV:-$HOME/.cache/shoal-venv}"
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c "import shoal" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation -e "$root/python" ||
    echo "install-deps: WARNING: could not install python/ into $venv" >&2
fi

# torch 2.x exports (opt-in): a plain environment, Debian's torch 1.13 and
# onnx 1.12 must not shadow the new ones.
if [ "$torch2" = 1 ]; then
  install_venv "${SHOAL_VENV_TORCH2:-$HOME/.cache/shoal-venv-torch2}" \
    "$root/test/zoo/requirements-torch2.txt"
fi
