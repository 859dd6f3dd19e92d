"""LoRA adapters on the policy through `peft`: wrapping, the reference policy, merged and
adapter-only weights, and checkpoint checks.

    model = apply_lora(model, cfg.lora)          # a peft `PeftModel`; only A, B train
    with reference_policy(model): ...            # the base model: adapters off (no 2nd model)
    merged = merge_lora(model.state_dict(), cfg.lora)   # base names, W + (alpha/r) B A
    adapter = adapter_tensors(model.state_dict())     # peft's names (adapter_model.safetensors)

A weight sync to an engine that loads full weights sends `merge_lora`'s tensors (the base
layout, so nothing on the generator side changes); an engine serving adapters needs only
`adapter_state_dict`'s (megabytes instead of the whole model).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from forge_agent.trainer.config import LoraConfig

ADAPTER_CONFIG = "adapter_config.json"
"""The file peft writes beside an adapter's weights; its presence marks an adapter folder."""

_PREFIX = "base_model.model."  # what peft puts before the wrapped model's own names


def linear_module_names(model: nn.Module) -> list[str]:
    """The distinct last name parts of `model`'s linear layers (the LM head excluded): what
    `trainer.lora.target_modules` may name."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not head and name
        }
    )


def check_target_modules(model: nn.Module, cfg: LoraConfig) -> None:
    """Raise a `ValueError` naming the target modules `model` lacks and listing the ones it has."""
    if cfg.target_modules == ["all-linear"]:
        return
    have = linear_module_names(model)
    missing = [m for m in cfg.target_modules if m not in have]
    if missing:
        raise ValueError(
            f"trainer.lora.target_modules names {missing}, which {type(model).__name__} does "
            f"not have; its linear modules are {have} (or use [all-linear])"
        )


def peft_config(cfg: LoraConfig) -> Any:
    """`cfg` as peft's `LoraConfig` (a causal-LM task)."""
    from peft import LoraConfig as PeftLoraConfig

    targets: Any = "all-linear" if cfg.target_modules == ["all-linear"] else cfg.target_modules
    return PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )


def apply_lora(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """`model` wrapped by peft with fresh adapters (B = 0: the same outputs as `model`); the
    base weights are frozen, only the adapters' A and B require gradients."""
    from peft import get_peft_model

    check_target_modules(model, cfg)
    return get_peft_model(model, peft_config(cfg))


def is_lora(model: nn.Module) -> bool:
    """Whether `model` is a peft model (carries adapters)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft model (`model` itself otherwise)."""
    return model.get_base_model() if is_lora(model) else model


@contextlib.contextmanager
def reference_policy(model: nn.Module) -> Iterator[None]:
    """Within it, `model` computes the base policy: its adapters are off."""
    with model.disable_adapter():
        yield


def merge_lora(state: Mapping[str, torch.Tensor], cfg: LoraConfig) -> dict[str, torch.Tensor]:
    """A peft model's full state dict as the base model's, each adapted weight merged:
    W' = W + (alpha / rank) B A (Hu et al. 2021, eq. 3), in the base names and dtype.

    Works on a state dict (not on modules) so a sharded trainer can merge the full tensors it
    gathered on one rank. An empty `state` (a rank that holds none) gives {}."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        name = key.removeprefix(_PREFIX)
        if ".base_layer." in name:
            module = key.rsplit(".base_layer.", 1)[0]
            name = name.replace(".base_layer.", ".")
            a = state.get(f"{module}.lora_A.default.weight")
            b = state.get(f"{module}.lora_B.default.weight")
            if a is not None and b is not None and key.endswith(".weight"):
                delta = (b.float() @ a.float()) * cfg.scaling  # [out, in]
                value = (value.float() + delta).to(value.dtype)
        out[name] = value.detach()
    return out


def adapter_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters' tensors of a peft model's full state dict, in peft's saved names (the
    adapter's name dropped: `...q_proj.lora_A.weight`); {} for an empty `state`. Works on a
    state dict so a sharded trainer can pick them from the full tensors it gathered."""
    return {
        k.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B."): v
        for k, v in state.items()
        if ".lora_A.default." in k or ".lora_B.default." in k
    }


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors in peft's saved names (`adapter_model.safetensors`)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_weights(model: nn.Module, folder: Path) -> None:
    """Load a peft adapter folder's weights into `model`'s adapters in place; a tensor the
    model's adapters lack, or one of theirs the folder lacks, is an error naming it."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    file = folder / "adapter_model.safetensors"
    if not file.exists():
        raise FileNotFoundError(f"no adapter_model.safetensors under {folder}")
    weights = load_file(str(file))
    own = set(adapter_state_dict(model))
    if set(weights) != own:
        extra, lacking = sorted(set(weights) - own), sorted(own - set(weights))
        raise KeyError(
            f"adapter {folder} does not match the trainer's adapters (trainer.lora): "
            f"{len(extra)} unknown tensor(s) {extra[:3]}, {len(lacking)} missing {lacking[:3]}"
        )
    set_peft_model_state_dict(model, weights)


def saved_lora(policy_folder: Path) -> dict[str, Any] | None:
    """The adapter config a checkpoint's policy folder holds (peft's JSON), or None when it
    holds full weights."""
    file = Path(policy_folder) / ADAPTER_CONFIG
    return json.loads(file.read_text()) if file.exists() else None


def check_checkpoint_kind(policy_folder: Path, cfg: LoraConfig | None) -> None:
    """Refuse to resume a LoRA checkpoint as full weights, full weights as LoRA, or an adapter
    of another rank or other target modules; the error names the folder and the fix."""
    saved = saved_lora(policy_folder)
    where = Path(policy_folder).parent
    if saved is not None and cfg is None:
        raise ValueError(
            f"checkpoint {where} holds a LoRA adapter (rank {saved.get('r')}) but trainer.lora "
            f"is null (full weights): set trainer.lora.rank={saved.get('r')} to resume it, or "
            "start in a new output_dir"
        )
    if saved is None and cfg is not None:
        raise ValueError(
            f"checkpoint {where} holds full weights but trainer.lora is set: set "
            "trainer.lora=null to resume it, or start in a new output_dir"
        )
    if saved is not None and cfg is not None:
        targets = saved.get("target_modules")
        want = cfg.target_modules
        same_targets = want == ["all-linear"] or sorted(targets or []) == sorted(want)
        if saved.get("r") != cfg.rank or not same_targets:
            raise ValueError(
                f"checkpoint {where} holds a LoRA adapter of rank {saved.get('r')} on "
                f"{sorted(targets or [])}, but trainer.lora has rank {cfg.rank} on {sorted(want)}:"
                " set them as saved, or start in a new output_dir"
            )


def export_merged(adapter: Path, out: Path, base: str | Path | None = None) -> Path:
    """Write a transformers folder of `base` with the peft adapter folder `adapter` merged in
    (weights, config, tokenizer when the adapter folder or the base has one); `base` None: the
    adapter's `base_model_name_or_path`. Returns `out`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter, out = Path(adapter), Path(out)
    saved = saved_lora(adapter)
    if saved is None:
        raise ValueError(f"{adapter} is not a peft adapter folder (no {ADAPTER_CONFIG})")
    base = base or saved.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{adapter / ADAPTER_CONFIG} names no base model: give one")
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype="auto")
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged.save_pretrained(out)
    tokenizer_from = adapter if (adapter / "tokenizer_config.json").exists() else Path(base)
    if (tokenizer_from / "tokenizer_config.json").exists():
        AutoTokenizer.from_pretrained(str(tokenizer_from)).save_pretrained(out)
    return out
