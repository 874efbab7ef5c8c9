"""Multi-task BERT fine-tuning on SST-5, Quora paraphrase and STS-B.

    python run_multitask.py                       # embedded model, data from $MINBERT_DATA or ./data
    python run_multitask.py --data_dir ../shared/data/multitask --pooling cls --para_head cosine
    python run_multitask.py --pre_qqp --pooling mean --smart --scl

Flags come from the config dataclasses in ``training/config.py`` (one field, one flag).
"""
from __future__ import annotations

import argparse
import sys

from training.cli import run_command
from training.config import CORE_SECTIONS, REFERENCE_SPEED, SPLIT_FLAGS, RunConfig
from training import extensions as registry
from training.flags import add_flags, add_refused, section_from_args
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
    add_refused(parser, SPLIT_FLAGS)
    return parser


def parse_config(argv=None) -> RunConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.reference:  # the reference paths become the defaults; flags given explicitly win
        parser.set_defaults(**REFERENCE_SPEED)
        args = parser.parse_args(argv)
    return RunConfig(**{name: section_from_args(cls, args) for name, cls in CORE_SECTIONS.items()},
                     extensions={e.name: section_from_args(e.settings, args) for e in registry.EXTENSIONS})


def main(argv=None) -> int:
    """Exit codes: 0 finished, 1 an error (one line on stderr), 130 Ctrl-C, 143 SIGTERM."""
    config = parse_config(argv)  # a bad flag is argparse's usage message and exit code 2
    return run_command(lambda: run(config) and None)


if __name__ == "__main__":
    sys.exit(main())
