"""The learning kernel: what a student reads to understand one training step, in the order docs/reading.md gives:
tasks, objectives (task losses plus the extensions' terms), the loop, the round-robin schedule, one evaluation loop
and its metrics, the losses, SMART's maths. It imports minbert, heads, training/data, the configuration and itself;
never the harness (the run folder, resume, outputs, command-line ends: ``training.harness``), which wraps it.
"""
