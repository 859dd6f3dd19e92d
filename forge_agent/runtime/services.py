"""The run's services: what the controller drives, built, restarted and stopped here.

    Services(cfg, policy_path, on_trainer_restart, on_generator_restart)
      await start(meshes)        weight store, env workers, then trainer ranks, vLLM generator
                                 replicas and reward actors started together, each on its host
                                 mesh (`runtime.placement`, `runtime.host_placement`)
      trainer / generators / rewards
                                 supervised services (`runtime.supervision.Service`): a
                                 process that dies or overruns its call deadline is replaced
                                 (its `on_*_restart` hook brings the replacement up to date),
                                 past `supervision.max_restarts` the run fails naming it
      store, pool, placement     the weight store, the env worker pool, the proc meshes
      await call_trainer(method, *args)     every trainer rank; rank 0's answer
      await generator_busy()     the replicas' busy seconds so far
      restarts()                 restarts so far, over all services
      await shutdown()           stop everything started here

Each actor gets its own config section plus what the run shares: the policy folder, its dtype
and the seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from forge_agent.config import AgentConfig
from forge_agent.rewards.build import build_rubric

logger = logging.getLogger(__name__)

RestartHook = Callable[[Any], Awaitable[None]]


class Services:
    """The supervised actors and env workers of one run (see the module docstring)."""

    def __init__(
        self,
        cfg: AgentConfig,
        policy_path: Path | str,
        on_trainer_restart: RestartHook,
        on_generator_restart: RestartHook,
    ) -> None:
        self.cfg = cfg
        self.policy_path = str(policy_path)
        self.on_trainer_restart = on_trainer_restart
        self.on_generator_restart = on_generator_restart
        self.placement: Any = None
        self.store: Any = None
        self.pool: Any = None
        self.trainer: Any = None
        self.generators: list[Any] = []
        self.rewards: Any = None
        self.generator_info: dict[str, Any] = {}  # the first replica's setup answer

    @property
    def supervised(self) -> list[Any]:
        return [s for s in [self.trainer, self.rewards, *self.generators] if s is not None]

    async def start(self, meshes: Any) -> dict[str, Any]:
        """Place and start every service; the generator's setup answer (`max_model_len`...)."""
        from forge_agent.runtime.placement import Placement
        from forge_agent.runtime.supervision import Service, install_fault_hook

        cfg = self.cfg
        install_fault_hook()
        self.placement = Placement(
            cfg.services, cfg.generator.tensor_parallel_size, hosts=cfg.hosts, host_meshes=meshes
        )
        self.store = await self.placement.weight_store(cfg.weight_store)
        sup = cfg.supervision
        supervised = functools.partial(
            Service,
            default_deadline_s=sup.call_deadline_s,
            max_restarts=sup.max_restarts,
            restart_timeout_s=sup.restart_timeout_s,
        )
        self.trainer = supervised(
            "trainer",
            self._spawn_trainer,
            deadlines={"train_step": sup.train_step_deadline_s},
            on_restart=self.on_trainer_restart,
        )
        self.generators = [
            supervised(
                f"generator{i}",
                functools.partial(self._spawn_generator, i),
                deadlines={
                    "generate": sup.generate_deadline_s,
                    "update_weights": cfg.training.weight_sync_timeout_s,
                },
                on_restart=self.on_generator_restart,
            )
            for i in range(cfg.services.generator.num_replicas)
        ]
        self.rewards = supervised(
            "reward", self._spawn_reward, deadlines={"score": sup.reward_deadline_s}
        )
        self.pool = await self.placement.env_pool(cfg.env)  # env workers, on the env's host
        started = time.monotonic()
        await asyncio.gather(*(s.start() for s in self.supervised))
        logger.info("actors ready in %.1fs: %s", time.monotonic() - started, self.generator_info)
        print(
            f"[setup] actors ready in {time.monotonic() - started:.0f}s: "
            f"{len(self.generators)} vLLM generator(s), {cfg.services.trainer.procs} trainer "
            f"rank(s), reward, weight store; {self.pool.size} envs on "
            f"{self.pool.num_workers} env worker(s)",
            flush=True,
        )
        return self.generator_info

    async def call_trainer(self, method: str, *args: Any, on: Any = None) -> Any:
        """Call `method` on every trainer rank (of `on`: a replacement trainer being brought
        up to date); rank 0's answer."""
        endpoint = getattr(self.trainer if on is None else on, method)
        if self.cfg.services.trainer.procs == 1:
            return await endpoint.call_one(*args)
        values = await endpoint.call(*args)
        return next(iter(values.values()))

    async def generator_busy(self) -> float:
        """The replicas' busy seconds so far, summed."""
        busy = await asyncio.gather(
            *(g.busy_seconds.call_one() for g in self.generators), return_exceptions=True
        )
        return sum(b for b in busy if isinstance(b, float | int))  # a replaced replica: 0

    def restarts(self) -> int:
        return sum(s.restarts for s in self.supervised)

    async def shutdown(self) -> None:
        """Stop everything started here (actors, env workers and their sandboxes)."""
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await self.pool.close()
        for gen in self.generators:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(gen.actor.shutdown.call_one(), 30)
        if self.store is not None and hasattr(self.store, "close"):
            with contextlib.suppress(Exception):
                await self.store.close()
        if self.placement is not None:
            await self.placement.stop()
        for service in self.supervised:  # whatever outlived its mesh's stop (vLLM's engine core)
            await service.stop(timeout_s=1)

    # ------------------------------------------------------------------ spawning
    async def _spawn_trainer(self) -> tuple[Any, Any]:
        from forge_agent.trainer.actor import TrainerActor

        cfg = self.cfg
        procs = self.placement.trainer_procs()
        trainer = procs.spawn(
            "trainer",
            TrainerActor,
            cfg.trainer,
            self.policy_path,
            self.store,
            device=cfg.device,
            master_port=free_port(),
            dtype=cfg.model.dtype,
            seed=cfg.seed,
        )
        await trainer.setup.call()
        return procs, trainer

    async def _spawn_generator(self, replica: int) -> tuple[Any, Any]:
        from forge_agent.generator import Generator

        cfg = self.cfg
        procs = self.placement.generator_procs(replica)
        generator = procs.spawn(
            "generator",
            Generator,
            cfg.generator,
            self.policy_path,
            dtype=cfg.model.dtype,
            seed=cfg.seed,
        )
        self.generator_info = await generator.setup.call_one()
        return procs, generator

    async def _spawn_reward(self) -> tuple[Any, Any]:
        from forge_agent.rewards.actor import RewardActor

        cfg = self.cfg
        agent_reward = cfg.env.kwargs.get("reward") if cfg.env.id.startswith("agent:") else None
        rubric = functools.partial(
            build_rubric, dict(cfg.rewards.components), cfg.rollout.max_total_tokens, agent_reward
        )
        procs = self.placement.reward_procs()
        rewards = procs.spawn("reward", RewardActor, rubric)
        await rewards.setup.call()
        return procs, rewards


def free_port() -> int:
    """A free TCP port on loopback (the trainer's torch.distributed rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
