"""The env resolved once: a `ResolvedEnv` built at setup is what the task stream, the
curriculum, evaluation, the setup checks and the env workers receive; none of them looks the
env id up again."""

from __future__ import annotations

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
    assert [t["task_id"] for t in eval_tasks(env, 8)] == [
        t["task_id"] for t in load_tasks(env, "eval", 8, seed=cfg.eval_seed)
    ]
    assert next(TaskStream(env)) == next(TaskStream(ResolvedEnv.of(cfg)))


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
    (task,) = load_tasks(level, "eval", 1, seed=3)
    assert task["task_id"].startswith("calculator-d2-")


def test_an_unknown_env_id_fails_when_it_is_resolved() -> None:
    with pytest.raises(UnknownEnvError, match="no-such-env"):
        ResolvedEnv.of(EnvConfig("no-such-env"))


def test_an_env_that_is_already_resolved_is_not_resolved_again() -> None:
    env = ResolvedEnv.of("calculator")
    with pytest.raises(TypeError, match="EnvConfig or an env id"):
        ResolvedEnv.of(env)  # type: ignore[arg-type]


# Where the library may turn an env id into an env: where an id is read from a config or a
# hook (the driver's setup, evaluation's setup, the model recipe, an env naming another env),
# never below it. Every other module takes the `ResolvedEnv` it is handed.
RESOLVES_IDS = {
    "env/registry.py": "env_spec and make_env themselves",
    "env/resolved.py": "ResolvedEnv.of",
    "env/demonstrations.py": "demonstrations_origin: the env an env's hook names",
    "env/adapters/agent_gym.py": "GymnasiumAgentEnv(env_id): a user names the env to wrap",
    "env/adapters/openenv.py": "serve_openenv(env_id): the env a server serves",
    "env/adapters/agent_program.py": "an agent program's tasks_from, resolved once",
    "models/tiny.py": "the tokenizer corpus envs of the model's recipe",
    "run/controller.py": "the driver's setup: the run's env",
    "run/setup_checks.py": "check_setup: the config's env",
}


def test_env_ids_are_resolved_only_where_they_are_read() -> None:
    import ast
    from pathlib import Path

    root = Path(registry.__file__).resolve().parents[1]
    lookups = {"env_spec", "make_env", "of"}
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in lookups:
                continue
            owner = getattr(func, "value", None)
            if name == "of" and getattr(owner, "id", None) not in ("ResolvedEnv", "cls"):
                continue
            found.add(str(path.relative_to(root)))
    assert found <= set(RESOLVES_IDS), (
        f"env ids resolved below setup in {found - set(RESOLVES_IDS)}"
    )
    assert "run/controller.py" in found and "env/tasks.py" not in found  # the check can see
