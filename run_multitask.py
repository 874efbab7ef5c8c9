"""Multi-task BERT fine-tuning on SST-5, Quora paraphrase and STS-B.

    python run_multitask.py                       # embedded model, data from $MINBERT_DATA or ./data
    python run_multitask.py --data_dir ../shared/data/multitask --pooling cls --para_head cosine
    python run_multitask.py --pre_qqp --pooling mean --smart --scl

Flags come from the config dataclasses in ``training/config.py`` (one field, one flag).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from training.cli import run_command
from minbert.errors import first_line
from training.config import CORE_SECTIONS, REMOVED, REMOVED_IN, RENAMED, REFERENCE_SPEED, SPLIT_FLAGS, RunConfig, \
    saved_values
from training import extensions as registry
from training.flags import add_flags, add_refused, section_from_args
from training.settings_file import read_settings_file
from training.trainer import run

EPILOG = """other tools:
  python -m training.tools.predict RUN --data_dir DIR --out DIR   predict files with a trained run
  python -m training.tools.embed RUN --input FILE --out FILE.npy  sentence vectors of a file
  python -m training.tools.report predictions/         results table of run folders
  python -m scripts.evaluate_embeddings ...            STS / SentEval embedding evaluation
  python -m scripts.simcse_sweep ...                   unsupervised SimCSE sweep (lr x temp x pooling)
  python -m scripts.probe ...                          k-means and linear probe of sentence vectors
  python -m scripts.sentence_finetune ...              single-sentence fine-tuning (ce or lcl)
  python scripts/quantize.py ...                       int8 quantization of a run's checkpoint
  bash scripts/ablate.sh -- --data_dir DIR             the ablation grid"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for section, cls in CORE_SECTIONS.items():
        add_flags(parser, cls, title=section)
    for extension in registry.EXTENSIONS:
        add_flags(parser, extension.settings, title=f"{extension.name} ({extension.column})")
    reference = " ".join(f"--{k} {v}" if not isinstance(v, bool) else f"--{'' if v else 'no_'}{k}"
                         for k, v in REFERENCE_SPEED.items())
    parser.add_argument("--reference", action="store_true",
                        help=f"the written-out reference paths instead of the fast defaults: {reference} "
                             f"(speed flags given beside it still apply)")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="take the settings from FILE, JSON (a run's checkpoint/run_config.json, its metrics.json, "
                             "or your own, in sections or flat) or YAML (with PyYAML installed); flags given on the "
                             "command line override it; its run_name, resume and log_file are not taken (default: none, "
                             "the flags alone)")
    add_refused(parser, SPLIT_FLAGS)
    return parser


# a configuration file is a recipe, not a run: where a run is and what it resumes come from the command line only
NOT_FROM_FILE = ("run_name", "resume", "resume_fallback", "log_file", "wait_after_eval")
# settings a run saves that are no flag: a run's own configuration file carries its declared tasks
SAVED_ONLY = ("own_tasks",)


def parse_config(argv=None) -> RunConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    given = explicit_flags(argv)
    layers = [config_file(parser, args.config)] if args.config else []
    if args.reference:  # the reference paths over the defaults (and a file's speed settings); flags given win
        layers.append(REFERENCE_SPEED)
    for values in layers:
        for name, value in values.items():
            if name not in given:
                setattr(args, name, value)
    return RunConfig(**{name: section_from_args(cls, args) for name, cls in CORE_SECTIONS.items()},
                     extensions={e.name: section_from_args(e.settings, args) for e in registry.EXTENSIONS})


def explicit_flags(argv=None) -> set[str]:
    """The settings the command line gives (a flag's ``--no_`` form included), whatever their values."""
    parser, unset = build_parser(), object()
    parser.set_defaults(**{action.dest: unset for action in parser._actions if action.dest != "help"})
    return {name for name, value in vars(parser.parse_args(argv)).items() if value is not unset}


def config_file(parser: argparse.ArgumentParser, path: str) -> dict:
    """The settings ``--config FILE`` names (what the file gives, no more): read through ``RunConfig.from_dict``
    (older names renamed); an unreadable file, an unknown setting or a value its flag would refuse is
    argparse's usage error naming the file."""
    file = Path(path)
    try:
        data = read_settings_file(file, "--config")
    except ValueError as err:   # unreadable, not JSON / YAML (a YAML syntax error too), PyYAML missing
        parser.error(str(err))
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]   # a run's metrics.json
    if not isinstance(data, dict):
        parser.error(f"--config {file}: expected settings by name (a JSON object), got {type(data).__name__}")
    flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
    named = {**saved_values({k: v for k, v in data.items() if isinstance(v, dict)}), **flat}
    actions = {action.dest: action for action in parser._actions}
    unknown = sorted(name for name in named if name not in actions and name not in RENAMED
                     and name not in SAVED_ONLY and name not in REMOVED)
    if unknown:
        parser.error(f"--config {file}: unknown settings {', '.join(unknown)}")
    for name, off in REMOVED.items():   # a setting whose code is gone: read when off, refused when on
        if named.pop(name, off) != off:
            parser.error(f"--config {file}: {name} {REMOVED_IN}")
    where = [name for name in NOT_FROM_FILE if name in named and named[name] not in (None, False)]
    if where:   # a recipe, not a run: where a run goes is the command line's (a run's own saved file has them)
        print(f"note: --config {file}: {', '.join(where)} not taken from the file (give them as flags)",
              file=sys.stderr)
    for name, value in list(named.items()):
        field = RENAMED[name][0][0] if name in RENAMED else name   # an older name: typed as the field it became
        if field in actions and name not in NOT_FROM_FILE:
            named[name] = typed(parser, actions[field], value, f"--config {file}: {name}")
    try:
        config = RunConfig.from_dict({"file": named})
    except (TypeError, ValueError) as err:
        parser.error(f"--config {file}: {first_line(err)}")
    present = {new for old in named for new in (RENAMED[old][0] if old in RENAMED else (old,))}
    values = {f.name: getattr(section, f.name) for section in config.sections().values()
              for f in dataclasses.fields(section) if f.name in present and f.name not in NOT_FROM_FILE}
    for name, value in values.items():
        if name in actions:
            check_as_parsed(parser, actions[name], value, f"--config {file}: {name}")
    return values


def typed(parser: argparse.ArgumentParser, action: argparse.Action, value, where: str):
    """A value of a configuration file as its flag reads it: an on/off flag takes true or false; other flags
    take text through the flag's ``type`` (so 1e-4 in YAML 1.1, which reads it as text, is a number, and
    ``none`` is None where the flag takes it), a number (a whole one for a whole-number flag), a list where
    the flag takes comma-separated values, or null where the flag's default is none; argparse's usage
    error naming the file and the key otherwise."""
    if action.nargs == 0:   # --name / --no_name (null where the default is none: "decide for me")
        if not isinstance(value, bool) and not (value is None and action.default is None):
            parser.error(f"{where}: {value!r}: give true or false")
        return value
    if value is None:
        if action.default is None:
            return None
        parser.error(f"{where}: null: give a value (its default is {action.default!r})")
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        value = ",".join(str(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        parser.error(f"{where}: {value!r} is not a value this flag takes")
    if action.type is float and isinstance(value, (int, float)):
        return float(value)
    if action.type is int and isinstance(value, float) and value.is_integer():
        return int(value)
    convert = action.type if callable(action.type) else str
    try:
        return convert(str(value))   # text as the command line gives it: "1e-4", "none", "32,86,32"
    except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
        parser.error(f"{where}: {value!r}: {first_line(err)}")


def check_as_parsed(parser: argparse.ArgumentParser, action: argparse.Action, value, where: str) -> None:
    """A setting from a file checked as its flag would be: text through the flag's ``type`` (e.g.
    ``--device``'s ``device_name``), any value against its ``choices``; argparse's usage error otherwise."""
    if isinstance(value, str) and callable(action.type):
        try:
            action.type(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
            parser.error(f"{where}: {first_line(err)}")
    if action.choices is not None and value not in action.choices:
        parser.error(f"{where} {value!r}: choose one of {', '.join(map(str, action.choices))}")


def main(argv=None) -> int:
    """Exit codes: 0 finished, 1 an error (one line on stderr), 130 Ctrl-C, 143 SIGTERM."""
    config = parse_config(argv)  # a bad flag is argparse's usage message and exit code 2
    return run_command(lambda: run(config) and None)


if __name__ == "__main__":
    sys.exit(main())
