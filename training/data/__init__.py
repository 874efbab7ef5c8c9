"""Reading the CS224N task files (``readers``) and batching them for BERT (``batching``).

Below everything that trains: this package imports only ``minbert`` and itself (never ``heads`` or the rest
of ``training``); the tokenizer is passed in. The data itself goes in ``./data`` (data/README.md).
"""
from .batching import ExampleCollator, ExampleDataset, make_collate, make_loader
from .readers import BadRow, DataError, Example, FileLayout, ReadReport, read_examples, resolve_data_dir

__all__ = ["BadRow", "DataError", "Example", "ExampleCollator", "ExampleDataset", "FileLayout", "ReadReport",
           "make_collate", "make_loader", "read_examples", "resolve_data_dir"]
