"""Command-line tools built on the training core: the results table and the ablation grid's rows,
prediction and sentence vectors with a trained run. Each is ``python -m training.tools.<name> --help``;
the embedding studies are in scripts/."""
