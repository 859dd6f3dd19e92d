"""OpenEnv, both ways (the `openenv` package, 0.10.x).

- `serve_openenv(env_factory, host, port)`: any agent env served as an OpenEnv server
  (`create_app(...)` under uvicorn). Each WebSocket session (`EnvClient`, `/ws`) gets its own
  env instance. Action: `{"message": assistant_message}`. Observation: `messages`, `tools`,
  `rewards` (named components), `info`, plus OpenEnv's `done`, `reward` (the components' sum)
  and `metadata`. `reset` takes `task` (a dict; without it the env's `default_task(seed)`) and
  `seed`. Two routes beside OpenEnv's serve the warm start: `GET /forge/env` (the served env's
  id and kwargs, and whether it has demonstrations) and `GET /forge/demonstrations?n=&seed=
  &demo_fraction=` (its demonstrations, as `[messages, tools]` pairs).
- `OpenEnvAgentEnv(base_url=...)` (or `docker_image=...`): any OpenEnv server as an agent env,
  through OpenEnv's own `GenericEnvClient` over WebSocket. A server made by `serve_openenv`
  speaks messages natively. Any other server is played through one tool, `step`, whose
  parameters are the server's action schema (from `/schema`); observations come back as JSON
  tool messages and the episode's summed reward is the component `env_reward`. Its warm start
  uses the demonstrations of the env a `serve_openenv` server serves, and is cached under
  that env's id, not the URL (`demonstrations_origin`).

`openenv` imports gradio (seconds), so this module imports it only when used.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Self

from forge_agent.env.demonstrations import env_demonstrations
from forge_agent.env.protocol import AgentEnv, message_text
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import Split, holdout
from forge_agent.types import Message, StepResult, ToolSpec

__all__ = ["OpenEnvAgentEnv", "OpenEnvServer", "openenv_app", "serve_openenv"]


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@functools.cache
def _openenv() -> SimpleNamespace:
    """The pydantic types and Environment class, built on first use (imports openenv)."""
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import Field

    class AgentAction(Action):
        """One assistant message (OpenAI-style dict: content, tool_calls)."""

        message: dict[str, Any] = Field(..., description="the assistant message")

    class AgentObservation(Observation):
        """The env's answer: new messages, tool schemas (at reset), reward components, info."""

        messages: list[dict[str, Any]] = Field(default_factory=list)
        tools: list[dict[str, Any]] = Field(default_factory=list)
        rewards: dict[str, float] = Field(default_factory=dict)
        info: dict[str, Any] = Field(default_factory=dict)

    class AgentEnvironment(Environment):
        """Base of the OpenEnv environment made for one agent env factory."""

        SUPPORTS_CONCURRENT_SESSIONS = True
        env_factory: Callable[[], AgentEnv]

        def __init__(self) -> None:
            super().__init__()
            self.agent_env = type(self).env_factory()
            # Sync OpenEnv calls of one session run in one executor thread; the agent env's
            # coroutines run on this private loop so loop-bound resources stay valid.
            self._loop = asyncio.new_event_loop()
            self._state = State(episode_id=None, step_count=0)

        def reset(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            task: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> AgentObservation:
            if task is None:
                task = self.agent_env.default_task(seed or 0)  # type: ignore[attr-defined]
            messages, tools = self._loop.run_until_complete(self.agent_env.reset(task, seed))
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            return AgentObservation(messages=_jsonable(messages), tools=_jsonable(tools))

        def step(self, action: AgentAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
            result = self._loop.run_until_complete(self.agent_env.step(action.message))
            self._state.step_count += 1
            return AgentObservation(
                messages=_jsonable(result.messages),
                rewards=dict(result.rewards),
                info=_jsonable(result.info),
                done=result.done,
                reward=float(sum(result.rewards.values())) if result.done else None,
            )

        @property
        def state(self) -> State:
            return self._state

        def close(self) -> None:
            if not self._loop.is_closed():
                self._loop.run_until_complete(self.agent_env.close())
                self._loop.close()

    return SimpleNamespace(
        AgentAction=AgentAction,
        AgentObservation=AgentObservation,
        AgentEnvironment=AgentEnvironment,
    )


def _factory(
    env: str | Callable[[], AgentEnv], env_kwargs: dict[str, Any]
) -> Callable[[], AgentEnv]:
    if isinstance(env, str):  # the id this server serves: resolved once, here
        return ResolvedEnv.of(env, kwargs=env_kwargs).make
    return functools.partial(env, **env_kwargs) if env_kwargs else env


def _served_id(env: str | Callable[[], AgentEnv]) -> str | None:
    """An env id for what a server serves: the id it was given, or "module:Name" of a class or
    function (None for a lambda, a partial or a local class: no name to import it by)."""
    if isinstance(env, str):
        return env
    qualname = getattr(env, "__qualname__", "")
    return f"{env.__module__}:{qualname}" if qualname and "<" not in qualname else None


FORGE_ROUTES = "/forge"
"""Prefix of the routes a `serve_openenv` server adds beside OpenEnv's own."""


def openenv_app(
    env: str | Callable[[], AgentEnv],
    env_kwargs: dict[str, Any] | None = None,
    env_name: str | None = None,
    max_concurrent_envs: int = 64,
) -> Any:
    """A FastAPI app serving `env` (a registered id or a factory) as an OpenEnv environment."""
    from openenv.core.env_server.http_server import create_app

    types = _openenv()
    env_kwargs = dict(env_kwargs or {})
    factory = _factory(env, env_kwargs)
    name = env_name or (env if isinstance(env, str) else getattr(env, "__name__", "agent_env"))
    environment = type(
        f"{name.title().replace('_', '')}Environment",
        (types.AgentEnvironment,),
        {"env_factory": staticmethod(factory)},
    )
    app = create_app(
        environment,
        types.AgentAction,
        types.AgentObservation,
        env_name=name,
        max_concurrent_envs=max_concurrent_envs,
    )
    served_id = _served_id(env)

    @app.get(f"{FORGE_ROUTES}/env")
    def served_env() -> dict[str, Any]:
        """The served env's id and kwargs (the warm start's cache key; no id for a factory
        without an importable name) and whether it has demonstrations."""
        has_demos = callable(getattr(factory(), "demonstrations", None))
        return {"env_id": served_id, "env_kwargs": env_kwargs, "demonstrations": has_demos}

    @app.get(f"{FORGE_ROUTES}/demonstrations")
    def demonstrations(n: int, seed: int = 0, demo_fraction: float = 0.5) -> list[Any]:
        """`n` demonstrations of the served env ([] when it has none)."""
        convos = env_demonstrations(factory(), n, seed, demo_fraction) or []
        return _jsonable([[messages, tools] for messages, tools in convos])

    return app


@dataclass
class OpenEnvServer:
    """A server started with `serve_openenv(..., block=False)`; `stop()` shuts it down."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_openenv(
    env: str | Callable[[], AgentEnv],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_concurrent_envs: int = 64,
    block: bool = True,
    startup_timeout_s: float = 30.0,
) -> OpenEnvServer | None:
    """Serve `env` as an OpenEnv server with uvicorn (port 0: a free port).

    With `block=False` the server runs in a background thread and an `OpenEnvServer` (with
    its `url`) is returned once it accepts connections.
    """
    import uvicorn

    app = openenv_app(env, env_kwargs, max_concurrent_envs=max_concurrent_envs)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", ws="websockets-sansio")
    server = uvicorn.Server(config)
    if block:
        server.run()
        return None
    thread = threading.Thread(target=server.run, name="openenv-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the OpenEnv server on {host}:{port} did not start")
        time.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    return OpenEnvServer(f"http://{host}:{bound_port}", server, thread)


def server_entry_point(env_id: str, description: str) -> tuple[Callable[[str], Any], Callable]:
    """`(module __getattr__, main)` for an env's `server.py`: `app` is built on first access
    (importing openenv takes seconds) for `uvicorn envs.<id>.server:app`, and `main()` parses
    `--host/--port` for `python -m envs.<id>.server`."""

    def module_getattr(name: str) -> Any:
        if name == "app":
            return openenv_app(env_id)
        raise AttributeError(name)

    def main(argv: list[str] | None = None) -> None:
        import argparse

        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        args = parser.parse_args(argv)
        serve_openenv(env_id, host=args.host, port=args.port)

    return module_getattr, main


class OpenEnvAgentEnv:
    """Any OpenEnv server as an agent env (see the module docstring for the two modes).

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000".
        docker_image: instead of base_url, an image OpenEnv starts (needs a Docker engine).
        instructions: system prompt for servers that do not speak messages.
        message_timeout_s: bound on one reply from the server.
    """

    def __init__(
        self,
        base_url: str | None = None,
        docker_image: str | None = None,
        instructions: str | None = None,
        message_timeout_s: float = 120.0,
    ) -> None:
        if (base_url is None) == (docker_image is None):
            raise ValueError("pass exactly one of base_url= or docker_image=")
        self.base_url = base_url
        self.docker_image = docker_image
        self.instructions = instructions
        self.message_timeout_s = message_timeout_s
        self._client: Any = None
        self.native = False
        self._return = 0.0

    def default_task(self, seed: int) -> dict[str, Any]:
        return {}

    def demonstrations_origin(self) -> tuple[str, dict[str, Any]] | None:
        """The env (id, kwargs) a `serve_openenv` server serves, when it has demonstrations
        (the warm start keys its cache by it, not by this URL); None for other servers."""
        served = self._forge_get("env")
        if not served or not served.get("demonstrations") or not served.get("env_id"):
            return None
        return served["env_id"], served["env_kwargs"]

    def demonstrations(
        self, n: int, seed: int, demo_fraction: float
    ) -> list[tuple[list[Message], list[ToolSpec]]]:
        """The served env's demonstrations, from its server ([] for a server without them)."""
        query = {"n": n, "seed": seed, "demo_fraction": demo_fraction}
        return [(messages, tools) for messages, tools in self._forge_get("demonstrations", query)]

    def _forge_get(self, route: str, query: dict[str, Any] | None = None) -> Any:
        """GET one of `serve_openenv`'s own routes; [] when the server has none (404) or no
        URL is known yet (a Docker image not started)."""
        if self.base_url is None:
            return []
        url = f"{self._http_url()}{FORGE_ROUTES}/{route}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=self.message_timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def _http_url(self) -> str:
        url = self.base_url or ""
        return url.replace("ws://", "http://").replace("wss://", "https://").rstrip("/")

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """Start seeds for the server's own tasks (`reset(seed=...)` without a task), the
        `split` share of seeds `seed * n ... seed * n + n - 1` by a hash."""
        starts = [
            {"task_id": f"openenv-seed{s}", "seed": s} for s in range(seed * n, (seed + 1) * n)
        ]
        return holdout(starts, split, key=lambda task: f"openenv:{task['seed']}")

    async def _connect(self) -> Any:
        if self._client is None:
            from openenv.core.generic_client import GenericEnvClient

            if self.docker_image is not None:
                self._client = await GenericEnvClient.from_docker_image(self.docker_image)
                self.base_url = self._client.base_url
            else:
                self._client = GenericEnvClient(
                    base_url=self.base_url, message_timeout_s=self.message_timeout_s
                )
        return self._client

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        client = await self._connect()
        if task.get("seed") is not None:  # a start seed from `tasks`: the server picks the task
            seed = int(task["seed"])
        kwargs: dict[str, Any] = {"seed": seed} if seed is not None else {}
        if set(task) - {"task_id", "seed"}:
            kwargs["task"] = task
        result = await client.reset(**kwargs)
        observation = result.observation
        self.native = isinstance(observation, dict) and {"messages", "tools"} <= observation.keys()
        self._return, self._done = 0.0, False
        if self.native:
            return observation["messages"], observation["tools"]
        schema = await asyncio.to_thread(self._action_schema)
        self._tool = {
            "type": "function",
            "function": {
                "name": "step",
                "description": "Take one action in the environment; returns the observation.",
                "parameters": schema,
            },
        }
        system = self.instructions or (
            "You interact with an environment by calling the step tool. Answer without a tool "
            "call when you are done."
        )
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(observation)},
        ]
        return messages, [self._tool]

    async def step(self, assistant_message: Message) -> StepResult:
        client = await self._connect()
        if self.native:
            result = await client.step({"message": assistant_message})
            obs = result.observation
            return StepResult(obs["messages"], obs["rewards"], bool(result.done), obs["info"])
        messages: list[Message] = []
        calls = assistant_message.get("tool_calls") or []
        if not calls:
            info = {"outcome": "stopped", "answer": message_text(assistant_message)}
            return StepResult([], {"env_reward": self._return}, True, info)
        for call in calls:
            messages.append(await self._generic_step(client, call))
            if self._done:
                break
        info = {"outcome": "done"} if self._done else {}
        rewards = {"env_reward": self._return} if self._done else {}
        return StepResult(messages, rewards, self._done, info)

    async def _generic_step(self, client: Any, call: dict[str, Any]) -> Message:
        call_id = call.get("id", "") if isinstance(call, dict) else ""
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        name = fn.get("name") if isinstance(fn, dict) else None
        reply: Message = {"role": "tool", "tool_call_id": call_id, "name": "step"}
        parse_error = call.get("parse_error") if isinstance(call, dict) else None
        if isinstance(parse_error, str) and parse_error:  # the renderer refused the call
            return {**reply, "content": f"Error: {parse_error}"}
        if name != "step":
            return {**reply, "content": f"Error: unknown tool {name!r}; available: step"}
        args = fn.get("arguments", {})
        try:
            action = json.loads(args) if isinstance(args, str) else args
            result = await client.step(action)
        except Exception as exc:
            return {**reply, "content": f"Error: {exc}"}
        self._return += float(result.reward or 0.0)
        self._done = bool(result.done)
        return {**reply, "content": json.dumps(result.observation)}

    def _action_schema(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self._http_url()}/schema", timeout=30) as response:
            schema = json.load(response)["action"]
        properties = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
        required = [r for r in schema.get("required", []) if r in properties]
        parameters = {"type": "object", "properties": properties, "required": required}
        if "$defs" in schema:
            parameters["$defs"] = schema["$defs"]
        return parameters

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
