"""Command-line tools built on the training core: embedding evaluation (STS, SentEval) and the frozen-embedding probe."""
