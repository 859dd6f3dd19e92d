"""The warm-start cache is keyed by everything that shapes it, and says when it is used."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.warm_start import WarmStartConfig, warm_start, warm_start_dir

ENV_SOURCE = """
from forge_agent.env.protocol import ToolEnv


class DemoEnv(ToolEnv):
    dataset = [{{"task_id": "t0", "prompt": "Say hi.", "answer": "hi"}}]

    def judge(self, answer):
        return {{"correct": float(answer.strip() == "hi")}}

    def demonstrations(self, n, seed, demo_fraction):
        return [[{{"role": "user", "content": "Say hi."}},
                 {{"role": "assistant", "content": {answer!r}}}]] * n
"""


@pytest.fixture
def user_env(tmp_path, monkeypatch):
    """A user's env module `cache_user_env` whose demonstrations answer `answer`; returns a
    function that (re)writes it and reimports it."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(answer: str) -> str:
        (tmp_path / "cache_user_env.py").write_text(
            textwrap.dedent(ENV_SOURCE.format(answer=answer))
        )
        sys.modules.pop("cache_user_env", None)
        importlib.invalidate_caches()
        return "cache_user_env:DemoEnv"

    yield write
    sys.modules.pop("cache_user_env", None)


def test_changing_an_envs_demonstrations_changes_the_warm_start_key(user_env, tmp_path):
    cfg = WarmStartConfig()
    before = warm_start_dir(
        tmp_path / "model", [ResolvedEnv.of(user_env("hi"))], cfg, tmp_path / "cache"
    )
    same = warm_start_dir(
        tmp_path / "model", [ResolvedEnv.of(user_env("hi"))], cfg, tmp_path / "cache"
    )
    after = warm_start_dir(
        tmp_path / "model", [ResolvedEnv.of(user_env("hello"))], cfg, tmp_path / "cache"
    )
    assert before == same
    assert after != before


def test_changing_the_tokenizer_changes_the_warm_start_key(user_env, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text('{"vocab": 1}')
    envs = [ResolvedEnv.of(user_env("hi"))]
    before = warm_start_dir(model, envs, WarmStartConfig(), tmp_path / "cache")
    (model / "tokenizer.json").write_text('{"vocab": 2}')
    assert warm_start_dir(model, envs, WarmStartConfig(), tmp_path / "cache") != before


def test_changing_a_warm_start_setting_changes_the_warm_start_key(user_env, tmp_path):
    envs = [ResolvedEnv.of(user_env("hi"))]
    before = warm_start_dir(tmp_path, envs, WarmStartConfig(), tmp_path / "cache")
    assert warm_start_dir(tmp_path, envs, WarmStartConfig(steps=10), tmp_path / "cache") != before


def test_a_cached_warm_start_is_named_on_the_console_with_its_key(user_env, tmp_path, capsys):
    envs = [ResolvedEnv.of(user_env("hi"))]
    cached = warm_start_dir(tmp_path / "model", envs, WarmStartConfig(), tmp_path / "cache")
    cached.mkdir(parents=True)
    (cached / "config.json").write_text("{}")
    assert warm_start(tmp_path / "model", envs, WarmStartConfig(), tmp_path / "cache") == cached
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"[warm start] using the cached warm start {cached}, keyed on model ")
    assert "cache_user_env:DemoEnv (source " in line and "demonstrations " in line
    assert "steps=300" in line


def test_a_warm_start_longer_than_a_minute_says_how_long_before_it_runs():
    from forge_agent.warm_start import estimate_line

    assert estimate_line(3, 6.0, 300) == (
        "[warm start] about 10 min for 300 steps (2.0 s a step); cached after, and "
        "warm_start.steps sets how many"
    )
    assert estimate_line(3, 0.3, 300) is None  # 30 s: no estimate


def test_a_warm_start_builds_only_the_demonstrations_its_steps_draw_and_says_so(
    tiny_tokenizer, capsys
):
    """c257d3d built all warm_start.num_demos (2,000) whatever warm_start.steps was, silently:
    a Gymnasium id's 8 steps prepared for minutes before the first line."""
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.run.config import load_config
    from forge_agent.warm_start.cache_key import warm_start_key
    from forge_agent.warm_start.sft import demonstration_trajectories

    env = ResolvedEnv.of(load_config(None, []).env)
    cfg = WarmStartConfig(steps=3, batch_size=4, num_demos=2000)
    demos = demonstration_trajectories(ChatRenderer(tiny_tokenizer), [env], cfg)
    assert len(demos) == 12
    out = capsys.readouterr().out
    assert "[warm start] preparing 12 demonstrations (3 steps x 4 draw at most 12" in out
    assert "[warm start] prepared 4/12 demonstrations |" in out and "eta" in out
    assert "[warm start] prepared 12 demonstrations in" in out
    assert warm_start_key(tiny_tokenizer.name_or_path, [env], cfg)["demos_built"] == 12
    whole = WarmStartConfig(steps=300, batch_size=32, num_demos=2000)  # the default: all
    assert "demos_built" not in warm_start_key(tiny_tokenizer.name_or_path, [env], whole)


def _stand_in_warm_start(folder, episode_tokens: int) -> None:
    """A stand-in for a cached warm start (no weights): what the cache lookup reads."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    lengths = {"turn_tokens": 8, "episode_tokens": episode_tokens}
    (folder / "demonstration_lengths.json").write_text(json.dumps(lengths))


def test_a_run_whose_episode_limits_cut_nothing_uses_the_warm_start_cached_before_them(
    tiny_model_path, tmp_path, capsys
):
    """Demonstrations are cut to the run's episode limits now; a warm start cached before,
    whose demonstrations those limits cut nothing of, has the tokens a build would give and
    is used (the default run's: its key is the one it had)."""
    from forge_agent.warm_start.config import DemoCap

    envs = [ResolvedEnv.of("calculator", kwargs={"difficulty": 1})]
    cfg = WarmStartConfig(steps=1, batch_size=8)
    cached = warm_start_dir(tiny_model_path, envs, cfg, tmp_path)
    _stand_in_warm_start(cached, episode_tokens=120)
    limits = DemoCap(max_total_tokens=512, max_turns=4, tool_output_tokens=64)
    assert warm_start(tiny_model_path, envs, cfg, tmp_path, cap=limits) == cached
    assert "using the cached warm start" in capsys.readouterr().out


@pytest.mark.parametrize(
    "limits",
    [{"max_total_tokens": 100}, {"max_turns": 1}, {"tool_output_tokens": 1}],
    ids=["tokens", "turns", "replies"],
)
def test_a_warm_start_cached_before_is_not_used_where_the_limits_would_cut_it(
    tiny_model_path, tmp_path, limits
):
    from forge_agent.warm_start.cache_key import dir_of, warm_start_key
    from forge_agent.warm_start.config import DemoCap
    from forge_agent.warm_start.sft import cached_warm_start

    envs = [ResolvedEnv.of("calculator", kwargs={"difficulty": 1})]
    cfg = WarmStartConfig(steps=1, batch_size=8, demo_fraction=1.0)  # every one calls: 2 turns
    _stand_in_warm_start(warm_start_dir(tiny_model_path, envs, cfg, tmp_path), 120)
    cap = DemoCap(**limits)
    key = warm_start_key(tiny_model_path, envs, cfg)
    cut_key = {**key, "context": cap.key()}
    assert cached_warm_start(tiny_model_path, envs, cfg, cap, (key, cut_key), tmp_path) is None
    cut = dir_of(tiny_model_path, cut_key, tmp_path)  # one built with these limits: used
    _stand_in_warm_start(cut, 100)
    found = cached_warm_start(tiny_model_path, envs, cfg, cap, (key, cut_key), tmp_path)
    assert found == (cut, cut_key)
