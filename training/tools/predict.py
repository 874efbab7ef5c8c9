"""Predict task files with a trained run, without training: CS224N prediction CSVs for every file of
the run's tasks that the data folder holds (dev, test-student, or a labelled test file of your own),
scored where the file has labels.

    python -m training.tools.predict predictions/<run> --data_dir ../shared/data/multitask --out preds/
    python -m training.tools.predict predictions/<run> --input sentences.txt --task sst --out preds/
    python -m training.tools.predict predictions/<run> --input reviews.csv --columns text --task sst --out preds/

Writes ``<out>/<prefix>-{dev,test}-output.csv`` (the names a run writes) and ``<out>/metrics.json``; or for
``--input FILE`` ``<out>/<prefix>-<file stem>-output.csv``, with each row's text and class name, and its own record
``<out>/<prefix>-<file stem>-metrics.json``, so that the predictions of several files go into one ``--out``.
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Sequence

from training.data.readers import (BadRow, DataError, Example, FileLayout, ReadReport, guess_delimiter,
                                   read_examples, read_header, read_utf8, resolve_data_dir)
from minbert.atomic import check_folder, output_set

from .command import check_overwrite, run_command
from ..configuration.sections import DataConfig, TrainConfig, add_flags
from .embed import text_lines
from ..harness.outputs import (input_prediction_paths, prediction_path, read_record, write_json, write_predictions,
                               written_by_predict)
from ..harness.runs import load_run
from ..configuration.task_declarations import label_names, parse_tasks
from ..learning.task_schema import known_tasks
from ..learning.tasks import Task, format_metrics

METRICS = "metrics.json"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch_size must be at least 1, got {args.batch_size}")
    check_mode(args)
    run = load_run(args.run, device=args.device)
    out = Path(args.out)
    check_out(out, Path(args.run), run.source, args.overwrite, beside=args.input is not None)
    if args.input is not None:
        return predict_input(run, args, out)
    tasks = parse_tasks(args.tasks, known_tasks(run.config.data)) if args.tasks else run.config.task_names()
    data_dir = resolve_data_dir(args.data_dir)
    predict_files(run, tasks, data_dir, out, args.batch_size, overwrite=args.overwrite)
    return 0


# the flags of each mode: the data folder's files, or one --input file
INPUT_FLAGS = ("columns", "task", "label_column", "id_column", "no_score", "skip_bad_rows")
DATA_DIR_FLAGS = ("tasks", "data_dir")
CSV_FLAGS = ("columns", "label_column", "id_column")   # a .txt file has no columns


def check_mode(args: argparse.Namespace) -> None:
    """Refuse flags of the other mode (they would be ignored), before the run is loaded."""
    if args.input is None:
        if given := given_flags(args, INPUT_FLAGS):
            raise ValueError(f"{goes(given)} with --input FILE; without it the data folder's files are predicted")
    elif given := given_flags(args, DATA_DIR_FLAGS):
        raise ValueError(f"--input predicts one file for one task (--task): drop {', '.join(given)}")


def given_flags(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return [f"--{name}" for name in names if getattr(args, name) is not None]


def goes(given: list[str]) -> str:
    return f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'}"


def predict_input(run, args: argparse.Namespace, out: Path) -> int:
    """``--input FILE``: the task's prediction of every row, with its text and class name, scored where labelled."""
    trained = list(run.model.heads)
    if args.task is not None:
        run.check_head(args.task)
    elif len(trained) != 1:
        raise ValueError(f"--input: this run has {len(trained)} task heads ({', '.join(trained) or 'none'}); "
                         "say which predicts with --task NAME")
    name = trained[0] if args.task is None else args.task
    known = known_tasks(run.config.data)
    task, path = known[name], Path(args.input)
    target, record = input_prediction_paths(out, task, path)
    if not path.is_file():   # before the out folder's checks, whichever kind of file
        raise DataError(f"--input {path}: no such file")
    is_text = path.suffix.lower() == ".txt"
    layout = input_layout(args, name, task, path)
    check_folder(out)
    check_overwrite([target, record], args.overwrite)   # this file's predictions only: other files' stay beside them
    if args.overwrite and not_predicts(record):
        raise ValueError(f"--out {out}: its {record.name} was not written by predict: --overwrite replaces only "
                         "predict's own outputs; choose another --out")
    examples, report = read_text_examples(path, task) if is_text else read_examples(path, layout)
    label = layout.label_column
    if report.bad_rows and not args.skip_bad_rows:
        raise DataError(bad_row_error(path, report, label, layout.delimiter))
    if report.bad_rows:
        print(f"warning: {report.summary()}", file=sys.stderr)
    if not examples:
        hint = f"; to predict without scoring, add --no_score (its {label} column is then not read)" if label else ""
        raise DataError(f"{path}: no usable rows ({report.summary()}){hint}")
    result = run.predict_examples(name, examples, args.batch_size, progress=len(examples) >= 2000)
    line = f"{path.name}: {len(examples)} predictions ({name}) -> {target}"
    if layout.id_column is None:
        line += "   (ids are line numbers)" if is_text else "   (no id column: ids are line numbers)"
    scores = {}
    if label is not None:
        scores[path.name] = result.score(task)
        line += f"   {format_metrics({name: scores[path.name]}, known, 4)}"
    with output_set(out) as staging:   # the CSV and its record appear together, or neither
        write_predictions(staging / target.name, task, result, {e.id: e.texts for e in examples},
                          tuple(layout.text_columns), label_names(name, run.config.data.own_tasks))
        write_json(staging / record.name, {"run": str(run.source), "input": str(path.resolve()), "task": name,
                                           "columns": list(layout.text_columns), "label_column": label,
                                           "scores": scores})
    print(line)
    return 0


def input_layout(args: argparse.Namespace, name: str, task: Task, path: Path) -> FileLayout:
    """How ``--input`` is read: a .txt file has one sentence (or tab-separated pair) a line, no header, ids or
    labels; a table has the task's columns or the given ones, and is scored where it has the label column."""
    if path.suffix.lower() == ".txt":
        if given := given_flags(args, CSV_FLAGS):
            raise ValueError(f"{goes(given)} with a CSV/TSV --input: {path.name} is read as text, {text_format(task)}")
        return FileLayout(task.text_columns, id_column=None)
    columns = tuple(c.strip() for c in args.columns.split(",")) if args.columns else task.text_columns
    if len(columns) != len(task.text_columns) or not all(columns) or len(set(columns)) != len(columns):
        raise ValueError(f"--columns: {name} reads {len(task.text_columns)} distinct text column"
                         f"{'s' if len(task.text_columns) > 1 else ''} ({','.join(task.text_columns)} in its own "
                         f"files), got {args.columns!r}")
    delimiter = guess_delimiter(path)
    header = read_header(path, delimiter)
    if args.no_score and args.label_column:
        raise ValueError("--no_score and --label_column do not go together: drop one")
    # --no_score: the label column (blank, text, or another task's) is not read, every row is predicted
    label = None if args.no_score else args.label_column or (task.label_column if task.label_column in header
                                                              else None)
    return dataclasses.replace(task.layout(), text_columns=columns, label_column=label, delimiter=delimiter,
                               id_column=args.id_column or (task.id_column if task.id_column in header else None))


def text_format(task: Task) -> str:
    return ("the two sentences of a pair a line, tab-separated" if task.is_pair else "one sentence a line") + \
        " (ids are line numbers)"


def read_text_examples(path: Path, task: Task) -> tuple[list[Example], ReadReport]:
    """The examples of a ``.txt`` file's non-empty lines: one sentence, or for a pair task two tab-separated ones."""
    lines = text_lines(read_utf8(path))
    if not lines:
        raise DataError(f"{path}: no sentences (a .txt file is read as {text_format(task)})")
    report, examples = ReadReport(path=path, n_rows=len(lines)), []
    for number, line in lines:
        texts = tuple(part.strip() for part in line.split("\t")) if task.is_pair else (line,)
        if len(texts) < len(task.text_columns):
            report.bad_rows.append(BadRow(number, task.text_columns[-1], "no tab: a pair task reads two sentences "
                                                                         "a line, separated by a tab"))
        elif len(texts) > len(task.text_columns):
            report.bad_rows.append(BadRow(number, "row", f"{len(texts)} tab-separated fields, a pair is 2"))
        elif empty := next((c for c, text in zip(task.text_columns, texts) if not text), None):
            report.bad_rows.append(BadRow(number, empty, "empty sentence"))
        else:
            examples.append(Example(str(number), texts, None, number))
    return examples, report


def bad_row_error(path: Path, report: ReadReport, label: str | None, delimiter: str) -> str:
    """The one line refusing a file with bad rows: the first one, how many more, and what to do."""
    first, more = report.bad_rows[0], len(report.bad_rows) - 1
    message = first.where(path)
    if more:
        message += f" (and {more} more bad row{'s' if more > 1 else ''})"
    if label is not None and first.field == label:
        message += f"; to predict without scoring, add --no_score (its {label} column is then not read)"
    elif delimiter == "," and first.field == "row" and "header has" in first.reason:
        message += ('; a comma inside an unquoted sentence splits it: quote the field ("..."), '
                    'or give a .txt file, one sentence a line')
    return message + "; --skip_bad_rows predicts the readable rows and lists the others"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.tools.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder or its checkpoint/")
    parser.add_argument("--out", required=True,
                        help="folder for the prediction CSVs and metrics.json, or with --input FILE for "
                             "<prefix>-<file stem>-output.csv and its record <prefix>-<file stem>-metrics.json: "
                             "several files can be predicted into one --out (never the run folder itself)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace prediction files already in --out (default: refuse)")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks to predict (default: the run's tasks)")
    add_flags(parser, DataConfig, only=("data_dir",))
    given = parser.add_argument_group("one file of your own (instead of the data folder)")
    given.add_argument("--input", default=None, metavar="FILE",
                       help="predict this file instead of the data folder's: a .txt file, one sentence a line (a "
                            "pair task: two, tab-separated), or a CSV/TSV (tab when its header has one, else "
                            "comma); the output keeps the text and names the class (default: none)")
    given.add_argument("--columns", default=None, metavar="COL[,COL2]",
                       help="with --input: its text column(s), two for a pair task (default: the task's own)")
    given.add_argument("--task", default=None, metavar="NAME",
                       help="with --input: the run's task that predicts (default: the run's one task)")
    given.add_argument("--label_column", default=None, metavar="COL",
                       help="with --input: score the predictions against this column (default: the task's label "
                            "column where the file has it, else no score)")
    given.add_argument("--no_score", action="store_true", default=None,
                       help="with --input: predict every row without scoring, the label column not read (e.g. "
                            "blank or text labels)")
    given.add_argument("--skip_bad_rows", action="store_true", default=None,
                       help="with --input: predict the rows that can be read and list the others on stderr "
                            "(default: a row that cannot be read is an error naming its line and field)")
    given.add_argument("--id_column", default=None, metavar="COL",
                       help="with --input: the ids of the prediction file (default: the task's id column where the "
                            "file has it, else line numbers)")
    parser.add_argument("--batch_size", type=int, default=None, help="examples per batch (default: the run's)")
    add_flags(parser, TrainConfig, only=("device",), title="device")
    return parser


def check_out(out: Path, given: Path, checkpoint: Path, overwrite: bool, beside: bool = False) -> None:
    """Refuse an ``--out`` that is this run's folder or holds another run, even with ``--overwrite``; and one whose
    metrics.json predict did not write, with ``--overwrite`` (it would be replaced) or ``beside`` (``--input``, whose
    files would go beside it, into what may be a run's folder)."""
    own = {given, checkpoint}
    if checkpoint.name == "checkpoint":  # a run folder's checkpoint/: the run folder is its parent
        own.add(checkpoint.parent)
    if any(out.resolve() == folder.resolve() for folder in own):
        raise ValueError(f"--out {out} is the run's own folder (or its checkpoint/); its metrics.json and "
                         "prediction files would be replaced: choose another --out")
    if (out / "checkpoint").is_dir() or (out / ".lock").exists():
        raise ValueError(f"--out {out} holds a run (its checkpoint/ or .lock): its metrics.json and prediction "
                         "files would be replaced, --overwrite or not; choose another --out")
    if (overwrite or beside) and not_predicts(out / METRICS):
        raise ValueError(f"--out {out}: its {METRICS} was not written by predict (a run's, or another file): "
                         "predict replaces only its own outputs and writes none beside another's; choose another --out")


def not_predicts(path: Path) -> bool:
    """Whether ``path`` is a file predict did not write: a run's metrics.json, or another file of that name."""
    return path.is_file() and not written_by_predict(read_record(path))


def predict_files(run, tasks: list[str], data_dir: Path, out: Path, batch_size: int | None,
                  overwrite: bool = False) -> dict:
    """Predict each dev/test file of ``tasks`` in ``data_dir`` and write the predictions with their metrics.json into
    ``out``, as one set (``output_set``); ``{file name: metric}`` of the labelled."""
    for name in tasks:  # every task checked before any file is written
        run.check_head(name)
    known = known_tasks(run.config.data)
    files = [(name, split, data_dir / known[name].files[split]) for name in tasks for split in ("dev", "test")
             if split in known[name].files]   # a declared task's test file is optional
    planned = [file for file in files if file[2].is_file()]
    if not planned:
        raise DataError(f"{data_dir}: none of the files of {', '.join(tasks)} "
                        f"({', '.join(known[name].files[split] for name, split, _ in files)})")
    check_folder(out)  # an --out that can never be a folder fails before any prediction
    check_overwrite([*(prediction_path(out, known[n], split) for n, split, _ in planned), out / METRICS], overwrite)
    for missing in (file[2] for file in files if file not in planned):
        print(f"note: no {missing.name} in {data_dir}; skipping it", file=sys.stderr)
    read = []
    for name, split, path in planned:  # every file read before any is written: an unreadable one leaves no output
        labelled = known[name].label_column in read_header(path)
        examples, report = known[name].read(path, labelled)
        if report.bad_rows:
            print(f"warning: {report.summary()}", file=sys.stderr)
        read.append((name, split, path, labelled, examples))
    scores, lines = {}, []
    with output_set(out) as staging:
        for name, split, path, labelled, examples in read:
            task = known[name]
            result = run.predict_examples(name, examples, batch_size, progress=len(examples) >= 2000)
            write_predictions(prediction_path(staging, task, split), task, result)
            line = f"{path.name}: {len(examples)} predictions -> {prediction_path(out, task, split)}"
            if labelled:
                scores[path.name] = result.score(task)
                line += f"   {format_metrics({name: scores[path.name]}, known, 4)}"
            lines.append(line)
        write_json(staging / METRICS, {"run": str(run.source), "data_dir": str(data_dir), "scores": scores})
    print("\n".join(lines))   # once the files are in place
    return scores


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
