"""OpenEnv both ways: code_exec served over OpenEnv, played by OpenEnv's client and our adapter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from envs.code_exec import load_tasks
from forge_agent.env import OpenEnvAgentEnv, serve_openenv
from forge_agent.env.resolved import ResolvedEnv

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    server = serve_openenv("code_exec", host="127.0.0.1", port=0, block=False)
    assert server is not None
    with server:
        yield server.url


def task() -> dict[str, Any]:
    return next(t for t in load_tasks() if t["entry_point"] == "gcd")


def test_openenv_client_plays_a_code_exec_episode_over_websocket(server_url: str) -> None:
    from openenv.core import GenericEnvClient

    async def main() -> tuple[Any, Any, Any]:
        async with GenericEnvClient(base_url=server_url) as client:
            reset = await client.reset(task=task(), seed=0)
            run = {"name": "python", "arguments": json.dumps({"code": "print(6 * 7)"})}
            call = {"id": "c", "type": "function", "function": run}
            tool_turn = await client.step(
                {"message": {"role": "assistant", "content": "", "tool_calls": [call]}}
            )
            final = await client.step(
                {
                    "message": {
                        "role": "assistant",
                        "content": f"```python\n{task()['reference']}```",
                    }
                }
            )
            return reset, tool_turn, final

    reset, tool_turn, final = asyncio.run(main())
    assert reset.observation["messages"][-1]["content"] == task()["prompt"]
    assert reset.observation["tools"][0]["function"]["name"] == "python"
    assert "42" in tool_turn.observation["messages"][0]["content"] and not tool_turn.done
    assert final.done and final.reward == 1.0
    assert final.observation["rewards"] == {"tests_passed": 1.0}
    assert final.observation["info"]["outcome"] == "passed"


def test_openenv_server_wrapped_back_as_an_agent_env(server_url: str) -> None:
    async def main() -> tuple[Any, Any]:
        env = OpenEnvAgentEnv(base_url=server_url)
        try:
            messages, tools = await env.reset(task(), seed=0)
            wrong = "```python\ndef gcd(a, b):\n    return 1\n```"
            result = await env.step({"role": "assistant", "content": wrong})
            return (messages, tools), result
        finally:
            await env.close()

    (messages, tools), result = asyncio.run(main())
    assert messages[-1]["content"] == task()["prompt"] and tools[0]["function"]["name"] == "python"
    assert result.done and result.rewards == {"tests_passed": pytest.approx(2 / 5)}
    assert result.info["outcome"] == "partial"


def test_sessions_are_isolated(server_url: str) -> None:
    from openenv.core import GenericEnvClient

    tasks = load_tasks()

    async def one(i: int) -> str:
        async with GenericEnvClient(base_url=server_url) as client:
            result = await client.reset(task=tasks[i], seed=0)
            return result.observation["messages"][-1]["content"]

    async def main() -> list[str]:
        return list(await asyncio.gather(*(one(i) for i in range(3))))

    assert asyncio.run(main()) == [t["prompt"] for t in tasks[:3]]


def test_a_url_env_warm_starts_from_the_demonstrations_of_the_env_it_serves(
    server_url: str,
) -> None:
    from forge_agent.warm_start import demonstration_source, demonstrations

    by_url, url_tools = demonstrations(ResolvedEnv.of(server_url), 4, 0.5, seed=3)
    served, served_tools = demonstrations(ResolvedEnv.of("code_exec"), 4, 0.5, seed=3)
    assert demonstration_source(ResolvedEnv.of(server_url)) == "demonstrations"  # not schemas
    assert by_url == served and url_tools == served_tools


def test_a_url_envs_warm_start_is_cached_under_the_served_env_not_the_url(
    server_url: str, tmp_path
) -> None:
    from forge_agent.warm_start import WarmStartConfig, warm_start_dir

    cfg = WarmStartConfig()
    by_url = warm_start_dir("/models/tiny", [ResolvedEnv.of(server_url)], cfg, tmp_path)
    assert by_url == warm_start_dir("/models/tiny", [ResolvedEnv.of("code_exec")], cfg, tmp_path)
    assert by_url.name.startswith("warm-tiny-code_exec-")


def test_a_server_that_does_not_serve_demonstrations_leaves_the_url_as_the_cache_key(
    tmp_path,
) -> None:
    from forge_agent.env.demonstrations import demonstrations_origin

    server = serve_openenv(NoDemosEnv, port=0, block=False)
    assert server is not None
    with server:
        url = ResolvedEnv.of(server.url)
        assert demonstrations_origin(url) is url  # the URL itself keys the cache
        assert OpenEnvAgentEnv(base_url=server.url).demonstrations(2, 0, 0.5) == []


class NoDemosEnv:
    """An env with a reset and no demonstrations."""

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> Any:
        return [{"role": "user", "content": "hi"}], []

    async def step(self, message: Any) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        return None
