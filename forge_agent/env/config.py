"""`EnvConfig`: which env a run trains on, its tasks and how long its calls may take; and
`CurriculumConfig`, its `env.curriculum` section (the mechanism: `forge_agent.env.curriculum`).

The env layer owns it: the env workers (`EnvPool`, `EnvPoolActor`), the task stream, the
evaluator and the agent-program path take this config, not copies of its fields.

    env = EnvConfig("calculator", {"difficulty": 2})
    stream = TaskStream(env)               # forge_agent.env.tasks; from env.train_seed
    held_out = eval_tasks(env, 64)         # from env.eval_seed, disjoint from training
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forge_agent.env.registry import is_agent_program
from forge_agent.typed_config import check_field


@dataclass
class CurriculumConfig:
    """`env.curriculum`: a difficulty ladder and online task selection (module docstring)."""

    kwarg: str | None = None  # the env constructor argument the ladder raises; null: no ladder
    levels: list[Any] = field(default_factory=list)
    advance_at: float = 0.7  # mean group reward over `window` groups that moves up a level
    window: int = 16  # groups at the current level in the running mean
    select: bool = False  # skip tasks whose last group had zero variance, for `retry_after`
    retry_after: int = 256  # task draws before a skipped task is tried again

    def __post_init__(self) -> None:
        check_field(
            0.0 < self.advance_at <= 1.0, "advance_at", self.advance_at, "a fraction in (0, 1]"
        )
        check_field(self.window >= 1, "window", self.window, "an int >= 1")
        check_field(self.retry_after >= 1, "retry_after", self.retry_after, "an int >= 1")
        if self.kwarg is not None:
            check_field(len(self.levels) >= 2, "levels", self.levels, "a list of >= 2 levels")
        else:
            allowed = "the env argument whose values `levels` lists"
            check_field(not self.levels, "kwarg", self.kwarg, allowed)

    @property
    def ladder(self) -> bool:
        return self.kwarg is not None


@dataclass
class EnvConfig:
    """Which environment to train on, where its tasks come from and its call deadlines.

    `id`: a registered env id, a "package.module:Class" entry point, an OpenEnv server's
    http(s) URL, or "agent:package.module:fn" (an agent program, docs/agents.md).
    `kwargs`: the env's constructor arguments. `dataset` / `fields`: tasks from a hub dataset or
    a local file instead of the env's own (task field -> column or "{template}").
    `curriculum`: a difficulty ladder over one of `kwargs` and online task selection
    (`forge_agent.env.curriculum`); off by default.
    `seats`: for a multi-seat env (`SeatEnv`), who plays each seat: `policy`, `snapshot:-k`,
    `league:k`, `module:function` (scripted) or `endpoint:<url>[#model]`
    (`forge_agent.rollout.players`); empty for one-seat envs.
    """

    id: str = "calculator"
    kwargs: dict[str, Any] = field(default_factory=lambda: {"difficulty": 1})
    step_timeout_s: float = 30.0  # one env step past this ends the episode `policy_timeout`
    reset_timeout_s: float = 60.0  # building + resetting an env, and a worker's start
    close_timeout_s: float = 30.0  # closing an env at the end of its episode
    train_seed: int = 0  # seed of the first training task; eval tasks start at eval_seed
    eval_seed: int = 10_000
    dataset: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    seats: dict[str, str] = field(default_factory=dict)
    # what an episode scores when the policy's message makes a step raise or time out
    # (`policy_error`, `policy_timeout`); None: the env class's `failure_reward` (default 0.0)
    failure_reward: float | None = None

    def __post_init__(self) -> None:
        check_field(bool(self.id), "id", self.id, "a registered env id or 'module:Name'")
        for key in ("step_timeout_s", "reset_timeout_s", "close_timeout_s"):
            check_field(getattr(self, key) > 0, key, getattr(self, key), "seconds > 0")

    @property
    def is_agent_program(self) -> bool:
        """The env is an agent program on the openai client (`agent:...`)."""
        return is_agent_program(self.id)

    @property
    def agent_reward(self) -> str | None:
        """An agent program's reward function ("module:fn"), run by the reward actors."""
        return self.kwargs.get("reward") if self.is_agent_program else None
