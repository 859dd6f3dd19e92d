"""The env resolved once: a `ResolvedEnv` built at setup is what the task stream, the
curriculum, evaluation, the setup checks and the env workers receive; none of them looks the
env id up again."""

from __future__ import annotations

import itertools
import pickle

import pytest

import forge_agent.env.registry as registry
import forge_agent.env.resolved as resolved_module
from forge_agent.env import EnvConfig, EnvPool, ResolvedEnv
from forge_agent.env.config import CurriculumConfig
from forge_agent.env.curriculum import Curriculum, check_curriculum
from forge_agent.env.registry import UnknownEnvError
from forge_agent.env.tasks import TaskStream, eval_tasks, load_tasks
from forge_agent.run.config import load_config
from forge_agent.run.setup_checks import check_run_choices, check_setup


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """The env ids looked up in the registry from now on."""
    seen: list[str] = []
    lookup = registry.env_spec

    def counted(env_id: str) -> registry.EnvSpec:
        seen.append(env_id)
        return lookup(env_id)

    monkeypatch.setattr(registry, "env_spec", counted)
    monkeypatch.setattr(resolved_module, "env_spec", counted)
    return seen


def _ladder_env() -> EnvConfig:
    ladder = CurriculumConfig(kwarg="difficulty", levels=[1, 2], window=1, advance_at=0.5)
    return EnvConfig("calculator", {"difficulty": 1}, curriculum=ladder)


def test_tasks_and_the_curriculum_of_a_resolved_env_look_nothing_up(lookups) -> None:
    env = ResolvedEnv.of(_ladder_env())
    lookups.clear()
    check_curriculum(env)
    curriculum = Curriculum(env)
    task, _ = next(curriculum)
    assert curriculum.observe(task, [1.0])  # a move up the ladder builds a new stream
    next(curriculum)
    next(TaskStream(env))
    eval_tasks(env, 2)
    assert lookups == []


def test_a_resolved_env_gives_the_same_tasks_as_its_config() -> None:
    cfg = EnvConfig("calculator", {"difficulty": 2}, train_seed=5)
    env = ResolvedEnv.of(cfg)
    assert eval_tasks(env, 8) == eval_tasks(cfg, 8)
    assert list(itertools.islice(TaskStream(env), 8)) == list(itertools.islice(TaskStream(cfg), 8))


def test_env_workers_get_the_spec_resolved_at_setup(lookups) -> None:
    env = ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 1}))
    lookups.clear()
    pool = EnvPool(env, size=2)
    assert pool.spec is env.spec and pool.env is env.config
    assert lookups == []


def test_a_resolved_env_travels_to_another_host_by_pickle() -> None:
    env = ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 2}))
    assert pickle.loads(pickle.dumps(env)) == env


def test_the_run_choices_check_of_a_resolved_env_looks_nothing_up(lookups) -> None:
    cfg = load_config(None, [])
    env = ResolvedEnv.of(cfg.env)
    lookups.clear()
    check_run_choices(cfg, env)
    assert lookups == []


def test_the_setup_check_resolves_the_env_once(lookups) -> None:
    check_setup(load_config(None, []))
    assert lookups == ["calculator"]


def test_a_curriculum_level_keeps_the_spec_and_changes_the_kwargs() -> None:
    env = ResolvedEnv.of(_ladder_env())
    level = env.with_kwargs({"difficulty": 2})
    assert level.spec is env.spec and level.config.kwargs == {"difficulty": 2}
    assert env.config.kwargs == {"difficulty": 1}
    (task,) = load_tasks(level.spec, "eval", 1, seed=3, env_kwargs=level.config.kwargs)
    assert task["task_id"].startswith("calculator-d2-")


def test_an_unknown_env_id_fails_when_it_is_resolved() -> None:
    with pytest.raises(UnknownEnvError, match="no-such-env"):
        ResolvedEnv.of(EnvConfig("no-such-env"))
