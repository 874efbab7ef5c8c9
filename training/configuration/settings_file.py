"""Reading a settings file a user writes (``--task_file``, ``minbert-search --space``): JSON, or YAML with
PyYAML installed; whatever is wrong is one line naming the file, never a parser's traceback."""
from __future__ import annotations

import json
from pathlib import Path


def read_settings_file(path: str | Path, flag: str):
    """The data of the JSON or YAML file ``path``; ``ValueError`` naming ``flag`` and the file otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{flag} {path}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    if is_yaml:
        try:
            import yaml
        except ImportError:
            raise ValueError(f"{flag} {path}: reading YAML needs PyYAML (pip install pyyaml); or give JSON") from None
    try:
        return yaml.safe_load(text) if is_yaml else json.loads(text)
    except Exception as err:   # json.JSONDecodeError, yaml.YAMLError (not a ValueError)
        raise ValueError(f"{flag} {path}: not valid {'YAML' if is_yaml else 'JSON'}: "
                         f"{' '.join(str(err).split())[:200]}") from None
