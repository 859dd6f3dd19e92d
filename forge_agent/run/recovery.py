"""Checkpoints of a run and going back to one: resume (`resume=true`) and a trainer restart.

    recovery = Recovery(out / "checkpoints", keep=2, services, tasks, buffer)
    await recovery.save(step)                 policy, optimizer, version + the run's position
    restored = await recovery.resume()        the newest complete checkpoint, loaded
    step, version = await recovery.trainer_restarted(trainer)

A run's position is what the driver needs to continue exactly: the task stream's state, the
step, and the replay buffer's scored groups not yet trained on. A half-written checkpoint is
never loaded (`trainer.checkpoint.complete_checkpoints`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_agent.algorithms.replay import ReplayBuffer
from forge_agent.env.curriculum import Curriculum
from forge_agent.run.services import Services
from forge_agent.trainer.checkpoint_dirs import complete_checkpoints, prune_checkpoints
from forge_agent.types import ActorMesh


@dataclass
class Restored:
    """A checkpoint loaded into the trainer: its folder, the run's position and the version."""

    path: Path
    position: dict[str, Any]
    version: int

    @property
    def step(self) -> int:
        return int(self.position.get("step", 0))


class Recovery:
    """The run's checkpoint folder, saved to and restored from through the trainer service;
    restoring also puts the task stream and the replay buffer back where the run was."""

    def __init__(
        self, folder: Path, keep: int, services: Services, tasks: Curriculum, buffer: ReplayBuffer
    ) -> None:
        self.folder = folder
        self.keep = keep
        self.services = services
        self.tasks = tasks
        self.buffer = buffer

    async def save(self, step: int) -> Path:
        """Checkpoint `step` (`step_000040`) with the run's position; prune to `keep`."""

        path = self.folder / f"step_{step:06d}"
        position = {"tasks": self.tasks.state(), "step": step, "replay": self.buffer.state_dict()}
        await self.services.save_checkpoint(str(path), position)
        prune_checkpoints(self.folder, self.keep)
        return path

    async def resume(self) -> Restored | None:
        """`resume=true`: the newest complete checkpoint, loaded (None: there is none)."""
        restored = await self._restore(trainer=None)
        if restored is not None:
            self._go_back(restored.position, restored.version)
        return restored

    async def trainer_restarted(self, trainer: ActorMesh) -> tuple[Restored | None, int]:
        """A replacement trainer continues from the newest complete checkpoint (or the initial
        policy when there is none); the generators go back to that policy, dropping requests
        in flight. Returns what was restored and the version now served."""
        restored = await self._restore(trainer=trainer)
        version = await self.services.policy_version(trainer=trainer)
        self._go_back(restored.position if restored else {}, version)
        version = await self.services.push_weights(trainer=trainer)
        await self.services.generators.update(version, in_flight="drop", rollback=True)
        return restored, version

    async def _restore(self, trainer: Any) -> Restored | None:

        checkpoints = complete_checkpoints(self.folder)
        if not checkpoints:
            return None
        position = await self.services.load_checkpoint(str(checkpoints[-1]), trainer=trainer)
        version = await self.services.policy_version(trainer=trainer)
        return Restored(checkpoints[-1], position, version)

    def _go_back(self, position: dict[str, Any], version: int) -> None:
        """Tasks and replay as of `position` ({}: the start) at policy `version`; the buffer's
        staleness bound is re-checked against it."""
        if "tasks" in position:
            self.tasks.load_state(position["tasks"])
        self.buffer.load_state_dict(position.get("replay") or self.buffer.counts(), version)
