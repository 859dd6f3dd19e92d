"""`RewardActor`: scores trajectories off the rollout path, as a Monarch actor.

procs = this_host().spawn_procs(per_host={"procs": 2})
rewards = procs.spawn("reward", RewardActor, make_rubric)   # make_rubric: () -> Rubric
await rewards.setup.call()
scored, metrics = await rewards.score.choose(trajectories)  # one replica
"""

from __future__ import annotations

from collections.abc import Callable

from monarch.actor import Actor, endpoint

from forge_agent.rewards.rubric import Rubric, reward_metrics
from forge_agent.types import Trajectory

RubricFactory = Callable[[], Rubric]


class RewardActor(Actor):
    """Holds one `Rubric` and scores lists of trajectories.

    The constructor takes plain data: an importable zero-argument factory returning the rubric
    (or a picklable `Rubric`); `setup` builds it, so construction errors reach the caller.
    """

    def __init__(self, rubric: RubricFactory | Rubric) -> None:
        self._spec = rubric
        self.rubric: Rubric | None = None

    @endpoint
    async def setup(self) -> list[str]:
        """Build the rubric; returns its component names."""
        self.rubric = self._spec if isinstance(self._spec, Rubric) else self._spec()
        if not isinstance(self.rubric, Rubric):
            raise TypeError(f"rubric factory returned {type(self.rubric).__name__}, not Rubric")
        return [c.name for c in self.rubric.components]

    @endpoint
    async def score(
        self, trajectories: list[Trajectory], components: list[str] | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Score the trajectories (with the named `components` only, default all); returns
        them with `reward`/`info` filled in, plus metrics (per-component means, error counts).
        The caller gets copies: use the returned ones."""
        if self.rubric is None:
            raise RuntimeError("RewardActor.score called before setup()")
        results = await self.rubric.score_all(trajectories, apply=True, only=components)
        return trajectories, reward_metrics(results)

    @endpoint
    async def failures(self) -> dict[str, int]:
        """Reward-function failures counted since setup, by component name."""
        return dict(self.rubric.failures) if self.rubric else {}
