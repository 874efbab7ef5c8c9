#!/usr/bin/env bash
# The ablation grid: one run_multitask.py call per row, then the results table.
#
# Usage: bash scripts/ablate.sh [--epochs N] [--max_steps_per_epoch M] [--stage_steps S] [--seeds N]
#                               [--out_dir DIR] [--only NAME...] [--resume] [--list] [--dry_run] [--help]
#                               [-- EXTRA FLAGS passed to every run]
#
#   --epochs N, --max_steps_per_epoch M   multi-task budget of every run (default: 1 epoch of 30 steps;
#                        M = none: the whole round-robin epoch)
#   --stage_steps S      batches of every extension's stage (pre-QQP, U-CL, S-CL, LCL; default: 20)
#   --seeds N            run every row with N seeds (default: 1, the default --seed). With N > 1 the
#                        runs are ablate-<name>-s<seed> with --seed 11711, 11712, ...; the report pools
#                        them into one row (mean ± std, bootstrap interval against FT); --seed after --
#                        is then refused
#   --out_dir DIR        where the run folders go (default: predictions/ablate); each run writes
#                        DIR/ablate-<name>/ (DIR/ablate-<name>-s<seed>/ with --seeds N > 1) and its log
#                        DIR/logs/<the same name>.log
#   --only NAME...       run only these rows (names as --list prints them)
#   --resume             continue each unfinished run (metrics.json says running or interrupted: the
#                        grid was stopped by Ctrl-C, a kill or a shut-down) from its newest checkpoint
#                        (run_multitask.py --resume) instead of skipping it; only when no other grid
#                        is running in DIR
#   --list               print the grid (name and flags, one run a line) and exit
#   --dry_run            print each command instead of running it
#   -- EXTRA...          flags appended to every run, e.g. -- --data_dir ../shared/data/multitask --device cpu
#
# Examples: the 30-step grid, and one full --rr min epoch with stages of 2/3 of it, 3 seeds a row:
#   bash scripts/ablate.sh -- --data_dir ../shared/data/multitask
#   bash scripts/ablate.sh --max_steps_per_epoch none --stage_steps 126 --seeds 3 -- --data_dir ../shared/data/multitask
#
# A run whose folder already exists is skipped (remove the folder to run it again), so a stopped
# grid goes on where it stopped (with --resume, the run it stopped in continues too). A failing row is reported and the loop goes on; Ctrl-C
# stops the grid. At the end `python -m training.tools.report DIR --out DIR/ablation` prints the table and writes
# DIR/ablation.md, DIR/ablation.csv and (with matplotlib) DIR/ablation-forest.png. The exit status
# is 1 if any run failed. Set PYTHON to choose the interpreter (default: python).
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
OUT="predictions/ablate"
ONLY=()
EXTRA=()
SETS=()   # budget flags given here, FLAG VALUE pairs (--stage_steps S: Python sets every stage's flag to S)
DRY_RUN=0
LIST=0
RESUME=0
SEEDS=1

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "ablate.sh: $*" >&2; exit 2; }
unfinished() {  # does run folder $1 hold a stopped run with a checkpoint to continue from?
  "$PYTHON" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("status") not in ("running", "interrupted"))' \
    "$1/metrics.json" 2>/dev/null &&
    [[ -n "$(ls -A "$1/checkpoints" 2>/dev/null)" ]]
}

# the options first, in bash: --help and a mistyped option answer without starting Python
while (($# > 0)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --list) LIST=1; shift ;;
    --resume) RESUME=1; shift ;;
    --dry_run) DRY_RUN=1; shift ;;
    --epochs|--max_steps_per_epoch|--stage_steps)
      (($# >= 2)) || die "$1 needs a value"; SETS+=("$1" "$2"); shift 2 ;;
    --seeds)
      (($# >= 2)) && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "--seeds needs a whole number >= 1"
      SEEDS="$2"; shift 2 ;;
    --out_dir)
      (($# >= 2)) && [[ -n "$2" ]] || die "--out_dir needs a folder (an empty one would write at the filesystem root)"
      OUT="$2"; shift 2 ;;
    --only)
      shift
      while (($# > 0)) && [[ "$1" != -* ]]; do ONLY+=("$1"); shift; done
      ((${#ONLY[@]} > 0)) || die "--only needs at least one row name (see --list)" ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown option '$1' (see --help; flags for run_multitask.py go after --)" ;;
  esac
done

# ---- the grid's runs: training.tools.grid's plan, the one minbert-grid runs ---------------------------------
# The rows (the PT, FT and single-task baselines, the CLS control, each extension alone on CLS and on MEAN,
# every pair on MEAN, the variants, everything but the costly extensions on MEAN, everything on CLS and on MEAN),
# their seeds, and every run's budget (one multi-task epoch of 30 steps, 20 batches of every extension's stage,
# with the options above applied) come from training.tools.grid.plan, as minbert-grid's; a flag after -- that the
# grid sets itself (--out_dir, --run_name, --resume; --seed with --seeds N > 1) is refused there, by minbert-grid's
# rule (training.tools.grid.refused_after_dashes). Unless --list, every
# run's flags (budget, row, EXTRA) are checked too, as minbert-grid checks them (training.tools.grid.first_refused: the
# parser, RunConfig.validate and the model's config.json): a bad flag after -- fails once,
# before the first run. On 2 CPU cores with the embedded model, the 26 rows without LCL took 117.3 min in all,
# 2.8-6.5 min a row on an idle machine, the all-on rows the slowest (docs/ablation.md); the 7 LCL rows come on
# top. Other jobs on the same cores make every row slower.
PLAN_AND_CHECK='
import sys
sys.path.insert(0, sys.argv[1])
from training.tools.grid import ablate_plan, listing, shell_lines
runs = ablate_plan(sys.argv[3:])
if sys.argv[2] == "list":
    print("\n".join(listing(runs)))
    sys.exit(0)
from training.tools.grid import first_refused
if refused := first_refused([(f"row {run.row}", list(run.flags)) for run in runs]):   # as minbert-grid checks
    sys.exit("ablate.sh: " + refused)
print("\n".join(shell_lines(runs)))
'
OPTIONS=(--seeds "$SEEDS" "${SETS[@]+"${SETS[@]}"}")
((${#ONLY[@]} == 0)) || OPTIONS+=(--only "${ONLY[@]}")
mode=run
((LIST)) && mode=list
planned="$(cd "$ROOT" && "$PYTHON" -c "$PLAN_AND_CHECK" "$ROOT" "$mode" "${OPTIONS[@]}" -- "${EXTRA[@]+"${EXTRA[@]}"}")" ||
  exit 2
if ((LIST)); then
  printf '%s\n' "$planned"
  exit 0
fi
mapfile -t RUNS <<< "$planned"
((${#RUNS[@]} > 0)) && [[ -n "${RUNS[0]}" ]] ||
  { echo "ablate.sh: could not plan the grid (training.tools.grid)" >&2; exit 2; }

if ((!DRY_RUN)); then
  mkdir -p "$OUT/logs" || die "cannot create $OUT/logs"
  # one grid at a time in a folder, this one or minbert-grid (the same lock file; opened to append, so that
  # minbert-grid's note in it stays): a second would append to the live logs and rerun the live runs
  if command -v flock > /dev/null; then   # util-linux; without it (macOS) the folder is not locked
    exec 9>>"$OUT/.grid.lock" || die "cannot open $OUT/.grid.lock"
    flock -n 9 || die "another grid is running in $OUT (it holds $OUT/.grid.lock): wait for it, or give another --out_dir"
  fi
  echo "ablation grid -> $OUT (${#RUNS[@]} runs; extra: ${EXTRA[*]+"${EXTRA[*]}"})"
fi
grid_start=$SECONDS
n_ok=0; n_failed=0; n_skipped=0; failed_rows=()
for line in "${RUNS[@]}"; do
  eval "words=($line)"   # shell-quoted by training.tools.grid.shell_lines: the folder name, then the flags
  run="${words[0]}"
  flags=("${words[@]:1}")
  label="${run#ablate-}"
  cmd=("$PYTHON" "$ROOT/run_multitask.py" --run_name "$run" --out_dir "$OUT" "${flags[@]}")
  if ((DRY_RUN)); then
    printf '%q ' "${cmd[@]}"; echo
    continue
  fi
  log="$OUT/logs/$run.log"
  if [[ -d "$OUT/$run" ]] && [[ -n "$(ls -A "$OUT/$run")" ]]; then
    if ((RESUME)) && unfinished "$OUT/$run"; then
      printf '%-22s resuming %s ... ' "$label" "$OUT/$run"
      row_start=$SECONDS
      "$PYTHON" "$ROOT/run_multitask.py" --resume "$OUT/$run" >> "$log" 2>&1
    else
      unfinished "$OUT/$run" && hint="unfinished: --resume continues it" || hint="remove it to run it again"
      printf '%-22s skipped: %s already exists (%s)\n' "$label" "$OUT/$run" "$hint"
      n_skipped=$((n_skipped + 1))
      continue
    fi
  else
    printf '%-22s running (%s) ... ' "$label" "${flags[*]+"${flags[*]}"}"
    row_start=$SECONDS
    "${cmd[@]}" > "$log" 2>&1
  fi
  rc=$?
  elapsed=$((SECONDS - row_start))
  if ((rc == 0)); then
    printf 'ok in %dm%02ds\n' $((elapsed / 60)) $((elapsed % 60))
    n_ok=$((n_ok + 1))
  else
    printf 'FAILED (exit %d) in %dm%02ds; log: %s\n' "$rc" $((elapsed / 60)) $((elapsed % 60)) "$log"
    tail -n 3 "$log" | sed 's/^/    /'
    n_failed=$((n_failed + 1)); failed_rows+=("$label")
    if ((rc == 130)); then echo "interrupted: stopping the grid"; break; fi
  fi
done

((DRY_RUN)) && exit 0
total=$((SECONDS - grid_start))
printf '\n%d ok, %d failed, %d skipped in %dh%02dm%02ds\n' "$n_ok" "$n_failed" "$n_skipped" \
  $((total / 3600)) $((total % 3600 / 60)) $((total % 60))
((n_failed == 0)) || echo "failed rows: ${failed_rows[*]}"
echo
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m training.tools.report "$OUT" --out "$OUT/ablation"
((n_failed == 0))
