"""`--check`'s episodes: the env played once on the first training task and once on the first
held-out task, in an env worker as a run plays it, by a scripted policy that answers at once.

    check = check_episodes(cfg, report.train_tasks[:1], report.eval_tasks[:1])
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

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import Message, SeatStart, Status

if TYPE_CHECKING:
    from forge_agent.run.config import AgentConfig

__all__ = ["CHECK_ANSWER", "CheckedEpisode", "EpisodeCheck", "check_episodes", "play_check_episode"]

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


async def play_check_episode(
    pool: Any, task: dict[str, Any], split: str, max_turns: int
) -> CheckedEpisode:
    """One episode of `task` on a leased env of `pool` (an `EnvPool`), answering
    `CHECK_ANSWER` each turn."""
    from forge_agent.env.protocol import step_failure

    task_id = str(task.get("task_id", "?"))
    answer: Message = {"role": "assistant", "content": CHECK_ANSWER}
    async with pool.lease() as env:
        try:
            start = await env.reset(task, 0)
        except Exception as exc:
            status, _ = step_failure(exc, env)
            status = status if status.is_infra_failure else Status.ENV_ERROR  # a reset
            return CheckedEpisode(split, task_id, status.value, error=f"reset: {exc}")
        if isinstance(start, SeatStart):
            return await _play_seated(env, start, split, task_id, max_turns)
        reward = 0.0
        for turn in range(1, max_turns + 1):
            try:
                result = await env.step(answer)
            except Exception as exc:
                status, failure = step_failure(exc, env)
                return CheckedEpisode(split, task_id, status.value, failure, turn, f"step: {exc}")
            reward += sum(float(v) for v in result.rewards.values())
            if result.done:
                return CheckedEpisode(split, task_id, Status.OK.value, reward, turn)
        return CheckedEpisode(split, task_id, Status.TRUNCATED_TURNS.value, reward, max_turns)


async def _play_seated(
    env: Any, start: SeatStart, split: str, task_id: str, max_turns: int
) -> CheckedEpisode:
    """A seated game with every seat answering `CHECK_ANSWER`; its reward is the first
    seat's (the game usually ends on invalid moves: reset and step ran)."""
    from forge_agent.env.protocol import step_failure

    answer: Message = {"role": "assistant", "content": CHECK_ANSWER}
    first = next(iter(start.seats))
    reward, moves = 0.0, 0
    for moves in range(1, max_turns * len(start.seats) + 1):
        try:
            result = await env.step(answer)
        except Exception as exc:
            status, failure = step_failure(exc, env)
            return CheckedEpisode(split, task_id, status.value, failure, moves, f"step: {exc}")
        reward += sum(float(v) for v in result.rewards.get(first, {}).values())
        if result.done:
            return CheckedEpisode(split, task_id, Status.OK.value, reward, moves)
    return CheckedEpisode(split, task_id, Status.TRUNCATED_TURNS.value, reward, moves)


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
    cfg: AgentConfig, env: ResolvedEnv, train: list[dict[str, Any]], held_out: list[dict[str, Any]]
) -> EpisodeCheck:
    """Each task of `train` and of `held_out` played once, in an env worker built from `env`
    (`cfg.env` as `check_setup` resolved it)."""
    from forge_agent.env.pool import EnvPool
    from forge_agent.env.registry import is_agent_program

    if is_agent_program(cfg.env.id):
        return EpisodeCheck(
            not_played=f"episodes: not played by --check ({cfg.env.id!r} is an agent program: "
            "it needs the policy's endpoint)"
        )

    async def play() -> list[CheckedEpisode]:
        played = []
        async with EnvPool(env, size=1) as pool:
            for split, tasks in (("train", train), ("held-out", held_out)):
                for task in tasks:
                    played.append(
                        await play_check_episode(pool, task, split, cfg.rollout.max_turns)
                    )
        return played

    return EpisodeCheck(asyncio.run(play()))
