"""The harness: what makes a run safe and visible but is not learning (run folder and lock, exact resume,
checkpoints, outputs, DDP, TensorBoard, curves, model card, logging, the search's trial control); ``trainer.run``
wraps the learning kernel (``training.learning``) in them. The kernel never imports this package.
"""
