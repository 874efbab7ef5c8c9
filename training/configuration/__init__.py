"""A run's configuration: one dataclass per concern whose fields are the flags (``flags``), the core sections,
``CoreSettings`` and ``RunSettings`` (``sections``), the task declarations (``task_declarations``), ``--config FILE``
(``config_file``), JSON / YAML settings files and ``--task_file``. A leaf: it imports nothing else of training/
(the registries build on it; ``RunConfig``, with every extension's section, is training/harness/run_config.py).
"""
