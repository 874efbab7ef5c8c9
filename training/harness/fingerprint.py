"""Size and SHA-256 of every task and model file a run reads, recorded in metrics.json (``inputs``),
which ``--resume`` checks: a run whose inputs changed would otherwise finish on other inputs than it
began with. Keyed by name (``sst-train.csv``, ``model/vocab.txt``), not path: data moved elsewhere resumes.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from training.data.readers import DataError

MODEL_FILES = (".json", ".txt", ".safetensors", ".bin")   # config, vocabulary and weights of a model folder


def input_files(data_dir: Path | None, data_files, model_dir: Path) -> dict[str, Path]:
    """Name -> path of every file a run reads: ``data_files`` in ``data_dir`` and the model folder's files."""
    files = {name: data_dir / name for name in data_files} if data_dir is not None else {}
    return files | {f"model/{path.name}": path for path in sorted(model_dir.iterdir())
                    if path.is_file() and path.suffix in MODEL_FILES}


def file_digest(path: Path) -> dict:
    with open(path, "rb") as handle:
        return {"size": path.stat().st_size, "sha256": hashlib.file_digest(handle, "sha256").hexdigest()}


def fingerprint(files: dict[str, Path]) -> dict[str, dict]:
    """Name -> {path (absolute), size, sha256} of each file."""
    return {name: {"path": str(path.resolve()), **file_digest(path)} for name, path in files.items()}


def check_unchanged(recorded: dict[str, dict], files: dict[str, Path]) -> None:
    """Refuse, in one line naming the file, when a file recorded at the start is missing now or
    differs in size or content. A file recorded but not read now (another layout) is left alone."""
    for name, saved in recorded.items():
        path = files.get(name)
        if path is None:
            continue
        if not path.is_file():
            raise DataError(f"--resume: {path} is missing; the run started on {saved['path']} (give --data_dir "
                            f"with the same files, or start a new run)")
        now = file_digest(path)
        if now != {"size": saved["size"], "sha256": saved["sha256"]}:
            change = (f"{saved['size']} -> {now['size']} bytes" if now["size"] != saved["size"]
                      else "same size, other content")
            raise DataError(f"--resume: {path} changed since the run started ({change}); a resumed run must read "
                            f"what it began with: restore the file, or start a new run")
