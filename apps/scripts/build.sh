#!/usr/bin/env bash
# Configures and builds a preset of CMakePresets.json into build/PRESET: release (the main
# command's build), test (the README's test command's), cpu, debug, asan, fuzz.
# Usage: apps/scripts/build.sh [PRESET] [-DVAR=VALUE ...] [TARGET ...]
# The folder is configured only when it is new or a -D option differs from its cache, so a
# second build starts building at once (the build reconfigures itself when a CMakeLists.txt
# changes). No TARGET: the preset's default (everything).
set -euo pipefail
cd "$(dirname "$0")/../.."
preset="${1:-release}"
shift || true
options=() targets=()
for arg in "$@"; do
  if [[ $arg == -D* ]]; then options+=("$arg"); else targets+=("$arg"); fi
done

cache="build/$preset/CMakeCache.txt"
configure=0
[[ -f $cache ]] || configure=1
for opt in "${options[@]}"; do  # -DVAR=VALUE or -DVAR:TYPE=VALUE
  name="${opt#-D}" name="${name%%=*}" name="${name%%:*}"
  [[ -f $cache && "$(sed -n "s/^${name}:[A-Z]*=//p" "$cache")" == "${opt#*=}" ]] || configure=1
done
if ((configure)); then
  cmake --preset "$preset" "${options[@]}" >/dev/null
fi
cmake --build --preset "$preset" -j"$(nproc)" ${targets[@]:+--target "${targets[@]}"}
