"""A sweep of unsupervised SimCSE settings (Gao et al. 2021, §3): learning rate × temperature τ ×
pooling, each setting one run of the stage alone, scored on STS dev as it trains.

    python -m scripts.simcse_sweep --ucl_steps 1000 --out_dir predictions/simcse_sweep \\
        -- --data_dir ../shared/data/multitask
    python -m scripts.simcse_sweep --ucl_lr 3e-5 --cl_temp 0.05 --pooling mean cls --dry_run

Every setting is ``python run_multitask.py --ucl --epochs 0 --ucl_lr LR --cl_temp T --pooling P ...
--out_dir OUT --run_name <setting> [flags after --]``, run one after the other in this process
(run_multitask's own parser, ``training.harness.trainer.run``): no interpreter and torch start per setting,
the same numbers as the command, which the table lists so it can be rerun by hand. A finished setting
is not run again and an interrupted one is resumed, so rerunning a stopped sweep continues it. What
``OUT/simcse_sweep.{md,csv,json,png}`` hold: docs/embeddings.md, "Unsupervised SimCSE alone, and the sweep".
"""
from __future__ import annotations

import argparse
import csv
import io
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import run_multitask  # the command's own parser: a setting is exactly its command line
from heads import POOLING_MODES
from minbert.atomic import atomic_path, make_folder, write_text_atomic
from training.tools.command import run_command
from training.configuration.sections import SPLIT_FLAGS, OutputConfig, add_flags
from training.harness.run_config import RunConfig
from training.harness.curves import MatplotlibMissing, pyplot
from training.extensions.ucl import UclConfig
from training.configuration.flags import add_refused
from training.harness.outputs import read_metrics, write_json
from training.harness.resume import list_checkpoints
from training.harness.trainer import run

# The study's grid. SimCSE chose its learning rate among the same three values on STS-B dev (Gao et al.
# 2021, Appendix A); its example script scores every 125 steps and truncates to 32 word pieces.
GRID = {"ucl_lr": [1e-5, 3e-5, 5e-5], "cl_temp": [0.01, 0.05, 0.1], "pooling": ["mean", "last4_mean", "cls"]}
PASSED_THROUGH = ("ucl_steps", "ucl_batch_size", "ucl_max_length", "ucl_eval_every")
TABLE = "simcse_sweep"
COLUMNS = ["setting", "lr", "temp", "pooling", "step 0", "best", "best step", "last", "steps", "status"]


@dataclass
class Setting:
    """One point of the grid and what its run left."""
    ucl_lr: float
    cl_temp: float    # the "temp" column
    pooling: str
    status: str = "not run"
    command: str = ""
    curve: list[list[float]] = field(default_factory=list)   # [step, STS dev Spearman]
    best: dict | None = None                                   # {"step", "spearman"}

    @property
    def name(self) -> str:
        return f"lr{self.ucl_lr:g}-t{self.cl_temp:g}-{self.pooling}"

    def cells(self) -> dict:
        """The table's values (None where unknown)."""
        first, last = (self.curve[0][1], self.curve[-1][1]) if self.curve else (None, None)
        return {"setting": self.name, "lr": self.ucl_lr, "temp": self.cl_temp, "pooling": self.pooling,
                "step 0": first, "best": self.best and self.best["spearman"],
                "best step": self.best and self.best["step"], "last": last,
                "steps": self.curve[-1][0] if self.curve else None, "status": self.status}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, run_flags = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = build_parser().parse_args(own)
    return run_command(lambda: sweep(args, run_flags))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.simcse_sweep", usage="%(prog)s [options] "
                                     "[-- run_multitask.py flags for every run]", description=__doc__.split("\n\n")[0])
    grid = parser.add_argument_group("the grid (one run per combination)")
    grid.add_argument("--ucl_lr", nargs="+", type=float, default=GRID["ucl_lr"],
                      help=f"unsupervised SimCSE learning rates (default: {' '.join(map(str, GRID['ucl_lr']))})")
    grid.add_argument("--cl_temp", nargs="+", type=float, default=GRID["cl_temp"],
                      help=f"temperatures τ of the SimCSE loss, run_multitask.py's --cl_temp (default: "
                           f"{' '.join(map(str, GRID['cl_temp']))})")
    grid.add_argument("--pooling", nargs="+", choices=sorted(POOLING_MODES), default=GRID["pooling"],
                      metavar="MODE", help=f"sentence vectors (default: {' '.join(GRID['pooling'])})")
    add_flags(parser, UclConfig, only=PASSED_THROUGH, title="every run", ucl_max_length=32, ucl_eval_every=125)
    add_flags(parser, OutputConfig, only=("out_dir",), title="output", out_dir="predictions/simcse_sweep")
    parser.add_argument("--dry_run", action="store_true", help="print each setting's command and run nothing")
    add_refused(parser, {"--temp": "--temp was split: the sweep's temperatures are --cl_temp (the contrastive "
                                   "losses' tau; the cosine paraphrase head's is run_multitask.py's --head_temp)"})
    return parser


def sweep(args: argparse.Namespace, run_flags: list[str]) -> int:
    """Run (or skip, or resume) every setting, then write the table; 1 if any setting did not finish."""
    for name in ("ucl_lr", "cl_temp", "pooling", *PASSED_THROUGH, "out_dir", "run_name", "epochs", "resume"):
        if any(flag == f"--{name}" or flag.startswith(f"--{name}=") for flag in run_flags):
            raise ValueError(f"--{name} after '--' would override the sweep's own; give it before '--'"
                             if name in vars(args) else f"--{name} is set by the sweep for every run")
    for flag in run_flags:   # run_multitask.py's parser would end the sweep with its usage message
        if flag.split("=")[0] in SPLIT_FLAGS:
            raise ValueError(SPLIT_FLAGS[flag.split("=")[0]])
    if not args.ucl_eval_every:
        raise ValueError("--ucl_eval_every must be at least 1: the sweep compares the settings' STS dev curves")
    out_dir = Path(args.out_dir)
    settings = [Setting(*point) for point in itertools.product(args.ucl_lr, args.cl_temp, args.pooling)]
    configs = {}
    for setting in settings:  # every command is checked before the first run starts
        flags = setting_flags(args, setting) + run_flags
        setting.command = " ".join(["python run_multitask.py", *flags])
        configs[setting.name] = run_multitask.parse_config(flags)
        configs[setting.name].validate()
    if args.dry_run:
        print("\n".join(setting.command for setting in settings))
        return 0
    for number, setting in enumerate(settings, start=1):
        print(f"[{number}/{len(settings)}] {setting.name}", flush=True)
        code = run_setting(setting, configs[setting.name], out_dir / setting.name)
        if code in (130, 143):  # Ctrl-C or SIGTERM: stop the sweep (rerun it to continue)
            return code
    make_folder(out_dir)
    write_tables(settings, out_dir, args)
    return 0 if all(s.status == "finished" for s in settings) else 1


def setting_flags(args: argparse.Namespace, setting: Setting) -> list[str]:
    """The run_multitask.py flags of one setting (run flags given after '--' come after them)."""
    flags = ["--ucl", "--epochs", "0", "--ucl_lr", f"{setting.ucl_lr:g}", "--cl_temp", f"{setting.cl_temp:g}",
             "--pooling", setting.pooling]
    for name in PASSED_THROUGH:
        if getattr(args, name) is not None:
            flags += [f"--{name}", str(getattr(args, name))]
    return flags + ["--out_dir", str(args.out_dir), "--run_name", setting.name]


def run_setting(setting: Setting, config: RunConfig, run_dir: Path) -> int:
    """Run one setting, resume it, or take its finished run; fill ``setting`` from its metrics.json.
    Returns the run's exit code (0 also for a finished run left as it was)."""
    code = 0
    if not run_dir.exists():
        code = run_command(lambda: run(config) and None)
    else:
        saved = read_metrics(run_dir)
        differs = _differences(saved.get("config"), config.to_dict())
        if differs:
            setting.status = f"not run: {run_dir} was run with other flags ({differs}); use another --out_dir"
        elif saved.get("status") == "finished":
            print(f"{setting.name}: finished before, not run again", flush=True)
        elif list_checkpoints(run_dir):
            code = run_command(lambda: run(run_multitask.parse_config(["--resume", str(run_dir)])) and None)
        else:
            setting.status = f"not run: {run_dir} holds an unfinished run with no checkpoint to resume; remove it"
        if setting.status.startswith("not run:"):
            print(f"{setting.name}: {setting.status}", file=sys.stderr, flush=True)
            return 1
    metrics = read_metrics(run_dir)
    status = metrics.get("status", "did not start (its error is above)")
    setting.status = status if status != "failed" else f"failed: {metrics.get('error', '')}"
    sts_dev = ((metrics.get("stages") or {}).get("ucl") or {}).get("sts_dev") or {}
    setting.curve, setting.best = sts_dev.get("curve", []), sts_dev.get("best")
    return code


def _differences(saved: dict | None, wanted: dict) -> str:
    """The flags (outside the output section) in which a saved run configuration differs, read as this
    version reads it (``RunConfig.from_dict``: a run saved with the older ``temp`` has its two τ's)."""
    if not isinstance(saved, dict):
        return "no readable configuration in its metrics.json"
    try:
        saved = RunConfig.from_dict(saved).to_dict()
    except (TypeError, KeyError, ValueError):
        pass   # compared as saved
    return ", ".join(f"--{key}" for section, values in wanted.items() if section != "output"
                     for key, value in values.items() if (saved.get(section) or {}).get(key, object()) != value)


def write_tables(settings: list[Setting], out_dir: Path, args: argparse.Namespace) -> None:
    """``simcse_sweep.{md,csv,json}`` and, with matplotlib, ``simcse_sweep.png``; prints the table."""
    ranked = sorted(settings, key=lambda s: (s.best is None, -(s.best or {}).get("spearman", 0.0)))
    markdown = render_markdown(ranked, args)
    write_text_atomic(out_dir / f"{TABLE}.md", markdown)
    write_text_atomic(out_dir / f"{TABLE}.csv", render_csv(ranked))
    write_json(out_dir / f"{TABLE}.json", {
        "ucl_eval_every": args.ucl_eval_every, **{name: getattr(args, name) for name in PASSED_THROUGH},
        "settings": [{**s.cells(), "run_dir": str(out_dir / s.name), "command": s.command, "curve": s.curve}
                     for s in ranked]})
    print(markdown)
    written = [f"{TABLE}.md", f"{TABLE}.csv", f"{TABLE}.json"]
    try:
        plot_curves(settings, out_dir / f"{TABLE}.png")
        written.append(f"{TABLE}.png")
    except MatplotlibMissing as err:
        print(f"note: {err}", file=sys.stderr)
    print(f"wrote {', '.join(written)} in {out_dir}", file=sys.stderr)


def render_markdown(ranked: list[Setting], args: argparse.Namespace) -> str:
    """Settings by best STS dev Spearman (highest first), unfinished ones last."""
    formats = {"step 0": "{:.4f}", "best": "{:.4f}", "last": "{:.4f}", "lr": "{:g}", "temp": "{:g}"}
    lines = [f"STS dev Spearman of cosine similarity every {args.ucl_eval_every} unsupervised SimCSE steps "
             f"(step 0: before training); each run ends with its best step's encoder.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join("-" if value is None else formats.get(column, "{}").format(value)
                                for column, value in s.cells().items()) + " |" for s in ranked]
    return "\n".join(lines) + "\n"


def render_csv(ranked: list[Setting]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(["" if value is None else value for value in s.cells().values()] for s in ranked)
    return buffer.getvalue()


def plot_curves(settings: list[Setting], path: Path) -> None:
    """STS dev Spearman against the step, one line per setting (matplotlib is optional)."""
    plt = pyplot(path)
    fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    for s in settings:
        if s.curve:
            ax.plot(*zip(*s.curve), marker=".", label=s.name)
    ax.set(title="unsupervised SimCSE: STS dev Spearman", xlabel="step", ylabel="Spearman")
    if ax.lines:
        ax.legend(fontsize="small")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
