"""The env kind that runs a user's agent program (`env.id=agent:package.module:fn`).

`AgentProgramEnv` runs one agent program per episode in an env worker: `reset` hands the
program its task and an `openai.AsyncOpenAI` client on the run's endpoint
(`forge_agent.endpoint`, which samples and records every request) and runs it to its end. The
episode around it, and how the recorded session becomes a trajectory, is
`forge_agent.endpoint.agents.AgentRolloutRunner`'s; the reward is the reward actors'
(`forge_agent.rewards.program_reward`).

A program that raises after the policy answered is the policy's failure (`policy_error`); one
that raises on an unreachable or failing endpoint is infra (`env_error`, `_is_infra`).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import openai

from forge_agent.env.demonstrations import demonstrations_of
from forge_agent.env.protocol import EnvFailure
from forge_agent.env.registry import load_entry_point
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.errors import InfraError
from forge_agent.types import Message, Status, StepResult, ToolSpec


class AgentProgramEnv:
    """Runs one agent program per episode in the env worker; `reset` runs the program to
    its end and returns its result. Its reward is not computed here: the reward actors run it.

    Args (`env.kwargs` in a config):
        program: the agent, "package.module:fn" (taken from the env id `agent:...`).
        reward: the reward function, "package.module:fn" (run by the reward actors; required
            here so a run without one fails at its first episode, naming the key).
        tasks_from: the env id whose tasks the program solves (its `tasks(split, n, seed)`).
        tasks_kwargs: constructor arguments of that env.
        request_timeout_s: the HTTP timeout of the program's client.
        blocking: the program blocks its event loop (sync HTTP, sync tools, `time.sleep`):
            each episode then runs on a thread of its own. By default the programs of one
            env worker run as tasks on one shared event loop (`shares_event_loop`).
    """

    def __init__(
        self,
        program: str,
        reward: str | None = None,
        tasks_from: str | None = None,
        tasks_kwargs: dict[str, Any] | None = None,
        request_timeout_s: float = 120.0,
        blocking: bool = False,
    ) -> None:
        if not reward:
            raise ValueError(
                f"agent program {program!r} needs env.kwargs.reward='package.module:fn' "
                "(called as reward(task, result, transcript) -> float | dict)"
            )
        self.agent = load_entry_point(program)
        self.reward = reward
        self.tasks_from = tasks_from
        self.tasks_kwargs = dict(tasks_kwargs or {})
        self.request_timeout_s = request_timeout_s
        self._tasks_env: ResolvedEnv | None = None  # `tasks_from`, resolved on first use

    def _source_env(self) -> ResolvedEnv:
        """The `tasks_from` env, resolved once (a `ResolvedEnv`); None when not set."""
        if self.tasks_from and self._tasks_env is None:
            self._tasks_env = ResolvedEnv.of(self.tasks_from, kwargs=self.tasks_kwargs)
        return self._tasks_env

    @staticmethod
    def shares_event_loop(blocking: bool = False, **_: Any) -> bool:
        """The env worker runs this env's episodes as tasks on one event loop, unless the
        program blocks (`blocking=True`): a program that blocks the shared loop would hold
        up every other episode of its worker."""
        return not blocking

    def tasks(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """The tasks of the `tasks_from` env (the program's own task source)."""
        if not self.tasks_from:
            raise ValueError(
                "an agent program needs env.kwargs.tasks_from (an env id whose tasks it "
                "solves) or env.dataset"
            )
        return self._source_env().make().tasks(split, n, seed)

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[Any]:
        """The demonstrations of the `tasks_from` env (the tasks and tools the program works
        with), for the warm start; [] when that env has none."""
        if not self.tasks_from:
            return []
        return demonstrations_of(self._source_env(), n, seed, demo_fraction) or []

    def demonstrations_origin(self) -> tuple[str, dict[str, Any]] | None:
        """The `tasks_from` env and its kwargs when it has demonstrations (they are this
        program's), so the warm start's cache is shared with that env's own runs."""
        if not self.tasks_from:
            return None
        if not callable(getattr(self._source_env().factory(), "demonstrations", None)):
            return None
        return self.tasks_from, dict(self.tasks_kwargs)

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        endpoint = task["_endpoint"]
        task = {k: v for k, v in task.items() if k != "_endpoint"}
        client = program_client(endpoint["base_url"], endpoint["api_key"], self.request_timeout_s)
        try:
            result = await self.agent(task, client)
        except Exception as exc:
            if _is_infra(exc):
                raise
            # the program raised on what the policy answered (its parser, its checks, a reply
            # the endpoint refused): the policy's failure, scored (docs/rewards.md)
            raise EnvFailure(
                Status.POLICY_ERROR, f"the agent program raised {type(exc).__name__}: {exc}"
            ) from exc
        return [{"role": "result", "content": result}], []

    async def step(self, assistant_message: Message) -> StepResult:
        """Nothing to step: the program ran to its end in `reset`."""
        return StepResult(messages=[], rewards={}, done=True)

    async def close(self) -> None:
        """Nothing to release: the program's client closed with its episode."""

    @staticmethod
    async def close_shared() -> None:
        """Release what this event loop's episodes shared: their loopback HTTP client (the env
        worker awaits it before closing the loop)."""
        await close_loopback_http_client()


def program_client(base_url: str, api_key: str, timeout_s: float = 120.0) -> Any:
    """The `openai.AsyncOpenAI` client an agent program gets for one episode: the session's
    key as its api_key, no retries (a retried request would be sampled and recorded twice),
    and the loopback HTTP client this process shares between episodes (`loopback_http_client`).
    The episode does not close it; a program that does gets a fresh one next time."""
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=timeout_s,
        http_client=loopback_http_client(),
    )


_LOOPBACK_CLIENTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def loopback_http_client() -> Any:
    """The HTTP client agent programs' `openai` clients use on this event loop: one per loop,
    kept open between episodes so requests reuse their kept-alive loopback connections
    (`close_loopback_http_client` closes it with the loop).

    Building one per episode cost ~0.5 ms of CPU, and each new connection costs the endpoint an
    accept and a parser; the endpoint speaks plain HTTP, so the client loads no TLS context
    (openai's default client loads the CA bundle: ~35 ms of CPU per client). It is openai's
    aiohttp-backed client where aiohttp is installed (vLLM installs it): 64 concurrent programs
    spent 1.5 ms of CPU a request in their clients with it against 2.2 ms on httpx's transport
    (`python -m apps.bench.proxy`).
    """
    loop = asyncio.get_running_loop()
    client = _LOOPBACK_CLIENTS.get(loop)
    if client is None or client.is_closed:
        try:  # aiohttp's C HTTP parser under httpx: ~0.4 ms less CPU a request than httpx's own
            client = openai.DefaultAioHttpClient()
        except RuntimeError:  # aiohttp is not installed (openai's `aiohttp` extra)
            client = openai.DefaultAsyncHttpxClient(verify=False)
        _LOOPBACK_CLIENTS[loop] = client
    return client


async def close_loopback_http_client() -> None:
    """Close this event loop's loopback HTTP client, if it has one: its kept-alive
    connections and (on aiohttp) its session, which would otherwise be collected unclosed at
    exit and log "Unclosed client session"."""
    client = _LOOPBACK_CLIENTS.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


def _is_infra(exc: BaseException) -> bool:
    """An agent program's exception the policy cannot have caused: an `InfraError`, memory,
    or the endpoint unreachable, timing out or failing (a 5xx, a closed session's 401)."""
    return isinstance(
        exc,
        InfraError
        | MemoryError
        | openai.APIConnectionError
        | openai.InternalServerError
        | openai.AuthenticationError,
    )
