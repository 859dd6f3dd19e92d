"""Typed config from YAML: dataclass schemas, ``defaults:`` inheritance and ``key=value`` overrides.

This package knows no schema: every function takes the schema (a dataclass, whose fields may be
nested dataclasses, "sections") as an argument. The run's schema, and the ``load_config`` /
``parse_cli`` that default to it, live in ``forge_agent.run.config``.

Loading goes: YAML file (a ``defaults: base.yaml`` key inherits from another YAML, merged
section by section) -> overrides applied to the dict (each value parsed as YAML) -> ``from_dict``
builds the dataclasses, checking every key and type -> each section's ``__post_init__`` checks
ranges (with ``check_field``). Every error is a ``ConfigError`` that names the full key, the
value and what was expected. Free-form mappings (``dict`` fields) are replaced as a whole by a
YAML value or an override of the mapping, and updated key by key by an override of one of their
keys (``model.tiny.hidden_size=64``).

`schema`: dict <-> dataclasses and the errors; `files`: YAML, overrides, the command line.
"""

from forge_agent.typed_config.files import (
    apply_override,
    describe_keys,
    dump_yaml,
    load_config,
    load_yaml,
    parse_cli,
)
from forge_agent.typed_config.schema import (
    ConfigError,
    FieldError,
    check_field,
    from_dict,
    to_dict,
)

__all__ = [
    "ConfigError",
    "FieldError",
    "apply_override",
    "check_field",
    "describe_keys",
    "dump_yaml",
    "from_dict",
    "load_config",
    "load_yaml",
    "parse_cli",
    "to_dict",
]
