"""Trainer checkpoints: save and resume policy, optimizer, step, policy version, RNG and data
position.

Layout of one checkpoint folder:

    <path>/policy/         a standard Hugging Face folder (`save_pretrained` + tokenizer when
                           given): loadable by transformers' `from_pretrained` and by vLLM;
                           with LoRA (`trainer.lora`) peft's adapter folder instead
                           (`adapter_config.json`, `adapter_model.safetensors`): loadable by
                           `PeftModel.from_pretrained` and as a vLLM LoRA module
                           (`python -m apps.export --merge` writes the merged model)
    <path>/trainer.pt      optimizer state (keyed by parameter name), step, policy version,
                           RNG states (python, torch, cuda) and the caller's data position
    <path>/COMPLETE        written last: a folder without it is an interrupted save

A run keeps its checkpoints as `step_000010` folders under one root: `complete_checkpoints`
lists the finished ones and `prune_checkpoints` keeps the newest K (`trainer.checkpoint_dirs`,
which imports no torch).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from forge_agent.trainer.checkpoint_dirs import DONE as _DONE
from forge_agent.trainer.lora import is_lora, load_adapter_weights, saved_lora

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_TRAINER_FILE = "trainer.pt"


@dataclass
class TrainerState:
    """What `load_checkpoint` restored besides the weights."""

    step: int
    policy_version: int
    data_position: Any


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def _named_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer state keyed by parameter name (robust to parameter order changes)."""
    names = {id(p): n for n, p in model.named_parameters()}
    sd = optimizer.state_dict()
    index_to_name = {}
    for group, sd_group in zip(optimizer.param_groups, sd["param_groups"], strict=True):
        for p, idx in zip(group["params"], sd_group["params"], strict=True):
            index_to_name[idx] = names[id(p)]
    state = {index_to_name[i]: s for i, s in sd["state"].items()}
    groups = [
        {
            **{k: v for k, v in g.items() if k != "params"},
            "params": [index_to_name[i] for i in g["params"]],
        }
        for g in sd["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _load_named_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, named: dict[str, Any]
) -> None:
    names = {id(p): n for n, p in model.named_parameters()}
    name_to_index: dict[str, int] = {}
    idx = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            name_to_index[names[id(p)]] = idx
            idx += 1
    missing = sorted(set(named["state"]) - set(name_to_index))
    if missing:
        raise KeyError(f"checkpoint optimizer state has unknown parameters {missing[:5]}")
    groups = [
        {**g, "params": [name_to_index[n] for n in g["params"]]} for g in named["param_groups"]
    ]
    state = {name_to_index[n]: s for n, s in named["state"].items()}
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    step: int,
    policy_version: int,
    data_position: object = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> Path:
    """Write a checkpoint folder (see the module docstring); returns its path."""
    path = Path(path)
    if (path / _DONE).exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path / "policy")
    if tokenizer is not None:
        tokenizer.save_pretrained(path / "policy")
    torch.save(
        {
            "step": step,
            "policy_version": policy_version,
            "data_position": data_position,
            "rng": _rng_state(),
            "optimizer": _named_optimizer_state(model, optimizer) if optimizer else None,
        },
        path / _TRAINER_FILE,
    )
    (path / _DONE).write_text(f"step {step}\n")
    return path


def load_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> TrainerState:
    """Load weights into `model` (in place), optimizer state, and RNG states."""
    path = Path(path)
    if not (path / _DONE).exists():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {_DONE} marker)")

    if is_lora(model) != (saved_lora(path / "policy") is not None):
        kind = "a LoRA adapter" if saved_lora(path / "policy") else "full weights"
        raise ValueError(
            f"checkpoint {path} holds {kind}, the model "
            f"{'has adapters' if is_lora(model) else 'has none'} (trainer.lora)"
        )
    if is_lora(model):
        load_adapter_weights(model, path / "policy")
        return _load_trainer_state(path, model, optimizer)
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for f in sorted((path / "policy").glob("*.safetensors")):
        weights.update(load_file(f))
    if not weights:
        raise FileNotFoundError(f"no *.safetensors weights under {path / 'policy'}")
    own = model.state_dict()
    tied = {k for k in own if k not in weights}
    unexpected = sorted(set(weights) - set(own))
    if unexpected:
        raise KeyError(f"checkpoint {path} has weights the model lacks: {unexpected[:5]}")
    with torch.no_grad():
        for k, v in weights.items():
            own[k].copy_(v)
    if tied and not getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        raise KeyError(f"checkpoint {path} lacks weights {sorted(tied)[:5]}")
    return _load_trainer_state(path, model, optimizer)


def _load_trainer_state(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None
) -> TrainerState:
    """Optimizer state, RNG states, step, version and data position from `trainer.pt`."""
    blob = torch.load(path / _TRAINER_FILE, weights_only=False)
    if optimizer is not None and blob["optimizer"] is not None:
        _load_named_optimizer_state(model, optimizer, blob["optimizer"])
    _set_rng_state(blob["rng"])
    return TrainerState(blob["step"], blob["policy_version"], blob["data_position"])
