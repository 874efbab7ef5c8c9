#!/usr/bin/env bash
# The LCL study: label-contrastive (lcl) against cross-entropy (ce) fine-tuning, judged by the
# embeddings alone. For each task, the encoder is fine-tuned with each loss (same budget, same seed;
# python -m scripts.sentence_finetune), then k-means ARI/AMI and a logistic-regression probe
# (python -m scripts.probe) are measured on the frozen embeddings of the result and, as the
# baseline, of the untouched model ("pretrained").
#
# Usage: bash scripts/lcl_study.sh [--data_dir DIR] [--model DIR] [--out DIR] [--max_train N] [--normalize]
#                                  [--dry_run] [--help] [-- EXTRA FLAGS for sentence_finetune]
#
#   --data_dir DIR   folder with ids-{sst,cfimdb}-{train,dev}.csv
#                    (default: ../shared/data/cs224n beside this repository)
#   --model DIR      encoder to start from (default: the embedded model)
#   --out DIR        where results go (default: predictions/lcl_study): DIR/runs/<task>-<loss>/
#                    (checkpoint/ and metrics.json), DIR/<series>/<task>.json (probe results; series
#                    = pretrained, ce, lcl), DIR/logs/, and the table DIR/lcl_study.{md,csv} with its
#                    chart DIR/lcl_study.png, copied to docs/lcl_study.png
#   --max_train N    training sentences the probe encodes, a seeded random subset (default: 2000)
#   --normalize      probe L2-normalised vectors (the geometry the lcl loss shapes): the probe results
#                    go to DIR/normalized/<series>/<task>.json and the table to
#                    DIR/lcl_study_normalized.{md,csv,png} (not copied to docs/); the fine-tuning runs
#                    are shared with the plain study (reused when they exist)
#   --dry_run        print each command instead of running it
#   -- EXTRA...      flags appended to every sentence_finetune call, e.g. -- --cl_temp 0.1 --lr 5e-5
#
# The budget of each task is the BUDGETS table below (epochs and batches per epoch of 32 sentences,
# max_length 128): SST 1 x 150 batches (4,800 of its 8,544 sentences), CFIMDB 2 x 50 batches (its
# 1,707 reviews about twice; the reviews are long, so a batch costs ~5x an SST batch). Every run
# uses mean pooling, as does the probe. A result that already exists (a run's metrics.json, a probe
# JSON) is reused: delete it to run that step again. The table and chart are drawn by
# scripts/plot_table.py (the PNG needs matplotlib, an optional dependency; without it only the
# Markdown and CSV are written). The exit status is 1 if any step failed. Set PYTHON to choose the
# interpreter (default: python). On a shared machine run it as
#   OMP_NUM_THREADS=1 nice -n 19 bash scripts/lcl_study.sh
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
DATA_DIR="$ROOT/../shared/data/cs224n"
MODEL=""
OUT="predictions/lcl_study"
MAX_TRAIN=2000
POOLING=mean
EXTRA=()
DRY_RUN=0
NORMALIZE=0
LOSSES=(ce lcl)
# task, then its sentence_finetune budget flags
BUDGETS=(
  "sst --epochs 1 --max_steps 150"
  "cfimdb --epochs 2 --max_steps 50"
)

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "lcl_study.sh: $*" >&2; exit 2; }

while (($# > 0)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry_run) DRY_RUN=1; shift ;;
    --normalize) NORMALIZE=1; shift ;;
    --data_dir|--model|--out|--max_train)
      (($# >= 2)) || die "$1 needs a value"
      case "$1" in
        --data_dir) DATA_DIR="$2" ;; --model) MODEL="$2" ;; --out) OUT="$2" ;; --max_train) MAX_TRAIN="$2" ;;
      esac
      shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

[[ -d "$DATA_DIR" ]] || die "data folder not found: $DATA_DIR (give --data_dir DIR)"
[[ "$MAX_TRAIN" =~ ^[1-9][0-9]*$ ]] || die "--max_train wants a positive whole number, got '$MAX_TRAIN'"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
model_flags=()
[[ -n "$MODEL" ]] && model_flags=(--model "$MODEL")
PROBES="$OUT"; NAME=lcl_study; SUFFIX=""; probe_flags=()
((NORMALIZE)) && { PROBES="$OUT/normalized"; NAME=lcl_study_normalized; SUFFIX=-normalized; probe_flags=(--normalize); }

((DRY_RUN)) || mkdir -p "$OUT/logs" || die "cannot create $OUT/logs"
study_start=$SECONDS
n_failed=0; results=()

# step NAME RESULT COMMAND...: run COMMAND (log in $OUT/logs/NAME.log) unless RESULT exists
step() {
  local name="$1" result="$2"; shift 2
  if ((DRY_RUN)); then printf '%q ' "$@"; echo; return 0; fi
  if [[ -s "$result" ]]; then printf '%-14s reused %s\n' "$name" "$result"; return 0; fi
  local log="$OUT/logs/$name.log" started=$SECONDS rc
  printf '%-14s ... ' "$name"
  "$@" > "$log" 2>&1
  rc=$?
  if ((rc == 0)); then printf 'ok in %ds\n' $((SECONDS - started)); return 0; fi
  printf 'FAILED (exit %d); log: %s\n' "$rc" "$log"; tail -n 2 "$log" | sed 's/^/    /'
  n_failed=$((n_failed + 1))
  ((rc == 130)) && { echo "interrupted: stopping the study"; exit 130; }
  return 1
}

# probe TASK SERIES SOURCE-FLAGS...: the frozen-embedding evaluation into $PROBES/SERIES/TASK.json
probe() {
  local task="$1" series="$2"; shift 2
  local json="$PROBES/$series/$task.json"
  ((DRY_RUN)) || mkdir -p "$PROBES/$series"
  step "probe-$task-$series$SUFFIX" "$json" "$PYTHON" -m scripts.probe "$@" \
    --task "$task" --data_dir "$DATA_DIR" --pooling "$POOLING" --max_train "$MAX_TRAIN" \
    "${probe_flags[@]+"${probe_flags[@]}"}" --out "$json" && results+=("$json")
}

for entry in "${BUDGETS[@]}"; do
  read -r task budget <<< "$entry"
  probe "$task" pretrained "${model_flags[@]+"${model_flags[@]}"}"
  for loss in "${LOSSES[@]}"; do
    run="$OUT/runs/$task-$loss"
    # shellcheck disable=SC2086  # $budget is a list of flags
    step "train-$task-$loss" "$run/metrics.json" "$PYTHON" -m scripts.sentence_finetune --task "$task" \
      --loss "$loss" --data_dir "$DATA_DIR" --out "$run" --pooling "$POOLING" --max_length 128 $budget \
      "${model_flags[@]+"${model_flags[@]}"}" "${EXTRA[@]+"${EXTRA[@]}"}" \
      && probe "$task" "$loss" --checkpoint "$run"
  done
done

title="LCL study: frozen-embedding clustering and linear probe"
((NORMALIZE)) && title+=" (L2-normalised vectors)"
table=("$PYTHON" "$ROOT/scripts/plot_table.py" --title "$title"
       --md "$OUT/$NAME.md" --csv "$OUT/$NAME.csv" --png "$OUT/$NAME.png")
if ((DRY_RUN)); then printf '%q ' "${table[@]}"; echo "$PROBES/<series>/<task>.json ..."; exit 0; fi
total=$((SECONDS - study_start))
printf '\n%d probes, %d failed steps, in %dm%02ds\n\n' "${#results[@]}" "$n_failed" $((total / 60)) $((total % 60))
((${#results[@]} > 0)) || die "no results to tabulate"
"${table[@]}" "${results[@]}" || exit 1

# the fine-tuning runs under the table: steps, loss at the start and end, seconds
"$PYTHON" - "$OUT" >> "$OUT/$NAME.md" <<'EOF' || exit 1
import json, sys
from pathlib import Path
runs = sorted(Path(sys.argv[1], "runs").glob("*/metrics.json"))
print("**fine-tuning runs** (mean loss of the first and last 10 batches)\n")
print("| run | steps | sentences | loss first | loss last | train s | wall s |\n|---|---:|---:|---:|---:|---:|---:|")
for path in runs:
    m = json.loads(path.read_text())
    print(f"| {path.parent.name} | {m['steps']} | {m['examples']} | {m['first_loss']:.4f} | {m['last_loss']:.4f} "
          f"| {m['seconds']:.0f} | {m['wall_seconds']:.0f} |")
EOF
tail -n +"$(grep -n '^\*\*fine-tuning runs' "$OUT/$NAME.md" | cut -d: -f1)" "$OUT/$NAME.md"
if ((!NORMALIZE)) && [[ -f "$OUT/lcl_study.png" ]]; then
  mkdir -p "$ROOT/docs" && cp "$OUT/lcl_study.png" "$ROOT/docs/lcl_study.png" && echo "copied the chart to docs/lcl_study.png"
fi
# on a loaded machine the wall time says little; the CPU time of the commands is the cost of the study
echo "CPU time (user, system) of this shell, then of the commands it ran:"
times
((n_failed == 0))
