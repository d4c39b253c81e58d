#!/usr/bin/env bash
# Installs what FlexPipe builds with, from Debian 12's packages only. Run as root. One line per step;
# the package manager's own output goes to a log, named when a step fails.
set -euo pipefail
# libtorch-dev, libgloo-dev (c10d's ProcessGroupGloo headers) and libopenblas0-pthread (without it
# libtorch falls back to reference BLAS, about 47x slower) are the runtime's. python3-torch and
# python3-torchvision (the same PyTorch 1.13, for /usr/bin/python3) are `flexpipe capture`'s (and
# python3-torch's torchrun drives a multi-node test). iproute2's `ip netns` gives that test's two
# nodes network namespaces of their own where it runs as root.
packages=(g++ cmake ninja-build nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
          clang-14 libclang-rt-14-dev clang-format-14 pkg-config libtorch-dev libgloo-dev libopenblas0-pthread
          python3-torch python3-torchvision iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages are installed"
  exit 0
fi
log=${SETUP_LOG:-/tmp/flexpipe-setup.log}
: >"$log"
step() {  # step DESCRIPTION COMMAND...: one line, the command's output in the log
  echo "setup: $1"
  if ! "${@:2}" >>"$log" 2>&1; then
    echo "setup: failed: $1 (the package manager's output: $log)" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
export DEBIAN_FRONTEND=noninteractive
step "updating the package lists" apt-get update
step "installing ${#missing[@]} packages: ${missing[*]}" apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: done; build with scripts/build.sh (docs: README.md, Build)"
