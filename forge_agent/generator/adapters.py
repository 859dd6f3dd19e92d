"""The LoRA adapters a vLLM engine serves (`trainer.lora` with `sync: adapter`): each update is
one peft folder per adapter in shared memory, added to vLLM under a new LoRA id; the previous
ids are removed and their folders deleted. Requests name their adapter
(`SamplingConfig.adapter`); before the first update every adapter is the base model.
"""

from __future__ import annotations

import itertools
import shutil
import time
from typing import TYPE_CHECKING, Any

import torch

from forge_agent.generator.engine_args import GeneratorError
from forge_agent.generator.weight_files import write_adapter
from forge_agent.trainer.config import LoraConfig
from forge_agent.trainer.lora import split_adapters

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

    from forge_agent.generator.inproc import InprocLLM

__all__ = ["ServedAdapters"]


class ServedAdapters:
    """The adapters of `lora` over `model` that one engine serves, by name."""

    def __init__(self, lora: LoraConfig, model: str) -> None:
        self.lora, self.model = lora, model
        self.requests: dict[str, Any] = {}  # adapter name -> vLLM's LoRARequest (empty: base)
        self._ids = itertools.count(1)  # vLLM LoRA ids: unique per adapter, >= 1

    def split(self, tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        """An update's tensors (`trainer.lora.adapter_tensors`) by adapter, checked: LoRA A/B
        matrices only, of exactly the adapters served."""
        other = sorted(k for k in tensors if ".lora_A." not in k and ".lora_B." not in k)
        if other or not tensors:
            raise GeneratorError(
                f"an adapter update holds {len(tensors)} tensors, {len(other)} of them not "
                f"LoRA A/B matrices (e.g. {other[:3]}): the trainer sent full weights?"
            )
        adapters = split_adapters(tensors)
        if sorted(adapters) != sorted(self.lora.adapters):
            raise GeneratorError(
                f"an adapter update holds the adapters {sorted(adapters)}, this engine serves "
                f"{sorted(self.lora.adapters)} (trainer.lora.adapters)"
            )
        return adapters

    async def load(
        self, llm: AsyncLLM | InprocLLM, adapters: dict[str, dict[str, torch.Tensor]], version: int
    ) -> dict[str, float]:
        """Serve `adapters` as `version` on vLLM's `llm` (nothing may run on the old ones:
        the caller drained or aborted them); the reload's tensors and seconds."""
        from vllm.lora.request import LoRARequest

        started = time.perf_counter()
        folders = {
            name: write_adapter(part, self.lora, self.model, version, name)
            for name, part in adapters.items()
        }
        written = time.perf_counter()
        old, new = self.requests, {}
        for name, folder in folders.items():
            new[name] = LoRARequest(f"{name}-v{version}", next(self._ids), str(folder))
            await llm.add_lora(new[name])
        self.requests = new
        for request in old.values():
            await llm.remove_lora(request.lora_int_id)
            shutil.rmtree(request.lora_path, ignore_errors=True)
        tensors = sum(len(part) for part in adapters.values())
        return {
            "tensors": float(tensors),
            "read_s": written - started,
            "reload_s": time.perf_counter() - written,
            "reprepare_s": 0.0,
        }

    def request(self, name: str | None) -> Any:
        """The LoRARequest of adapter `name` (None: the first of `lora.adapters`); None while
        no update has come (version 0: every adapter is the base model)."""
        name = name or self.lora.adapters[0]
        if name not in self.lora.adapters:
            raise GeneratorError(
                f"no LoRA adapter {name!r} on this engine; it serves {self.lora.adapters} "
                "(trainer.lora.adapters)"
            )
        return self.requests.get(name)

    def remove_folders(self) -> None:
        """Delete the served adapters' folders (the engine is shut down)."""
        for request in self.requests.values():
            shutil.rmtree(request.lora_path, ignore_errors=True)
        self.requests = {}
