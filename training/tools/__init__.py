"""Command-line tools built on the training core: the results table and the ablation grid's rows,
sentence-embedding evaluation (STS, SentEval, SICK), the frozen-embedding probe and single-sentence
fine-tuning. Each is ``python -m training.tools.<name> --help``."""
