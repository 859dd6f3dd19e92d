"""The run's services: what the driver calls, built, restarted and stopped here.

    services = Services(specs, policy_path, on_trainer_restart, on_generator_restart, env)
                                     (specs: `ServiceSpecs`, handed over by the driver)
    await services.start(meshes)     weight store, env workers, then trainer ranks, vLLM generator
                                     replicas and reward actors started together, each on its
                                     host mesh (`hosts.placement`, `hosts.meshes`)
    await services.train_step(batch)             every trainer rank (call), rank 0's metrics
    await services.push_weights()                trainer -> weight store; the new version
    await services.generators.update(v, in_flight="finish" | "continue" | "drop")
                                                 fan-out: every generator replica loads v
    await services.generators.sleep() / .wake_up(["weights"])    `services.colocate`: the
                                                 generator frees the trainer's GPU (no-ops else)
    await services.score(trajectories)           route: one reward replica scores them
    await services.shutdown()                    stop everything started here

The trainer, the generator replicas and the reward actors are supervised services
(`run.supervision.Service`): a process that dies or overruns its call deadline is replaced
(its `on_*_restart` hook brings the replacement up to date); past `supervision.max_restarts` the
run fails naming it. Each actor gets its own config section plus what the run shares: the
policy folder, its dtype and the seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.generator import Generator
from forge_agent.generator.engine_args import engine_process_environ
from forge_agent.hosts.placement import Placement
from forge_agent.rewards.build import build_rubric
from forge_agent.run.config import ServiceSpecs
from forge_agent.run.supervision import Service, ServiceRestarted, install_fault_hook
from forge_agent.types import ActorMesh

if TYPE_CHECKING:
    from forge_agent.hosts.meshes import HostMeshes
    from forge_agent.weights.protocol import WeightStore

logger = logging.getLogger(__name__)

RestartHook = Callable[[Any], Awaitable[None]]

InFlight = Literal["finish", "continue", "drop"]
"""What a weight update does with requests running on the old weights: let them finish first
(on-policy), interrupt and continue them on the new weights (partial rollouts, async), or drop
them (going back to a checkpoint)."""


class GeneratorReplicas:
    """The generator replicas, called as one where every replica must act (a fan-out)."""

    def __init__(
        self, replicas: list[Service], store: WeightStore, colocated: bool = False
    ) -> None:
        self.replicas = replicas
        self.store = store  # the weight store the replicas pull versions from
        self.colocated = colocated  # `services.colocate`: they sleep while the trainer steps
        self.asleep: list[str] = []  # what sleeps now: "weights", "kv_cache"

    def __iter__(self) -> Iterator[Service]:
        return iter(self.replicas)

    def __len__(self) -> int:
        return len(self.replicas)

    def __getitem__(self, index: int) -> Service:
        return self.replicas[index]

    async def update(
        self,
        version: int,
        *,
        in_flight: InFlight = "finish",
        rollback: bool = False,
        only: Service | None = None,
    ) -> None:
        """Every replica (or `only` one) loads `version` from the weight store in place.

        `rollback`: `version` is older than the one served (a trainer went back to a
        checkpoint). A replica that dies or overruns `training.weight_sync_timeout_s` is
        replaced, and its replacement loads the current version itself (its restart hook).
        """
        results = await asyncio.gather(
            *(
                replica.update_weights.call_one(
                    version,
                    source=self.store,
                    abort_in_flight=in_flight == "drop",
                    resume_in_flight=in_flight == "continue",
                    rollback=rollback,
                )
                for replica in ([only] if only is not None else self.replicas)
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, ServiceRestarted):
                raise result

    async def sleep(self, level: int = 1) -> None:
        """Colocated: every replica drains and sleeps (`generator.sleep`); else nothing."""
        if self.colocated and not self.asleep:
            await asyncio.gather(*(r.sleep.call_one(level) for r in self.replicas))
            self.asleep = ["weights", "kv_cache"]

    async def wake_up(self, tags: list[str]) -> None:
        """Colocated: wake each of `tags` still asleep, in the order given; else nothing."""
        for tag in [t for t in tags if t in self.asleep]:
            await asyncio.gather(*(r.wake_up.call_one([tag]) for r in self.replicas))
            self.asleep.remove(tag)

    async def busy_seconds(self) -> float:
        """The replicas' busy seconds so far, summed (a replaced replica counts from 0)."""
        busy = await asyncio.gather(
            *(g.busy_seconds.call_one() for g in self.replicas), return_exceptions=True
        )
        return sum(b for b in busy if isinstance(b, float | int))


class Services:
    """The supervised actors and env workers of one run (see the module docstring)."""

    def __init__(
        self,
        specs: ServiceSpecs,
        policy_path: Path | str,
        on_trainer_restart: RestartHook,
        on_generator_restart: RestartHook,
        env: ResolvedEnv,
    ) -> None:
        self.specs = specs
        self.env = env  # the run's env as the driver resolved it: the env workers' env
        self.policy_path = str(policy_path)
        self.on_trainer_restart = on_trainer_restart
        self.on_generator_restart = on_generator_restart
        self.placement: Any = None
        self.store: Any = None
        self.pool: Any = None
        self.trainer: Any = None
        self.generators = GeneratorReplicas([], store=None)
        self.rewards: Any = None
        self.generator_info: dict[str, Any] = {}  # the first replica's setup answer

    @property
    def supervised(self) -> list[Service]:
        return [s for s in [self.trainer, self.rewards, *self.generators] if s is not None]

    async def start(self, meshes: HostMeshes) -> dict[str, Any]:
        """Place and start every service; the generator's setup answer (`max_model_len`...)."""
        specs = self.specs
        install_fault_hook()
        self.placement = Placement(
            specs.placement,
            specs.generator.tensor_parallel_size,
            hosts=specs.hosts,
            host_meshes=meshes,
        )
        self.store = await self.placement.weight_store(specs.weight_store)
        sup = specs.supervision
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
        self.generators = GeneratorReplicas(
            [
                supervised(
                    f"generator{i}",
                    functools.partial(self._spawn_generator, i),
                    deadlines={
                        "generate": sup.generate_deadline_s,
                        "update_weights": specs.weight_sync_timeout_s,
                    },
                    on_restart=self.on_generator_restart,
                )
                for i in range(specs.placement.generator.num_replicas)
            ],
            store=self.store,
            colocated=specs.placement.colocate != "off",
        )
        self.rewards = supervised(
            "reward", self._spawn_reward, deadlines={"score": sup.reward_deadline_s}
        )
        self.pool = await self.placement.env_pool(self.env)  # env workers, on the env's host
        started = time.monotonic()
        await asyncio.gather(*(s.start() for s in self.supervised))
        logger.info("actors ready in %.1fs: %s", time.monotonic() - started, self.generator_info)
        print(
            f"[setup] actors ready in {time.monotonic() - started:.0f}s: "
            f"{len(self.generators)} vLLM generator(s), {specs.placement.trainer.procs} trainer "
            f"rank(s), reward, weight store; {self.pool.size} envs on "
            f"{self.pool.num_workers} env worker(s)",
            flush=True,
        )
        return self.generator_info

    # ------------------------------------------------------------------ trainer calls
    # Every rank takes part in each call (FSDP collectives); rank 0 answers. `trainer=`: a
    # replacement trainer being brought up to date by its restart hook.
    async def train_step(self, batch: list[Any]) -> dict[str, float]:
        """One optimizer step on `batch`; the step's metrics (`train/policy_version` ...)."""
        return await self._rank0(self.trainer.train_step, batch)

    async def push_weights(self, *, trainer: ActorMesh | None = None) -> int:
        """The trainer's weights into the weight store as a new version; that version."""
        return int(await self._rank0((trainer or self.trainer).push_weights))

    async def save_checkpoint(self, path: str, position: dict[str, Any]) -> None:
        """Policy, optimizer, version and the run's `position` (tasks, step, replay) to `path`."""
        await self._rank0(self.trainer.save_checkpoint, path, position)

    async def load_checkpoint(
        self, path: str, *, trainer: ActorMesh | None = None
    ) -> dict[str, Any]:
        """Restore a checkpoint into the trainer; the run's position saved with it."""
        return await self._rank0((trainer or self.trainer).load_checkpoint, path)

    async def policy_version(self, *, trainer: ActorMesh | None = None) -> int:
        """The version of the trainer's current policy."""
        return int(await self._rank0((trainer or self.trainer).policy_version))

    # ------------------------------------------------------------------ reward calls
    async def score(
        self, trajectories: list[Any], components: list[str] | None = None
    ) -> tuple[list[Any], dict[str, float]]:
        """Score `trajectories` on one reward replica (route); once more if that replica died
        and was replaced meanwhile. `components`: only these rubric components."""
        args = (trajectories,) if components is None else (trajectories, components)
        try:
            return await self.rewards.score.choose(*args)
        except ServiceRestarted:
            return await self.rewards.score.choose(*args)

    async def _rank0(self, endpoint: Any, *args: Any) -> Any:
        if self.specs.placement.trainer.procs == 1:
            return await endpoint.call_one(*args)
        values = await endpoint.call(*args)
        return next(iter(values.values()))

    def restarts(self) -> int:
        return sum(s.restarts for s in self.supervised)

    def raise_if_failed(self) -> None:
        """Raise the `ServiceFailed` of a service beyond recovery (episodes only record a
        failed generator as `generator_error`; the run must stop with the cause)."""
        for service in self.supervised:
            if service.failed is not None:
                raise service.failed

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
        # imported here: torch: +2.1 s at import, measured; `--check` imports this module without it
        from forge_agent.trainer.actor import TrainerActor

        specs = self.specs
        await self.placement.check_host("trainer", "trainer")
        procs = self.placement.trainer_procs()
        trainer = procs.spawn(
            "trainer",
            TrainerActor,
            specs.trainer,
            self.policy_path,
            self.store,
            device=specs.device,
            master_port=free_port(),
            dtype=specs.dtype,
            seed=specs.seed,
            free_cache=specs.placement.colocate == "sleep",
        )
        await trainer.setup.call()
        return procs, trainer

    async def _spawn_generator(self, replica: int) -> tuple[Any, Any]:
        specs = self.specs
        # an in-process engine core runs in the generator's proc: it gets the engine's
        # environment (OpenMP's wait policy) before torch is imported there
        inproc = specs.generator.resolved_engine_core() == "inproc"
        environ = engine_process_environ(specs.generator) if inproc else None
        await self.placement.check_host(f"generator{replica}", "generator", replica)
        procs = self.placement.generator_procs(replica, environ=environ)
        lora = specs.trainer.lora
        generator = procs.spawn(
            "generator",
            Generator,
            specs.generator,
            self.policy_path,
            dtype=specs.dtype,
            seed=specs.seed,
            lora=lora if lora is not None and lora.sync == "adapter" else None,
            colocate=specs.placement.colocate,
        )
        self.generator_info = await generator.setup.call_one()
        return procs, generator

    async def _spawn_reward(self) -> tuple[Any, Any]:
        # imported here: Monarch's actor module: +0.2 s at import, measured
        from forge_agent.rewards.actor import RewardActor

        specs, env = self.specs, self.env.config
        rubric = functools.partial(
            build_rubric,
            dict(specs.reward_components),
            specs.max_total_tokens,
            env.agent_reward,
            env.failure_reward,
        )
        await self.placement.check_host("reward", "reward")
        procs = self.placement.reward_procs()
        rewards = procs.spawn("reward", RewardActor, rubric)
        await rewards.setup.call()
        return procs, rewards


def free_port() -> int:
    """A free TCP port on loopback (the trainer's torch.distributed rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
