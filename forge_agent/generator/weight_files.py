"""Weights handed to vLLM's workers as files in shared memory, and the layout they are
checked against: a full state dict as one safetensors file (`write_shared`), an adapter as a
peft folder (`write_adapter`), and a local checkpoint's tensor names and shapes
(`expected_shapes`) that a state dict must match (`check_shapes`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from forge_agent.generator.engine_args import GeneratorError
from forge_agent.trainer.config import LoraConfig
from forge_agent.trainer.lora import peft_config


def write_shared(state_dict: dict[str, torch.Tensor], version: int) -> Path:
    """Write a state dict as safetensors in shared memory (tmpfs) for the worker to map."""
    from safetensors.torch import save_file

    root = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    path = root / f"forge-weights-{os.getpid()}-{version}.safetensors"
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    save_file(tensors, str(path))
    return path


def write_adapter(
    tensors: dict[str, torch.Tensor], lora: LoraConfig, base: str, version: int, name: str
) -> Path:
    """Adapter `name`'s peft folder (config + safetensors) in shared memory, for vLLM to load."""
    from safetensors.torch import save_file

    root = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    prefix = f"forge-lora-{os.getpid()}-{version}-{name}-"
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    config = peft_config(lora)
    config.base_model_name_or_path = base
    config.save_pretrained(str(folder))
    plain = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    save_file(plain, str(folder / "adapter_model.safetensors"))
    return folder


def expected_shapes(model: str) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a local safetensors checkpoint (empty for hub names)."""
    folder = Path(model)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return {}
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def check_shapes(shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]):
    """A `GeneratorError` naming the first difference between a state dict's tensor names and
    shapes (`shapes`) and a checkpoint's (`expected`; empty: nothing to check)."""
    if not expected:
        return
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    if missing:
        raise GeneratorError(f"state dict is missing {len(missing)} tensor(s), e.g. {missing[:3]}")
    if unexpected:
        raise GeneratorError(
            f"state dict has {len(unexpected)} unknown tensor(s), e.g. {unexpected[:3]}"
        )
    for name, shape in shapes.items():
        if tuple(shape) != expected[name]:
            raise GeneratorError(
                f"tensor {name!r} has shape {tuple(shape)}, the model expects {expected[name]}"
            )


def cuda_ipc_payload(state_dict: dict[str, torch.Tensor]) -> bytes:
    """CUDA IPC handles of `state_dict`'s tensors (each a view of its device memory, which
    vLLM's worker on the same GPU opens without a copy), pickled: vLLM's RPC carries bytes, not
    tensors. The tensors must stay alive until the worker has loaded them."""
    import pickle

    from torch.multiprocessing.reductions import reduce_tensor

    off = sorted(k for k, v in state_dict.items() if not v.is_cuda or not v.is_contiguous())
    if off:
        raise GeneratorError(
            f"CUDA IPC takes contiguous CUDA tensors; {len(off)} are not, e.g. {off[:3]}"
        )
    return pickle.dumps({k: reduce_tensor(v.detach()) for k, v in state_dict.items()})
