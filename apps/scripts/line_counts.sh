#!/usr/bin/env bash
# Lines of C++ per folder (code: neither blank nor a // comment; all: every line), so growth is
# seen with every test run (apps/scripts/run_tests.sh prints it after the tests). dist/ is split
# into the runtime (what training links), the DLCP transport (dist/dlcp/, also linked) and the
# prediction wing (dist/predict/).
set -euo pipefail
cd "$(dirname "$0")/../.."

count() {  # count LABEL FILE... : one row
  local label=$1
  shift
  local code=0 all=0
  if (($#)); then
    code=$(cat "$@" | grep -cvE '^[[:space:]]*(//|$)' || true)
    all=$(cat "$@" | wc -l)
  fi
  printf '%-16s %6d %6d %4d\n' "$label" "$code" "$all" "$#"
}

sources() {  # sources DIR [maxdepth]: the C++ files of DIR
  find "$1" -maxdepth "${2:-8}" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort
}

printf '%-16s %6s %6s %4s\n' folder code all files
for dir in core layers optim data; do
  mapfile -t files < <(sources "$dir")
  count "$dir/" "${files[@]}"
done
mapfile -t files < <(sources dist 1)
count "dist/ runtime" "${files[@]}"
mapfile -t files < <(sources dist/dlcp)
count "dist/dlcp/" "${files[@]}"
mapfile -t files < <(sources dist/predict)
count "dist/predict/" "${files[@]}"
for dir in apps tests; do
  mapfile -t files < <(sources "$dir")
  count "$dir/" "${files[@]}"
done
