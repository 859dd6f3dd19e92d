"""A guard on `eval` for scorers that evaluate the policy's answer, installed inside a judge's
sandbox (`forge_agent.rewards.judge`) just before the scorer runs.

The sandbox keeps what such an answer runs away from the host and from other episodes, but it
runs in the process that computes its own verdict: ``__import__('json').dumps = ...`` made the
verdict 1.0 whatever the answer. So in the judge's child, `eval` and `compile` (which
reasoning-gym scorers call on the answer directly or through `sympy.parse_expr`) first check
the expression and refuse, with `PermissionError`, one that could run code rather than compute
a value:

- a name or attribute starting with ``_`` (``__import__``, ``__class__``, ``__globals__``);
- a name whose value is not a number, a string, a safe builtin (`SAFE_BUILTINS`: ``len``,
  ``sorted``, ``int``, ...) or a piece of mathematics (a sympy expression or class, or a
  function of sympy's math modules), so ``getattr``, ``open``, ``eval``, modules, and
  sympy's printing, plotting or ``lambdify`` are out of reach;
- attributes that reach frames, code or class trees without an underscore (``mro``,
  ``f_globals``, ``format``, ...).

Answers a scorer expects (a list literal, ``3 + 4*2``, ``x**2/2 + C``) pass unchanged; this
is checked over every reasoning-gym task's own answers (docs/rewards.md). `exec` is not
guarded: scorers never `exec` an answer, and an expression cannot name it.
"""

from __future__ import annotations

import ast
import builtins
import os
import sys
import types
from collections.abc import Mapping
from types import CodeType
from typing import Any

__all__ = ["SAFE_BUILTINS", "check_expression", "install"]

SAFE_BUILTINS = frozenset(
    {
        abs, all, any, bin, bool, chr, complex, dict, divmod, enumerate, filter, float,
        frozenset, hex, int, isinstance, iter, len, list, map, max, min, next, oct, ord, pow,
        range, repr, reversed, round, set, slice, sorted, str, sum, tuple, zip,
    }
)  # fmt: skip
_DENIED_ATTRIBUTES = frozenset(
    {
        "mro", "format", "format_map", "f_globals", "f_locals", "f_back", "f_builtins",
        "f_code", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
        "tb_frame", "tb_next", "co_code",
    }
)  # fmt: skip
_MATH_MODULES = (
    "sympy.core", "sympy.functions", "sympy.polys", "sympy.simplify", "sympy.ntheory",
    "sympy.sets", "sympy.logic", "sympy.matrices", "sympy.concrete", "sympy.integrals",
    "sympy.series", "sympy.calculus", "sympy.assumptions", "sympy.combinatorics",
    "fractions", "decimal", "math",
)  # fmt: skip
_SCALARS = (int, float, complex, str, bytes, bool, type(None))


def _is_math(value: Any) -> bool:
    sympy = sys.modules.get("sympy")
    if sympy is not None and (
        isinstance(value, sympy.Basic)
        or (isinstance(value, type) and issubclass(value, sympy.Basic))
    ):
        return True
    module = getattr(value, "__module__", None) or ""
    return (
        callable(value)
        and not isinstance(value, types.ModuleType)
        and (module.startswith(_MATH_MODULES))
    )


def _safe_value(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return True
    try:
        if value in SAFE_BUILTINS:
            return True
    except TypeError:  # unhashable
        return False
    return _is_math(value)


def _lookup(name: str, scopes: list[Any]) -> tuple[bool, Any]:
    for scope in scopes:
        if isinstance(scope, types.ModuleType):
            scope = vars(scope)
        if isinstance(scope, dict) and name in scope:
            return True, scope[name]
    return False, None


def check_expression(tree: ast.AST, scopes: list[Any]) -> None:
    """Raise `PermissionError` naming the first part of `tree` that could run code (see the
    module docstring); `scopes` are where its names resolve (locals, globals, builtins)."""
    bound_here = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    } | {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise PermissionError(f"the expression may not use the name {node.id!r}")
            if node.id in bound_here:
                continue
            found, value = _lookup(node.id, scopes)
            if found and not _safe_value(value):
                raise PermissionError(f"the expression may not use {node.id!r}")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in _DENIED_ATTRIBUTES:
                raise PermissionError(f"the expression may not use the attribute {node.attr!r}")
        elif isinstance(node, ast.stmt) and not isinstance(node, ast.Expr):
            raise PermissionError(f"the expression may not hold a {type(node).__name__}")


def _scopes(globals_: Any, locals_: Any) -> list[Any]:
    if globals_ is None:  # eval(source) alone: the caller's scopes
        frame = sys._getframe(2)
        globals_, locals_ = frame.f_globals, frame.f_locals
    scopes = [s for s in (locals_, globals_) if s is not None]
    found, inner = _lookup("__builtins__", [globals_])
    scopes.append(inner if found else builtins)
    return scopes


_REAL_COMPILE = builtins.compile


def _tree(source: Any, mode: str) -> ast.AST | None:
    if isinstance(source, ast.AST):
        return source
    if isinstance(source, str | bytes):
        return _REAL_COMPILE(source, "<answer>", mode, ast.PyCF_ONLY_AST)
    return None  # a code object: compiled by the scorer itself (`compile` is guarded)


def install() -> None:
    """Guard `builtins.eval` and `builtins.compile` in this process (a judge's sandboxed
    child: nothing else runs there, and it ends with the verdict)."""
    real_eval, real_compile = builtins.eval, _REAL_COMPILE
    compiled: dict[int, tuple[Any, ast.AST]] = {}  # id(code) -> (code, its tree) of `compile`

    def eval(
        source: str | bytes | CodeType,
        globals: dict[str, Any] | None = None,
        locals: Mapping[str, object] | None = None,
        /,
    ) -> Any:
        tree = _tree(source, "eval")
        if tree is None and id(source) in compiled and compiled[id(source)][0] is source:
            tree = compiled[id(source)][1]  # compiled here: its names resolve only now
        if tree is not None:
            check_expression(tree, _scopes(globals, locals))
        if globals is None:  # evaluate in the caller's scopes, as the real eval would
            frame = sys._getframe(1)
            globals, locals = frame.f_globals, frame.f_locals
        return real_eval(source, globals, locals)

    def compile(
        source: str | bytes | ast.AST,
        filename: str | bytes | os.PathLike,
        mode: str,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        tree = _tree(source, "exec" if mode == "exec" else "eval")
        code = real_compile(source, filename, mode, *args, **kwargs)
        if tree is not None and mode == "eval":
            check_expression(tree, [builtins])  # and again by `eval`, with its scopes
            compiled[id(code)] = (code, tree)
        return code

    builtins.eval = eval  # type: ignore[assignment]
    builtins.compile = compile  # type: ignore[assignment]
