"""Typed config from YAML: dataclass schemas, ``defaults:`` inheritance and ``key=value`` overrides.

This module knows no schema: every function takes the schema (a dataclass, whose fields may be
nested dataclasses, "sections") as an argument. The run schema, ``AgentConfig``, and the
``load_config`` / ``parse_cli`` that default to it live in ``forge_agent.run.config``.

Loading goes: YAML file (a ``defaults: base.yaml`` key inherits from another YAML, merged
section by section) -> overrides applied to the dict (each value parsed as YAML) -> ``from_dict``
builds the dataclasses, checking every key and type -> each section's ``__post_init__`` checks
ranges (with ``check_field``). Every error is a ``ConfigError`` that names the full key, the
value and what was expected. Free-form mappings (``dict`` fields) are replaced as a whole by a
YAML value or an override of the mapping, and updated key by key by an override of one of their
keys (``model.tiny.hidden_size=64``).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from forge_agent.errors import SetupError

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

T = TypeVar("T")


class ConfigError(SetupError, ValueError):
    """A configuration the schema refuses; the message names the key and what was expected."""

    kind = "config error"


class FieldError(ConfigError):
    """A range check failed in a section's ``__post_init__``; ``from_dict`` adds the key's path."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"{key}={value!r} is invalid: expected {expected}")


def check_field(ok: bool, key: str, value: Any, expected: str) -> None:
    """Raise a ``FieldError`` for ``key`` unless ``ok``; for a section's ``__post_init__``."""
    if not ok:
        raise FieldError(key, value, expected)


# ====================================================================== dict -> dataclasses
_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _join(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any value"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} keys"
    if origin in (list, Sequence):
        (item,) = typing.get_args(tp) or (Any,)
        return f"a list of {_type_name(item)}"
    if origin is tuple:
        items = typing.get_args(tp)
        return f"a list of {len(items)} ({', '.join(_type_name(a) for a in items)})"
    if origin in (dict, Mapping) or tp is dict:
        return "a mapping"
    if tp is float:
        return "a float"
    return f"a{'n' if tp.__name__[0] in 'aeiou' else ''} {tp.__name__}"


def _unknown_key(key: str, where: str, allowed: Sequence[str]) -> ConfigError:
    full = _join(where, key)
    close = [n for n in allowed if n.startswith(key)] or difflib.get_close_matches(key, allowed)
    hint = f" (did you mean '{_join(where, close[0])}'?)" if close else ""
    scope = f"in '{where}'" if where else "at the top level"
    return ConfigError(f"unknown key '{full}'{hint}; allowed keys {scope}: {', '.join(allowed)}")


def _bad_value(where: str, value: Any, tp: Any) -> ConfigError:
    return ConfigError(
        f"{where or 'config'}={value!r} ({type(value).__name__}) is invalid: "
        f"expected {_type_name(tp)}"
    )


def _coerce(tp: Any, value: Any, where: str, base: Any = None) -> Any:
    """Check ``value`` against the type ``tp`` and convert it (mappings to dataclasses)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if value is None:  # an empty YAML section means "all defaults"
            value = {}
        if not isinstance(value, Mapping):
            raise _bad_value(where, value, tp)
        return _build(tp, value, where, base)
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        allowed = ", ".join(repr(a) for a in args)
        raise ConfigError(f"{where}={value!r} is not allowed{hint}; allowed values: {allowed}")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        section = _optional_section(tp)
        if dataclasses.is_dataclass(section) and isinstance(value, Mapping):
            return _coerce(section, value, where, base)  # its own errors name the bad key
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _coerce(arm, value, where)
            except ConfigError:
                continue
        raise _bad_value(where, value, tp)
    if origin in (list, Sequence):
        if not isinstance(value, list | tuple):
            raise _bad_value(where, value, tp)
        item = args[0] if args else Any
        return [_coerce(item, v, _join(where, i)) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise _bad_value(where, value, tp)
        pairs = enumerate(zip(args, value, strict=True))
        return tuple(_coerce(a, v, _join(where, i)) for i, (a, v) in pairs)
    if origin in (dict, Mapping) or tp is dict:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _bad_value(where, value, tp)
        key_tp, item_tp = args if args else (Any, Any)
        out = {}
        for k, v in value.items():
            out[_coerce(key_tp, k, f"{where} key")] = _coerce(item_tp, v, _join(where, str(k)))
        return out
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _bad_value(where, value, tp)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _bad_value(where, value, tp)
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        # PyYAML reads `3e-4` (no dot) as a string; accept numeric strings for floats.
        if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
            return float(value)
        raise _bad_value(where, value, tp)
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise _bad_value(where, value, tp)
    raise ConfigError(f"{where}: the schema uses an unsupported type {tp!r}")


def _build(cls: type[T], data: Mapping[str, Any], where: str, base: Any = None) -> T:
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    names = [f.name for f in fields]
    for key in data:
        if key not in names:
            raise _unknown_key(str(key), where, names)
    kwargs: dict[str, Any] = {}
    # A section's default may differ from its class's (``field(default_factory=lambda:
    # GeneratorConfig(max_model_len=1024))``): keys the data leaves out keep the section's
    # default where it departs from the class's, and are left to the class otherwise (so a
    # class that derives values in ``__post_init__``, like a loss preset, derives them anew).
    fresh = _fresh(cls) if base is not None else None
    for f in fields:
        sub_base = getattr(base, f.name) if base is not None else _default_of(f)
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name], _join(where, f.name), sub_base)
        elif base is not None:
            value = getattr(base, f.name)
            if fresh is None or value != getattr(fresh, f.name):
                kwargs[f.name] = copy.deepcopy(value)
    try:
        return cls(**kwargs)
    except FieldError as err:
        key = _join(where, err.key)
        raise ConfigError(f"{key}={err.value!r} is invalid: expected {err.expected}") from None


def _fresh(cls: type) -> Any:
    """A default instance of ``cls``, or None when it needs arguments."""
    try:
        return cls()
    except TypeError:
        return None


def _default_of(f: dataclasses.Field) -> Any:
    """The default of a field when it is a dataclass instance (so nested defaults are kept)."""
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return value if dataclasses.is_dataclass(value) else None
    return None


def _check_renamed(schema: Any, keys: Sequence[str]) -> None:
    """A key the schema renamed (its ``RENAMED`` class attribute: old dotted key -> new) fails
    naming where it went, not only as unknown."""
    renamed = getattr(schema, "RENAMED", {})
    for key in keys:
        if key in renamed:
            raise ConfigError(f"unknown key '{key}': it was renamed '{renamed[key]}'")


def _dotted_keys(data: Mapping[str, Any], where: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        keys.append(_join(where, str(key)))
        if isinstance(value, Mapping):
            keys.extend(_dotted_keys(value, _join(where, str(key))))
    return keys


def from_dict(cls: type[T], data: Mapping[str, Any] | None, where: str = "") -> T:
    """Build the dataclass ``cls`` (and its nested sections) from a mapping, checking it.

    Unknown keys, wrong types and values outside a ``Literal`` raise ``ConfigError`` naming the
    full key (prefixed by ``where``) and what is allowed. Missing keys keep their defaults.
    """
    if data and not where:
        _check_renamed(cls, _dotted_keys(data))
    return _coerce(cls, {} if data is None else data, where)


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain nested dicts and lists (YAML- and JSON-ready)."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(cfg))


# ====================================================================== YAML + overrides
def _section_type(cls: Any, key: str) -> Any:
    """The dataclass type of field ``key`` of ``cls``, or None when it is not a section."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    tp = _optional_section(typing.get_type_hints(cls).get(key))
    return tp if dataclasses.is_dataclass(tp) else None


def _optional_section(tp: Any) -> Any:
    """``X`` for an optional section ``X | None`` (X a dataclass: null turns it off, keys set
    it up from X's defaults); ``tp`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(arms) == 1 and dataclasses.is_dataclass(arms[0]):
            return arms[0]
    return tp


def _merge(base: dict[str, Any], update: Mapping[str, Any], cls: Any) -> dict[str, Any]:
    """Merge ``update`` into ``base`` section by section; other values (mappings too) replace."""
    out = dict(base)
    for key, value in update.items():
        sub = _section_type(cls, key)
        if sub is not None and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value, sub)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _yaml_error(path: Path, err: yaml.YAMLError) -> str:
    """`FILE:LINE:COLUMN: not valid YAML: PROBLEM` (1-based, as editors count)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    detail = f"{problem} ({context})" if context else problem
    return f"{where}: not valid YAML: {detail}"


def load_yaml(path: str | Path, schema: Any, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a YAML config, resolving ``defaults:`` (a file name or list, relative to ``path``).

    Each defaults file is loaded first (recursively) and this file's sections are merged over
    it; later defaults files win over earlier ones.
    """
    path = Path(path).resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise ConfigError(f"config 'defaults' form a cycle: {chain}")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error(path, err)) from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping, got {data!r}")
    data = dict(data)
    parents = data.pop("defaults", None) or []
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"{path.name}: 'defaults' must be a file name or a list of file names")
    merged: dict[str, Any] = {}
    for parent in parents:
        parent_data = load_yaml(path.parent / parent, schema, (*_seen, path))
        merged = _merge(merged, parent_data, schema)
    return _merge(merged, data, schema)


def apply_override(data: dict[str, Any], override: str, schema: Any) -> dict[str, Any]:
    """Apply one ``a.b.c=value`` override to ``data`` in place (value parsed as YAML).

    Keys are checked against the schema down to the first free-form mapping; inside one
    (``model.tiny.hidden_size=64``) any key is accepted and set.
    """
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"override {override!r} is not of the form key=value (e.g. training.group_size=4)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = ""
        if raw.count("{") > raw.count("}") or raw.count("[") > raw.count("]"):
            hint = (
                "; the shell split it at a space: quote the whole override, e.g. "
                "'env.kwargs={difficulty: 2}'"
            )
        raise ConfigError(
            f"override {override!r}: the value is not valid YAML ({problem}){hint}"
        ) from None
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"override {override!r}: empty key part in {key!r}")
    try:
        _check_renamed(schema, [key])
    except ConfigError as err:
        raise ConfigError(f"override {override!r}: {err}") from None
    node, cls, where = data, schema, ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if cls is not None:
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                err = _unknown_key(part, where, names)
                raise ConfigError(f"override {override!r}: {err}") from None
            tp = _optional_section(typing.get_type_hints(cls)[part])
            free = typing.get_origin(tp) in (dict, Mapping) or tp is dict
            if not last and not dataclasses.is_dataclass(tp) and not free:
                raise ConfigError(
                    f"override {override!r}: '{_join(where, part)}' is {_type_name(tp)}, "
                    "not a section with keys"
                )
            next_cls = tp if dataclasses.is_dataclass(tp) else None
        else:
            next_cls = None
        where = _join(where, part)
        if last:
            node[part] = value
        else:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if child is None else child
                if not isinstance(child, dict):
                    raise ConfigError(f"override {override!r}: '{where}' is not a mapping")
                node[part] = child
            node, cls = child, next_cls
    return data


def load_config(path: str | Path | None, overrides: Sequence[str], schema: type[T]) -> T:
    """Load ``path`` (or the defaults when None), apply ``overrides``, validate and build."""
    data = load_yaml(path, schema) if path is not None else {}
    for override in overrides:
        apply_override(data, override, schema)
    return from_dict(schema, data)


def dump_yaml(cfg: Any, path: str | Path) -> Path:
    """Write the config as YAML (every key, in schema order); ``load_config`` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False))
    return path


def parse_cli(argv: Sequence[str], schema: type[T]) -> T:
    """Build a config from command-line words: ``[--config PATH] key=value ...``."""
    path: str | None = None
    overrides: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--config":
            if i + 1 >= len(words):
                raise ConfigError("--config needs a path")
            path, i = words[i + 1], i + 2
            continue
        if word.startswith("--config="):
            path = word.split("=", 1)[1]
        elif word.startswith("-"):
            raise ConfigError(f"unknown option {word!r}; use --config PATH and key=value")
        else:
            overrides.append(word)
        i += 1
    return load_config(path, overrides, schema)


def describe_keys(cfg: Any, width: int = 100, indent: str = "  ") -> list[str]:
    """Every key of a config instance and its value, grouped by section, for ``--help``:

        training: steps=40 groups_per_step=8 group_size=8 ...
          trainer.loss: name=dapo clip_eps_low=null ...

    Generated from the dataclasses, so it cannot drift from the schema.
    """
    import textwrap

    def show(value: Any) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        return text.removesuffix("\n...").removesuffix("...").strip()

    lines: list[str] = []
    top: list[str] = []

    def walk(obj: Any, where: str) -> None:
        scalars, sections = [], []
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                sections.append((f.name, value))
            else:
                plain = to_dict(value) if dataclasses.is_dataclass(value) else value
                scalars.append(f"{f.name}={show(plain)}")
        if where:
            depth = where.count(".")
            prefix = indent * (1 + depth) + f"{where}: "
            lines.extend(
                textwrap.wrap(
                    " ".join(scalars),
                    width,
                    initial_indent=prefix,
                    subsequent_indent=" " * len(prefix),
                    break_on_hyphens=False,
                )
                or [prefix.rstrip()]
            )
        else:
            top.extend(scalars)
        for name, value in sections:
            walk(value, f"{where}.{name}" if where else name)

    walk(cfg, "")
    head = textwrap.wrap(
        " ".join(top),
        width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )
    return head + lines
