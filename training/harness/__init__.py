"""The harness: everything that makes a run safe and visible but is not learning. The run folder and its lock,
exact resume, checkpoints, outputs, fingerprints, one-line ends and exit codes, DDP, TensorBoard, curves, the
model card, logging, the search's trial control; ``trainer.run`` wraps the learning kernel (``training.learning``)
in them. The kernel never imports this package.
"""
