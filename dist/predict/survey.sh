#!/usr/bin/env bash
# The survey's comparison in one command: the seven methods (BSP-A2A, WFBP-A2A, MG-WFBP,
# ByteScheduler-A2A, BSP-PS, WFBP-PS, ByteScheduler-PS) and PyTorch DDP on the emulated cluster,
# for every cell of models x networks x worker counts, by calling dist/predict/report.sh once per
# cell (same testbed, same run, DDP a row of it) and merging the cells' tables:
#   models    resnet20 (many small tensors) and bert_tiny (one large embedding tensor), each on
#             synthetic data of its usual shape through configs/survey_<model>_synthetic.prototxt,
#             which is what the DDP peer (apps/bench/pytorch_ddp.py) trains: the same model,
#             per-worker batch, data shapes and optimizer on both sides
#   networks  flat:RATE (one switch, every host link at RATE) and two_racks:RATE (two racks of
#             N/2 workers, host links at RATE, one inter-rack link at RATE/4)
#   workers   N workers, with N/4 parameter servers (at least 1) for the PS methods, each server a
#             host of its own; on two_racks half the servers sit in each rack (report.sh's header)
# and, once per model, one worker training alone (the base of scaling efficiency), and once per
# model and N, N workers training alone at once (the compute of the cell, no communication).
#
# Writes DIR/survey.md: per model, the survey's table (samples/s and scaling efficiency against
# one worker, every method and DDP, one column per cell), the cost model's prediction next to the
# measurement, and per cell the verdict: does the best of our seven methods reach 1.25x DDP's
# throughput, or come within 1.05x of the cell's limit (the larger of the compute alone and the
# time one pass of every gradient takes through the cell's slowest link at its rate)? Plots:
# DIR/survey_throughput_<model>.png, DIR/survey_predicted_vs_measured.png; every cell's own
# report (report.md, its plots, every rank's log) in DIR/cells/<model>_<network>_<rate>_n<N>/.
#
#   bash dist/predict/survey.sh [--quick] [--out DIR] [--bin PATH] [--models "resnet20 bert_tiny"]
#                               [--networks "flat:100mbit flat:25mbit two_racks:100mbit"]
#                               [--workers "4 8"] [--batch B] [--epochs E] [--iters I]
#                               [--max-steal P] [--methods "..."] [--set KEY=VALUE]... [--merge-only]
#
# --quick     report.sh's short runs (3 epochs of 60 iterations); --epochs/--iters set them
# --out       output folder (default runs/survey; emptied first)
# --bin       the mintrain binary (default $MT_BIN; without either, build/release/apps/mintrain is
#             built first)
# --models, --networks, --workers   the grid (defaults above: 2 x 3 x 2 = 12 cells)
# --batch     per-worker batch (default 16)
# --methods   a subset of the seven (report.sh's names; default all seven); DDP always runs
# --max-steal report.sh's: a run during which the hypervisor took more than P% of the CPU runs again
# --set       a config override for every run of every cell (report.sh's), e.g.
#             dist.bytescheduler.search_iters=2 where few iterations leave little room for its search
# --merge-only  run nothing: merge the cells an earlier run left in --out again (its cells.tsv),
#             e.g. after re-running one cell's report.sh into its folder by hand
# Needs root, gnuplot (gnuplot-nox) and PyTorch for $PYTHON (default /usr/bin/python3; Debian:
# python3-torch). Every argument is checked before anything runs; a bad one is an error naming
# it (exit 2). The cells run one after the other, each on a testbed of its own, torn down after it.
# Every host shares this machine's cores: figures from a small VM say how the methods rank on a
# network slower than the cores, not what a cluster of real hosts would reach.
set -euo pipefail
cd "$(dirname "$0")/../.."

args_given="$*"
out=runs/survey
bin=${MT_BIN:-}
models="resnet20 bert_tiny"
networks="flat:100mbit flat:25mbit two_racks:100mbit"
workers="4 8"
batch=16
methods="ssgd_bsp ssgd_wfbp ssgd_mgwfbp bytescheduler_a2a ps_bsp ps_wfbp bytescheduler_ps"
pass=()   # options handed to every report.sh run as they are
merge_only=0
fail() { echo "survey.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) pass+=(--quick) ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --bin) bin=${2:?--bin needs a path}; shift ;;
    --models) models=${2:?--models needs a list}; shift ;;
    --networks) networks=${2:?--networks needs a list of PRESET:RATE}; shift ;;
    --workers) workers=${2:?--workers needs a list of numbers}; shift ;;
    --batch) batch=${2:?--batch needs a number}; shift ;;
    --methods) methods=${2:?--methods needs a list}; shift ;;
    --epochs|--iters|--max-steal|--set) pass+=("$1" "${2:?$1 needs a value}"); shift ;;
    --merge-only) merge_only=1 ;;
    -h|--help) awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown option '$1' (see --help)" ;;
  esac
  shift
done

# ---- every argument, before anything runs ----------------------------------------------------
[[ -n $models && -n $networks && -n $workers && -n $methods ]] || fail "--models, --networks, --workers and --methods must not be empty"
for m in $models; do
  [[ -f configs/survey_${m}_synthetic.prototxt ]] ||
    fail "unknown model '$m' (resnet20, bert_tiny: the models with a configs/survey_<model>_synthetic.prototxt)"
done
has_two_racks=0
for cell in $networks; do
  preset=${cell%%:*} rate=${cell#*:}
  [[ $cell == *:* ]] || fail "network '$cell' is not PRESET:RATE (e.g. flat:100mbit)"
  case $preset in flat) ;; two_racks) has_two_racks=1 ;;
    *) fail "unknown network preset '$preset' in '$cell' (flat, two_racks)" ;; esac
  [[ ${rate,,} =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || fail "bad rate '$rate' in '$cell' (e.g. 100mbit, 25mbit, 1gbit)"
done
for n in $workers; do
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 2)) || fail "--workers takes numbers >= 2, not '$n'"
  ((has_two_racks == 0 || n % 2 == 0)) || fail "two_racks needs an even number of workers (two racks of N/2), not $n"
done
[[ $batch =~ ^[0-9]+$ ]] && ((batch >= 1)) || fail "--batch must be a number >= 1, not '$batch'"
for a in $methods; do
  case $a in ssgd_bsp|ssgd_wfbp|ssgd_mgwfbp|bytescheduler_a2a|ps_bsp|ps_wfbp|bytescheduler_ps) ;;
    *) fail "unknown method '$a' (ssgd_bsp ssgd_wfbp ssgd_mgwfbp bytescheduler_a2a ps_bsp ps_wfbp bytescheduler_ps)" ;;
  esac
done
command -v gnuplot >/dev/null || fail "gnuplot not found; install it (Debian: apt-get install gnuplot-nox)"
log() { echo "survey: $*" | tee -a "$out/survey.log"; }
if ((merge_only)); then
  [[ -s $out/cells.tsv ]] || fail "--merge-only: no $out/cells.tsv (run the survey into --out first)"
  models=$(cut -f1 "$out/cells.tsv" | awk '!seen[$0]++' | tr '\n' ' ')   # the models that ran
else
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch' 2>/dev/null ||
  fail "the PyTorch DDP row needs PyTorch, and $PYTHON cannot import torch; install it (Debian: apt-get install python3-torch) or set PYTHON"
export PYTHON
[[ $(id -u) -eq 0 ]] || {
  echo "survey.sh: must run as root (report.sh builds network namespaces); try: sudo bash $0 $args_given" >&2
  exit 1; }
if [[ -z $bin ]]; then
  bin=build/release/apps/mintrain
  echo "survey.sh: building $bin (--bin PATH or MT_BIN uses another binary as it is)" >&2
  { cmake --preset release && cmake --build --preset release --target mintrain -j"$(nproc)"; } >/dev/null ||
    fail "building mintrain failed; run: cmake --build --preset release --target mintrain"
fi
[[ -x $bin ]] || fail "no mintrain binary at '$bin' (--bin)"

rm -rf "$out"
mkdir -p "$out/cells"
log "$(date -u '+%F %T') UTC; models: $models; networks: $networks; workers: $workers; batch $batch; binary $bin"

# ---- the cells ---------------------------------------------------------------------------------
cells=$out/cells.tsv   # model network rate workers servers folder rc
: >"$cells"
servers_for() { local s=$(($1 / 4)); echo $((s < 1 ? 1 : s)); }
declare -A ran_one ran_alone
for m in $models; do
  for n in $workers; do
    for cell in $networks; do
      preset=${cell%%:*} rate=${cell#*:}
      s=$(servers_for "$n")
      dir=$out/cells/${m}_${preset}_${rate}_n$n
      # The bases run once: one worker per model, N workers alone per model and N.
      rows="$methods pytorch_ddp"
      [[ -n ${ran_alone[$m/$n]:-} ]] || { rows="compute_alone $rows"; ran_alone[$m/$n]=1; }
      [[ -n ${ran_one[$m]:-} ]] || { rows="one_worker $rows"; ran_one[$m]=1; }
      log "cell $m, $preset at $rate, $n workers ($s server$( ((s == 1)) || echo s) for the PS): $rows"
      rc=0
      bash dist/predict/report.sh --out "$dir" --bin "$bin" --config "configs/survey_${m}_synthetic.prototxt" \
          --model "$m" --presets "$preset" --rate "$rate" --nproc "$n" --servers "$s" --batch "$batch" \
          --algorithms "$rows" "${pass[@]}" >"$out/cells/${m}_${preset}_${rate}_n$n.log" 2>&1 || rc=$?
      ((rc == 0)) || log "cell $m $preset $rate n$n: report.sh exit $rc (see $dir/report.log and $dir.log)"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$preset" "$rate" "$n" "$s" "$dir" "$rc" >>"$cells"
    done
  done
done
fi
cells=$out/cells.tsv

# ---- merging ----------------------------------------------------------------------------------
to_bits() { local r=${1,,}; [[ $r =~ ^([0-9]+)(kbit|mbit|gbit)$ ]]
  case ${BASH_REMATCH[2]} in kbit) echo $((BASH_REMATCH[1] * 1000)) ;; mbit) echo $((BASH_REMATCH[1] * 1000000)) ;;
    gbit) echo $((BASH_REMATCH[1] * 1000000000)) ;; esac; }
row() { [[ -s $1/summary.tsv ]] && awk -F'\t' -v a="$2" '$2 == a { print; exit }' "$1/summary.tsv"; }
ms_of() { row "$1" "$2" | cut -f3; }
# The cell that holds each base (the first one that ran it).
declare -A have_one have_alone
while IFS=$'\t' read -r m preset rate n s dir rc; do
  [[ -n ${have_one[$m]:-} ]] || ! row "$dir" one_worker >/dev/null || have_one[$m]=$dir
  [[ -n ${have_alone[$m/$n]:-} ]] || ! row "$dir" compute_alone >/dev/null || have_alone[$m/$n]=$dir
done <"$cells"
merged=$out/merged.tsv   # model network rate N method ms predicted_ms samples_s eff_vs_1 eff_vs_alone rc
: >"$merged"
verdicts=$out/verdicts.tsv   # model network rate N best best_samples_s ddp_samples_s x_ddp limit_ms x_limit verdict
: >"$verdicts"
while IFS=$'\t' read -r m preset rate n s dir rc; do
  one_ms=$(ms_of "${have_one[$m]:-/none}" one_worker || true)
  alone_ms=$(ms_of "${have_alone[$m/$n]:-/none}" compute_alone || true)
  # Every gradient once through the slowest link: the host link, or two_racks' inter-rack link (RATE/4).
  grad_bytes=$(grep -ohE '"bytes": [0-9]+' "$dir"/profile_rank0.txt 2>/dev/null | awk '{ s += $2 } END { print s + 0 }')
  bits=$(to_bits "$rate")
  [[ $preset == two_racks ]] && bits=$((bits / 4))
  for a in $methods pytorch_ddp; do
    r=$(row "$dir" "$a" || true)
    ms=$(cut -f3 <<<"$r") pred=$(cut -f7 <<<"$r") arc=$(cut -f8 <<<"$r")
    awk -v m="$m" -v p="$preset" -v rate="$rate" -v n="$n" -v a="$a" -v ms="${ms:-?}" -v pred="${pred:-?}" \
        -v b="$batch" -v one="${one_ms:-?}" -v alone="${alone_ms:-?}" -v rc="${arc:-missing}" 'BEGIN {
      sps = eff = effa = "?"
      if (ms != "?" && ms > 0) { sps = n * b * 1000 / ms
        if (one != "?" && one > 0) eff = sps / (n * b * 1000 / one)
        if (alone != "?" && alone > 0) effa = alone / ms }
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m, p, rate, n, a, ms, pred, sps, eff, effa, rc }' >>"$merged"
  done
  awk -F'\t' -v m="$m" -v p="$preset" -v rate="$rate" -v n="$n" -v alone="${alone_ms:-?}" -v gb="$grad_bytes" -v bits="$bits" '
    $1 == m && $2 == p && $3 == rate && $4 == n && $8 != "?" {
      if ($5 == "pytorch_ddp") ddp = $8
      else if ($8 > best_sps) { best_sps = $8; best = $5; best_ms = $6 } }
    END {
      wire = gb > 0 ? 1000 * gb * 8 / bits : 0
      limit = (alone != "?" && alone > wire) ? alone : wire
      xd = (ddp > 0 && best_sps > 0) ? best_sps / ddp : "?"
      xl = (limit > 0 && best_ms > 0) ? best_ms / limit : "?"
      v = "NOT MET"
      if (best == "") v = "no run of ours"
      else if (xd != "?" && xd >= 1.25) v = "MET (>= 1.25x DDP)"
      else if (xl != "?" && xl <= 1.05) v = "MET (within 1.05x of the limit)"
      else if (xd == "?") v = "NOT MET (no DDP figure)"
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m, p, rate, n, (best == "" ? "-" : best),
             (best_sps == "" ? "?" : best_sps), (ddp == "" ? "?" : ddp), xd, (limit > 0 ? limit : "?"), xl, v }' "$merged" >>"$verdicts"
done <"$cells"

# ---- plots ------------------------------------------------------------------------------------
declare -A label=([ssgd_bsp]="BSP-A2A" [ssgd_wfbp]="WFBP-A2A" [ssgd_mgwfbp]="MG-WFBP"
                  [bytescheduler_a2a]="ByteScheduler-A2A" [ps_bsp]="BSP-PS" [ps_wfbp]="WFBP-PS"
                  [bytescheduler_ps]="ByteScheduler-PS" [pytorch_ddp]="PyTorch DDP")
cell_names() { awk -F'\t' -v m="$1" '$1 == m { print $2 "_" $3 "_n" $4 }' "$cells"; }
for m in $models; do
  mapfile -t names < <(cell_names "$m")
  ((${#names[@]})) || continue
  { printf 'method'; printf ' %s' "${names[@]}"; echo
    for a in $methods pytorch_ddp; do
      printf '"%s"' "${label[$a]}"
      for c in "${names[@]}"; do
        v=$(awk -F'\t' -v c="$c" -v a="$a" '$2 "_" $3 "_n" $4 == c && $5 == a { print $8 }' <(awk -F'\t' -v m="$m" '$1 == m' "$merged"))
        printf ' %s' "${v:-?}"
      done
      echo
    done; } >"$out/throughput_$m.dat"
  gnuplot <<EOF || log "gnuplot failed on the $m throughput plot"
set terminal pngcairo noenhanced size 1100,600 font 'sans,11'; set datafile missing '?'
set key outside right top; set grid ytics; set style data histograms; set style histogram clustered gap 1
set style fill solid 0.8 border -1; set boxwidth 0.9; set yrange [0:*]; set xtics rotate by -30
set output '$out/survey_throughput_$m.png'
set title "$m: samples/s, all workers, by method and cell (network_rate_workers)"
set ylabel 'samples/s'
plot for [c=2:$((${#names[@]} + 1))] '$out/throughput_$m.dat' using c:xtic(1) title columnheader(c)
EOF
done
awk -F'\t' '$6 != "?" && $7 != "?" { print $7, $6, $1 }' "$merged" >"$out/predicted_vs_measured.dat"
if [[ -s $out/predicted_vs_measured.dat ]]; then
  pm="x title 'predicted = measured' lc rgb 'gray' dt 2"
  i=0
  for m in $models; do
    i=$((i + 1))
    pm+=", '$out/predicted_vs_measured.dat' using 1:(stringcolumn(3) eq '$m' ? \$2 : 1/0) with points pt $((i * 2 + 3)) ps 1.5 title '$m'"
  done
  gnuplot <<EOF || log "gnuplot failed on the predicted-vs-measured plot"
set terminal pngcairo noenhanced size 900,700 font 'sans,11'
set output '$out/survey_predicted_vs_measured.png'
set title "Cost model vs measurement, ms per iteration, every method and cell"
set xlabel 'predicted (ms)'; set ylabel 'measured (ms)'; set logscale xy; set grid; set key left top
plot $pm
EOF
fi

# ---- the report -------------------------------------------------------------------------------
f() { [[ $1 == "?" || -z $1 ]] && echo "-" || printf "%.${2}f" "$1"; }
{
  echo "# The survey's comparison on the emulated cluster"
  echo
  echo "Generated $(date -u '+%F %T') UTC by \`bash dist/predict/survey.sh${args_given:+ $args_given}\` on $(nproc --all) cores" \
       "($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)); every emulated host shares them."
  echo "Per-worker batch $batch; synthetic data of each model's usual shape on both sides; PS methods with N/4 servers (at least 1)."
  # One row per method (and DDP), one column per cell of model $1; `cell` is the awk code that
  # prints one cell from the merged row ($6 ms, $7 predicted, $8 samples/s, $9-$10 efficiencies).
  method_table() {
    local m=$1 cell=$2 a c
    printf '| method |'; printf ' %s |' "${names[@]}"; echo
    printf '|---|'; printf -- '---:|%.0s' "${names[@]}"; echo
    for a in $methods pytorch_ddp; do
      printf '| %s |' "${label[$a]}"
      for c in "${names[@]}"; do
        awk -F'\t' -v m="$m" -v c="$c" -v a="$a" '$1 == m && $2 "_" $3 "_n" $4 == c && $5 == a {'"$cell"'
          found = 1 }
          END { if (!found) printf " - |" }' "$merged"
      done
      echo
    done
  }
  for m in $models; do
    mapfile -t names < <(cell_names "$m")
    ((${#names[@]})) || continue
    echo
    echo "## $m: samples/s (scaling efficiency against 1 worker / against N workers alone)"
    echo
    one=$(ms_of "${have_one[$m]:-/none}" one_worker || true)
    [[ -n $one && $one != "?" ]] &&
      echo "1 worker alone: $(f "$one" 1) ms per iteration, $(awk -v ms="$one" -v b="$batch" 'BEGIN { printf "%.1f", b * 1000 / ms }') samples/s."
    echo "Scaling efficiency against 1 worker: samples/s / (N x one worker's samples/s alone on this machine)."
    echo "Against N workers alone: the N workers training at once without communication, sharing the cores as in the run (what communication costs)."
    echo
    method_table "$m" '
          if ($8 == "?") printf " - (%s) |", ($11 == "0" ? "no figure" : "failed")
          else printf " %.1f (%s / %s) |", $8, ($9 == "?" ? "-" : sprintf("%.2f", $9)), ($10 == "?" ? "-" : sprintf("%.2f", $10))'
    echo
    echo "### $m: ms per iteration, measured / predicted by the cost model"
    echo
    method_table "$m" '
          ms = $6 == "?" ? "-" : sprintf("%.1f", $6); pr = $7 == "?" ? "-" : sprintf("%.1f", $7)
          printf " %s / %s |", ms, pr'
  done
  echo
  echo "## Per cell: the best of the seven against DDP and against the cell's limit"
  echo
  echo "Limit: the larger of the compute alone (N workers training at once without communication) and one pass of every gradient through the cell's slowest link at its rate. Target: best >= 1.25x DDP's samples/s, or best's time <= 1.05x the limit."
  echo
  echo "| model | network | workers | best of ours | its samples/s | DDP samples/s | best / DDP | limit ms | best / limit | verdict |"
  echo "|---|---|---:|---|---:|---:|---:|---:|---:|---|"
  while IFS=$'\t' read -r m p rate n best bsps dsps xd lim xl v; do
    echo "| $m | $p $rate | $n | ${label[$best]:-$best} | $(f "$bsps" 1) | $(f "$dsps" 1) | $(f "$xd" 2) | $(f "$lim" 1) | $(f "$xl" 2) | $v |"
  done <"$verdicts"
  echo
  echo "Each cell's own report (every run's time, prediction, steal, dropped packets, logs): \`cells/<model>_<network>_<rate>_n<N>/report.md\`."
  echo
  for m in $models; do [[ -s $out/survey_throughput_$m.png ]] && echo "![$m throughput](survey_throughput_$m.png)"; done
  [[ -s $out/survey_predicted_vs_measured.png ]] && echo "![predicted vs measured](survey_predicted_vs_measured.png)"
  true
} >"$out/survey.md"
cat "$out/survey.md"
log "wrote $out/survey.md"
failed=$(awk -F'\t' '$7 != 0' "$cells" | wc -l)
((failed == 0)) || { log "$failed cell(s) had a failed run; see $out/cells/*/report.log"; exit 1; }
