"""A STAND-IN for the `torchstore` module (TorchStore cannot run here: see DESIGN.md).

It offers TorchStore's documented async API, in one process: `initialize`, `put_state_dict(sd,
key)` (each tensor under `{key}/{name}` plus a `{key}/MAPPING` entry), `get_state_dict(key,
user_state_dict=None)` (copies into the user's tensors when given), `keys(prefix)` (every
stored key starting with `prefix`, as TorchStore matches) and `delete(key)`.
"""

from __future__ import annotations

from typing import Any

import torch

_stores: dict[str | None, dict[str, Any]] = {}


def reset() -> None:
    """Forget every stored key (between tests)."""
    _stores.clear()


async def initialize(store_name: str | None = None, **_: Any) -> None:
    _stores.setdefault(store_name, {})


def _store(store_name: str | None) -> dict[str, Any]:
    if store_name not in _stores:
        raise RuntimeError(f"torchstore stand-in: store {store_name!r} was not initialized")
    return _stores[store_name]


async def put_state_dict(
    state_dict: dict[str, torch.Tensor], key: str, store_name: str | None = None
) -> None:
    store = _store(store_name)
    for name, tensor in state_dict.items():
        store[f"{key}/{name}"] = tensor.detach().clone()
    store[f"{key}/MAPPING"] = list(state_dict)


async def get_state_dict(
    key: str,
    user_state_dict: dict[str, torch.Tensor] | None = None,
    store_name: str | None = None,
) -> dict[str, torch.Tensor]:
    store = _store(store_name)
    if f"{key}/MAPPING" not in store:
        raise KeyError(f"torchstore stand-in: no state dict under {key!r}")
    out = {}
    for name in store[f"{key}/MAPPING"]:
        value = store[f"{key}/{name}"]
        if user_state_dict is not None and name in user_state_dict:
            out[name] = user_state_dict[name].copy_(value)
        else:
            out[name] = value.clone()
    return out


async def keys(prefix: str | None = None, store_name: str | None = None) -> list[str]:
    return [k for k in _store(store_name) if prefix is None or k.startswith(prefix)]


async def delete(key: str, store_name: str | None = None) -> None:
    del _store(store_name)[key]
