"""vLLM's engine core inside the generator's own process, behind `AsyncLLM`'s async surface.

`AsyncLLM` always runs its engine core in a process of its own: on a CPU machine with one
worker that process holds the model, the KV cache and a second copy of the torch and vLLM
imports, and every engine step crosses a ZMQ socket twice (inputs out, sampled tokens back).
`InprocLLM` drives vLLM's synchronous `LLMEngine` (its `InprocClient`, the worker in this
process) from one stepping thread instead, and offers the calls `VLLMEngine` makes of
`AsyncLLM`: `generate` (an async stream of cumulative `RequestOutput`s), `abort`,
`collective_rpc`, `add_lora`, `remove_lora`, `reset_prefix_cache`, `shutdown`, `model_config`.

Threading: the thread owns the engine. The event loop never calls it; it queues commands
(add a request, abort, an RPC, a LoRA change) that the thread runs between engine steps, and
the thread hands each step's outputs back to the loop in one `call_soon_threadsafe`. A step
holds the GIL only in its Python parts; torch's kernels release it, so the actor's loop keeps
serving calls while the model runs.

Aborted requests end their stream with the tokens sampled so far and `finish_reason="abort"`,
as `AsyncLLM`'s do (the sync engine returns nothing for them).

    llm = InprocLLM(engine_kwargs)           # the kwargs of vLLM's EngineArgs
    async for out in llm.generate(prompt, params, request_id="r1"): ...
    await llm.collective_rpc("method", args=(...))
    llm.shutdown()
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import copy
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.inputs import PromptType
    from vllm.lora.request import LoRARequest

_DONE = object()  # a stream's end marker


class InprocLLM:
    """A vLLM `LLMEngine` stepped by a thread of this process, with `AsyncLLM`'s async calls."""

    def __init__(self, engine_kwargs: dict[str, Any]) -> None:
        """`engine_kwargs`: vLLM `EngineArgs` fields. Needs VLLM_ENABLE_V1_MULTIPROCESSING=0
        in the environment (else `LLMEngine` starts an engine-core process after all)."""
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        self._engine = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs))
        self.model_config = self._engine.model_config
        self._commands: collections.deque[tuple[Callable[[], Any], Any]] = collections.deque()
        self._wake = threading.Event()
        self._stopped = False
        # request id -> (its loop's queue, the loop, its newest output)
        self._streams: dict[str, tuple[asyncio.Queue, asyncio.AbstractEventLoop, Any]] = {}
        self._thread = threading.Thread(target=self._run, name="vllm-inproc-step", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the stepping thread
    def _run(self) -> None:
        engine = self._engine
        while not self._stopped:
            while self._commands:
                fn, future = self._commands.popleft()
                try:
                    result = fn()
                except BaseException as exc:  # the caller's future carries it
                    if future is not None:
                        future.set_exception(exc)
                else:
                    if future is not None:
                        future.set_result(result)
            if engine.has_unfinished_requests():
                try:
                    outputs = engine.step()
                except BaseException as exc:  # the engine is broken: end every stream with it
                    self._fail_all(exc)
                    continue
                self._deliver(outputs)
            elif self._streams:  # listeners of requests the engine no longer has: never hang
                self._fail_all(RuntimeError("vLLM dropped the request without a final output"))
            else:
                self._wake.wait()
                self._wake.clear()

    def _deliver(self, outputs: list[Any]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Any]]] = {}
        for out in outputs:
            entry = self._streams.get(out.request_id)
            if entry is None:
                continue
            queue, loop, _ = entry
            if out.finished:
                del self._streams[out.request_id]
            else:
                self._streams[out.request_id] = (queue, loop, out)
            by_loop.setdefault(loop, []).append((queue, out))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_put_all, items)

    def _fail_all(self, exc: BaseException) -> None:
        streams, self._streams = self._streams, {}
        for queue, loop, _ in streams.values():
            loop.call_soon_threadsafe(queue.put_nowait, exc)

    def _submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        if self._stopped:
            raise RuntimeError("the in-process vLLM engine is shut down")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.append((fn, future))
        self._wake.set()
        return future

    async def _call(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.wrap_future(self._submit(fn))

    # ------------------------------------------------------------------ AsyncLLM's calls
    async def generate(
        self,
        prompt: PromptType,
        params: SamplingParams,
        request_id: str,
        lora_request: LoRARequest | None = None,
    ) -> AsyncIterator[Any]:
        """The request's outputs as they grow (each cumulative), the last one finished."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def add() -> None:
            self._streams[request_id] = (queue, loop, None)
            try:
                self._engine.add_request(request_id, prompt, params, lora_request=lora_request)
            except BaseException:
                self._streams.pop(request_id, None)
                raise

        await self._call(add)
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    return
        finally:  # a caller that stops listening (cancelled) leaves nothing running
            if request_id in self._streams:
                self._submit(lambda: self._abort([request_id], notify=False))

    def _abort(self, request_ids: list[str], notify: bool = True) -> None:
        live = [r for r in request_ids if r in self._streams]
        if not live:
            return
        self._engine.abort_request(live)
        for request_id in live:
            queue, loop, last = self._streams.pop(request_id)
            if not notify:
                continue
            final = _aborted(last)
            loop.call_soon_threadsafe(queue.put_nowait, final if final is not None else _DONE)

    async def abort(self, request_ids: str | list[str]) -> None:
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        await self._call(lambda: self._abort(ids))

    async def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        return await self._call(
            lambda: self._engine.collective_rpc(method, timeout, tuple(args), kwargs)
        )

    async def add_lora(self, lora_request: LoRARequest) -> bool:
        return await self._call(lambda: self._engine.add_lora(lora_request))

    async def remove_lora(self, lora_id: int) -> bool:
        return await self._call(lambda: self._engine.remove_lora(lora_id))

    async def reset_prefix_cache(self) -> bool:
        return await self._call(self._engine.reset_prefix_cache)

    def shutdown(self) -> None:
        """Stop the thread (running requests end with an error) and free the engine."""
        if self._stopped:
            return
        done = self._submit(lambda: self._fail_all(RuntimeError("vLLM engine shut down")))
        concurrent.futures.wait([done], timeout=30)
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=30)
        self._engine.engine_core.shutdown()


def _put_all(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for queue, out in items:
        queue.put_nowait(out)


def _aborted(last: Any) -> Any:
    """`last` (a request's newest cumulative output, or None) ended as an abort."""
    if last is None:
        return None
    final = copy.copy(last)
    final.outputs = [copy.copy(o) for o in last.outputs]
    for out in final.outputs:
        out.finish_reason = "abort"
    final.finished = True
    return final
