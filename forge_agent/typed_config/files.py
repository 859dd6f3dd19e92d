"""Typed config, the files half: YAML with ``defaults:`` inheritance, ``key=value``
overrides, the command line and the key listing of ``--help`` (`describe_keys`); the dicts
become dataclasses through `forge_agent.typed_config.schema`."""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from forge_agent.typed_config.schema import (
    ConfigError,
    check_renamed,
    from_dict,
    join_key,
    optional_section,
    to_dict,
    type_name,
    unknown_key,
)

__all__ = ["apply_override", "describe_keys", "dump_yaml", "load_config", "load_yaml", "parse_cli"]

T = TypeVar("T")


# ====================================================================== YAML + overrides
def _section_type(cls: Any, key: str) -> Any:
    """The dataclass type of field ``key`` of ``cls``, or None when it is not a section."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    tp = optional_section(typing.get_type_hints(cls).get(key))
    return tp if dataclasses.is_dataclass(tp) else None


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


def load_yaml(
    path: str | Path, schema: type, _seen: tuple[Path, ...] = (), search: Sequence[Path] = ()
) -> dict:
    """Read a YAML config, resolving ``defaults:`` (a file name or list, relative to ``path``,
    else found by name in the folders of ``search``: the shipped configs).

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
        found = _find_defaults(path, parent, search)
        parent_data = load_yaml(found, schema, (*_seen, path), search)
        merged = _merge(merged, parent_data, schema)
    return _merge(merged, data, schema)


def _find_defaults(path: Path, name: str, search: Sequence[Path]) -> Path:
    """The file a ``defaults: name`` of ``path`` means: beside ``path``, else the first folder
    of ``search`` that holds it; a ``ConfigError`` naming every place looked in."""
    places = [path.parent, *(Path(folder) for folder in search)]
    for folder in places:
        if (folder / name).is_file():
            return (folder / name).resolve()
    if not search:
        return path.parent / name  # load_yaml says it does not exist
    looked = ", ".join(repr(str(folder / name)) for folder in places)
    raise ConfigError(f"{path.name}: 'defaults: {name}': no such config file (looked for {looked})")


def apply_override(data: dict[str, Any], override: str, schema: type) -> dict[str, Any]:
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
        check_renamed(schema, [key])
    except ConfigError as err:
        raise ConfigError(f"override {override!r}: {err}") from None
    node, cls, where = data, schema, ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if cls is not None:
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                err = unknown_key(part, where, names)
                raise ConfigError(f"override {override!r}: {err}") from None
            tp = optional_section(typing.get_type_hints(cls)[part])
            free = typing.get_origin(tp) in (dict, Mapping) or tp is dict
            if not last and not dataclasses.is_dataclass(tp) and not free:
                raise ConfigError(
                    f"override {override!r}: '{join_key(where, part)}' is {type_name(tp)}, "
                    "not a section with keys"
                )
            next_cls = tp if dataclasses.is_dataclass(tp) else None
        else:
            next_cls = None
        where = join_key(where, part)
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


def load_config(
    path: str | Path | None, overrides: Sequence[str], schema: type[T], search: Sequence[Path] = ()
) -> T:
    """Load ``path`` (or the defaults when None), apply ``overrides``, validate and build;
    ``search``: folders where a ``defaults:`` name not beside its file is found."""
    data = load_yaml(path, schema, search=search) if path is not None else {}
    for override in overrides:
        apply_override(data, override, schema)
    return from_dict(schema, data)


def dump_yaml(cfg: object, path: str | Path) -> Path:
    """Write the config as YAML (every key, in schema order); ``load_config`` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False))
    return path


def parse_cli(argv: Sequence[str], schema: type[T], search: Sequence[Path] = ()) -> T:
    """Build a config from command-line words: ``[--config PATH] key=value ...`` (``search``:
    see `load_config`)."""
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
    return load_config(path, overrides, schema, search)


def describe_keys(cfg: object, width: int = 100, indent: str = "  ") -> list[str]:
    """Every key of a config instance and its value, grouped by section, for ``--help``:

        training: steps=40 groups_per_step=8 group_size=8 ...
          trainer.loss: name=dapo clip_eps_low=null ...

    Generated from the dataclasses, so it cannot drift from the schema.
    """
    import textwrap

    def show(value: object) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        return text.removesuffix("\n...").removesuffix("...").strip()

    lines: list[str] = []
    top: list[str] = []

    def walk(obj: object, where: str) -> None:
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
