"""Studies built on the library, run from the repository root: ``python -m scripts.<name> --help``
(the embedding evaluation, the SimCSE sweep, the frozen-embedding probe, single-sentence
fine-tuning), and the shell loops that chain them. Nothing in minbert/, heads/ or training/
imports them."""
