"""Reading a settings file a user writes (``--config``, ``--task_file``, ``minbert-search --space``): JSON, or YAML
with PyYAML installed; whatever is wrong is one line naming the file, never a parser's traceback.

A key written twice in one object is refused, naming it: both parsers would keep the last value silently, and the
user meant one of the two."""
from __future__ import annotations

import json
from pathlib import Path


class RepeatedKey(ValueError):
    """A key written twice in one object of a settings file."""


def read_settings_file(path: str | Path, flag: str):
    """The data of the JSON or YAML file ``path``; ``ValueError`` naming ``flag`` and the file otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{flag} {path}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        return _read_yaml(text) if is_yaml else json.loads(text, object_pairs_hook=_one_value_a_key)
    except RepeatedKey as err:
        raise ValueError(f"{flag} {path}: {err}; keep one of them") from None
    except ImportError:
        raise ValueError(f"{flag} {path}: reading YAML needs PyYAML (pip install pyyaml); or give JSON") from None
    except Exception as err:   # json.JSONDecodeError, yaml.YAMLError (not a ValueError)
        raise ValueError(f"{flag} {path}: not valid {'YAML' if is_yaml else 'JSON'}: "
                         f"{' '.join(str(err).split())[:200]}") from None


def _one_value_a_key(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's dict, refusing a key it holds twice."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise RepeatedKey(f"key {key!r} is written twice in one object")
        seen[key] = value
    return seen


def _read_yaml(text: str):
    """``yaml.safe_load``, refusing a key a mapping holds twice (with its line)."""
    import yaml

    class OneValueAKey(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":   # <<: a merged key may be written over
                        continue
                    key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                    if not isinstance(key, (str, int, float, bool)):   # a list as a key: unhashable, not a flag
                        continue
                    if key in seen:
                        raise RepeatedKey(f"key {key!r} is written twice in one mapping (lines {seen[key]} and {line})")
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=OneValueAKey)   # a SafeLoader: no Python objects
