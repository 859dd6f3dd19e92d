"""`--check` plays one episode per split in an env worker and says how each ended."""

from __future__ import annotations

import textwrap

import pytest

from apps.agent.main import main
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.run.check_episodes import check_episodes
from forge_agent.run.config import load_config

ENVS = """
from forge_agent.env.protocol import ToolEnv


class JudgedEnv(ToolEnv):
    dataset = [{"task_id": f"t{i}", "prompt": "Say hi.", "answer": "hi"} for i in range(40)]

    def judge(self, answer):
        return {"correct": float(answer.strip() == self.task["answer"])}


class BrokenJudgeEnv(JudgedEnv):
    def judge(self, answer):
        return {"correct": float(answer.strip() == self.task["answr"])}  # a typo
"""


@pytest.fixture
def user_envs(tmp_path, monkeypatch):
    (tmp_path / "check_user_envs.py").write_text(textwrap.dedent(ENVS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the env worker imports it too
    return "check_user_envs"


def lines_of(env_id: str, renderer) -> list[str]:
    cfg = load_config(None, [f"env.id={env_id}", "env.kwargs={}"])
    task = {"task_id": "t0", "prompt": "Say hi.", "answer": "hi"}
    held_out = [{**task, "task_id": "t1"}]
    return check_episodes(cfg, ResolvedEnv.of(cfg.env), renderer, [task], held_out).lines()


@pytest.fixture
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def test_check_plays_a_train_and_a_held_out_episode_and_names_their_status(user_envs, renderer):
    train, held_out = lines_of(f"{user_envs}:JudgedEnv", renderer)
    assert train.startswith("episode (train, task t0): ok, reward 0 after 1 turn(s)")
    assert held_out.startswith("episode (held-out, task t1): ok")


def test_check_names_a_judge_that_raises_with_its_exception(user_envs, renderer):
    train, _ = lines_of(f"{user_envs}:BrokenJudgeEnv", renderer)
    assert train.startswith("episode (train, task t0): policy_error: step: ")
    assert "KeyError" in train and "answr" in train


def test_check_exits_non_zero_when_an_episode_it_plays_fails(user_envs, capsys):
    assert main(["--check", f"env.id={user_envs}:BrokenJudgeEnv", "env.kwargs={}"]) == 2
    captured = capsys.readouterr()
    assert "policy_error: step: " in captured.out
    assert "check failed: 2 of 2 episodes ended policy_error" in captured.err


def test_check_exits_zero_when_its_episodes_end_normally(user_envs):
    assert main(["--check", f"env.id={user_envs}:JudgedEnv", "env.kwargs={}"]) == 0


def test_check_does_not_play_an_agent_program(renderer):
    cfg = load_config(
        None, ["env.id=agent:json:dumps", "env.kwargs={reward: 'json:dumps', tasks_from: x}"]
    )
    env = ResolvedEnv.of(cfg.env)
    (line,) = check_episodes(cfg, env, renderer, [{"task_id": "t0"}], []).lines()
    assert "not played by --check" in line and "agent program" in line


def test_check_plays_a_seated_game_with_every_seat_answering(renderer):
    cfg = load_config(
        "apps/agent/tictactoe.yaml",
        ["env.id=textarena:ConnectFour-v0", "env.kwargs={board_only: true}"],
    )
    task = {"task_id": "c4", "seed": 0}
    (line,) = check_episodes(cfg, ResolvedEnv.of(cfg.env), renderer, [task], []).lines()
    # the scripted answer is no move: the game's invalid-move rule ends it, player_0 losing
    assert line.startswith("episode (train, task c4): ok, reward -1 after 2 turn(s)")
