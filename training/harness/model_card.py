"""A run's model card: the ``README.md`` of its ``checkpoint/`` folder, as sentence-transformers and HuggingFace
write one, made from the run's ``metrics.json`` (and the tensor names of ``heads.safetensors``): what the model
is, the command that trains it again, its scores, how each of the three readers loads it, what the heads compute.

    write_model_card(json.loads((run_dir / "metrics.json").read_text()), run_dir / "checkpoint")
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

from safetensors import safe_open

from heads.pair_parts import DEFAULTS as PAIR_DEFAULTS, PROJECTIONS, SCORERS, ClassesScorer
from minbert.atomic import write_text_atomic

from .checkpoint import ENCODER, EXPORTED_TOWER, HEADS, SENTENCE_TRANSFORMERS_POOLING
from .run_config import RunConfig
from heads.sts_losses import DEFAULT_STS_LOSS, STS_LOSSES
from ..configuration.sections import NOT_REPRODUCED, saved_dev_cap, scored_whole
from ..configuration.task_declarations import STS_SCALE
from ..learning.task_schema import saved_tasks
from ..learning.tasks import Task

EMBEDDED = "the embedded all-MiniLM-L6-v2"
README = "README.md"


def write_model_card(metrics: dict, checkpoint_dir: Path) -> None:
    """Write ``checkpoint_dir/README.md`` (``model_card``) atomically."""
    write_text_atomic(Path(checkpoint_dir) / README, model_card(metrics, Path(checkpoint_dir)))


def model_card(metrics: dict, checkpoint_dir: Path) -> str:
    """The Markdown text of ``checkpoint/README.md`` for a run with these ``metrics`` (metrics.json)."""
    checkpoint_dir = Path(checkpoint_dir)
    config = metrics.get("config") or {}
    model = config.get("model") or {}
    listed = (config.get("train") or {}).get("tasks")
    tasks = ([name.strip() for name in listed.split(",") if name.strip()] if isinstance(listed, str)
             else list(metrics.get("dev") or {}))
    known = saved_tasks(config)
    heads = head_tensors(checkpoint_dir)
    what = ("A BERT sentence encoder without task heads, left by minbert-mtl's training stages"
            if _stages_only(metrics) else
            "A BERT sentence encoder with task heads, trained by minbert-mtl's multi-task fine-tuning")
    parts = [
        front_matter(metrics, config, tasks, known) +
        f"# {metrics.get('run_name') or checkpoint_dir.parent.name}\n\n{what} (`run_multitask.py`).",
        "## Model\n\n" + "\n".join(_about(metrics, config, tasks, checkpoint_dir, known)),
        "## Reproduce\n\n```bash\n" + command(config) + "\n```",
        "## Scores\n\n" + _scores(metrics, tasks, known),
        "## Load\n\n" + _loading(checkpoint_dir, model.get("pooling"), tasks if heads else [], known),
        "## Heads\n\n" + _heads(heads, model, tasks, known),
    ]
    return "\n\n".join(parts) + "\n"


# the hub's names of the benchmark's data sets, and each task's kind for its model-index entry
HUB_DATASETS = {"sst": "stanfordnlp/sst", "qqp": "quora", "sts": "mteb/stsbenchmark-sts", "cfimdb": "imdb"}
TASK_TYPES = {"accuracy": "text-classification", "pearson": "sentence-similarity"}


def front_matter(metrics: dict, config: dict, tasks: list[str], known: dict[str, Task]) -> str:
    """The YAML header that the HuggingFace hub and sentence-transformers read from a model card: library,
    base model, pipeline, data sets and the dev scores as a model-index (JSON scalars, which YAML reads)."""
    model = config.get("model") or {}
    pooling, base = model.get("pooling"), model.get("model")
    library = "sentence-transformers" if pooling in SENTENCE_TRANSFORMERS_POOLING else "transformers"
    lines = ["---", f"library_name: {library}",
             f"base_model: {json.dumps('sentence-transformers/all-MiniLM-L6-v2' if base is None else Path(base).name)}",
             f"pipeline_tag: {'sentence-similarity' if library == 'sentence-transformers' else 'feature-extraction'}",
             "tags: [bert, multi-task, minbert-mtl]"]
    if datasets := [HUB_DATASETS[t] for t in tasks if t in HUB_DATASETS]:
        lines.append(f"datasets: [{', '.join(datasets)}]")
    dev = {name: value for name, value in (metrics.get("dev") or {}).items()
           if name in known and isinstance(value, (int, float))}
    cap = dev_cap(metrics)
    split = "dev" if cap is None else json.dumps(f"dev[:{cap}]")   # a capped run's: the datasets library's slice
    if dev:
        lines += ["metrics: [" + ", ".join(sorted({known[t].metric_name for t in dev})) + "]", "model-index:",
                  f"- name: {json.dumps(metrics.get('run_name') or 'minbert-mtl')}", "  results:"]
        for name, value in dev.items():
            task = known[name]
            lines += [f"  - task: {{type: {TASK_TYPES[task.metric_name]}, name: {json.dumps(task.description)}}}",
                      f"    dataset: {{type: {HUB_DATASETS.get(name, name)}, name: {json.dumps(name.upper())}, "
                      f"split: {split}}}",
                      f"    metrics: [{{type: {task.metric_name}, value: {round(float(value), 4)}}}]"]
    return "\n".join(lines + ["---", ""]) + "\n"


def command(config: dict) -> str:
    """``python run_multitask.py`` and every setting whose value differs from its default (booleans as
    ``--name`` / ``--no_name``), the output section's too (``--no_test_predictions``, ``--save_every``), but
    ``NOT_REPRODUCED``: where the run's folder was and how it was watched. The rule names what is left out, so
    a setting a later version adds is in the command without a line here."""
    try:   # the saved configuration as this version reads it (older names, absent fields resolved), else as saved
        saved = RunConfig.from_dict(config).to_dict()
    except (TypeError, KeyError, ValueError):
        saved = {name: values for name, values in config.items() if isinstance(values, dict)}
    defaults = RunConfig.defaults().to_dict()
    words = ["python", "run_multitask.py"]
    for section, values in saved.items():
        for name, value in values.items():
            skipped = (name in NOT_REPRODUCED or name not in defaults.get(section, {})
                       or isinstance(value, list))   # DataConfig.own_tasks, no flag (--task_file names the file)
            if not skipped and value != defaults[section][name]:
                words += _flag(name, value)
    return " ".join(words)


def dev_cap(metrics: dict) -> int | None:
    """The run's ``--max_eval_examples N``, from its saved configuration; None for whole dev files."""
    return saved_dev_cap(metrics.get("config") or {})


def capped_dev_note(metrics: dict) -> str:
    """What a capped run's dev scores are on, naming the tasks whose dev file was shorter than the cap (scored
    whole, by metrics.json's ``dev_examples``); "" for a run scored on whole dev files."""
    cap = dev_cap(metrics)
    if cap is None:
        return ""
    scored = metrics.get("dev_examples") if isinstance(metrics.get("dev_examples"), dict) else {}
    shorter = scored_whole(scored, cap)   # as the log says
    return (f"Capped (`--max_eval_examples {cap}`): the dev scores are on the first {cap} examples of each task's "
            f"dev file{shorter}, not comparable with scores on whole dev files; every evaluation, and so the "
            f"choice of the best weights, used those examples alone.")


def head_tensors(checkpoint_dir: Path) -> dict[str, list[int]]:
    """Name -> shape of the ``heads.*`` tensors (``heads.safetensors``, or the older layout's ``model.safetensors``)."""
    path = checkpoint_dir / HEADS
    if not path.is_file():
        path = checkpoint_dir / ENCODER
        if not path.is_file() or (checkpoint_dir / "run_config.json").is_file():
            return {}
    with safe_open(str(path), "pt") as f:
        return {key: list(f.get_slice(key).get_shape()) for key in sorted(f.keys()) if key.startswith("heads.")}


def _flag(name: str, value) -> list[str]:
    if isinstance(value, bool):
        return [f"--{name}" if value else f"--no_{name}"]
    text = "none" if value is None else repr(value) if isinstance(value, float) else str(value)
    if text.startswith("-"):  # argparse would take it for a flag
        return [shlex.quote(f"--{name}={text}")]
    return [f"--{name}", shlex.quote(text)]


def _extensions(config: dict) -> list[str]:
    """Sections switched on: a section with a true field of its own name (``smart.smart``)."""
    found = []
    for name, values in config.items():
        if name == "extensions" and isinstance(values, dict):  # a nested layout
            found += _extensions(values)
        elif isinstance(values, dict) and values.get(name) is True:
            found.append(name)
    return found


def _stages_only(metrics: dict) -> bool:
    return ((metrics.get("config") or {}).get("train") or {}).get("epochs") == 0


def _about(metrics: dict, config: dict, tasks: list[str], checkpoint_dir: Path, known: dict[str, Task]) -> list[str]:
    model, train = config.get("model") or {}, config.get("train") or {}
    try:
        bert = json.loads((checkpoint_dir / "config.json").read_text(encoding="utf-8"))
        encoder = f" ({bert.get('model_type', 'bert')}, {bert['num_hidden_layers']} layers, {bert['hidden_size']} wide)"
    except (OSError, ValueError, KeyError, TypeError):
        encoder = ""
    base = f"`{model['model']}`" if model.get("model") else EMBEDDED
    described = "; ".join(f"{name}: {known[name].description}" if name in known else name for name in tasks)
    if _stages_only(metrics):
        trained = f"none: the stages alone (`--epochs 0`), which read the training sets of {', '.join(tasks)}"
    else:
        epochs = train.get("epochs")
        trained = (f"{described} ({epochs} epoch{'' if epochs == 1 else 's'}, "
                   f"option {model.get('option', 'finetune')})")
    extensions = _extensions(config)
    stages = list(metrics.get("stages") or {})
    lines = [f"- Base model: {base}{encoder}",
             f"- Pooling: {model.get('pooling')} (the sentence vector of the encoder's output)",
             f"- Tasks trained: {trained}",
             f"- Extensions: {', '.join(f'`--{e}`' for e in extensions) if extensions else 'none'}"
             + (f" (stages run before multi-task training: {', '.join(stages)})" if stages else "")]
    if model.get("private_layers") and len(tasks) > 1 and not _stages_only(metrics):  # else no towers were built
        home = EXPORTED_TOWER if EXPORTED_TOWER in tasks else tasks[0]
        k = model["private_layers"]
        top = "top encoder layer" if k == 1 else f"top {k} encoder layers"
        lines.append(f"- Private layers: each task has its own {top}. "
                     f"`{ENCODER}` is the {home} tower (what `encode`, transformers and sentence-transformers "
                     f"use); the others' top layers are `towers.<task>.*` in `{HEADS}`, read by `load_run` alone")
    for name, part in (metrics.get("model_parts") or {}).items():   # what extensions added (heads/model_parts.py)
        lines.append(f"- Model part `{name}`: {part.get('about')}, {part.get('parameters'):,} parameters "
                     f"(`parts.{name}.*` in `{HEADS}`, read by `load_run` alone: transformers and sentence-transformers "
                     f"load the encoder without it)")
    rows = ", ".join(f"{name} {r.get('rows')}" + (f" ({r['skipped']} skipped)" if r.get("skipped") else "")
                     for name, r in (metrics.get("data") or {}).items() if isinstance(r, dict))
    lines.append(f"- Data: `{metrics.get('data_dir') or 'no task file'}`" + (f"; rows: {rows}" if rows else ""))
    if isinstance(metrics.get("wall_seconds"), (int, float)):
        lines.append(f"- Run: `{metrics.get('run_name')}`, {metrics.get('status', 'finished')}, "
                     f"{metrics['wall_seconds']:.0f} s")
    return lines


def _scores(metrics: dict, tasks: list[str], known: dict[str, Task]) -> str:
    if _stages_only(metrics):
        return ("A run of the stages alone (`--epochs 0`): no task heads were trained, so it has no heads and "
                "no dev scores. The encoder is the one the stages left.")
    dev, test = metrics.get("dev") or {}, metrics.get("test") or {}
    if not dev:
        return f"No dev scores were recorded (run status: {metrics.get('status', 'unknown')})."
    with_test, cap = bool(test), dev_cap(metrics)

    def row(*cells) -> str:
        return "| " + " | ".join(str(c) for c in (cells if with_test else cells[:3])) + " |"
    rows = [row("task", "metric", "dev" if cap is None else f"dev (first {cap})", "test"),
            row("---", "---", "---", "---").replace(" ", "")]
    for name in [t for t in tasks if t in dev] + [t for t in dev if t not in tasks]:
        metric = known[name].metric_name if name in known else ""
        rows.append(row(name, metric, _number(dev[name]), _number(test.get(name))))
    rows.append(row("overall", "mean on 0..1", *(_number(metrics.get(key)) for key in ("dev_overall", "test_overall"))))
    best = f"Best epoch: {metrics.get('best_epoch')} of {len(metrics.get('epochs') or [])}"
    if metrics.get("best_step"):
        best += f" (step {metrics['best_step']})"
    after = list(((metrics.get("after_stages") or {}).get("stages") or {}))
    note = (f"; then {', '.join(after)} trained it further (the stages after multi-task training), and those weights "
            f"are the ones saved here." if after else "; its weights are the ones saved here.")
    note += " Test: the labelled test files." if with_test else ""
    capped = capped_dev_note(metrics)
    return (capped + "\n\n" if capped else "") + "\n".join(rows) + "\n\n" + best + note


def _number(value) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def _loading(checkpoint_dir: Path, pooling: str | None, tasks: list[str], known: dict[str, Task]) -> str:
    path = json.dumps(str(checkpoint_dir.resolve()))   # the snippets work from any folder
    ours = ["from training.harness.runs import load_run", f"run = load_run({path})",
            'vectors = run.encode(["A sentence.", "Another one."])']
    if tasks:
        name = "sst" if "sst" in tasks else tasks[0]
        example = ('[("How do I learn Python?", "What is the best way to learn Python?")]'
                   if name in known and known[name].is_pair else '["A gripping, funny film."]')
        ours.append(f'predictions = run.predict("{name}", {example})')
    if pooling in SENTENCE_TRANSFORMERS_POOLING:
        st = f"loads the encoder with the run's {pooling} pooling (modules.json, 1_Pooling/)."
    else:
        st = (f"has no {pooling} pooling: it falls back to mean pooling; use `load_run(...).encode` for the "
              f"run's own vectors.")
    return (f"1. Ours (encoder, pooling{' and heads' if tasks else ''}):\n\n```python\n" + "\n".join(ours)
            + "\n```\n\n"
            "2. HuggingFace transformers (the encoder only; pool `last_hidden_state` yourself):\n\n```python\n"
            f"from transformers import AutoModel, AutoTokenizer\nmodel = AutoModel.from_pretrained({path})\n"
            f"tokenizer = AutoTokenizer.from_pretrained({path})\n```\n\n"
            f"3. sentence-transformers: `SentenceTransformer({path})` {st}")


def _heads(heads: dict[str, list[int]], model: dict, tasks: list[str], known: dict[str, Task]) -> str:
    if not heads:
        return "This checkpoint has no heads (`heads.safetensors` holds no tensor): it is an encoder only."
    pooling, temp = model.get("pooling"), model.get("head_temp", model.get("temp"))  # "temp": saved before the split
    lines = [f"`{HEADS}` holds `heads.<task>.*` tensors. Each head reads the pooled ({pooling}) sentence "
             f"vector u (and v, the second sentence's, for pairs); dropout ({model.get('hidden_dropout_prob')}) "
             f"acts in training only.", ""]
    present = {key.split(".")[1] for key in heads if key.count(".") >= 2}
    for name in [t for t in tasks if t in present] + sorted(present - set(tasks)):
        lines.append(f"- {name}: {_head_formula(known.get(name), model, temp)}")
    if model.get("pair_projection", PAIR_DEFAULTS["pair_projection"]) != "none":
        lines += ["", "The pair heads' projections (`project_u`, and `project_v` when separate) are head tensors: "
                      "`encode`, transformers and sentence-transformers give the exported tower's pooled vectors, "
                      "before any projection."]
    lines += ["", "| tensor | shape |", "|---|---|"]
    lines += [f"| `{key}` | {list(shape)} |" for key, shape in heads.items()]
    return "\n".join(lines)


def _head_formula(task: Task | None, model: dict, temp) -> str:
    if task is None:
        return "a head this version does not know"
    if not task.is_pair:
        return f"`classifier` on u: logits = W·u + b ({task.num_classes} classes); the prediction is the argmax"
    if task.divergence == "multiclass":   # a declared pair task of more than two classes
        return ClassesScorer(task.num_classes).formula("logit", temp)
    if task.label_type == "score" and task.score_range != STS_SCALE:   # a declared range, mapped onto 0..5
        low, high = task.score_range
        mapped = f"mapped onto {low:g}..{high:g}"
        on_scale = _head_formula(dataclasses.replace(task, score_range=STS_SCALE), model, temp)
        return on_scale.replace(", 0..5;", f", 0..5 {mapped};").replace("clamped to 0..5",
                                                                        f"clamped to 0..5 and {mapped}")
    projection = model.get("pair_projection", PAIR_DEFAULTS["pair_projection"])
    prefix = PROJECTIONS[projection].formula if projection in PROJECTIONS else f"projection {projection}; then "
    if task.label_type == "class":  # the paraphrase head (--para_head)
        kind = model.get("para_head", PAIR_DEFAULTS["para_head"])
        formula = SCORERS[kind].formula("logit", temp) if kind in SCORERS else f"{kind} (a head this version lacks)"
        return f"{prefix}{formula}; a paraphrase when logit > 0"
    kind, loss = model.get("sts_head", PAIR_DEFAULTS["sts_head"]), model.get("sts_loss", DEFAULT_STS_LOSS)
    trained = STS_LOSSES[loss].trained(temp) if loss in STS_LOSSES else loss
    if kind not in SCORERS:
        return f"{prefix}{kind} (a head this version lacks); {trained}"
    probability = loss in STS_LOSSES and STS_LOSSES[loss].probability
    return f"{prefix}{SCORERS[kind].formula('score', temp, probability)}; {trained}"
