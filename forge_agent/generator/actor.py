"""The generator as a Monarch actor: `VLLMEngine` behind concurrent endpoints.

Plain data goes into the constructor; the engine starts in `setup()` so start-up failures
surface to the caller. `generate` is a concurrent endpoint (each call is its own task on the
actor's loop), so many callers share vLLM's continuous batching.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Unpack

from monarch.actor import Actor, endpoint
from monarch.actor.concurrent import concurrent_endpoint

from forge_agent.generator.config import EngineOptions, GeneratorConfig, SamplingConfig
from forge_agent.memory import trim_heap
from forge_agent.types import Completion

if TYPE_CHECKING:
    import torch

    from forge_agent.generator.vllm_engine import VLLMEngine


class StateDictSource(Protocol):
    """Anything a versioned state dict can be pulled from (a weight store or its handle)."""

    async def get(self, version: int) -> dict[str, torch.Tensor]: ...


class Generator(Actor):
    """A vLLM engine serving token-id prompts, with versioned in-place weight updates."""

    def __init__(
        self, config: GeneratorConfig, model: str, **options: Unpack[EngineOptions]
    ) -> None:
        """The engine's arguments (`VLLMEngine`), kept until `setup` starts it."""
        self.config = config
        self.model = model
        self.options = options
        self.engine: VLLMEngine | None = None

    @endpoint
    async def setup(self) -> dict[str, Any]:
        """Start the engine; returns its context length and vocabulary size."""
        # imported here: torch and the engine's modules: 0.15 GB of PSS (measured) in the
        # driver, which spawns this actor and never runs an engine
        from forge_agent.generator.vllm_engine import VLLMEngine

        self.engine = VLLMEngine(self.config, self.model, **self.options)
        await self.engine.start()
        return {"max_model_len": self.engine.max_model_len, "vocab_size": self.engine.vocab_size}

    def _engine(self) -> VLLMEngine:
        if self.engine is None:
            raise RuntimeError("Generator.setup() has not been called")
        return self.engine

    @concurrent_endpoint
    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingConfig | None = None,
        session_id: str | None = None,
    ) -> Completion:
        """One completion for `prompt_ids` (token ids in, token ids + logprobs out)."""
        return await self._engine().generate(prompt_ids, sampling, session_id)

    @concurrent_endpoint
    async def update_weights(
        self,
        version: int,
        state_dict: dict[str, torch.Tensor] | None = None,
        source: StateDictSource | None = None,
        abort_in_flight: bool = False,
        resume_in_flight: bool = False,
        rollback: bool = False,
    ) -> int:
        """Load `state_dict` (or pull `version` from `source`) in place; returns the version.
        In-flight requests: drained (default), aborted, or interrupted and continued on the
        new weights (`resume_in_flight`, partial rollouts); see `VLLMEngine.update_weights`.

        A source on this host that offers `shared_view` (the Monarch weight store) is read in
        place by vLLM's workers, from shared memory (colocated on one GPU: `device_view`, from
        the trainer's device memory); otherwise the state dict is pulled here.
        An engine serving LoRA takes adapter tensors (`VLLMEngine.update_adapter`).
        """
        engine = self._engine()
        if engine.lora is not None:
            if state_dict is None:
                if source is None:
                    raise ValueError("update_weights needs a state_dict or a source to pull from")
                state_dict = await source.get(version)
            return await engine.update_adapter(
                version, state_dict, abort_in_flight, resume_in_flight, rollback
            )
        if state_dict is None:
            if source is None:
                raise ValueError("update_weights needs a state_dict or a source to pull from")
            view = await _view_in_place(source, version)
            if view is not None:
                version = await self._engine().update_weights_shared(
                    view, abort_in_flight, resume_in_flight, rollback
                )
                trim_heap()  # the last generation phase's freed buffers go back to the OS
                return version
            state_dict = await source.get(version)
        version = await self._engine().update_weights(
            version, state_dict, abort_in_flight, resume_in_flight, rollback
        )
        trim_heap()
        return version

    @concurrent_endpoint
    async def version(self) -> int:
        return self._engine().version

    @concurrent_endpoint
    async def in_flight(self) -> dict[str, int]:
        """Running requests and the tokens each has sampled so far."""
        return self._engine().in_flight()

    @concurrent_endpoint
    async def busy_seconds(self) -> float:
        """Seconds the engine had at least one request in flight (for busy fractions)."""
        return self._engine().busy_seconds()

    @endpoint
    async def sleep(self, level: int = 1) -> None:
        """Colocated: free the GPU for the trainer (`VLLMEngine.sleep`)."""
        await self._engine().sleep(level)

    @endpoint
    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Colocated: bring back `tags` ("weights", "kv_cache"; None: both)."""
        await self._engine().wake_up(tags)

    @concurrent_endpoint
    async def colocation_events(self) -> list[tuple[str, float]]:
        """The engine's last sleeps, wakes, updates and requests, with monotonic times."""
        return self._engine().colocation.list()

    @endpoint
    async def worker_environ(self, names: list[str]) -> list[dict[str, str | None]]:
        """Each vLLM worker's values of the environment variables `names` (diagnostics)."""
        return await self._engine().worker_environ(names)

    @endpoint
    async def shutdown(self) -> None:
        if self.engine is not None:
            await self.engine.shutdown()
            self.engine = None


async def _view_in_place(source: StateDictSource, version: int) -> Any:
    """Where the store holds `version` for vLLM's workers to read in place: a slot of the
    trainer's device memory (colocated), shared memory on this host, or None (pull it here)."""
    for where in ("device_view", "shared_view"):
        if hasattr(source, where) and (view := await getattr(source, where)(version)):
            return view
    return None
