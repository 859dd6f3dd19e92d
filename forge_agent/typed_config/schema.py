"""Typed config, the schema half: dict -> dataclasses (`from_dict`, checking every key and
type), dataclasses -> dict (`to_dict`), and the errors every config check raises
(`ConfigError`, `FieldError`, `check_field`). The YAML files, overrides and the command line
are `forge_agent.typed_config.files`."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from forge_agent.errors import SetupError

__all__ = [
    "ConfigError",
    "FieldError",
    "check_field",
    "check_renamed",
    "from_dict",
    "join_key",
    "optional_section",
    "to_dict",
    "type_name",
    "unknown_key",
]

T = TypeVar("T")


class ConfigError(SetupError, ValueError):
    """A configuration the schema refuses; the message names the key and what was expected."""

    kind = "config error"


class FieldError(ConfigError):
    """A range check failed in a section's ``__post_init__``; ``from_dict`` adds the key's path."""

    def __init__(self, key: str, value: object, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"{key}={value!r} is invalid: expected {expected}")


def check_field(ok: bool, key: str, value: object, expected: str) -> None:
    """Raise a ``FieldError`` for ``key`` unless ``ok``; for a section's ``__post_init__``."""
    if not ok:
        raise FieldError(key, value, expected)


# ====================================================================== dict -> dataclasses
_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def join_key(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def type_name(tp: object) -> str:
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any value"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} keys"
    if origin in (list, Sequence):
        (item,) = typing.get_args(tp) or (Any,)
        return f"a list of {type_name(item)}"
    if origin is tuple:
        items = typing.get_args(tp)
        return f"a list of {len(items)} ({', '.join(type_name(a) for a in items)})"
    if origin in (dict, Mapping) or tp is dict:
        return "a mapping"
    if tp is float:
        return "a float"
    return f"a{'n' if tp.__name__[0] in 'aeiou' else ''} {tp.__name__}"


def unknown_key(key: str, where: str, allowed: Sequence[str]) -> ConfigError:
    full = join_key(where, key)
    close = [n for n in allowed if n.startswith(key)] or difflib.get_close_matches(key, allowed)
    hint = f" (did you mean '{join_key(where, close[0])}'?)" if close else ""
    scope = f"in '{where}'" if where else "at the top level"
    return ConfigError(f"unknown key '{full}'{hint}; allowed keys {scope}: {', '.join(allowed)}")


def _bad_value(where: str, value: Any, tp: Any) -> ConfigError:
    return ConfigError(
        f"{where or 'config'}={value!r} ({type(value).__name__}) is invalid: "
        f"expected {type_name(tp)}"
    )


def optional_section(tp: object) -> Any:
    """``X`` for an optional section ``X | None`` (X a dataclass: null turns it off, keys set
    it up from X's defaults); ``tp`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(arms) == 1 and dataclasses.is_dataclass(arms[0]):
            return arms[0]
    return tp


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
        section = optional_section(tp)
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
        return [_coerce(item, v, join_key(where, i)) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise _bad_value(where, value, tp)
        pairs = enumerate(zip(args, value, strict=True))
        return tuple(_coerce(a, v, join_key(where, i)) for i, (a, v) in pairs)
    if origin in (dict, Mapping) or tp is dict:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _bad_value(where, value, tp)
        key_tp, item_tp = args if args else (Any, Any)
        out = {}
        for k, v in value.items():
            out[_coerce(key_tp, k, f"{where} key")] = _coerce(item_tp, v, join_key(where, str(k)))
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
            raise unknown_key(str(key), where, names)
    kwargs: dict[str, Any] = {}
    # A section's default may differ from its class's (``field(default_factory=lambda:
    # GeneratorConfig(max_model_len=1024))``): keys the data leaves out keep the section's
    # default where it departs from the class's, and are left to the class otherwise (so a
    # class that derives values in ``__post_init__``, like a loss preset, derives them anew).
    fresh = _fresh(cls) if base is not None else None
    for f in fields:
        sub_base = getattr(base, f.name) if base is not None else _default_of(f)
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name], join_key(where, f.name), sub_base)
        elif base is not None:
            value = getattr(base, f.name)
            if fresh is None or value != getattr(fresh, f.name):
                kwargs[f.name] = copy.deepcopy(value)
    try:
        return cls(**kwargs)
    except FieldError as err:
        key = join_key(where, err.key)
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


def check_renamed(schema: type, keys: Sequence[str]) -> None:
    """A key the schema renamed (its ``RENAMED`` class attribute: old dotted key -> new) fails
    naming where it went, not only as unknown."""
    renamed = getattr(schema, "RENAMED", {})
    for key in keys:
        if key in renamed:
            raise ConfigError(f"unknown key '{key}': it was renamed '{renamed[key]}'")


def _dotted_keys(data: Mapping[str, Any], where: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        keys.append(join_key(where, str(key)))
        if isinstance(value, Mapping):
            keys.extend(_dotted_keys(value, join_key(where, str(key))))
    return keys


def from_dict(cls: type[T], data: Mapping[str, Any] | None, where: str = "") -> T:
    """Build the dataclass ``cls`` (and its nested sections) from a mapping, checking it.

    Unknown keys, wrong types and values outside a ``Literal`` raise ``ConfigError`` naming the
    full key (prefixed by ``where``) and what is allowed. Missing keys keep their defaults.
    """
    if data and not where:
        check_renamed(cls, _dotted_keys(data))
    return _coerce(cls, {} if data is None else data, where)


def to_dict(cfg: object) -> dict[str, Any]:
    """The config as plain nested dicts and lists (YAML- and JSON-ready)."""

    def plain(value: object) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(cfg))
