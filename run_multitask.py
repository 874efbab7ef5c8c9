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

from data.readers import DataError
from minbert.weights import WeightsError
from training.config import SECTIONS, RunConfig
from training.resume import ResumeError
from training.trainer import run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(section)
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata)
            if "default" not in meta["help"] and not isinstance(f.default, bool):
                meta["help"] += f" (default: {f.default})"
            if f.type in (bool, "bool"):
                group.add_argument(f"--{f.name}", action="store_true", help=meta["help"])
                continue
            kind = meta.pop("type", None) or type(f.default)
            group.add_argument(f"--{f.name}", type=kind, default=f.default, **meta)
    return parser


def parse_config(argv=None) -> RunConfig:
    args = vars(build_parser().parse_args(argv))
    sections = {name: cls(**{f.name: args[f.name] for f in dataclasses.fields(cls)})
                for name, cls in SECTIONS.items()}
    return RunConfig(**sections)


def main(argv=None) -> int:
    try:
        config = parse_config(argv)
        config.validate()
        run(config)
    except (DataError, WeightsError, ResumeError, ValueError, FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
