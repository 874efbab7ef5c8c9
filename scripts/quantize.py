#!/usr/bin/env python3
"""Int8 dynamic quantization of a trained multi-task checkpoint, for CPU inference, with a
side-by-side report: size on disk, inference speed and dev metrics, fp32 against int8.

    python scripts/quantize.py --checkpoint predictions/<run>/checkpoint --out /tmp/quant \\
        [--data_dir ../shared/data/multitask] [--max_dev N] [--batch_size 32] [--threads 1] [--per_channel]

Why dynamic quantization. ``torch.ao.quantization.quantize_dynamic`` replaces every ``nn.Linear``
(the Q/K/V, attention-output and feed-forward projections, the pooler and the task heads) by an
int8 version: its weights are stored as int8 (qint8, one scale and zero point per matrix, or
with ``--per_channel`` one per output row), and each batch's activations are quantized on the fly, from that batch's own
min/max, just before the int8 matrix multiply, whose int32 result is scaled back to float. No
calibration data is needed and nothing is retrained; everything else (embeddings, LayerNorm,
softmax, GELU, the attention products Q·Kᵀ and A·V) stays fp32. The int8 kernels (fbgemm/x86,
onednn) are CPU kernels only, so this is a CPU-inference tool. The word-embedding table is not a
Linear layer and stays fp32; on the 384-wide MiniLM it is about half the file, so the file shrinks
by much less than 4×.

What is measured, in one run:
  1. size on disk: fp32 = the checkpoint's ``model.safetensors``; int8 = the quantized model's
     ``state_dict`` written with ``torch.save`` to ``<out>/model-int8.pt``;
  2. inference sequences/s: both models run ``torch.no_grad()`` forward passes over the same
     pre-tokenized dev batches (the first ``--bench_examples`` dev examples of each task; a pair
     counts as two sequences, since each sentence is encoded on its own), after ``--warmup``
     passes each, timed interleaved — fp32, int8, int8, fp32, ... — over ``--reps`` repetitions on
     ``--threads`` threads; reported: the median, and int8 over fp32, both by the wall clock and
     by the CPU time of this process (``time.process_time``). On a machine shared with other jobs
     the wall clock measures mostly how much CPU the scheduler gave us; CPU time measures the work
     (it sums all threads, so with ``--threads`` > 1 it is not the latency);
  3. dev metrics of the run's tasks (SST and QQP accuracy, STS Pearson, ...; the overall score)
     with the project's own evaluation loop (``training.learning.evaluate.predict``) on the dev sets (the
     first ``--max_dev`` examples of each when given), and how often the two models' predictions agree.
The model is the run's own (``training.load_run``: the modules of the saved run configuration,
the checkpoint's weights loaded strictly), evaluated on the run's tasks.
``<out>/quantize-report.json`` keeps every figure (written atomically, like the weights). Nothing is
written until every measurement is done, so a failure leaves no output behind; where either output
file exists already, the script refuses unless ``--overwrite`` is given. A checkpoint without task
heads (a run trained with ``--epochs 0``) is refused: there are no dev metrics to compare. Ctrl-C and
SIGTERM stop it at once (the weights' temporary file is removed); the temporary file of one killed
outright (SIGKILL) is removed by the next quantize into the same ``--out``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere

from training.data.batching import make_loader  # noqa: E402
from training.data.readers import DataError, resolve_data_dir  # noqa: E402
from minbert.atomic import atomic_path, remove_stale_temporaries, write_text_atomic  # noqa: E402
from training.tools.command import check_overwrite, run_command  # noqa: E402
from training.configuration.sections import DataConfig, add_flags  # noqa: E402
from training.learning.task_schema import run_tasks  # noqa: E402
from training.learning.evaluate import predict  # noqa: E402
from training.harness.runs import load_run  # noqa: E402
from training.learning.tasks import Task, overall_score  # noqa: E402

INT8_WEIGHTS = "model-int8.pt"
REPORT = "quantize-report.json"
CPU = torch.device("cpu")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    """The script's work; its errors become one line in ``main``."""
    threads_before = torch.get_num_threads()
    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        report = quantize_checkpoint(args.checkpoint, args.data_dir, args.out, max_dev=args.max_dev,
                                     batch_size=args.batch_size, bench_examples=args.bench_examples,
                                     reps=args.reps, warmup=args.warmup, per_channel=args.per_channel,
                                     overwrite=args.overwrite)
    finally:
        torch.set_num_threads(threads_before)  # the caller (a test process) keeps its setting
    print(format_table(report))
    print(f"-> {args.out / REPORT}, {args.out / INT8_WEIGHTS}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a run's checkpoint/ folder (model.safetensors + config.json), or the run folder")
    parser.add_argument("--out", type=Path, required=True,
                        help=f"output folder: {INT8_WEIGHTS} (quantized state_dict) and {REPORT}")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing {INT8_WEIGHTS} or {REPORT} in --out (default: refuse)")
    parser.add_argument("--max_dev", type=int, default=None,
                        help="evaluate on the first N dev examples of each task (default: all)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads for both models (default: torch's own setting)")
    parser.add_argument("--bench_examples", type=int, default=128,
                        help="dev examples per task in the timed batches (default: 128)")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per model (default: 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per model first (default: 1)")
    parser.add_argument("--per_channel", action="store_true",
                        help="one weight scale per output row of each Linear instead of one per matrix")
    add_flags(parser, DataConfig, only=("data_dir", "batch_size"), title="data")
    args = parser.parse_args(argv)
    for name in ("max_dev", "batch_size", "threads", "bench_examples", "reps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    return args


def quantize_checkpoint(checkpoint: Path, data_dir: str | None, out: Path, max_dev: int | None = None,
                        batch_size: int = 32, bench_examples: int = 128, reps: int = 7, warmup: int = 1,
                        per_channel: bool = False, overwrite: bool = False, log=print) -> dict:
    """Quantize, measure both models side by side, write ``<out>/model-int8.pt`` and the report.
    Everything is checked (outputs not already there unless ``overwrite``, the run's heads, the dev
    files) before the weights are written, and the weights are renamed into place only once every
    measurement is done, so an error leaves no output behind."""
    for name in (INT8_WEIGHTS, REPORT):  # what a SIGKILLed quantize left (66 MB at full size); a live one's stay
        if out.is_dir():
            remove_stale_temporaries(out / name)
    check_overwrite([out / INT8_WEIGHTS, out / REPORT], overwrite)  # creates nothing
    run = load_run(checkpoint)
    directory, fp32, tokenizer, run_config = run.source, run.model.to(CPU), run.tokenizer, run.config
    tasks = run_tasks(run_config)
    missing = [name for name in tasks if name not in fp32.heads]
    if missing:
        raise ValueError(f"{directory}: no {', '.join(map(repr, missing))} head (its run trained "
                         f"{', '.join(fp32.heads) or 'no task heads'}: an --epochs 0 run is an encoder only); "
                         "quantize compares the dev metrics of a run's task heads")
    data_path = resolve_data_dir(data_dir, [task.files["dev"] for task in tasks.values()])
    dev = read_dev(data_path, tasks, max_dev, log)
    int8 = quantize(fp32, per_channel)
    log(f"checkpoint: {directory}   data: {data_path}   threads: {torch.get_num_threads()}   "
        f"quantized engine: {torch.backends.quantized.engine}")

    made = not out.exists()
    try:
        with atomic_path(out / INT8_WEIGHTS) as tmp:  # renamed into place once the report is written
            torch.save(int8.state_dict(), tmp)
            report = measure(directory, fp32, int8, tokenizer, run_config, data_path, dev, tmp.stat().st_size,
                             max_dev, batch_size, bench_examples, reps, warmup, per_channel, log)
            write_text_atomic(out / REPORT, json.dumps(report, indent=2) + "\n")
    except BaseException:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # the --out folder this call made, left empty
        raise
    return report


def measure(directory: Path, fp32: nn.Module, int8: nn.Module, tokenizer, run_config, data_path: Path, dev: dict,
            int8_bytes: int, max_dev: int | None, batch_size: int, bench_examples: int, reps: int, warmup: int,
            per_channel: bool, log) -> dict:
    """The report of ``quantize_checkpoint``: size, speed and dev metrics of both models."""
    fp32_bytes = (directory / "model.safetensors").stat().st_size
    tasks = run_tasks(run_config)

    def loader(examples):  # as the trainer's evaluation loaders: the run's max_length and bucketing
        return make_loader(examples, tokenizer, run_config.data.max_length, batch_size, shuffle=False,
                           bucket=run_config.speed.bucket)

    bench_batches = [(name, batch["inputs"]) for name, examples in dev.items()
                     for batch in loader(examples[:bench_examples])]
    n_sequences = sum(len(inputs) * len(inputs[0]["input_ids"]) for _, inputs in bench_batches)
    log(f"timing: {len(bench_batches)} batches, {n_sequences} sequences, {warmup} warm-up + {reps} "
        f"interleaved repetitions per model")
    seconds, cpu_seconds = time_interleaved({"fp32": fp32, "int8": int8}, bench_batches, reps, warmup)

    metrics, results, dev_seconds = {}, {}, {}
    for label, model in (("fp32", fp32), ("int8", int8)):
        started = time.perf_counter()
        results[label] = {name: predict(model, tasks[name], loader(examples), CPU, f"{label} dev {name}")
                          for name, examples in dev.items()}
        dev_seconds[label] = round(time.perf_counter() - started, 2)
        scores = {name: result.score(tasks[name]) for name, result in results[label].items()}
        metrics[label] = {**scores, "overall": overall_score(scores, tasks)}

    speed = {label: n_sequences / statistics.median(times) for label, times in seconds.items()}
    cpu_speed = {label: n_sequences / statistics.median(times) for label, times in cpu_seconds.items()}
    report = {
        "checkpoint": str(directory.resolve()),
        "data_dir": str(data_path.resolve()),
        "created": datetime.now().isoformat(timespec="seconds"),
        "quantization": {"method": "torch.ao.quantization.quantize_dynamic", "modules": "nn.Linear",
                         "dtype": "qint8",
                         "qscheme": "per_channel_affine" if per_channel else "per_tensor_affine", "activations": "quantized per batch",
                         "engine": torch.backends.quantized.engine, "linear_layers": count_linear(fp32)},
        "size": {"fp32_bytes": fp32_bytes, "int8_bytes": int8_bytes, "ratio": int8_bytes / fp32_bytes,
                 "fp32_file": "model.safetensors", "int8_file": INT8_WEIGHTS,
                 "fp32_linear_weight_fraction": linear_fraction(fp32)},
        "speed": {"sequences": n_sequences, "batches": len(bench_batches), "batch_size": batch_size,
                  "examples_per_task": bench_examples, "reps": reps, "warmup": warmup,
                  "threads": torch.get_num_threads(), "seconds": seconds, "cpu_seconds": cpu_seconds,
                  "fp32_seq_per_s": speed["fp32"], "int8_seq_per_s": speed["int8"],
                  "ratio": speed["int8"] / speed["fp32"],
                  "fp32_seq_per_cpu_s": cpu_speed["fp32"], "int8_seq_per_cpu_s": cpu_speed["int8"],
                  "cpu_ratio": cpu_speed["int8"] / cpu_speed["fp32"],
                  "attention": next((m.impl for m in fp32.modules() if hasattr(m, "impl")), None)},
        "dev": {"examples": {name: len(examples) for name, examples in dev.items()}, "max_dev": max_dev,
                "metric": {name: tasks[name].metric_name for name in dev},
                "fp32": metrics["fp32"], "int8": metrics["int8"],
                "delta": {k: metrics["int8"][k] - metrics["fp32"][k] for k in metrics["fp32"]},
                "agreement": prediction_agreement(results["fp32"], results["int8"], tasks), "seconds": dev_seconds},
        "torch": torch.__version__,
    }
    return report


# ---------------------------------------------------------------------------------------------
# the models


def quantize(model: nn.Module, per_channel: bool = False) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` dynamically quantized to int8 (``model`` is untouched).

    Per-tensor (the default): one scale per weight matrix; per-channel: one per output row, which
    follows rows of very different ranges more closely at the same int8 size (a few floats more).
    """
    spec = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig} if per_channel else {nn.Linear}
    with warnings.catch_warnings():
        # torch 2.x says torch.ao.quantization is deprecated in favour of torchao (not installed
        # here); the eager-mode API still works, and one warning per layer would bury the table.
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions")
        return torch.ao.quantization.quantize_dynamic(model.eval(), spec, dtype=torch.qint8, inplace=False)


def count_linear(model: nn.Module) -> int:
    return sum(isinstance(m, nn.Linear) for m in model.modules())


def linear_fraction(model: nn.Module) -> float:
    """Share of the fp32 parameter bytes that are ``nn.Linear`` weights (what int8 shrinks 4×)."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return linear / sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# data, timing, agreement


def read_dev(data_dir: Path, tasks: dict[str, Task], max_dev: int | None, log) -> dict:
    """Each of ``tasks``' labelled dev examples, the first ``max_dev`` of them when given."""
    dev = {}
    for name, task in tasks.items():
        path = data_dir / task.files["dev"]
        examples, read_report = task.read(path)
        if read_report.bad_rows:
            log(f"warning: {read_report.summary()}")
        if not examples:
            raise DataError(f"{path}: no usable rows ({read_report.summary()})")
        dev[name] = examples[:max_dev]
    return dev


@torch.no_grad()
def time_interleaved(models: dict[str, nn.Module], batches: list, reps: int,
                     warmup: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds per pass over ``batches`` for each model, A/B interleaved with
    alternating order, so slow drifts of a shared machine hit both models alike."""
    for model in models.values():
        model.eval()
        for _ in range(warmup):
            run_batches(model, batches)
    seconds = {name: [] for name in models}
    cpu_seconds = {name: [] for name in models}
    names = list(models)
    for rep in range(reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            started, cpu_started = time.perf_counter(), time.process_time()
            run_batches(models[name], batches)
            seconds[name].append(time.perf_counter() - started)
            cpu_seconds[name].append(time.process_time() - cpu_started)
    return seconds, cpu_seconds


def run_batches(model: nn.Module, batches: list) -> None:
    for task_name, inputs in batches:
        model(task_name, inputs)


def prediction_agreement(fp32: dict, int8: dict, tasks: dict[str, Task]) -> dict:
    """SST/QQP: share of identical predictions; STS: largest absolute score difference."""
    agreement = {}
    for name, a in fp32.items():
        b = int8[name]
        assert a.ids == b.ids, "both models were evaluated on the same batches"
        if tasks[name].label_type == "class":
            agreement[f"{name}_same_prediction"] = float(np.mean(a.predictions == b.predictions))
        else:
            agreement[f"{name}_max_abs_diff"] = float(np.max(np.abs(a.predictions - b.predictions)))
    return agreement


# ---------------------------------------------------------------------------------------------
# the table


def format_table(report: dict) -> str:
    size, speed, dev = report["size"], report["speed"], report["dev"]
    rows = [
        ("size on disk (MB)", size["fp32_bytes"] / 1e6, size["int8_bytes"] / 1e6, f"{size['ratio']:.3f}x", "{:.2f}"),
        ("inference (seq/s)", speed["fp32_seq_per_s"], speed["int8_seq_per_s"], f"{speed['ratio']:.3f}x", "{:.1f}"),
        ("inference (seq/CPU-s)", speed["fp32_seq_per_cpu_s"], speed["int8_seq_per_cpu_s"],
         f"{speed['cpu_ratio']:.3f}x", "{:.1f}"),
    ]
    labels = {name: f"{name.upper()} {'Pearson' if dev['metric'][name] == 'pearson' else 'accuracy'}"
              for name in dev["examples"]}
    for key, label in (*labels.items(), ("overall", "overall")):
        rows.append((f"dev {label}", dev["fp32"][key], dev["int8"][key], f"{dev['delta'][key]:+.4f}", "{:.4f}"))
    lines = [f"{'':<22}{'fp32':>10}{'int8':>10}{'int8 vs fp32':>14}"]
    for label, a, b, change, fmt in rows:
        lines.append(f"{label:<22}{fmt.format(a):>10}{fmt.format(b):>10}{change:>14}")
    n = dev["examples"]
    agree = ", ".join(f"{k} {v:.4f}" for k, v in dev["agreement"].items())
    lines += [
        "dev examples: " + ", ".join(f"{name.upper()} {count}" for name, count in n.items())
        + ("" if dev["max_dev"] is None else f" (--max_dev {dev['max_dev']})"),
        f"agreement: {agree}",
        f"speed: median of {speed['reps']} interleaved passes over {speed['sequences']} sequences "
        f"({speed['batches']} batches of <= {speed['batch_size']}), {speed['threads']} thread(s); "
        f"dev evaluation took {dev['seconds']['fp32']:.1f} s fp32, {dev['seconds']['int8']:.1f} s int8",
        f"size: nn.Linear weights are {100 * size['fp32_linear_weight_fraction']:.0f}% of the fp32 parameters; "
        "the rest (embeddings, LayerNorm, biases) stays fp32",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
