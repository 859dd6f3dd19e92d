"""Which of the project's own calls would initialise CUDA (a stand-in for a GPU: on the CPU
build these torch functions initialise nothing, so they are recorded instead).

On a CUDA machine a process that initialised CUDA cannot use it in a child it forks, and vLLM
starts its engine core by fork: the generator's process must decide CPU-or-GPU, build the
engine's arguments and start the engine without calling any of these.

    python -m tests.cuda_probe MODEL   # start a CPU engine on MODEL, print the calls as JSON
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

import forge_agent

CUDA_INITIALISING = (
    "is_available",  # cudaGetDeviceCount (unless PYTORCH_NVML_BASED_CUDA_CHECK=1)
    "init",
    "_lazy_init",
    "current_device",
    "get_device_name",
    "get_device_properties",
    "mem_get_info",
    "set_device",
    "synchronize",
)
PROJECT = str(Path(forge_agent.__file__).parent)


@contextlib.contextmanager
def project_cuda_calls() -> Iterator[list[str]]:
    """Within: every call of a `CUDA_INITIALISING` function of `torch.cuda` made directly from
    the project's code, as "function <- file:line" (calls from vLLM or torch are not listed)."""
    calls: list[str] = []
    originals = {name: getattr(torch.cuda, name) for name in CUDA_INITIALISING}

    def wrap(name: str, fn):
        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            caller = sys._getframe(1).f_code
            if caller.co_filename.startswith(PROJECT):
                calls.append(f"torch.cuda.{name} <- {caller.co_filename}:{caller.co_name}")
            return fn(*args, **kwargs)

        return recorded

    for name, fn in originals.items():
        setattr(torch.cuda, name, wrap(name, fn))
    try:
        yield calls
    finally:
        for name, fn in originals.items():
            setattr(torch.cuda, name, fn)


async def _start_and_generate(model: str) -> None:
    from forge_agent.generator import GeneratorConfig, SamplingConfig
    from forge_agent.generator.vllm_engine import VLLMEngine

    engine = VLLMEngine(GeneratorConfig(), model)
    await engine.start()
    try:
        await engine.generate([5, 6, 7], SamplingConfig(max_tokens=2))
    finally:
        await engine.shutdown()


if __name__ == "__main__":
    with project_cuda_calls() as found:
        asyncio.run(_start_and_generate(sys.argv[1]))
    print("CUDA_CALLS " + json.dumps(found))
