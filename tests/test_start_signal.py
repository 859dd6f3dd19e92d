"""The step-0 check names the status most held-out episodes ended with and the key that fixes
it; it blames the model only when episodes ended normally with equal rewards."""

from __future__ import annotations

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.errors import SetupError
from forge_agent.evaluation import EvalReport
from forge_agent.run.config import load_config
from forge_agent.run.stop_causes import check_start_signal, warm_start_kind
from forge_agent.types import Group, Status, Trajectory

NOTHING = {
    "eval/scored_episodes": 256.0,
    "eval/episodes": 256.0,
    "eval/reward/max": 0.0,
    "eval/reward/mean": 0.0,
    "eval/tools_offered": 1.0,
    "eval/tool_call_rate": 0.5,
}


def ended(status: str, n: int = 256, ok: int = 0) -> dict[str, float]:
    """Step-0 metrics of 256 episodes earning 0: `n` ended `status`, `ok` ended ok."""
    return {**NOTHING, f"eval/status/{status}": float(n), "eval/status/ok": float(ok)}


@pytest.fixture
def cfg():
    return load_config(None, ["rollout.max_turns=1"])


def test_episodes_cut_by_max_turns_name_rollout_max_turns_not_the_model(cfg) -> None:
    with pytest.raises(SetupError) as err:
        check_start_signal(ended("truncated_turns"), cfg.stop_facts(), 2_886_400)
    text = str(err.value)
    assert "256 of 256 held-out episodes ended truncated_turns" in text
    assert "rollout.max_turns is 1: try rollout.max_turns=2" in text
    assert "beyond this model" not in text


def test_a_gymnasium_game_cut_by_max_turns_names_its_move_cap_too() -> None:
    cfg = load_config(None, ["env.id=gymnasium:Taxi-v4", "env.kwargs={}"])
    with pytest.raises(SetupError) as err:
        check_start_signal({**ended("truncated_turns"), "eval/reward/max": -2000.0,
                            "eval/reward/mean": -2000.0}, cfg.stop_facts())  # fmt: skip
    assert "try rollout.max_turns=" in str(err.value)
    assert ", or end the game within them (env.kwargs.max_moves)" in str(err.value)


def test_the_most_frequent_status_is_named_when_it_is_not_all(cfg) -> None:
    with pytest.raises(SetupError, match="200 of 256 held-out episodes ended truncated_turns"):
        check_start_signal(ended("truncated_turns", n=200, ok=56), cfg.stop_facts())


def test_episodes_cut_by_tokens_name_the_token_limits(cfg) -> None:
    with pytest.raises(SetupError) as err:
        check_start_signal(ended("truncated_length"), cfg.stop_facts())
    text = str(err.value)
    assert "rollout.max_new_tokens_per_turn is 48: try rollout.max_new_tokens_per_turn=96" in text
    assert "rollout.max_total_tokens is 512: try rollout.max_total_tokens=1024" in text
    assert "rollout.context.strategy=drop_tool_outputs" in text  # or compact the transcript


def test_a_judge_that_raises_is_named_with_its_first_exception(cfg) -> None:
    errors = {"policy_error": "judge: KeyError('answer')"}
    with pytest.raises(SetupError) as err:
        check_start_signal(ended("policy_error"), cfg.stop_facts(), errors=errors)
    text = str(err.value)
    assert "raised on the policy's messages" in text and "judge: KeyError('answer')" in text
    assert "beyond this model" not in text


def test_every_episode_lost_to_env_errors_stops_naming_the_first_error(cfg) -> None:
    lost = {**ended("env_error"), "eval/scored_episodes": 0.0}
    with pytest.raises(SetupError) as err:
        error = {"env_error": "reset: OSError('no data')"}
        check_start_signal(lost, cfg.stop_facts(), errors=error)
    text = str(err.value)
    assert "no held-out episode could be scored" in text
    assert "failed to start or reset" in text and "reset: OSError('no data')" in text


def test_episodes_that_ended_normally_with_equal_rewards_blame_the_model(cfg) -> None:
    with pytest.raises(SetupError, match="the task is beyond this model"):
        facts = cfg.stop_facts()
        check_start_signal(ended("ok", n=256), facts, 2_886_400, warm_start="demonstrations")


def test_an_eval_report_keeps_the_first_error_of_each_status() -> None:
    def episode(status: Status, error: str) -> Trajectory:
        traj = Trajectory(task_id="t", group_id="t", status=status)
        traj.info["error"] = error
        return traj

    group = Group(
        task_id="t",
        trajectories=[
            episode(Status.POLICY_ERROR, "judge: first"),
            episode(Status.POLICY_ERROR, "judge: second"),
            episode(Status.ENV_ERROR, "reset: down"),
        ],
    )
    report = EvalReport.from_groups([group], k=3)
    assert report.first_errors == {"policy_error": "judge: first", "env_error": "reset: down"}


# ---------------------------------------------------------------- what would help, by evidence
NO_DEMOS = '''
from forge_agent.env.protocol import ToolEnv


def book(day: str) -> str:
    """Book a day.

    Args:
        day: The day.
    """
    return f"booked {day}"


class BookingEnv(ToolEnv):
    tools = (book,)
    dataset = [{"task_id": f"t{i}", "prompt": "Book monday.", "answer": "ok"} for i in range(40)]

    def judge(self, answer):
        return {"booked": 0.0}
'''


@pytest.fixture
def booking(tmp_path, monkeypatch) -> str:
    (tmp_path / "start_signal_envs.py").write_text(NO_DEMOS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "start_signal_envs:BookingEnv"


def stop_text(metrics: dict[str, float], overrides: list[str], **kw) -> str:
    cfg = load_config(None, overrides)
    taught = warm_start_kind(cfg.warm_start, ResolvedEnv.of(cfg.env))  # what the controller passes
    with pytest.raises(SetupError) as err:
        facts = cfg.stop_facts()
        check_start_signal(metrics, facts, 2_886_400, **{"warm_start": taught, **kw})
    return str(err.value)


def test_an_env_without_demonstrations_is_told_to_give_them_not_a_larger_model(booking) -> None:
    text = stop_text(ended("ok"), [f"env.id={booking}", "env.kwargs={}"])
    assert f"env '{booking}' has no demonstrations(): its warm start taught only" in text
    assert "the model's size is not the first suspect" in text
    assert "beyond this model" not in text


def test_a_run_without_a_warm_start_is_told_to_turn_it_on(booking) -> None:
    text = stop_text(
        ended("ok"), [f"env.id={booking}", "env.kwargs={}", "warm_start.enabled=false"]
    )
    assert "the warm start is off" in text and "beyond this model" not in text


def test_turns_that_fill_the_token_cap_name_the_token_budget() -> None:
    cut = {**ended("ok"), "eval/turns/mean": 2.0, "eval/sampled_tokens/mean": 96.0}
    text = stop_text(cut, ["rollout.max_new_tokens_per_turn=48"])
    assert "their turns average 48.0 sampled tokens, at the cap" in text
    assert "raise rollout.max_new_tokens_per_turn" in text and "beyond this model" not in text


def test_forfeits_cut_at_the_token_cap_name_the_budget_and_a_shorter_move_format() -> None:
    """ConnectFour: all 256 games forfeit, every move cut at 8 tokens, and no fix was named."""
    forfeits = {**ended("forfeit"), "eval/reward/max": -1.0, "eval/reward/mean": -1.0}
    forfeits.update({"eval/turns/mean": 1.0, "eval/sampled_tokens/mean": 8.0})
    text = stop_text(forfeits, ["rollout.max_new_tokens_per_turn=8"])
    assert "256 of 256 held-out episodes ended forfeit" in text
    assert "a move cut at the turn's token cap (rollout.max_new_tokens_per_turn is 8)" in text
    assert "a move format the model writes in fewer tokens" in text


def test_no_suggestion_names_the_value_in_effect_as_its_fix() -> None:
    """c257d3d said "or more turns (rollout.max_turns=5)" with max_turns already 5, and "train
    the warm start longer (warm_start.steps=100)" after 100 steps."""
    from forge_agent.run.stop_causes import episode_cause, teaching_help

    cfg = load_config(None, ["rollout.max_turns=5", "warm_start.steps=100"])
    texts = [teaching_help(cfg.stop_facts(), "tool schemas")]
    texts += [episode_cause(s, cfg.stop_facts()) for s in ("truncated_turns", "truncated_length",
                                                "prompt_too_long", "policy_timeout")]  # fmt: skip
    texts.append(stop_text({**ended("ok"), "eval/tool_call_rate": 0.0}, ["warm_start.steps=100"],
                           warm_start="demonstrations"))  # fmt: skip
    text = "\n".join(texts)
    for key, value in (("rollout.max_turns", 5), ("warm_start.steps", 100),
                       ("rollout.max_new_tokens_per_turn", cfg.rollout.max_new_tokens_per_turn),
                       ("rollout.max_total_tokens", cfg.rollout.max_total_tokens),
                       ("env.step_timeout_s", cfg.env.step_timeout_s)):  # fmt: skip
        assert f"{key}={value}" not in text, (key, text)
    assert "rollout.max_turns is 5: try rollout.max_turns=10" in text
    assert "warm_start.steps is 100: try warm_start.steps=300" in text


def test_the_model_is_blamed_after_a_warm_start_on_the_envs_own_demonstrations() -> None:
    text = stop_text(ended("ok"), [], warm_start="demonstrations")
    assert "the task is beyond this model (model.name=tiny, 2.9 M parameters)" in text
    assert "as a warm start on its demonstrations did not carry over" in text


def test_a_step_zero_stop_keeps_the_episodes_it_judged(tmp_path) -> None:
    """c257d3d: a run stopped at step 0 left traces.jsonl empty, though the stop is a verdict on
    what its held-out episodes did. The controller keeps the last evaluation's episodes (its
    eval engine's `on_trajectory`) and writes them when the step-0 check stops the run."""
    import json
    from types import SimpleNamespace

    from forge_agent.observability.traces import TraceWriter
    from forge_agent.run.controller import Controller
    from forge_agent.run.state import RunState

    cfg = load_config(None, ["metrics.traces_last=3"])
    episodes = [Trajectory(task_id=f"t{i}", group_id="g", token_ids=[1, 2]) for i in range(5)]
    run = SimpleNamespace(
        cfg=cfg, out=tmp_path, state=RunState(), eval_episodes=episodes,
        traces=TraceWriter(tmp_path / "traces.jsonl", keep=3),
    )  # fmt: skip
    said = Controller._keep_eval_episodes(run)
    run.traces.close()
    assert said == f" (the 3 last of the 5 held-out episodes it judged: {tmp_path}/traces.jsonl" \
        " and traces.html)"  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["t2", "t3", "t4"]
    assert [r["extra"] for r in rows] == [{"step": 0, "split": "eval"}] * 3
