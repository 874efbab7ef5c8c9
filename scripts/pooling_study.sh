#!/usr/bin/env bash
# The pooling study: STS correlation of every pooling mode (and the max token reduction wherever a
# mode takes one), for the embedded model and, when given, for a checkpoint after unsupervised SimCSE.
#
# Usage: bash scripts/pooling_study.sh [--model DIR] [--data FILE] [--ucl_checkpoint DIR] [--out DIR]
#                                      [--dry_run] [--help] [-- EXTRA FLAGS for evaluate_embeddings]
#
#   --model DIR            encoder of the "base" series (default: the embedded model)
#   --data FILE            STS file or folder, as evaluate_embeddings --data takes it
#                          (default: ../shared/data/multitask/sts-dev.csv beside this repository)
#   --ucl_checkpoint DIR   a run folder (or its checkpoint/) after unsupervised SimCSE: the "ucl"
#                          series. Make one with, e.g.,
#                            python run_multitask.py --ucl --epochs 1 --max_steps_per_epoch 1 --run_name ucl-only
#                          (add --ucl_steps N to bound the SimCSE stage; the one multi-task step after it
#                          barely moves the encoder), then pass --ucl_checkpoint predictions/ucl-only
#   --out DIR              where results go (default: predictions/pooling_study):
#                          DIR/<series>/<mode>[-<reduction>].json, DIR/logs/, and the table
#                          DIR/pooling_study.md with its chart DIR/pooling_study.png
#   --dry_run              print each command instead of running it
#   -- EXTRA...            flags appended to every evaluate_embeddings call, e.g. -- --device cpu
#
# The modes and which of them take a reduction come from heads/pooling.py (POOLING_MODES), so a new
# mode joins the study by itself. A result JSON that already exists is reused (delete it to run that
# row again). The table and chart are drawn by scripts/plot_table.py (the PNG needs matplotlib, an
# optional dependency; without it only the Markdown is written). The exit status is 1 if any
# evaluation failed. Set PYTHON to choose the interpreter (default: python).
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
MODEL=""
DATA="$ROOT/../shared/data/multitask/sts-dev.csv"
UCL=""
OUT="predictions/pooling_study"
EXTRA=()
DRY_RUN=0

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "pooling_study.sh: $*" >&2; exit 2; }

while (($# > 0)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry_run) DRY_RUN=1; shift ;;
    --model|--data|--ucl_checkpoint|--out)
      (($# >= 2)) || die "$1 needs a value"
      case "$1" in
        --model) MODEL="$2" ;; --data) DATA="$2" ;; --ucl_checkpoint) UCL="$2" ;; --out) OUT="$2" ;;
      esac
      shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

[[ -e "$DATA" ]] || die "STS data not found: $DATA (give --data FILE)"
if [[ -n "$UCL" ]]; then [[ -d "$UCL" ]] || die "--ucl_checkpoint: no such folder: $UCL"; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# "<mode> <reduction> <file name>" per line, in the table's order: each mode, then its max
# reduction if it takes one (file <mode>-<reduction>); a mode without a reduction is file <mode>.
ROWS="$("$PYTHON" -c '
from heads.pooling import POOLING_MODES, takes_reduction
for mode in POOLING_MODES:
    reductions = ("mean", "max") if takes_reduction(mode) else ("mean",)
    for reduction in reductions:
        print(mode, reduction, f"{mode}-{reduction}" if takes_reduction(mode) else mode)
')" || die "cannot list the pooling modes with $PYTHON (is the environment active?)"

SERIES=("base")
[[ -n "$UCL" ]] && SERIES+=("ucl")

((DRY_RUN)) || mkdir -p "$OUT/logs" || die "cannot create $OUT/logs"
study_start=$SECONDS
n_failed=0; results=()
for series in "${SERIES[@]}"; do
  source_flags=()
  [[ "$series" == base && -n "$MODEL" ]] && source_flags=(--model "$MODEL")
  [[ "$series" == ucl ]] && source_flags=(--checkpoint "$UCL")
  while read -r mode reduction name; do
    json="$OUT/$series/$name.json"
    cmd=("$PYTHON" -m scripts.evaluate_embeddings "${source_flags[@]+"${source_flags[@]}"}" --data "$DATA"
         --pooling "$mode" --reduction "$reduction" --out "$json" "${EXTRA[@]+"${EXTRA[@]}"}")
    if ((DRY_RUN)); then printf '%q ' "${cmd[@]}"; echo; continue; fi
    if [[ -s "$json" ]]; then
      printf '%-6s %-22s reused %s\n' "$series" "$name" "$json"; results+=("$json"); continue
    fi
    mkdir -p "$OUT/$series"
    log="$OUT/logs/$series-$name.log"
    printf '%-6s %-22s ... ' "$series" "$name"
    row_start=$SECONDS
    "${cmd[@]}" > "$log" 2>&1
    rc=$?
    if ((rc == 0)); then
      printf 'ok in %ds\n' $((SECONDS - row_start)); results+=("$json")
    else
      printf 'FAILED (exit %d); log: %s\n' "$rc" "$log"; tail -n 2 "$log" | sed 's/^/    /'
      n_failed=$((n_failed + 1))
      if ((rc == 130)); then echo "interrupted: stopping the study"; break 2; fi
    fi
  done <<< "$ROWS"
done

table=("$PYTHON" "$ROOT/scripts/plot_table.py" --title "Pooling study: STS correlation of cosine similarity"
       --md "$OUT/pooling_study.md" --png "$OUT/pooling_study.png")
if ((DRY_RUN)); then printf '%q ' "${table[@]}"; echo "$OUT/<series>/<row>.json ..."; exit 0; fi
total=$((SECONDS - study_start))
printf '\n%d evaluations, %d failed, in %dm%02ds\n\n' "$((${#results[@]} + n_failed))" "$n_failed" \
  $((total / 60)) $((total % 60))
((${#results[@]} > 0)) || die "no results to tabulate"
"${table[@]}" "${results[@]}" || exit 1
((n_failed == 0))
