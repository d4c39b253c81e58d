#!/usr/bin/env bash
# Installs what FlexPipe builds with, from Debian 12's packages only. Run as root.
set -euo pipefail
# libtorch-dev, libgloo-dev (c10d's ProcessGroupGloo headers) and libopenblas0-pthread (without it
# libtorch falls back to reference BLAS, about 47x slower) are the runtime's. python3-torch and
# python3-torchvision (the same PyTorch 1.13, for /usr/bin/python3) are `flexpipe capture`'s.
packages=(g++ cmake ninja-build nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
          clang-14 libclang-rt-14-dev clang-format-14 pkg-config libtorch-dev libgloo-dev libopenblas0-pthread
          python3-torch python3-torchvision)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
