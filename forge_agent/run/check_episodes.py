"""`--check`'s episodes: the env played once on the first training task and once on the first
held-out task, by a scripted policy that answers at once, through the run's own episode loop
(`RolloutEngine.run_episode`, in an env worker), so each ends with the status a run gives it.

    check = check_episodes(cfg, report.env, renderer, report.train_tasks[:1], report.eval_tasks[:1])
    check.lines()  # ["episode (train, task calc-3): ok, reward 0 after 1 turn(s) ...", ...]
    check.failed   # the episodes that ended in a failure: `--check` then exits 2

The answer is a plain message (`CHECK_ANSWER`), so the env's reset, its step and its judge run
on a real task; an env that wants more turns gets the same answer again, up to
`rollout.max_turns`. A failure is named with the status a run would give it (the rule of blame,
docs/rewards.md) and the exception's text, so a judge that raises on every answer shows here,
not after the warm start. A seated game (a reset that returns a `SeatStart`) is played with
every seat answering the same (its reward is the first seat's); an agent program (it runs
against the policy's endpoint) is not played. An episode that ends in a failure (an env, judge
or step that raised; `Status.is_policy_failure` or `is_infra_failure`) fails the check: a run
would score every such episode the env's failure reward, or lose it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge_agent.env.pool import EnvPool
from forge_agent.env.protocol import env_seats
from forge_agent.env.registry import is_agent_program
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.rollout.engine import RolloutEngine
from forge_agent.types import Completion, Status, Trajectory

if TYPE_CHECKING:
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.run.config import AgentConfig

__all__ = ["CHECK_ANSWER", "CheckAnswer", "CheckedEpisode", "EpisodeCheck", "check_episodes"]

CHECK_ANSWER = "I do not know."
"""The scripted policy's every message."""


@dataclass
class CheckedEpisode:
    """How one `--check` episode ended: its status, its reward (None when it has none), turns
    played and the error text of a failure."""

    split: str
    task_id: str
    status: str
    reward: float | None = None
    turns: int = 0
    error: str = ""

    @property
    def failed(self) -> bool:
        """It ended in a failure, the policy's (the env raised on its answer) or infra's."""
        status = Status(self.status)
        return status.is_policy_failure or status.is_infra_failure

    def line(self) -> str:
        """One console line."""
        head = f"episode ({self.split}, task {self.task_id}): {self.status}"
        if self.error:
            return f"{head}: {self.error}"
        reward = "none" if self.reward is None else f"{self.reward:g}"
        return f"{head}, reward {reward} after {self.turns} turn(s) (reset, step and judge ran)"


class CheckAnswer:
    """The scripted policy of `--check`: a `GenerateFn` whose every turn is `CHECK_ANSWER`
    and the renderer's stop token."""

    def __init__(self, renderer: ChatRenderer) -> None:
        text = renderer.tokenizer.encode(CHECK_ANSWER, add_special_tokens=False)
        self.token_ids = [*text, renderer.stop_token_ids[0]]

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        ids = list(self.token_ids)
        return Completion(ids, [0.0] * len(ids), "stop", policy_version=0)


def checked(split: str, task: dict[str, Any], traj: Trajectory) -> CheckedEpisode:
    """How the episode `traj` of `task` ended, as `--check` reports it."""
    error = str(traj.info.get("error", ""))
    reward = None if traj.status.is_infra_failure else traj.reward
    turns = len(traj.turn_spans)
    task_id = str(task.get("task_id", "?"))
    return CheckedEpisode(split, task_id, traj.status.value, reward, turns, error)


@dataclass
class EpisodeCheck:
    """`--check`'s episodes: those played, or why none was (`not_played`)."""

    episodes: list[CheckedEpisode] = field(default_factory=list)
    not_played: str = ""

    @property
    def failed(self) -> list[CheckedEpisode]:
        """The episodes that ended in a failure (`CheckedEpisode.failed`)."""
        return [e for e in self.episodes if e.failed]

    def lines(self) -> list[str]:
        """One console line per episode (or the reason none was played)."""
        return [self.not_played] if self.not_played else [e.line() for e in self.episodes]


def check_episodes(
    cfg: AgentConfig,
    env: ResolvedEnv,
    renderer: ChatRenderer,
    train: list[dict[str, Any]],
    held_out: list[dict[str, Any]],
) -> EpisodeCheck:
    """Each task of `train` and of `held_out` played once by `CheckAnswer` through the run's
    episode loop (`RolloutEngine.run_episode`), in an env worker built from `env` (`cfg.env`
    as `check_setup` resolved it); `renderer`: the policy's. A seated game has every seat
    played by the scripted policy; the report is the first seat's."""

    if is_agent_program(cfg.env.id):
        return EpisodeCheck(
            not_played=f"episodes: not played by --check ({cfg.env.id!r} is an agent program: "
            "it needs the policy's endpoint)"
        )
    players = dict.fromkeys(env_seats(env.factory())) or None  # every seat: the policy

    async def play() -> list[CheckedEpisode]:
        played = []
        async with EnvPool(env, size=1) as pool:
            engine = RolloutEngine(
                CheckAnswer(renderer), pool, renderer, cfg.rollout, players=players
            )
            for split, tasks in (("train", train), ("held-out", held_out)):
                for task in tasks:
                    trajs = await engine.run_episode(task, 0)
                    played.append(checked(split, task, trajs[0]))
        return played

    return EpisodeCheck(asyncio.run(play()))
