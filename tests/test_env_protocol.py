"""The env protocol, base classes and registry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from forge_agent.env import AgentEnv, Env, ToolEnv, make_env, register, registered_env_ids
from forge_agent.types import StepResult


def test_unknown_env_id_error_lists_registered_ids() -> None:
    with pytest.raises(KeyError) as error:
        make_env("no_such_env")
    for env_id in ("calculator", "code_exec", "frozen_lake"):
        assert env_id in str(error.value)


def test_shipped_envs_are_registered_and_satisfy_the_protocol() -> None:
    assert {"calculator", "code_exec", "frozen_lake", "blackjack"} <= set(registered_env_ids())
    assert isinstance(make_env("calculator"), AgentEnv)


def test_register_refuses_duplicates_unless_overwrite() -> None:
    register("test_dup_env", "envs.calculator:CalculatorEnv")
    with pytest.raises(ValueError, match="test_dup_env"):
        register("test_dup_env", "envs.calculator:CalculatorEnv")
    register("test_dup_env", "envs.calculator:CalculatorEnv", overwrite=True, difficulty=2)
    assert make_env("test_dup_env").difficulty == 2  # type: ignore[attr-defined]


def test_entry_point_string_works_as_an_id() -> None:
    assert type(make_env("envs.calculator:CalculatorEnv")).__name__ == "CalculatorEnv"


def test_sync_methods_of_env_subclass_become_awaitable() -> None:
    class Sync(Env):
        def reset(self, task: dict[str, Any], seed: int | None = None) -> tuple[list, list]:
            return [{"role": "user", "content": "x"}], []

        def step(self, assistant_message: dict[str, Any]) -> StepResult:
            return StepResult([], {"r": 1.0}, True)

    async def main() -> None:
        env = Sync()
        assert (await env.reset({}))[0][0]["content"] == "x"
        assert (await env.step({"role": "assistant", "content": ""})).done
        await env.close()

    asyncio.run(main())


def test_tool_env_runs_tool_calls_then_judges_the_final_answer() -> None:
    def double(x: int) -> int:
        """Double a number.

        Args:
            x: The number.
        """
        return 2 * x

    class Doubler(ToolEnv):
        tools = (double,)
        system_prompt = "Use double."

        def judge(self, answer: str) -> dict[str, float]:
            return {"right": float(answer.strip() == str(2 * self.task["x"]))}

    async def main() -> None:
        env = Doubler()
        messages, tools = await env.reset({"prompt": "double 21", "x": 21})
        assert [m["role"] for m in messages] == ["system", "user"]
        assert tools[0]["function"]["name"] == "double"
        call = {"id": "a", "function": {"name": "double", "arguments": '{"x": 21}'}}
        bad = {"id": "b", "function": {"name": "triple", "arguments": "{}"}}
        result = await env.step({"role": "assistant", "content": "", "tool_calls": [call, bad]})
        assert next(m["content"] for m in result.messages) == "42"
        assert result.messages[1]["content"].startswith("Error: unknown tool 'triple'")
        assert not result.done and result.info == {"tool_calls": 2, "tool_errors": 1}
        final = await env.step({"role": "assistant", "content": "42"})
        assert final.done and final.rewards == {"right": 1.0}

    asyncio.run(main())


def test_importing_the_env_api_loads_no_torch_vllm_gymnasium_or_openenv() -> None:
    code = (
        "import sys, forge_agent.env, envs.calculator\n"
        "heavy = [m for m in ('torch', 'vllm', 'gymnasium', 'openenv', 'datasets') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=_repo_root())


def _repo_root() -> str:
    import pathlib

    return str(pathlib.Path(__file__).resolve().parents[1])
