#!/usr/bin/env bash
# No include runs upward: core at the bottom, layers, optim and data on core alone, dist on
# those, apps on everything. dist/predict (the cost model) sits beside the algorithms: the rest
# of dist/ includes nothing from it, and it nothing from apps/. A file belongs to the deepest folder listed below; tests/
# may include anything. Fails naming each file and line that breaks the order.
# Usage: apps/scripts/include_check.sh [ROOT]   (a checkout; default: this one)
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

# folder        the folders it may include from, besides its own
rules='
core
layers          core
optim           core
data            core
dist            core layers optim data
dist/predict    core layers optim data dist
dist/auto       core layers optim data dist dist/predict
apps            core layers optim data dist dist/predict dist/auto
'

dirs=()
for dir in core layers optim data dist apps; do [[ -d $dir ]] && dirs+=("$dir"); done
((${#dirs[@]})) || exit 0
{ grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
       '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+/' "${dirs[@]}" || true; } |
  awk -v rules="$rules" '
    function folder(path,   i, best) {  # the deepest folder of the rules that holds path
      best = ""
      for (i = 1; i <= n; ++i)
        if (index(path, names[i] "/") == 1 && length(names[i]) > length(best)) best = names[i]
      return best
    }
    BEGIN {
      count = split(rules, lines, "\n")
      for (l = 1; l <= count; ++l) {
        if (split(lines[l], f, " ") == 0) continue
        names[++n] = f[1]; allowed[f[1]] = " " f[1] " "; shown[f[1]] = f[1] "/"
        for (j = 2; j in f; ++j) { allowed[f[1]] = allowed[f[1]] f[j] " "; shown[f[1]] = shown[f[1]] ", " f[j] "/" }
      }
    }
    {
      # file:line:#include "target"
      split($0, part, ":"); file = part[1]; line = part[2]
      target = $0; sub(/^[^"]*"/, "", target); sub(/".*/, "", target)
      from = folder(file); to = folder(target)
      if (from == "" || to == "" || index(allowed[from], " " to " ")) next
      printf "include_check: %s:%s includes %s, but %s/ may include only from %s\n", file, line,
             target, from, shown[from] > "/dev/stderr"
      ++bad
    }
    END { exit bad > 0 }'
