"""verifiers environments through `env.id=verifiers:<module>` (the real package, 0.3.1): its
dataset as tasks, its own rollout (tool calls answered by its env_response), its rubric's
functions as reward components, its parser, and the errors for a missing module and package.
The environments are modules written as a user writes them (tests/verifiers_envs)."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from forge_agent.env import EnvSetupError, make_env
from forge_agent.env.registry import UnknownEnvError
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

TOOLS = "verifiers:tests.verifiers_envs.tools"
ARITH = "verifiers:tests.verifiers_envs.arith"


def _lookup(word: str) -> dict:
    args = json.dumps({"word": word})
    return {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": args}}


def test_dataset_rows_are_tasks_and_the_eval_dataset_is_held_out():
    train = load_tasks(ResolvedEnv.of(TOOLS), "train", 10, seed=0)
    held_out = load_tasks(ResolvedEnv.of(TOOLS), "eval", 10, seed=0)
    assert len(train) == 5 and len(held_out) == 2
    assert train[0]["prompt"][0]["role"] == "system"  # formatted by verifiers
    assert all(t["answer"] for t in train)


def test_a_tool_episode_plays_through_verifiers_rollout_and_its_rubric_scores_it():
    env = make_env(TOOLS)
    (task,) = [
        t for t in load_tasks(ResolvedEnv.of(TOOLS), "train", 10, 0) if "stone" in str(t["prompt"])
    ]

    async def play(final: str, call: bool):
        messages, tools = await env.reset(task, 0)
        assert [t["function"]["name"] for t in tools] == ["lookup"]
        assert messages[-1]["content"].startswith("What is the code of stone")
        if call:
            step = await env.step(
                {"role": "assistant", "content": "", "tool_calls": [_lookup("stone")]}
            )
            assert not step.done
            assert step.messages == [
                {"role": "tool", "content": "S08", "tool_call_id": "c0", "name": "lookup"}
            ]
        end = await env.step({"role": "assistant", "content": final})
        assert end.done
        return end.rewards, end.info

    rewards, info = asyncio.run(play("<answer>S08</answer>", call=True))
    assert rewards == {"correct_answer": 1.0, "called_lookup": 0.2}
    assert info["vf_reward"] == pytest.approx(1.2) and info["metrics"]["lookup_calls"] == 1.0
    rewards, _ = asyncio.run(play("S08", call=False))  # the parser wants <answer> tags
    assert rewards == {"correct_answer": 0.0, "called_lookup": 0.0}
    asyncio.run(env.close())


def test_a_single_turn_environment_ends_after_one_answer_scored_by_its_own_scorer():
    env = make_env(ARITH, num_train_examples=8, num_eval_examples=4)
    task = load_tasks(
        ResolvedEnv.of(ARITH, kwargs={"num_train_examples": 8, "num_eval_examples": 4}),
        "train",
        1,
        0,
    )[0]
    truth = env.vf_env.rg_dataset[int(task["answer"])]["answer"]

    async def play(text: str):
        await env.reset(task, 0)
        return await env.step({"role": "assistant", "content": text})

    right, wrong = (
        asyncio.run(play(f"<answer>{truth}</answer>")),
        asyncio.run(play("<answer>x</answer>")),
    )
    assert right.done and right.rewards == {"check_answer_reward_func": 1.0}
    assert wrong.rewards == {"check_answer_reward_func": 0.0}
    assert right.info["metrics"] == {"format_reward_func": pytest.approx(1.0)}  # weight 0


def test_an_unknown_module_names_near_matches():
    with pytest.raises(UnknownEnvError, match=r"near matches: tests\.verifiers_envs\.tools"):
        make_env("verifiers:tests.verifiers_envs.tool")


def test_load_environment_failing_on_the_kwargs_is_named():
    with pytest.raises(EnvSetupError, match=r"load_environment.*env.kwargs=\{'turns': 3\}"):
        make_env(TOOLS, turns=3)


def test_without_the_package_the_error_gives_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(EnvSetupError, match="pip install verifiers"):
        make_env(TOOLS)


def test_a_multi_turn_environment_answers_with_its_env_response_until_it_ends():
    env_id = "verifiers:tests.verifiers_envs.guess"
    tasks = [t for s in ("train", "eval") for t in load_tasks(ResolvedEnv.of(env_id), s, 30, 0)]
    assert sorted(int(t["answer"]) for t in tasks) == list(range(1, 31))  # no overlap
    (task,) = [t for t in tasks if t["answer"] == "5"]
    env = make_env(env_id)

    async def play(guesses):
        await env.reset(task, 0)
        for guess in guesses:
            step = await env.step({"role": "assistant", "content": f"<answer>{guess}</answer>"})
            if step.done:
                return step
            assert step.messages[0]["role"] == "user"
        raise AssertionError("the episode did not end")

    solved = asyncio.run(play(["3", "7", "5"]))
    assert solved.messages == [{"role": "user", "content": "correct"}]
    assert solved.rewards == {"solved": 1.0} and solved.info["metrics"]["num_turns"] == 3.0
    out_of_turns = asyncio.run(play(["1", "2", "3", "4"]))  # max_turns=4
    assert out_of_turns.rewards == {"solved": 0.0}
    assert out_of_turns.info["outcome"] == "max_turns_reached"


def test_a_rubric_with_a_group_reward_function_is_refused_when_built(tmp_path):
    from tests.user_envs import make_user_package, remove_user_package

    source = (
        "import verifiers as vf\nfrom datasets import Dataset\n\n\n"
        "def load_environment():\n"
        "    def best_of_group(completions, **kwargs):\n"
        "        return [0.0 for _ in completions]\n\n"
        "    rows = [{'question': 'q', 'answer': 'a'}]\n"
        "    rubric = vf.Rubric(funcs=[best_of_group])\n"
        "    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=rubric)\n"
    )
    root = make_user_package(tmp_path, {"vf_group_env.py": source})
    try:
        with pytest.raises(EnvSetupError, match="group-level reward functions"):
            make_env("verifiers:vf_group_env")
    finally:
        remove_user_package(root)


def test_an_environment_builds_off_the_main_thread_and_leaves_the_signal_handlers_alone():
    """Env workers build envs in threads; verifiers' Environment would install SIGINT/SIGTERM
    handlers (which raises off the main thread)."""
    import signal
    import threading

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    built = []
    thread = threading.Thread(target=lambda: built.append(make_env(TOOLS)))
    thread.start()
    thread.join()
    assert len(built) == 1 and built[0].weights["correct_answer"] == 1.0
    make_env(TOOLS)  # on the main thread too
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert signal.signal.__module__ == "signal" and signal.signal.__name__ == "signal"
