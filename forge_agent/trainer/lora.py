"""LoRA adapters on the policy through `peft`: wrapping, the reference policy, merged and
adapter-only weights, and checkpoint checks.

    model = apply_lora(model, cfg.lora)          # a peft `PeftModel`; only A, B train
    with active_adapter(model, "solver"): ...    # several adapters: the one a batch trains
    with reference_policy(model): ...            # the base model: adapters off (no 2nd model)
    merged = merge_lora(model.state_dict(), cfg.lora)   # base names, W + (alpha/r) B A
    adapter = adapter_tensors(model.state_dict(), cfg.lora.adapters)   # peft's saved names

Several adapters (`trainer.lora.adapters`) share the frozen base: each is a peft adapter of its
own name, trained on the episodes routed to it. In a sync's flat dict the adapter named
"default" keeps peft's saved names and every other adapter's names carry a `"<name>/"` prefix
(`split_adapters` undoes it).

A weight sync to an engine that loads full weights sends `merge_lora`'s tensors (the base
layout, so nothing on the generator side changes); an engine serving adapters needs only
`adapter_state_dict`'s (megabytes instead of the whole model).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
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
    """`model` wrapped by peft with fresh adapters, one per name of `cfg.adapters` (B = 0: the
    same outputs as `model`); the base weights are frozen, every adapter's A and B require
    gradients (so one optimizer holds them all) and the first adapter is active."""
    from peft import get_peft_model

    check_target_modules(model, cfg)
    first, *others = cfg.adapters
    peft_model = get_peft_model(model, peft_config(cfg), adapter_name=first)
    for name in others:
        peft_model.add_adapter(name, peft_config(cfg))
    for name, param in peft_model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            param.requires_grad_(True)
    return peft_model


def adapter_names(model: nn.Module) -> list[str]:
    """The names of the adapters a peft model holds, in the order they were added."""
    return list(model.peft_config) if is_lora(model) else []


@contextlib.contextmanager
def active_adapter(model: nn.Module, name: str | None) -> Iterator[None]:
    """Within it, `model` computes (and trains) adapter `name` (None: the first). A model with
    one adapter is left as it is. peft marks only the active adapter's tensors as requiring
    gradients, so a backward pass reaches that adapter alone; the optimizer holds them all."""
    names = adapter_names(model)
    if len(names) <= 1:
        yield
        return
    name = name or names[0]
    if name not in names:
        raise KeyError(f"adapter {name!r} is not one of trainer.lora.adapters {names}")
    model.set_adapter(name)
    yield


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


def merge_lora(
    state: Mapping[str, torch.Tensor], cfg: LoraConfig, adapter: str | None = None
) -> dict[str, torch.Tensor]:
    """A peft model's full state dict as the base model's, each adapted weight merged with
    adapter `adapter` (None: the first of `cfg.adapters`):
    W' = W + (alpha / rank) B A (Hu et al. 2021, eq. 3), in the base names and dtype.

    Works on a state dict (not on modules) so a sharded trainer can merge the full tensors it
    gathered on one rank. An empty `state` (a rank that holds none) gives {}."""
    adapter = adapter or cfg.adapters[0]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        name = key.removeprefix(_PREFIX)
        if ".base_layer." in name:
            module = key.rsplit(".base_layer.", 1)[0]
            name = name.replace(".base_layer.", ".")
            a = state.get(f"{module}.lora_A.{adapter}.weight")
            b = state.get(f"{module}.lora_B.{adapter}.weight")
            if a is not None and b is not None and key.endswith(".weight"):
                delta = (b.float() @ a.float()) * cfg.scaling  # [out, in]
                value = (value.float() + delta).to(value.dtype)
        out[name] = value.detach()
    return out


def adapter_tensors(
    state: Mapping[str, torch.Tensor], names: Sequence[str] = ("default",)
) -> dict[str, torch.Tensor]:
    """The tensors of adapters `names` in a peft model's full state dict, in peft's saved
    names (the adapter's name dropped: `...q_proj.lora_A.weight`), each name but "default"
    as a `"<name>/"` prefix; {} for an empty `state`. Works on a state dict so a sharded
    trainer can pick them from the full tensors it gathered."""
    out: dict[str, torch.Tensor] = {}
    for name in names:
        prefix = "" if name == "default" else f"{name}/"
        a, b = f".lora_A.{name}.", f".lora_B.{name}."
        for k, v in state.items():
            if a in k or b in k:
                out[prefix + k.replace(a, ".lora_A.").replace(b, ".lora_B.")] = v
    return out


def split_adapters(tensors: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """`adapter_tensors`' flat dict back as adapter name -> its tensors in peft's saved names."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name, _, saved = key.rpartition("/")
        out.setdefault(name or "default", {})[saved] = value
    return out


def adapter_state_dict(model: nn.Module, name: str = "default") -> dict[str, torch.Tensor]:
    """Adapter `name`'s tensors in peft's saved names (`adapter_model.safetensors`)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}


def adapter_folder(policy_folder: Path, name: str) -> Path:
    """Where peft's `save_pretrained` puts adapter `name`: the folder itself for "default",
    a subfolder of its name for any other."""
    return Path(policy_folder) if name == "default" else Path(policy_folder) / name


def load_adapter_weights(model: nn.Module, folder: Path) -> None:
    """Load a checkpoint's policy folder into `model`'s adapters in place (each adapter from
    `adapter_folder`); a tensor the model's adapters lack, or one of theirs the folder lacks,
    is an error naming it."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    for name in adapter_names(model):
        file = adapter_folder(folder, name) / "adapter_model.safetensors"
        if not file.exists():
            raise FileNotFoundError(f"no adapter_model.safetensors for adapter {name!r}: {file}")
        weights = load_file(str(file))
        own = set(adapter_state_dict(model, name))
        if set(weights) != own:
            extra, lacking = sorted(set(weights) - own), sorted(own - set(weights))
            raise KeyError(
                f"adapter {file.parent} does not match the trainer's adapter {name!r} "
                f"(trainer.lora): {len(extra)} unknown tensor(s) {extra[:3]}, {len(lacking)} "
                f"missing {lacking[:3]}"
            )
        set_peft_model_state_dict(model, weights, adapter_name=name)


def saved_adapters(policy_folder: Path) -> dict[str, dict[str, Any]]:
    """The adapters a checkpoint's policy folder holds: name -> peft's adapter config (the
    folder's own config is "default", each subfolder's is its name); {} for full weights."""
    folder = Path(policy_folder)
    found = {}
    if (folder / ADAPTER_CONFIG).exists():
        found["default"] = json.loads((folder / ADAPTER_CONFIG).read_text())
    for sub in sorted(folder.glob(f"*/{ADAPTER_CONFIG}")):
        found[sub.parent.name] = json.loads(sub.read_text())
    return found


def saved_lora(policy_folder: Path) -> dict[str, Any] | None:
    """The (first) adapter config a checkpoint's policy folder holds (peft's JSON), or None
    when it holds full weights."""
    found = saved_adapters(policy_folder)
    return next(iter(found.values())) if found else None


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
        names = sorted(saved_adapters(policy_folder))
        if names != sorted(cfg.adapters):
            raise ValueError(
                f"checkpoint {where} holds the adapters {names}, but trainer.lora.adapters is "
                f"{sorted(cfg.adapters)}: set them as saved, or start in a new output_dir"
            )
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
