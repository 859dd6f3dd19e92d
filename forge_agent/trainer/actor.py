"""`TrainerActor`: the `Trainer` as a Monarch actor.

    procs = this_host().spawn_procs(per_host={"procs": 1})
    trainer = procs.spawn("trainer", TrainerActor, TrainerConfig(model=path), weight_store)
    await trainer.setup.call_one()
    metrics = await trainer.train_step.call_one(trajectories)
    version = await trainer.push_weights.call_one()          # -> weight store

The constructor takes plain data (a config and, optionally, a picklable weight-store client);
`setup` loads the model, so load errors surface to the caller.
"""

from __future__ import annotations

from typing import Any

from monarch.actor import Actor, endpoint

from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.types import Trajectory


class TrainerActor(Actor):
    """Wraps one `Trainer` (one process, one device)."""

    def __init__(self, cfg: TrainerConfig, weight_store: Any = None) -> None:
        self.cfg = cfg
        self.weight_store = weight_store
        self.trainer: Trainer | None = None

    def _t(self) -> Trainer:
        if self.trainer is None:
            raise RuntimeError("TrainerActor: call setup() before any other endpoint")
        return self.trainer

    @endpoint
    async def setup(self) -> int:
        """Load the model and build the optimizer; returns the policy version."""
        self.trainer = Trainer(self.cfg)
        return self.trainer.policy_version

    @endpoint
    async def train_step(self, trajectories: list[Trajectory]) -> dict[str, float]:
        return self._t().train_step(trajectories)

    @endpoint
    async def sft_step(self, trajectories: list[Trajectory]) -> dict[str, float]:
        return self._t().sft_step(trajectories)

    @endpoint
    async def compute_logprobs(self, trajectories: list[Trajectory]) -> list[list[float]]:
        return [lp.tolist() for lp in self._t().compute_logprobs(trajectories)]

    @endpoint
    async def policy_version(self) -> int:
        return self._t().policy_version

    @endpoint
    async def push_weights(self) -> int:
        """Put the current weights into the weight store under the current policy version."""
        if self.weight_store is None:
            raise RuntimeError("TrainerActor was built without a weight_store")
        t = self._t()
        await self.weight_store.put(t.policy_version, t.state_dict())
        return t.policy_version

    @endpoint
    async def save_checkpoint(self, path: str, data_position: Any = None) -> str:
        return str(self._t().save_checkpoint(path, data_position))

    @endpoint
    async def load_checkpoint(self, path: str) -> Any:
        return self._t().load_checkpoint(path)
