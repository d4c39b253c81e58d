#!/usr/bin/env bash
# Checks what the compiler does not: that every C++ file is formatted as .clang-format says (Debian's
# clang-format 14); that no source or public header includes a header of a library its own library
# does not reach in the build's graph, or reaches into another folder by a relative path (the build
# enforces the same by include paths; this names the file and line); and that
# docs/images/architecture.dot is the graph the build declares; and the tree's shape
# (scripts/check_tree_shape.py). Usage: scripts/check-conventions.sh
# [BUILD_DIR] (default build, a configured build with the runtime). Exit status 1 on any violation.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
graph="$build_dir/architecture.dot"
failed=0

# 1. Format.
format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$format" ]; then
  echo "check-conventions: needs clang-format (apt-get install clang-format-14)" >&2
  exit 2
fi
unformatted=()
while IFS= read -r file; do
  "$format" --dry-run -Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done < <(git ls-files '*.cpp' '*.h')
if [ ${#unformatted[@]} -gt 0 ]; then
  failed=1
  echo "error: not formatted as .clang-format says (run: $format -i FILE):"
  printf '  %s\n' "${unformatted[@]}"
fi

# 2. The picture in the docs is the build's graph.
if [ ! -f "$graph" ]; then
  echo "check-conventions: $graph is missing; configure $build_dir first" >&2
  exit 2
fi
if ! diff -u docs/images/architecture.dot "$graph" >/dev/null; then
  failed=1
  echo "error: docs/images/architecture.dot differs from $graph (the libraries' dependencies changed):"
  echo "  run scripts/architecture-graph.sh $build_dir and commit docs/images/architecture.{dot,svg}"
fi

# 3. Layering: the headers a library may include are its own and those of the libraries it reaches.
declare -A edges
while read -r from to; do
  edges[$from]+=" $to"
done < <(sed -n 's/^  "\([a-z_]*\)" -> "\([a-z_]*\)";$/\1 \2/p' "$graph")
reach() {  # the nodes reachable from $1, itself included, as header folders (runtime_api's are runtime/)
  local -A seen=()
  local stack=("$1") node
  while [ ${#stack[@]} -gt 0 ]; do
    node=${stack[-1]}
    unset 'stack[-1]'
    [ -n "${seen[$node]:-}" ] && continue
    seen[$node]=1
    for next in ${edges[$node]:-}; do stack+=("$next"); done
  done
  for node in "${!seen[@]}"; do [ "$node" = runtime_api ] && echo runtime || echo "$node"; done
}
check_folder() {  # FOLDER NODE
  local folder=$1 node=$2 allowed line concept
  [ -d "$folder" ] || return 0
  allowed=" $(reach "$node" | tr '\n' ' ') "
  while IFS= read -r line; do
    if [[ $line =~ \#include\ \"\.\./ ]]; then
      echo "error: ${line%%:#*}: includes another folder by a relative path; include its public header instead"
      failed=1
      continue
    fi
    concept=$(sed -n 's|.*#include "flexpipe/\([a-z_]*\)/.*|\1|p' <<<"$line")
    if [ -n "$concept" ] && [[ $allowed != *" $concept "* ]]; then
      echo "error: ${line%%:#*}: includes flexpipe/$concept/, which the $node library does not link" \
        "(the layering: docs/architecture.md)"
      failed=1
    fi
  done < <(grep -rn '#include "' "$folder" --include='*.cpp' --include='*.h' || true)
}
for folder in src/*/; do
  concept=$(basename "$folder")
  node=$concept
  [ "$concept" = cli ] && node=cli
  check_folder "src/$concept" "$node"
  header_node=$concept
  [ "$concept" = runtime ] && header_node=runtime_api
  check_folder "include/flexpipe/$concept" "$header_node"
done

# 4. The tree's shape: a summary line per file, folder, file and function sizes (docs/architecture.md).
python3 scripts/check_tree_shape.py || failed=1

if [ $failed -eq 0 ]; then
  echo "conventions: format, layering, the architecture graph and the tree's shape agree with the build"
fi
exit $failed
