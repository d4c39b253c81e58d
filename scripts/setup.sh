#!/usr/bin/env bash
# Installs what FlexPipe builds and tests with. Run as root. One line per step; the package managers'
# own output goes to a log, named when a step fails. Quiet when everything is present.
#
# - From Debian 12's packages: the C++ side (compilers, CMake, Ninja, nlohmann-json, CLI11, fmt,
#   GoogleTest, Google Benchmark, clang-14 for the fuzzers and the sanitized tests, clang-format-14),
#   libgloo-dev (the Gloo headers that c10d's public headers include and the wheel does not ship),
#   python3-venv, and iproute2 (`ip netns` gives the multi-node test's two nodes network namespaces).
# - From PyPI, into one Python environment shared by every clone on this machine ($FLEXPIPE_VENV,
#   default /opt/flexpipe/venv): PyTorch 2.11.0 with CUDA 13.0 (its libtorch is what the runtime
#   links; no GPU is needed to build, load or test), torchvision and transformers, at the versions
#   pinned in python/requirements.txt. About 3 GB to download and 4.9 GB installed: shared, so that a
#   fresh clone (CI's) does not unpack it again. Re-synced when requirements.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."
log=${SETUP_LOG:-/tmp/flexpipe-setup.log}
step() {  # step DESCRIPTION COMMAND...: one line, the command's output in the log
  echo "setup: $1"
  if ! "${@:2}" >>"$log" 2>&1; then
    echo "setup: failed: $1 (its output: $log)" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}

packages=(g++ cmake ninja-build nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
          clang-14 libclang-rt-14-dev clang-format-14 pkg-config libgloo-dev python3 python3-venv iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages are installed"
else
  : >"$log"
  export DEBIAN_FRONTEND=noninteractive
  step "updating the package lists" apt-get update
  step "installing ${#missing[@]} packages: ${missing[*]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

venv=${FLEXPIPE_VENV:-/opt/flexpipe/venv}
requirements=python/requirements.txt
stamp="$venv/flexpipe-requirements.txt"  # what the environment was last synced to
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then
  echo "setup: the Python environment $venv has $(grep -E '^(torch|torchvision|transformers)==' "$requirements" | tr '\n' ' ')"
else
  [ -x "$venv/bin/python" ] || step "making the Python environment $venv" /usr/bin/python3 -m venv "$venv"
  step "installing $(wc -l <"$requirements") pinned Python packages into $venv ($(grep -E '^(torch|torchvision|transformers)==' "$requirements" | tr '\n' ' ')about 3 GB to download)" \
    "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --no-input -r "$requirements"
  cp "$requirements" "$stamp"
fi
echo "setup: done; build with scripts/build.sh (README.md, Build)"
