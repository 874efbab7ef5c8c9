"""Reading the CS224N task files (``readers``) and batching them for BERT (``batching``).

Below everything that trains: this package imports only ``minbert`` and itself (never ``heads`` or the rest
of ``training``); the tokenizer is passed in. The data itself goes in ``./data`` (data/README.md).
"""
