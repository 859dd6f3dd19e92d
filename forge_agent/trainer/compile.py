"""`trainer.compile`: torch.compile for the trainer's decoder layers (hf backend)."""

from __future__ import annotations

import torch._dynamo
from torch import nn


def compile_decoder_layers(model: nn.Module, backend: str) -> int:
    """`torch.compile` every decoder layer of `model` (modules whose class name ends in
    "DecoderLayer", e.g. transformers' `Qwen3DecoderLayer`; LoRA-wrapped or FSDP-sharded ones
    too) with `backend`, `dynamic=True` (packed rows change length every micro-batch); the
    LM head, loss and optimizer stay eager. Returns the number of layers compiled.

    On an H200 with a Qwen3-0.6B shape it fused transformers' eager elementwise ops (RMSNorm,
    rotary, SiLU, casts: most of the step's device time) and made the train step 1.36x faster
    at 26% less peak memory, after a 28 s first step (docs/gpu.md)."""
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if not layers:
        raise ValueError(
            f"trainer.compile={backend!r}: {type(model).__name__} has no decoder layers "
            "(modules named *DecoderLayer) to compile; use trainer.compile=null"
        )
    # one compiled graph per layer instance (dynamo guards on the module)
    torch._dynamo.config.cache_size_limit = max(
        torch._dynamo.config.cache_size_limit, 2 * len(layers)
    )
    for layer in layers:
        layer.compile(backend=backend, dynamic=True)
    return len(layers)
