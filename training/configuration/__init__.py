"""A run's configuration: one dataclass per concern whose fields are the flags (``flags``), the core sections
(``sections``), ``RunConfig`` with every extension's section (``run_config``), ``--config FILE``
(``config_file``), JSON / YAML settings files and ``--task_file`` declarations.
"""
