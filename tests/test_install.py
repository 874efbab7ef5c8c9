"""The documented install (issue 44): ``pip install -e .`` into a fresh virtual environment, then the
Python API and each console script used from a directory outside the clone.

The fresh environment sees the test environment's site-packages (torch, pip, setuptools and the rest)
through a .pth file, so nothing is downloaded; the project is installed from a copy of its files, so the clone
itself gets no egg-info and the imports cannot come from the clone's folder."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
PROJECT = ["minbert", "heads", "training", "run_multitask.py", "setup.cfg", "pyproject.toml", "README.md"]
SCRIPTS = ["minbert-train", "minbert-predict", "minbert-embed", "minbert-report", "minbert-grid", "minbert-search",
           "minbert-launch"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    source.mkdir()
    for name in PROJECT:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__", "*.csv", "*.txt")}
                                           if (ROOT / name).is_dir() else {}))
    venv = base / "venv"
    # no pip of its own: pip and setuptools (>= 70.1, which builds wheels itself) come from the test environment
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1", TQDM_DISABLE="1",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(source)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    # a user's own data.py where the commands run: the project installs no top-level `data` it could shadow
    (elsewhere / "data.py").write_text("raise SystemExit('the data.py of the working folder was imported')\n")
    return {"python": python, "bin": venv / "bin", "env": env, "cwd": elsewhere, "source": source}


def run(installed, *command):
    result = subprocess.run([str(c) for c in command], cwd=installed["cwd"], env=installed["env"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}: {result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_api_and_each_console_script_work_from_another_directory(installed, tiny_model_dir):
    for script in SCRIPTS:
        assert (installed["bin"] / script).is_file(), script
    out = installed["cwd"] / "runs"
    run(installed, "minbert-train", "--data_dir", FIXTURE_DATA, "--model", tiny_model_dir, "--epochs", "1",
        "--batch_size", "4", "--max_length", "32", "--out_dir", out, "--run_name", "r", "--quiet")
    assert (out / "r" / "sts-dev-output.csv").is_file()
    api = run(installed, installed["python"], "-c",
              "import training, sys; from training import load_run; "
              f"run = load_run({str(out / 'r')!r}); "
              "print(training.__file__); print(run.encode(['a fine film .', 'dull .']).shape)")
    module, shape = api.strip().splitlines()
    assert module.startswith(str(installed["source"])) and shape == "(2, 16)"   # the installed copy, not the clone
    run(installed, "minbert-predict", out / "r", "--data_dir", FIXTURE_DATA, "--out", installed["cwd"] / "predicted")
    assert (installed["cwd"] / "predicted" / "sst-dev-output.csv").is_file()
    (installed["cwd"] / "sentences.txt").write_text("a fine film .\ndull and long .\nok .\n")
    run(installed, "minbert-embed", out / "r", "--input", "sentences.txt", "--out", "vectors.npy")
    assert np.load(installed["cwd"] / "vectors.npy").shape == (3, 16)
    report = run(installed, "minbert-report", out)
    assert report.splitlines()[0].split()[:2] == ["run", "seeds"] and "r " in report
    assert "usage: minbert-train" in run(installed, "minbert-train", "--help")
    assert "ablate-ft --epochs 1" in run(installed, "minbert-grid", "--list").splitlines()[1]
