"""reasoning-gym's generators through `env.id=reasoning_gym:<task>` (the real package): tasks
from the generator, the task's own scorer as reward, its curriculum levels, an optional tool,
and the errors for a misspelt task, a bad config key and the package missing."""

from __future__ import annotations

import asyncio
import sys

import pytest

from forge_agent.env import EnvConfig, EnvSetupError, make_env
from forge_agent.env.curriculum import CurriculumConfig, check_curriculum
from forge_agent.env.registry import UnknownEnvError
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

CALC = "tools.calculator:calculator"


def _play(env, task, answer: str) -> tuple[dict, dict]:
    async def go():
        await env.reset(task, 0)
        result = await env.step({"role": "assistant", "content": answer})
        await env.close()
        return result.rewards, result.info

    return asyncio.run(go())


@pytest.mark.parametrize("task", ["basic_arithmetic", "leg_counting", "spell_backward"])
def test_the_expected_answer_scores_one_and_a_wrong_one_less(task):
    env = make_env(f"reasoning_gym:{task}")
    (first, *_) = load_tasks(ResolvedEnv.of(f"reasoning_gym:{task}"), "train", 4, seed=0)
    assert _play(env, first, f"<answer>{first['answer']}</answer>")[0] == {"score": 1.0}
    assert _play(env, first, "<answer>not it</answer>")[0]["score"] < 1.0  # partial credit
    assert _play(env, first, "")[1]["outcome"] != "correct"


def test_config_keys_reach_the_generator_and_splits_never_share_a_question():
    kwargs = {"min_terms": 2, "max_terms": 2, "operators": ["+"]}
    train = load_tasks(
        ResolvedEnv.of("reasoning_gym:basic_arithmetic", kwargs=kwargs), "train", 40, seed=0
    )
    held_out = load_tasks(
        ResolvedEnv.of("reasoning_gym:basic_arithmetic", kwargs=kwargs), "eval", 40, seed=0
    )
    assert all(t["entry"]["metadata"]["num_terms"] == 2 for t in train + held_out)
    expressions = [t["entry"]["metadata"]["expression"] for t in train]
    assert all(
        " + " in e and not {" - ", " * ", " / "} & {e[i : i + 3] for i in range(len(e))}
        for e in expressions
    )
    assert not {t["prompt"] for t in train} & {t["prompt"] for t in held_out}


def test_a_level_is_the_tasks_curriculum_level_and_a_ladder_over_it_is_accepted():
    easy, hard = (make_env("reasoning_gym:basic_arithmetic", level=k) for k in (0, 3))
    assert easy.config["max_terms"] < hard.config["max_terms"]
    env = EnvConfig(
        "reasoning_gym:basic_arithmetic",
        {},
        curriculum=CurriculumConfig(kwarg="level", levels=[0, 1, 2]),
    )
    check_curriculum(ResolvedEnv.of(env))  # builds each level and draws a task from it


def test_a_tool_is_offered_and_demonstrated_where_it_solves_the_task():
    env = make_env("reasoning_gym:basic_arithmetic", tools=[CALC])
    demos = env.demonstrations(4, seed=0, demo_fraction=1.0)
    for convo in demos:
        call = convo[2]["tool_calls"][0]["function"]
        assert call["name"] == "calculator"
        assert convo[-1]["content"] == f"<answer>{convo[3]['content']}</answer>"
    (task,) = load_tasks(ResolvedEnv.of("reasoning_gym:basic_arithmetic"), "train", 1, seed=0)

    async def tools():
        _, specs = await env.reset(task, 0)
        return [s["function"]["name"] for s in specs]

    assert asyncio.run(tools()) == ["calculator"]


def test_a_misspelt_task_names_near_matches():
    with pytest.raises(UnknownEnvError, match="near matches: basic_arithmetic"):
        make_env("reasoning_gym:basic_arithmetc")


def test_a_config_key_the_task_lacks_is_named_with_its_keys():
    with pytest.raises(EnvSetupError, match=r"'max_term' is not a setting.*max_terms"):
        make_env("reasoning_gym:basic_arithmetic", max_term=3)


def test_without_the_package_the_error_gives_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails as if missing
    with pytest.raises(EnvSetupError, match="pip install reasoning-gym"):
        make_env("reasoning_gym:basic_arithmetic")


def test_composite_mixes_tasks_from_yaml_mappings_and_scores_each_by_its_own_scorer():
    kwargs = {"datasets": [{"name": "leg_counting"}, {"name": "basic_arithmetic", "weight": 1}]}
    tasks = load_tasks(
        ResolvedEnv.of("reasoning_gym:composite", kwargs=kwargs), "train", 12, seed=0
    )
    sources = {t["entry"]["metadata"]["source_dataset"] for t in tasks}
    assert sources == {"leg_counting", "basic_arithmetic"}
    env = make_env("reasoning_gym:composite", **kwargs)
    for task in tasks[:4]:
        assert _play(env, task, f"<answer>{task['answer']}</answer>")[0] == {"score": 1.0}
