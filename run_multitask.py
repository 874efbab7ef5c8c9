"""Multi-task BERT fine-tuning on SST-5, Quora paraphrase and STS-B.

examples:
  python run_multitask.py --data_dir ../shared/data/multitask --run_name smoke --epochs 1 \\
      --max_steps_per_epoch 30 --max_eval_examples 100 --no_test_predictions    # a smoke run, about a minute
  python run_multitask.py --data_dir ../shared/data/multitask                    # the default run (3 epochs)
  python run_multitask.py --data_dir ../shared/data/multitask --pre_qqp --smart --scl    # extensions, a flag each
  (data from --data_dir, else $MINBERT_DATA, else ./data; the embedded all-MiniLM-L6-v2 unless --model)

Flags come from the config dataclasses in ``training/configuration/sections.py`` (one field, one flag).
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import json
import sys

from training.configuration.config_file import config_as_file, read_config_file
from training.configuration.flags import add_flags, add_refused, flag_fields, section_from_args
from training.configuration.sections import CORE_SECTIONS, REFERENCE_SPEED, SPLIT_FLAGS
from training.configuration.task_declarations import TaskFileError
from training.configuration.task_file import check_agreement
from training import extensions as registry
from training.harness.memory import keep_freed_memory
from training.harness.run_config import RunConfig, extension_sections
from training.harness.trainer import run
from training.tools.command import run_command, usage_errors_once

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


def build_parser(abbreviations: bool = False) -> argparse.ArgumentParser:
    # flags in full, never abbreviated: --see 3 passed the grid's check of --seed, and a flag added later would make
    # an abbreviation in a saved command ambiguous (one rule for the run, the grid and the search)
    # --help opens with the docstring's examples (its paragraphs before the one on where flags come from)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\nFlags come")[0], epilog=EPILOG,
                                     allow_abbrev=abbreviations, formatter_class=argparse.RawDescriptionHelpFormatter)
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
                             "command line override it; resume and log_file are not taken, nor a saved run's own run_name "
                             "(default: none, the flags alone)")
    parser.add_argument("--print_config", action="store_true",
                        help="print the full configuration these flags (over --config FILE) would run, as a JSON file "
                             "--config takes, and exit without training; where a run goes (run_name, resume, "
                             "log_file) is left out, your own tasks are written in")
    add_refused(parser, SPLIT_FLAGS)
    return parser


def all_flag_fields() -> dict:
    """Every flag's settings field: the core sections' and each extension's."""
    return flag_fields([*CORE_SECTIONS.values(), *extension_sections().values()])


def parse_config(argv=None) -> RunConfig:
    return parse_command(argv)[0]


def parse_command(argv=None) -> tuple[RunConfig, bool, set[str]]:
    """The run's configuration, whether ``--print_config`` asks to print it instead of running it, and the settings
    the command gives (its flags', its --config file's, --reference's): --resume refuses those the run saved otherwise,
    at their defaults too."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:   # argparse's own error, after saying which flag an abbreviation stands for
        check_full_names(sys.argv[1:] if argv is None else list(argv))
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.print_config and args.resume:
        parser.error("--print_config prints a new run's configuration; a run's own is its "
                     "checkpoint/run_config.json (give that to --config)")
    given = explicit_flags(argv)
    try:
        layers = [read_config_file(args.config, all_flag_fields(), extension_sections())] if args.config else []
    except ValueError as err:   # unreadable, not JSON / YAML, a key or value its flag refuses: a usage error
        parser.error(str(err))
    if args.reference:  # the reference paths over the defaults (and a file's speed settings); flags given win
        layers.append(REFERENCE_SPEED)
    for values in layers:
        for name, value in values.items():
            if name not in given:
                setattr(args, name, value)
    if "task_file" in given and getattr(args, "own_tasks", None):   # a run's saved declarations, from --config
        try:
            check_agreement(args.task_file, args.own_tasks, f"--config {args.config}")
        except TaskFileError as err:
            parser.error(str(err))
    config = RunConfig(**{name: section_from_args(cls, args) for name, cls in CORE_SECTIONS.items()},
                       extensions={name: section_from_args(cls, args) for name, cls in extension_sections().items()})
    return config, args.print_config, given.union(*layers)


def check_full_names(argv: list[str]) -> None:
    """A usage error naming the flag an abbreviation stands for (argparse alone says "unrecognized arguments"): what
    a parser that takes abbreviations sets, and the one of the run does not."""
    strict, unset = build_parser(), object()
    strict.set_defaults(**dict.fromkeys(all_flag_fields(), unset))
    known, unknown = strict.parse_known_args(argv)
    if not (short := [word.split("=")[0] for word in unknown if word.startswith("--") and len(word) > 2]):
        return
    loose = build_parser(abbreviations=True)
    loose.set_defaults(**dict.fromkeys(all_flag_fields(), unset))
    meant = [name for name, value in vars(loose.parse_known_args(argv)[0]).items()
             if value is not unset and getattr(known, name, unset) is unset]
    if meant:
        negated = short[0].startswith("--no_")
        strict.error(f"{short[0]}: write the flag in full (--{'no_' if negated else ''}{meant[0]}); flags are never "
                     f"abbreviated")


def explicit_flags(argv=None) -> set[str]:
    """The settings the command line gives (a flag's ``--no_`` form included), whatever their values; not the
    command's own options (``--config``, ``--reference``, ``--print_config``) nor the refused ones."""
    parser, unset, fields = build_parser(), object(), all_flag_fields()
    parser.set_defaults(**dict.fromkeys(fields, unset))
    return {name for name, value in vars(parser.parse_args(argv)).items() if name in fields and value is not unset}


def main(argv=None) -> int:
    """Exit codes: 0 finished, 1 an error (one line on stderr), 130 Ctrl-C, 143 SIGTERM."""
    with usage_errors_once():   # a bad flag is argparse's usage message and exit code 2
        config, printing, given = parse_command(argv)
    if printing:   # as --config reads it back, checked as a run would check it: the file alone runs the same
        return run_command(lambda: print(json.dumps(config_as_file(config.validate()), indent=2)))
    keep_freed_memory()   # process-wide malloc thresholds: fewer page faults per step, no number changed
    return run_command(lambda: run(config, given=given) and None)


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
