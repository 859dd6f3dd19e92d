"""Colocation: the generator sleeps while the trainer steps on the same GPU.

Per step (`services.colocate`, driven by `run.controller`):

    sleep(level=1)            vLLM offloads its weights to host memory, drops its KV cache
    train step                the trainer has the card
    wake_up(["weights"])      the weights come back (no KV cache yet)
    weight sync               the new weights load in device memory
    wake_up(["kv_cache"])     the KV cache is allocated again; generation resumes

`VLLMSleep` is vLLM's sleep mode (the engine starts with `enable_sleep_mode=True`; CUDA only).
`SleepStandin` stands in for it where it cannot run (the CPU build has no sleep mode): it
records the same calls and frees nothing, so the order above is tested on CPU.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

    from forge_agent.generator.inproc import InprocLLM

COLOCATE_MODES = ("off", "sleep", "standin")
"""`services.colocate`: off (own devices), sleep (one GPU, vLLM's sleep mode), standin (CPU:
the same calls, through `SleepStandin`)."""


class Sleeper(Protocol):
    """What puts an engine to sleep and wakes it (a part of it: `tags`, None: all)."""

    async def sleep(self, level: int) -> None: ...

    async def wake_up(self, tags: list[str] | None) -> None: ...


class VLLMSleep:
    """vLLM's sleep mode on a running `AsyncLLM` (started with `enable_sleep_mode=True`)."""

    def __init__(self, llm: AsyncLLM | InprocLLM) -> None:
        if not hasattr(llm, "sleep"):  # the in-process engine core (`generator.inproc`)
            raise ValueError(
                "services.colocate=sleep needs vLLM's AsyncLLM with its engine core in a process "
                f"of its own, and this engine ({type(llm).__name__}) has no sleep mode; set "
                "generator.engine_core=process (or auto on a GPU)"
            )
        self.llm = llm

    async def sleep(self, level: int) -> None:
        await self.llm.sleep(level)

    async def wake_up(self, tags: list[str] | None) -> None:
        await self.llm.wake_up(tags)


class SleepStandin:
    """A stand-in for vLLM's sleep mode on CPU, where vLLM has none: it frees and allocates
    nothing (the weights and KV cache stay where they are); the engine still closes its gate
    while asleep, so the order of calls and what may run when are the real ones."""

    async def sleep(self, level: int) -> None:
        return None

    async def wake_up(self, tags: list[str] | None) -> None:
        return None


class EventLog:
    """The last `size` colocation events of an engine: (what, monotonic seconds), e.g.
    ("sleep(1)", t), ("wake_up(weights)", t), ("update_weights(3)", t), ("generate", t)."""

    def __init__(self, size: int = 512) -> None:
        self.events: deque[tuple[str, float]] = deque(maxlen=size)

    def add(self, what: str) -> None:
        self.events.append((what, time.monotonic()))

    def list(self) -> list[tuple[str, float]]:
        return list(self.events)


def sleep_engine_args(mode: str, engine_fields: set[str]) -> dict[str, Any]:
    """vLLM's argument for `services.colocate` `mode` ({} unless "sleep"), if this vLLM's
    `AsyncEngineArgs` (`engine_fields`) takes it."""
    if mode != "sleep":
        return {}
    if "enable_sleep_mode" not in engine_fields:
        raise ValueError(
            "services.colocate=sleep needs vLLM's sleep mode, and this vLLM's engine arguments "
            "have no enable_sleep_mode; upgrade vLLM or set services.colocate=off"
        )
    return {"enable_sleep_mode": True}


def make_sleeper(mode: str, llm: AsyncLLM | InprocLLM) -> Sleeper | None:
    """The sleeper of `services.colocate` `mode` for the started engine `llm` (None: off)."""
    if mode not in COLOCATE_MODES:
        raise ValueError(f"services.colocate={mode!r}; expected one of {COLOCATE_MODES}")
    if mode == "off":
        return None
    return VLLMSleep(llm) if mode == "sleep" else SleepStandin()
