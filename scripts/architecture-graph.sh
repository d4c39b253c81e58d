#!/usr/bin/env bash
# Copies the libraries' dependency graph that the build writes (BUILD/architecture.dot, from
# cmake/ArchitectureGraph.cmake) to docs/images/architecture.dot and draws it as
# docs/images/architecture.svg with Graphviz (apt-get install graphviz). Run after changing a
# library's dependencies; scripts/check-conventions.sh fails until the copy matches the build.
# Usage: scripts/architecture-graph.sh [BUILD_DIR] (default build, configured with the runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
cmake -S . -B "$build_dir" >/dev/null
cp "$build_dir/architecture.dot" docs/images/architecture.dot
dot -Tsvg docs/images/architecture.dot -o docs/images/architecture.svg
echo "docs/images/architecture.dot and .svg written"
