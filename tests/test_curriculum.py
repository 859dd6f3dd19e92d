"""`env.curriculum`: the difficulty ladder (advance, resume keeps the level), online task
selection, and the setup checks that refuse a curriculum or credit the env cannot follow.

The tasks are the calculator's own generator and a local dataset file; the groups' rewards
are given by the test (what a scored group reports), so each step of the ladder is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_agent.env import EnvConfig
from forge_agent.env.curriculum import LEVEL_KEY, Curriculum, CurriculumConfig
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.env.tasks import TaskStream
from forge_agent.run.config import load_config
from forge_agent.run.setup_checks import check_run_choices
from forge_agent.run.stop_causes import check_start_signal
from forge_agent.typed_config import ConfigError


def _ladder(**kw) -> EnvConfig:
    cfg = dict(kwarg="difficulty", levels=[1, 2, 3], advance_at=0.7, window=3)
    return EnvConfig("calculator", {"difficulty": 1}, curriculum=CurriculumConfig(**{**cfg, **kw}))


def _difficulty(task) -> int:
    return int(task["task_id"].split("-")[1][1:])  # "calculator-d2-s0-5" -> 2


def test_the_ladder_moves_up_when_the_running_reward_passes_the_threshold() -> None:
    cur = Curriculum(ResolvedEnv.of(_ladder()))
    task, _ = next(cur)
    assert cur.level == 1 and _difficulty(task) == 1 and task[LEVEL_KEY] == 0
    assert not cur.observe(task, [1, 1, 0, 0])  # window not full: 1 of 3
    assert not cur.observe(task, [1, 1, 1, 0])
    assert not cur.observe(task, [1, 0, 0, 0])  # mean (.5 + .75 + .25) / 3 = .5 < .7
    assert not cur.observe(task, [1, 1, 1, 1])  # (.75 + .25 + 1) / 3 = .67 < .7
    assert cur.observe(task, [1, 1, 1, 1])  # (.25 + 1 + 1) / 3 = .75 >= .7: up
    assert cur.level == 2 and cur.metrics()["curriculum/level"] == 1.0
    task2, _ = next(cur)
    assert _difficulty(task2) == 2
    assert not cur.observe(task, [1, 1, 1, 1])  # a group drawn at the old level: ignored
    for _ in range(3):
        cur.observe(task2, [1.0])
    assert cur.level == 3
    for _ in range(3):
        assert not cur.observe(next(cur)[0], [1.0])  # the last level stays
    assert [a["level"] for a in cur.advances] == [2, 3]


def test_resume_keeps_the_level_the_window_and_the_stream_position() -> None:
    cur = Curriculum(ResolvedEnv.of(_ladder()))
    for _ in range(3):
        cur.observe(next(cur)[0], [1.0])
    assert cur.level == 2
    task, _ = next(cur)
    cur.observe(task, [0.5])
    state = json.loads(json.dumps(cur.state()))  # as it is saved with a checkpoint
    expected = [next(cur)[0]["task_id"] for _ in range(5)]

    resumed = Curriculum(ResolvedEnv.of(_ladder()))
    resumed.load_state(state)
    assert resumed.level == 2
    assert resumed.metrics()["curriculum/running_reward"] == 0.5
    assert [next(resumed)[0]["task_id"] for _ in range(5)] == expected
    with pytest.raises(ValueError, match="levels"):
        Curriculum(ResolvedEnv.of(_ladder(levels=[1, 3]))).load_state(state)


def test_a_plain_task_streams_checkpoint_resumes_under_the_curriculum() -> None:

    env = EnvConfig("calculator", {"difficulty": 1})
    stream = TaskStream(ResolvedEnv.of(env))
    for _ in range(7):
        next(stream)
    cur = Curriculum(ResolvedEnv.of(env))
    cur.load_state(stream.state())
    assert next(cur)[0]["task_id"] == next(stream)[0]["task_id"]


def test_selection_skips_settled_tasks_and_retries_them_later(tmp_path) -> None:
    rows = [
        {"task_id": f"t{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(40)
    ]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = CurriculumConfig(select=True, retry_after=1000)
    env = EnvConfig("calculator", {}, dataset=str(data), curriculum=cfg)
    # The epochs' order is a shuffle seeded by the data set's path (tmp_path): read epoch 2's
    # order from a plain stream and settle two tasks it offers first, so that the rest of
    # epoch 2 is exactly `per_epoch - 2` draws whatever the shuffle.
    order = TaskStream(ResolvedEnv.of(env))
    per_epoch = len(order._block)
    _ = [next(order) for _ in range(per_epoch)]
    second_epoch = [next(order)[0] for _ in range(per_epoch)]
    solved, unsolved, mixed = second_epoch[0], second_epoch[1], second_epoch[-1]
    cur = Curriculum(ResolvedEnv.of(env))
    _ = [next(cur) for _ in range(per_epoch)]
    cur.observe(solved, [1, 1, 1, 1])
    cur.observe(unsolved, [0, 0, 0, 0])
    cur.observe(mixed, [1, 0, 1, 0])
    second = [next(cur)[0]["task_id"] for _ in range(per_epoch - 2)]
    assert solved["task_id"] not in second and unsolved["task_id"] not in second
    assert mixed["task_id"] in second
    assert cur.skipped == 2 and cur.metrics()["curriculum/skipped_tasks"] == 2.0
    # after retry_after draws they come back
    retry_soon = CurriculumConfig(select=True, retry_after=1)
    cur = Curriculum(
        ResolvedEnv.of(EnvConfig("calculator", {}, dataset=str(data), curriculum=retry_soon))
    )
    task = next(cur)[0]
    cur.observe(task, [1, 1])
    later = [next(cur)[0]["task_id"] for _ in range(2 * per_epoch)]
    assert task["task_id"] in later


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("env.curriculum.advance_at=0", "env.curriculum.advance_at"),
        ("env.curriculum.advance_at=1.5", "(0, 1]"),
        ("env.curriculum.window=0", "env.curriculum.window"),
        ("env.curriculum.levels=[1]", "env.curriculum.levels"),
        ("env.curriculum.kwarg=null", "env.curriculum.kwarg"),
    ],
)
def test_bad_curriculum_values_fail_naming_the_key(override, named) -> None:
    ladder = ["env.curriculum.kwarg=difficulty", "env.curriculum.levels=[1,2]"]
    with pytest.raises(ConfigError) as err:
        load_config(None, [*ladder, override])
    assert named in str(err.value)


def test_a_kwarg_the_env_does_not_take_and_a_level_it_rejects_fail_before_any_actor() -> None:
    bad_kwarg = load_config(None, ["env.curriculum.kwarg=hardness", "env.curriculum.levels=[1,2]"])
    with pytest.raises(EnvSetupError) as err:
        check_run_choices(bad_kwarg, ResolvedEnv.of(bad_kwarg.env))
    text = str(err.value)
    assert "'hardness'" in text and "calculator" in text and "difficulty" in text
    bad_level = load_config(
        None, ["env.curriculum.kwarg=difficulty", "env.curriculum.levels=[1,2,7]"]
    )
    with pytest.raises(EnvSetupError) as err:
        check_run_choices(bad_level, ResolvedEnv.of(bad_level.env))
    assert "difficulty=7" in str(err.value) and "(1, 2, 3)" in str(err.value)


def test_gigpo_needs_an_env_with_a_state_key() -> None:
    with pytest.raises(EnvSetupError) as err:
        gigpo = load_config(None, ["advantages.turn_credit=gigpo"])
        check_run_choices(gigpo, ResolvedEnv.of(gigpo.env))
    text = str(err.value)
    assert "calculator" in text and "state_key" in text and "advantages.turn_credit" in text
    ok = load_config(None, ["advantages.turn_credit=gigpo", "env.id=frozen_lake", "env.kwargs={}"])
    check_run_choices(ok, ResolvedEnv.of(ok.env))  # FrozenLake's state is its cell


def test_step_zero_without_any_reward_stops_naming_the_cause(capsys) -> None:
    from forge_agent.errors import SetupError

    cfg = load_config(None, ["env.id=blackjack", "env.kwargs={}"])
    never_called = {
        "eval/scored_episodes": 32.0,
        "eval/reward/max": 0.0,
        "eval/reward/mean": 0.0,
        "eval/tools_offered": 1.0,
        "eval/tool_call_rate": 0.0,
    }
    with pytest.raises(SetupError, match="never called a tool of env 'blackjack'"):
        check_start_signal(never_called, cfg.stop_facts())
    called = {**never_called, "eval/tool_call_rate": 0.5}
    with pytest.raises(SetupError, match="never earned reward"):
        check_start_signal(called, cfg.stop_facts())
    facts = cfg.stop_facts()
    check_start_signal({**called, "eval/reward/max": 1.0, "eval/reward/mean": 0.1}, facts)
    check_start_signal({**called, "eval/reward/max": -1.0, "eval/reward/mean": -1.5}, facts)
    check_start_signal({**never_called, "eval/scored_episodes": 4.0}, facts)  # too few: a warning
    assert "warning: step 0" in capsys.readouterr().out


def test_step_zero_names_the_model_and_its_size_when_the_task_is_beyond_it(tmp_path) -> None:
    """HumanEval on the CPU default: the policy answers (with or without the python tool) and
    never passes a test; the error names the model's size, read from its safetensors."""
    import torch
    from safetensors.torch import save_file

    from forge_agent.errors import SetupError
    from forge_agent.models.hub import parameter_count

    save_file(
        {"embed": torch.zeros(1000, 256), "head": torch.zeros(1000)}, tmp_path / "m.safetensors"
    )
    assert parameter_count(tmp_path) == 257_000 and parameter_count(tmp_path / "none") is None
    cfg = load_config(None, ["env.id=code_exec", "env.kwargs={}"])
    nothing = {
        "eval/scored_episodes": 256.0,
        "eval/reward/max": 0.0,
        "eval/reward/mean": 0.0,
        "eval/tools_offered": 1.0,
        "eval/tool_call_rate": 0.3,
    }
    beyond = r"env 'code_exec' \(tool-call rate 0.30\): the task is beyond this model"
    with pytest.raises(SetupError, match=beyond + r" \(model.name=tiny, 2.9 M parameters\)"):
        check_start_signal(nothing, cfg.stop_facts(), 2_886_400, warm_start="demonstrations")
    with pytest.raises(SetupError, match=r"never called a tool.*\(model.name=tiny, 2.9 M param"):
        check_start_signal(
            {**nothing, "eval/tool_call_rate": 0.0},
            cfg.stop_facts(),
            2_886_400,
            warm_start="demonstrations",
        )


def test_step_zero_without_reward_on_held_out_tasks_above_the_ladders_first_level_goes_on(capsys):
    from forge_agent.errors import SetupError

    config = str(Path(__file__).resolve().parents[1] / "apps/agent/calculator_curriculum.yaml")
    nothing = {
        "eval/scored_episodes": 256.0,
        "eval/reward/max": 0.0,
        "eval/reward/mean": 0.0,
        "eval/tools_offered": 1.0,
        "eval/tool_call_rate": 0.5,
    }
    check_start_signal(
        nothing, load_config(config, []).stop_facts()
    )  # held out at 2, trained from 1
    assert "the curriculum trains from difficulty=1: going on" in capsys.readouterr().out
    at_first_level = load_config(config, ["env.kwargs={difficulty: 1}"])
    with pytest.raises(SetupError, match="never earned reward"):
        check_start_signal(nothing, at_first_level.stop_facts())


def test_the_warm_start_of_a_ladder_demonstrates_every_level(
    monkeypatch, tmp_path, tiny_model_path
):
    """The policy is warm-started on demonstrations of each level, split evenly: on the first
    level only, the calculator earned nothing at difficulty 2 and its ladder stalled there."""
    import forge_agent.warm_start.sft as ws

    asked = []
    real = ws.demonstrations

    def recording(env, n, demo_fraction, seed, *limits):
        asked.append((env.id, dict(env.kwargs), n))
        return real(env, n, demo_fraction, seed, *limits)

    monkeypatch.setattr(ws, "demonstrations", recording)
    monkeypatch.setenv("FORGE_AGENT_CACHE", str(tmp_path))  # the warm start's cache: here
    config = str(Path(__file__).resolve().parents[1] / "apps/agent/calculator_curriculum.yaml")
    cfg = load_config(
        config,
        [f"model.name={tiny_model_path}", "warm_start.steps=1", "warm_start.num_demos=6"],
    )
    policy = ws.policy_model(tiny_model_path, ResolvedEnv.of(cfg.env), cfg.warm_start, cfg.rollout)
    assert policy.parent == tmp_path / "models" and (policy / "config.json").exists()
    assert asked == [("calculator", {"difficulty": d}, 2) for d in (1, 2, 3)]
