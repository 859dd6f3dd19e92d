"""Curricula: at which difficulty to train, and which tasks not to spend generation on.

Two mechanisms, both set in `env.curriculum` and both off by default:

- **A difficulty ladder** (`kwarg`, `levels`, `advance_at`, `window`): training tasks come from
  the env built with `kwarg=levels[i]`, starting at `levels[0]`. When the mean reward of the
  last `window` groups at the current level reaches `advance_at`, the ladder moves to the next
  level (and stays at the last). The level is a metric (`curriculum/level`) and part of the
  run's checkpoint; a resumed run continues at its level. Held-out evaluation keeps reading
  `env.kwargs`, so `env.kwargs.difficulty=2` evaluates on difficulty 2 while the ladder trains
  from 1.
      env.curriculum: {kwarg: difficulty, levels: [1, 2, 3], advance_at: 0.7, window: 16}
- **Online task selection** (`select: true`): a task whose last group had no reward variance
  (always solved or never solved, the groups DAPO's filter drops after generating them) is
  skipped when the task stream offers it again within `retry_after` draws, then re-tried: the
  policy has changed since. It acts on tasks that come back (a dataset's next epoch); a
  generator's tasks are fresh every draw, and there the ladder is what moves difficulty.

The ladder changes what the env's `tasks()` generates; each task carries what its episode needs
(the calculator's prompt and answer, a frozen_lake map), so env workers built from `env.kwargs`
run tasks of every level.

    curriculum = Curriculum(env)            # (a ResolvedEnv) yields (task, env_seed) pairs
    task, seed = next(curriculum)
    curriculum.observe(task, rewards)       # the group's rewards, when it is scored
    curriculum.state() / load_state(state)  # with the checkpoint
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from forge_agent.env.config import CurriculumConfig
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.env.tasks import TaskStream, load_tasks

__all__ = ["Curriculum", "CurriculumConfig", "check_curriculum"]

LEVEL_KEY = "curriculum_level"
"""The task field naming the ladder level a task was drawn at (set only with a ladder)."""


def check_curriculum(env: ResolvedEnv) -> None:
    """Refuse a ladder the env cannot follow, before any actor starts: a `kwarg` its
    constructor does not take, or a level it rejects (built and asked for a task at each
    level). Raises `EnvSetupError` naming the key, the env and what is allowed."""
    cfg = env.config.curriculum
    if not cfg.ladder:
        return
    factory = env.factory()
    train_seed = env.config.train_seed
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if cfg.kwarg not in params and not takes_any:
        allowed = ", ".join(n for n in params if n != "self") or "none"
        raise EnvSetupError(
            env.id,
            "env.curriculum.kwarg",
            f"{cfg.kwarg!r} is not an argument of {getattr(factory, '__name__', factory)}; "
            f"its arguments: {allowed}",
        )
    for level in cfg.levels:
        try:
            load_tasks(env.with_kwargs({**env.kwargs, cfg.kwarg: level}), "train", 1, train_seed)
        except Exception as exc:
            raise EnvSetupError(
                env.id,
                "env.curriculum.levels",
                f"level {cfg.kwarg}={level!r} is rejected: {type(exc).__name__}: {exc}",
            ) from exc


class Curriculum(Iterator[tuple[dict[str, Any], int]]):
    """The training task stream of `env` under its `env.curriculum`."""

    def __init__(self, env: ResolvedEnv) -> None:
        self._make_stream = TaskStream
        self.resolved = env
        self.env = self.resolved.config
        cfg: CurriculumConfig = self.env.curriculum
        self.kwarg, self.levels = cfg.kwarg, list(cfg.levels)
        self.advance_at, self.window = cfg.advance_at, cfg.window
        self.select, self.retry_after = cfg.select, cfg.retry_after
        self.level_index = 0
        self.draws = 0  # tasks taken from the stream, skipped ones included
        self.skipped = 0
        self.advances: list[dict[str, Any]] = []  # {"level", "draws"} of each move up
        self._recent: deque[float] = deque(maxlen=self.window)
        self._settled_until: dict[str, int] = {}  # task id -> draw count it is skipped until
        self.stream = self._make_stream(self._env_at(0))

    @property
    def level(self) -> Any:
        """The current level's value (None without a ladder)."""
        return self.levels[self.level_index] if self.kwarg is not None else None

    @property
    def position(self) -> int:
        return self.draws

    def _env_at(self, index: int) -> ResolvedEnv:
        if self.kwarg is None:
            return self.resolved
        return self.resolved.with_kwargs({**self.env.kwargs, self.kwarg: self.levels[index]})

    def __next__(self) -> tuple[dict[str, Any], int]:
        while True:
            task, seed = next(self.stream)
            self.draws += 1
            until = self._settled_until.get(_key(task))
            if self.select and until is not None and self.draws <= until:
                self.skipped += 1
                continue
            if self.kwarg is not None:
                task[LEVEL_KEY] = self.level_index
            return task, seed

    def observe(self, task: dict[str, Any], rewards: Sequence[float]) -> bool:
        """Record a scored group of `task` (its members' rewards, infra failures left out);
        returns True when the ladder moved up a level."""
        if not rewards:
            return False
        if self.select:
            key = _key(task)
            if max(rewards) == min(rewards):
                self._settled_until[key] = self.draws + self.retry_after
            else:
                self._settled_until.pop(key, None)
        if self.kwarg is None or task.get(LEVEL_KEY) != self.level_index:
            return False  # a group drawn before the last move up
        self._recent.append(sum(rewards) / len(rewards))
        full = len(self._recent) == self.window
        if not full or self.level_index + 1 >= len(self.levels):
            return False
        if sum(self._recent) / len(self._recent) < self.advance_at:
            return False
        self.level_index += 1
        self._recent.clear()
        self.advances.append({"level": self.level, "draws": self.draws})
        self.stream = self._make_stream(self._env_at(self.level_index))
        return True

    def metrics(self) -> dict[str, float]:
        """`curriculum/level` (the level's index), the running reward and skipped tasks."""
        out = {"curriculum/skipped_tasks": float(self.skipped)}
        if self.kwarg is not None:
            out["curriculum/level"] = float(self.level_index)
            if self._recent:
                out["curriculum/running_reward"] = sum(self._recent) / len(self._recent)
        return out

    def summary(self) -> dict[str, Any]:
        """The run summary's view: the level reached, each move up, tasks skipped."""
        return {
            "kwarg": self.kwarg,
            "level": self.level,
            "level_index": self.level_index,
            "advances": list(self.advances),
            "skipped_tasks": self.skipped,
        }

    def state(self) -> dict[str, Any]:
        """Where the curriculum is (JSON-able): save it with a checkpoint."""
        return {
            "curriculum": True,
            "level_index": self.level_index,
            "levels": self.levels,
            "draws": self.draws,
            "skipped": self.skipped,
            "recent": list(self._recent),
            "settled_until": dict(self._settled_until),
            "advances": list(self.advances),
            "stream": self.stream.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from `state()`: the same level, running window, skip list and stream."""
        if not state.get("curriculum"):  # a checkpoint of a run without a curriculum
            self.stream.load_state(state)
            self.draws = int(state.get("position", 0))
            return
        if state.get("levels") != self.levels:
            raise ValueError(
                f"the checkpoint's curriculum levels {state.get('levels')} differ from "
                f"env.curriculum.levels={self.levels}"
            )
        self.level_index = int(state["level_index"])
        self.draws, self.skipped = int(state["draws"]), int(state["skipped"])
        self._recent = deque(state["recent"], maxlen=self.window)
        self._settled_until = {k: int(v) for k, v in state["settled_until"].items()}
        self.advances = list(state.get("advances", []))
        self.stream = self._make_stream(self._env_at(self.level_index))
        self.stream.load_state(state["stream"])


def _key(task: dict[str, Any]) -> str:
    return str(task.get("task_id", task.get("prompt", task)))
