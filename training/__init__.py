"""Training, evaluation and loading of multi-task runs; ``training.load_run`` opens a saved run."""


def __getattr__(name: str):
    if name in ("load_run", "LoadedRun"):  # lazily: importing one training module need not load the model code
        from .harness import runs
        return getattr(runs, name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")


__all__ = ["LoadedRun", "load_run"]
