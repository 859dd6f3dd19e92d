"""`TrainerActor`: the `Trainer` as a Monarch actor.

    procs = this_host().spawn_procs(per_host={"procs": 1})
    trainer = procs.spawn("trainer", TrainerActor, TrainerConfig(), path, weight_store)
    await trainer.setup.call_one()
    metrics = await trainer.train_step.call_one(trajectories)
    version = await trainer.push_weights.call_one()          # -> weight store

The constructor takes plain data (a config, the model folder and, optionally, a picklable
weight-store client);
`setup` loads the model, so load errors surface to the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from monarch.actor import Actor, endpoint

from forge_agent.memory import trim_heap
from forge_agent.trainer.config import TrainerConfig, titan_degrees
from forge_agent.types import Trajectory

if TYPE_CHECKING:
    from forge_agent.trainer.core import Trainer
    from forge_agent.weights.protocol import WeightStore


class TrainerActor(Actor):
    """Wraps one `Trainer` rank (one process, one device); spawn it on a mesh of N procs for
    N ranks."""

    def __init__(
        self,
        cfg: TrainerConfig,
        model: str,
        weight_store: WeightStore | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
        master_port: int = 29500,
        free_cache: bool = False,
    ) -> None:
        """`free_cache`: after each step hand the device's cached memory back (colocated
        with a generator, which wakes into it: `services.colocate: sleep`)."""
        self.cfg = cfg
        self.model = model
        self.weight_store = weight_store
        self.run = {"device": device, "dtype": dtype, "seed": seed}
        self.master_port = master_port
        self.free_cache = free_cache
        self.rank = 0
        self.trainer: Trainer | None = None

    def _t(self) -> Trainer:
        if self.trainer is None:
            raise RuntimeError("TrainerActor: call setup() before any other endpoint")
        return self.trainer

    @endpoint
    async def setup(self) -> int:
        """Load the model and build the optimizer; returns the policy version.

        Each proc of the mesh is one rank: the usual torch.distributed variables are set from
        the Monarch rank before the device mesh is built. With several procs the hf backend
        shards the transformers model with FSDP2 (`FSDPTrainer`), titan with torchtitan.
        """
        world = _mesh_size()
        if world > 1 or self.cfg.backend == "titan":
            self.rank, world = _join_process_group(self.master_port)
        self.trainer = build_trainer(self.cfg, self.model, world, **self.run)
        return self.trainer.policy_version

    @endpoint
    async def train_step(self, trajectories: list[Trajectory]) -> dict[str, float]:
        metrics = self._t().train_step(trajectories)
        # the step's activations are freed: hand their pages back while the trainer waits
        # for the next batch (on-policy, the generators work meanwhile)
        trim_heap()
        if self.free_cache:
            import torch  # loaded by the trainer's setup already

            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        return metrics

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
        """Put the current weights (with LoRA: the adapters, or the merged weights; see
        `Trainer.sync_state_dict`) into the weight store under the current policy version."""
        if self.weight_store is None:
            raise RuntimeError("TrainerActor was built without a weight_store")
        t = self._t()
        state = t.sync_state_dict()  # every rank: gathering sharded tensors is a collective
        if self.rank == 0:
            await self.weight_store.put(t.policy_version, state)
        return t.policy_version

    @endpoint
    async def save_checkpoint(self, path: str, data_position: object = None) -> str:
        return str(self._t().save_checkpoint(path, data_position))

    @endpoint
    async def load_checkpoint(self, path: str) -> Any:
        return self._t().load_checkpoint(path)


def build_trainer(cfg: TrainerConfig, model: str, world: int = 1, **run: Any) -> Trainer:
    """The trainer `cfg.backend` names for one rank of `world`: `Trainer` (hf, one rank),
    `FSDPTrainer` (hf, several ranks) or `TitanTrainer` (`cfg.titan` degrees). `run`: the
    run's device, dtype and seed (see `Trainer`)."""
    # imported here: torch, transformers and the trainer's modules: 0.15 GB of PSS (measured)
    # in the driver, which spawns this actor and never trains
    from forge_agent.trainer.core import Trainer
    from forge_agent.trainer.fsdp import FSDPTrainer

    if cfg.backend == "titan":
        # imported here: torchtitan: +7.6 s at import, measured; only for trainer.backend=titan
        from forge_agent.trainer.titan import TitanTrainer

        tp, _ = titan_degrees(cfg.titan, world)
        return TitanTrainer(cfg, model, tensor_parallel_degree=tp, **run)
    if cfg.titan:
        raise ValueError(
            f"trainer.titan={cfg.titan!r} is set but trainer.backend is {cfg.backend!r}; "
            "set trainer.backend=titan or drop trainer.titan"
        )
    if world > 1:
        return FSDPTrainer(cfg, model, **run)
    return Trainer(cfg, model, **run)


def _mesh_size() -> int:
    """How many procs run this actor (1 outside a Monarch mesh)."""
    from monarch.actor import current_rank

    return current_rank().extent.nelements


def _join_process_group(master_port: int) -> tuple[int, int]:
    """Set RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* from this proc's place in its Monarch mesh and
    pin its GPU; returns (rank, world size)."""
    import os

    import torch
    from monarch.actor import current_rank

    point = current_rank()
    rank, world = point.rank, point.extent.nelements
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        MASTER_PORT=str(master_port),
    )
    if torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    return rank, world
