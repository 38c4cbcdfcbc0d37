#!/usr/bin/env bash
# Lines of C++ per folder (code: neither blank nor a // comment; all: every line) against the
# budgets in apps/scripts/line_budgets.txt. The README's test command prints the table, so growth
# is seen, and fails here, naming the folder and both numbers, when one is over its budget.
# Usage: apps/scripts/line_counts.sh [ROOT]   (a checkout; default: this one)
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
budgets=apps/scripts/line_budgets.txt
[[ -f $budgets ]] || { echo "line_counts: no $budgets under $PWD" >&2; exit 2; }

# The C++ files of every top-level folder that has a row (and exists).
mapfile -t tops < <(awk '!/^#/ && NF && $1 != "total" { sub(/\/.*/, "", $1); print $1 }' "$budgets" | sort -u)
existing=()
for dir in "${tops[@]}"; do [[ -d $dir ]] && existing+=("$dir"); done
files=()
if ((${#existing[@]})); then
  mapfile -t files < <(find "${existing[@]}" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
fi

awk -v budgets="$budgets" '
  FNR == NR {  # the budget table
    if ($0 ~ /^#/ || NF == 0) next
    if ($1 == "total") { total_budget = $2; next }
    rows[++n] = $1; budget[$1] = $2
    next
  }
  FNR == 1 {  # a new file: it counts toward the deepest row that holds it
    row = ""
    for (i = 1; i <= n; ++i)
      if (index(FILENAME, rows[i] "/") == 1 && length(rows[i]) > length(row)) row = rows[i]
    files[row]++
  }
  { all[row]++ }
  !/^[[:space:]]*(\/\/|$)/ { code[row]++ }
  END {
    printf "%-20s %6s %6s %5s %7s\n", "folder", "code", "all", "files", "budget"
    for (i = 1; i <= n; ++i) {
      r = rows[i]
      if (!(r in files) && system("test -d \"" r "\"") != 0) { printf "%-20s %6s\n", r "/", "absent"; continue }
      printf "%-20s %6d %6d %5d %7s\n", r "/", code[r], all[r], files[r], budget[r]
      if (budget[r] == "-") continue
      total += code[r]
      if (code[r] > budget[r]) over[++failed] = sprintf("%s/ has %d code lines, over its budget of %d", r, code[r], budget[r])
    }
    printf "%-20s %6d %6s %5s %7s\n", "total (non-test)", total, "", "", total_budget
    if (total_budget != "" && total > total_budget)
      over[++failed] = sprintf("non-test code has %d code lines, over its total budget of %d", total, total_budget)
    for (i = 1; i <= failed; ++i)
      printf "line_counts: %s: make it smaller, or raise the budget in %s in the commit that grows it, saying why\n", over[i], budgets > "/dev/stderr"
    exit failed > 0
  }' "$budgets" "${files[@]}"
