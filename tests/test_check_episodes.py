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


def shout(text: str) -> str:
    '''Say `text` loudly.

    Args:
        text: what to say.
    '''
    return text.upper()


class ToolEnvWithDemos(JudgedEnv):
    tools = (shout,)

    def demonstrations(self, n, seed, demo_fraction):
        call = {"id": "c0", "type": "function",
                "function": {"name": "shout", "arguments": '{"text": "hi"}'}}
        return [[{"role": "system", "content": "Shout."}, {"role": "user", "content": "Say hi."},
                 {"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "c0", "name": "shout", "content": "HI"},
                 {"role": "assistant", "content": "hi"}]] * n

class WrongReplyDemoEnv(ToolEnvWithDemos):
    '''A stand-in env whose demonstration is deliberately wrong: it says `shout` replied
    "hi", where the tool replies "HI".'''

    def demonstrations(self, n, seed, demo_fraction):
        (convo,) = ToolEnvWithDemos.demonstrations(self, 1, seed, demo_fraction)
        convo[3] = {**convo[3], "content": "hi"}
        task = {"task_id": "t7", "prompt": "Say hi.", "answer": "hi"}
        return [{"messages": convo, "task": task}] * n


class WrongReplyNoTaskDemoEnv(WrongReplyDemoEnv):
    '''The same deliberately wrong demonstration, given without its task.'''

    def demonstrations(self, n, seed, demo_fraction):
        return [d["messages"] for d in WrongReplyDemoEnv.demonstrations(self, n, seed, 1.0)]


class PerTaskToolEnv(JudgedEnv):
    '''A tool that answers from the episode's task, and demonstrations without their task.'''

    def get_tools(self):
        def answer() -> str:
            '''The task's answer.'''
            return self.task["task_id"]

        return [answer]

    def demonstrations(self, n, seed, demo_fraction):
        call = {"id": "c0", "type": "function", "function": {"name": "answer", "arguments": "{}"}}
        return [[{"role": "user", "content": "Say hi."},
                 {"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "c0", "name": "answer", "content": "t9"},
                 {"role": "assistant", "content": "hi"}]] * n

"""


@pytest.fixture
def user_envs(tmp_path, monkeypatch):
    (tmp_path / "check_user_envs.py").write_text(textwrap.dedent(ENVS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the env worker imports it too
    return "check_user_envs"


def check_of(env_id: str, renderer):
    cfg = load_config(None, [f"env.id={env_id}", "env.kwargs={}"])
    task = {"task_id": "t0", "prompt": "Say hi.", "answer": "hi"}
    held_out = [{**task, "task_id": "t1"}]
    return check_episodes(cfg, ResolvedEnv.of(cfg.env), renderer, [task], held_out)


def lines_of(env_id: str, renderer) -> list[str]:
    return check_of(env_id, renderer).lines()


@pytest.fixture
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def test_check_plays_a_train_and_a_held_out_episode_and_names_their_status(user_envs, renderer):
    train, held_out, calls, demos = lines_of(f"{user_envs}:JudgedEnv", renderer)
    assert calls == "tool calls: none (the env offers no tools)"
    assert demos.startswith("demonstrations: none of the env's own to replay")
    assert train.startswith("episode (train, task t0): ok, reward 0 after 1 turn(s)")
    assert held_out.startswith("episode (held-out, task t1): ok")


def test_check_names_a_judge_that_raises_with_its_exception(user_envs, renderer):
    train, _, _, _ = lines_of(f"{user_envs}:BrokenJudgeEnv", renderer)
    assert train.startswith("episode (train, task t0): policy_error: step: ")
    assert "KeyError" in train and "answr" in train


def test_check_exits_non_zero_when_an_episode_it_plays_fails(user_envs, capsys):
    assert main(["--check", f"env.id={user_envs}:BrokenJudgeEnv", "env.kwargs={}"]) == 2
    captured = capsys.readouterr()
    assert "policy_error: step: " in captured.out
    assert "check failed: 2 of 2 episodes ended policy_error" in captured.err


def test_check_exits_zero_when_its_episodes_end_normally(user_envs):
    assert main(["--check", f"env.id={user_envs}:JudgedEnv", "env.kwargs={}"]) == 0


def test_check_calls_each_tool_through_the_renderer_and_reads_its_reply(user_envs, renderer):
    check = check_of(f"{user_envs}:ToolEnvWithDemos", renderer)
    head, call = check.lines()[2:4]
    assert head == (
        "tool calls (train, task t0): ok, 1 call(s): each parsed, run and bridged append-only"
    )
    # the argument is words of the prompt, and the reply the tool's own (upper-cased) text
    assert call.startswith('  shout({"text": "') and call.endswith("'")
    text = call.split('"text": "')[1].split('"')[0]
    assert call.endswith(f"-> {text.upper()!r}") and text and text.upper() != text
    assert check.problems == [] and check.demo_problems == []


class NoCallParser:
    """A stand-in renderer that reads every completion as text: the Gemma bug of c257d3d (a
    call written as text that no parser reads) on the tiny model's tokenizer."""

    def __init__(self, renderer):
        self._renderer = renderer

    def __getattr__(self, name):
        return getattr(self._renderer, name)

    def parse(self, completion_ids, tools, prompt_ids, call_prefix="call"):
        text = self._renderer.tokenizer.decode(completion_ids, skip_special_tokens=True)
        return {"role": "assistant", "content": text}


def test_check_fails_when_the_renderer_does_not_parse_the_call_it_wrote(user_envs, renderer):
    check = check_of(f"{user_envs}:ToolEnvWithDemos", NoCallParser(renderer))
    assert check.problems == [
        "1 call(s) written, 0 parsed as calls (the renderer reads its own call format as text)"
    ]


class NoBridge(NoCallParser):
    """A stand-in renderer that cannot extend a history append-only: what c257d3d's default
    renderer did with Gemma's template (it refuses a tool turn), on the tiny model's tokenizer."""

    def parse(self, *args, **kwargs):
        return self._renderer.parse(*args, **kwargs)

    def bridge(self, *args, **kwargs):
        return None


def test_check_fails_on_a_demonstration_the_warm_start_cannot_render(user_envs, renderer):
    check = check_of(f"{user_envs}:ToolEnvWithDemos", NoBridge(renderer))
    assert check.demo_problems == [
        f"demonstration {k}: could not bridge demonstration 'demonstration {k}' append-only"
        for k in (0, 1)
    ]
    assert "1 tool reply(ies) could not be bridged append-only" in check.problems[0]
    assert "warm start: demonstration 0: could not bridge" in "\n".join(check.lines())


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
    line, calls, demos = check_episodes(cfg, ResolvedEnv.of(cfg.env), renderer, [task], []).lines()
    assert calls == "tool calls: not played by --check (a seated game)"
    assert demos == "demonstrations: not replayed by --check (a seated game)"
    # the scripted answer is no move: the game's invalid-move rule ends it, player_0 losing
    assert line.startswith("episode (train, task c4): ok, reward -1 after 2 turn(s)")


def test_check_replays_a_demonstration_through_the_env_on_two_tasks(user_envs, renderer):
    check = check_with_two_tasks(f"{user_envs}:ToolEnvWithDemos", renderer)
    replayed = [line for line in check.lines() if line.startswith("demonstration ")]
    assert replayed == [
        f"demonstration {k} (carries no task: replayed on training tasks t0 and t1, answered "
        "alike): replayed through the env, 2 turn(s), each reply the env's own"
        for k in (0, 1)
    ]
    assert check.problems == []


def check_with_two_tasks(env_id: str, renderer):
    cfg = load_config(None, [f"env.id={env_id}", "env.kwargs={}"])
    tasks = [{"task_id": f"t{i}", "prompt": "Say hi.", "answer": "hi"} for i in range(2)]
    return check_episodes(cfg, ResolvedEnv.of(cfg.env), renderer, tasks[:1], [], tasks)


def test_check_fails_on_a_demonstration_whose_reply_the_env_does_not_give(user_envs, capsys):
    """c257d3d's --check never replayed a demonstration: one whose tool replies the env never
    gives was trained on for minutes."""
    assert main(["--check", f"env.id={user_envs}:WrongReplyDemoEnv", "env.kwargs={}"]) == 2
    err = capsys.readouterr().err
    assert (
        "check failed: demonstration 0 (task t7, its own): turn 1's reply differs from the "
        "env's: 'hi' in the demonstration, 'HI' from the env" in err
    )


def test_a_wrong_demonstration_without_its_task_fails_where_the_tools_ignore_the_task(
    user_envs, renderer
):
    check = check_with_two_tasks(f"{user_envs}:WrongReplyNoTaskDemoEnv", renderer)
    assert len(check.problems) == 2
    assert check.problems[0].startswith(
        "demonstration 0 (carries no task: replayed on training tasks t0 and t1, answered "
        "alike): turn 1's reply differs from the env's: 'hi' in the demonstration, 'HI'"
    )


def test_a_demonstration_without_its_task_is_not_checked_where_the_tools_answer_per_task(
    user_envs, renderer
):
    check = check_with_two_tasks(f"{user_envs}:PerTaskToolEnv", renderer)
    assert check.problems == []
    line = next(line for line in check.lines() if line.startswith("demonstration 0"))
    assert line.startswith(
        "demonstration 0 (carries no task): not checked: the env's replies differ between "
        "training tasks t0 and t1 (its tools answer per task); give each demonstration its task"
    )


@pytest.mark.parametrize("env_id", ["multihop", "gymnasium:Taxi-v4"])
def test_a_shipped_env_with_tasks_on_its_demonstrations_replays_them(env_id, capsys):
    assert main(["--check", f"env.id={env_id}", "env.kwargs={}"]) == 0
    out = capsys.readouterr().out
    for k in (0, 1):
        assert f"demonstration {k} (task " in out
    assert out.count(", its own): replayed through the env, ") == 2
