"""Placement: which processes (and GPUs), on which host, each service of a run gets.

    placement = Placement(cfg.services, gpus_per_generator=cfg.generator.tensor_parallel_size)
    trainer_procs = placement.trainer_procs()        # services.trainer.procs procs, 1 GPU each
    generator_procs = placement.generator_procs(0)   # 1 proc seeing tensor_parallel_size GPUs

    # several hosts (forge_agent.hosts.meshes): each service on its host mesh
    placement = Placement(cfg.services, hosts=cfg.hosts, host_meshes=await resolve_host_meshes(...))

Every proc that runs on GPUs gets its own, disjoint ``CUDA_VISIBLE_DEVICES``, set by the proc's
bootstrap before anything in it touches CUDA. GPUs are handed out per host mesh in the order
services are spawned; asking for more than a host has is an error naming each service's share.
Services that ``hosts.services`` does not name (and every service with ``hosts.kind: local``)
run on this host. A generator mesh of several hosts takes the replicas in turn, one host each.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from forge_agent.hosts.config import LOCAL, SERVICES, HostsConfig, PlacementConfig
from forge_agent.hosts.serve import parse_address
from forge_agent.typed_config import check_field as _check

if TYPE_CHECKING:
    from monarch.actor import ProcMesh

    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.weights.config import WeightStoreConfig
    from forge_agent.weights.protocol import WeightStore


class Placement:
    """Spawns the run's proc meshes on this host and hands out its GPUs.

    ``gpu_count`` is the number of GPUs to hand out (default: ``torch.cuda.device_count()``,
    read once, when the first GPU is asked for).
    """

    def __init__(
        self,
        cfg: PlacementConfig,
        gpus_per_generator: int = 1,
        gpu_count: int | None = None,
        hosts: HostsConfig | None = None,
        host_meshes: dict[str, Any] | None = None,
    ) -> None:
        self.cfg = cfg
        self.gpus_per_generator = gpus_per_generator
        self.gpu_count = gpu_count  # per host
        self.hosts = hosts or HostsConfig()
        self.host_meshes = dict(host_meshes or {})
        missing = sorted({self.hosts.mesh_of(s) for s in SERVICES} - {LOCAL, *self.host_meshes})
        if missing:
            raise ValueError(f"placement: no host mesh named {missing} was resolved")
        self.meshes: list[Any] = []
        self.named: dict[str, Any] = {}  # the latest mesh spawned under each name
        self.given: list[tuple[str, list[str]]] = []  # (mesh name, devices of each proc)
        self._next_gpu: dict[str, int] = {}  # per host mesh

    def mesh_of(self, service: str) -> str:
        """The host mesh ``service`` runs on ("local": this host)."""
        return self.hosts.mesh_of(service)

    def trainer_procs(self) -> Any:
        """The trainer's mesh: ``trainer.procs`` procs, one GPU each with ``with_gpus``."""
        t = self.cfg.trainer
        return self.spawn("trainer", t.procs, 1 if t.with_gpus else 0, service="trainer")

    def generator_procs(self, replica: int, environ: dict[str, str] | None = None) -> Any:
        """Generator replica ``replica``'s mesh: one proc (``gpus_per_generator`` GPUs);
        ``environ``: set in the proc before anything imports torch (OpenMP reads it then)."""
        g = self.cfg.generator
        gpus = self.gpus_per_generator if g.with_gpus else 0
        name = f"generator{replica}"
        given = dict(self.given)
        if self.cfg.colocate == "sleep" and name not in given:  # the trainer's (only) GPU
            self.given.append((name, [given.get("trainer", ["0"])[0]]))
        return self.spawn(name, 1, gpus, service="generator", host=replica, environ=environ)

    def reward_procs(self) -> Any:
        """The reward service's mesh: ``reward.num_replicas`` CPU procs."""
        return self.spawn("reward", self.cfg.reward.num_replicas, service="reward")

    def spawn(
        self,
        name: str,
        procs: int,
        gpus_per_proc: int = 0,
        service: str | None = None,
        host: int | None = None,
        environ: dict[str, str] | None = None,
    ) -> Any:
        """A mesh of ``procs`` procs per host of ``service``'s host mesh (this host when
        None), each given its own next ``gpus_per_proc`` GPUs of its host; ``host`` i: on
        host i (modulo the mesh's size) only; ``environ``: variables each proc sets first."""
        host_name = self.mesh_of(service) if service else LOCAL
        hosts = self._host(host_name, host)
        devices: tuple[str, ...] = ()
        if gpus_per_proc:
            given = dict(self.given)
            if name in given:  # a replacement for a failed mesh gets its GPUs back
                devices = tuple(given[name])
            else:
                devices = tuple(
                    self._take_gpus(name, host_name, gpus_per_proc) for _ in range(procs)
                )
                self.given.append((name, list(devices)))
        bootstrap = functools.partial(
            _bootstrap, devices, tuple((environ or {}).items()), name
        )  # fmt: skip
        mesh = hosts.spawn_procs(per_host={"procs": procs}, name=name, bootstrap=bootstrap)
        self.meshes.append(mesh)
        self.named[name] = mesh
        return mesh

    async def check_host(self, name: str, service: str, host: int | None = None) -> None:
        """Before ``name``'s mesh is spawned again (a replacement after a fault): raise
        ``HostLostError`` when its host no longer answers within ``HOST_PROBE_S`` (its Monarch
        worker was killed, or the node lost), instead of a replacement that never starts.
        A no-op for a first spawn and on this host."""
        import asyncio

        mesh_name = self.mesh_of(service)
        if mesh_name == LOCAL or name not in self.named:
            return
        # imported here: Monarch's client transport: +0.2 s at import, measured; only for hosts that
        # are addresses
        from forge_agent.hosts.attach import HostInfo

        probe = self._host(mesh_name, host).spawn_procs(per_host={"procs": 1}, name="probe")
        try:
            info = probe.spawn("probe", HostInfo)
            await asyncio.wait_for(info.describe.call(), HOST_PROBE_S)
        except Exception as exc:  # TimeoutError, or the dead worker's error
            where = "" if host is None else f"host {host % len(self.host_meshes[mesh_name])} of "
            raise HostLostError(
                f"placement: {where}host mesh {mesh_name!r} ({self.hosts.kind}) does not "
                f"answer ({type(exc).__name__}): its Monarch host process is gone (killed, or the "
                f"node lost), so {name} cannot be replaced there. A Slurm job cannot restart "
                "a node's worker: resume from the last checkpoint (resume=true) in a new job"
            ) from exc
        await probe.stop()

    def _host(self, host_name: str, host: int | None) -> Any:
        if host_name == LOCAL:
            from monarch.actor import this_host

            return this_host()
        mesh = self.host_meshes[host_name]
        return mesh if host is None or len(mesh) == 1 else mesh.slice(hosts=host % len(mesh))

    def host_count(self, service: str) -> int:
        """How many hosts ``service``'s mesh has (1 for this host)."""
        name = self.mesh_of(service)
        return 1 if name == LOCAL else len(self.host_meshes[name])

    def _take_gpus(self, name: str, host_name: str, n: int) -> str:
        if self.gpu_count is None:
            import torch

            self.gpu_count = torch.cuda.device_count()
        first = self._next_gpu.get(host_name, 0)
        if first + n > self.gpu_count:
            shares = ", ".join(f"{m}: {len(d)} x {d[0].count(',') + 1}" for m, d in self.given)
            where = "this host" if host_name == LOCAL else f"host mesh {host_name!r}"
            raise RuntimeError(
                f"placement: {name} needs {n} more GPU(s) but {where} has "
                f"{self.gpu_count} and {first} are already given ({shares or 'none'}); lower "
                "services.*.with_gpus / procs / num_replicas or generator.tensor_parallel_size"
            )
        self._next_gpu[host_name] = first + n
        return ",".join(str(d) for d in range(first, first + n))

    async def weight_store(self, cfg: WeightStoreConfig) -> WeightStore:
        """The run's weight store (``cfg``: a ``WeightStoreConfig``) on the trainer's host:
        in this process when the trainer and the generators run on this host.

        When the generators run on other hosts than the trainer, a
        ``forge_agent.weights.relay.CrossHostWeightStore``: the same versioned put/get, each
        version broadcast (``hosts.weights_backend``: gloo or NCCL) to one store per host, from
        which that host's generators read through shared memory; with
        ``weight_store.backend=torchstore``, TorchStore, its storage volume on the trainer's
        host (each tensor crosses hosts as a Monarch message)."""
        # imported here: torch: +2.3 s at import, measured; `--check` reads placement without it
        from forge_agent.weights.store import make_weight_store

        trainer, gen = self.mesh_of("trainer"), self.mesh_of("generator")
        # colocated: versions in slots of the trainer's device memory (`weights.device_slots`)
        transport = "auto" if self.cfg.colocate == "off" else "device"
        if trainer == gen == LOCAL:
            # all on this host: the store actor lives in this (the controller's) process; it
            # only keeps a table of shared-memory files, not worth a process of its own
            from monarch.actor import this_proc

            return await make_weight_store(cfg, this_proc(), transport)
        if trainer == gen and self.host_count("generator") == 1:
            procs = self.spawn("store", 1, service="trainer")
            return await make_weight_store(cfg, procs, transport)
        if cfg.backend == "torchstore":
            # TorchStore moves each tensor as a Monarch message (RDMA where Monarch has it),
            # so any host reaches its storage volume, on the trainer's host, without a relay
            return await make_weight_store(cfg, self.spawn("store", 1, service="trainer"))
        # imported here: torch: +2.4 s at import, measured; `--check` reads placement without it
        from forge_agent.weights.relay import CrossHostWeightStore

        _check(
            cfg.backend == "monarch",
            "weight_store.backend",
            cfg.backend,
            f"'monarch' or 'torchstore' when the trainer ({trainer}) and generators ({gen}) are "
            "on other hosts",
        )
        home = self.spawn("store", 1, service="trainer")
        n = self.host_count("generator")
        others = {
            f"{gen}{i if n > 1 else ''}": self.spawn(f"store{i}", 1, service="generator", host=i)
            for i in range(n)
        }
        return await CrossHostWeightStore.spawn(
            (trainer, home),
            others,
            await self.trainer_address(trainer, home),
            backend=self.hosts.weights_backend,
            max_versions=cfg.max_versions,
            put_timeout_s=cfg.put_timeout_s,
        )

    async def trainer_address(self, host_name: str, procs: ProcMesh) -> str:
        """The address other hosts reach the trainer's host (mesh ``host_name``, where
        ``procs`` run) by: on a Slurm node, the node's own hostname, asked of ``procs`` (Slurm
        nodes resolve each other's names: Monarch reaches its workers by them too)."""
        if host_name != LOCAL and self.hosts.kind == "slurm":
            # imported here: Monarch's client transport: +0.2 s at import, measured; only for hosts
            # that are addresses
            from forge_agent.hosts.attach import HostInfo

            info = await procs.spawn("trainer_host", HostInfo).describe.call_one()
            return info["hostname"]
        return self.address_of(host_name)

    def address_of(self, host_name: str) -> str:
        """The address other hosts reach host mesh ``host_name``'s (first) host by."""
        import socket

        if host_name != LOCAL and self.hosts.kind == "addresses":
            return parse_address(self.hosts.addresses[host_name][0])[0]
        if host_name == LOCAL and self.hosts.client_address:
            host = self.hosts.client_address.removeprefix("tcp://").rsplit(":", 1)[0]
            if host not in ("", "0.0.0.0", "*"):
                return host.strip("[]")
        if host_name == LOCAL:
            return socket.gethostname()
        raise ValueError(
            f"placement: the trainer's host mesh {host_name!r} comes from a {self.hosts.kind} "
            "job, whose hosts publish no address here; cross-host weights need the trainer on "
            "a `workers` or `slurm` mesh or on this host, or weight_store.backend=torchstore"
        )

    async def env_pool(self, env: ResolvedEnv) -> Any:
        """The run's env workers (``env``: the run's env, resolved): an ``EnvPool`` of
        subprocesses of this process, or, with ``hosts.services.env`` naming a host mesh, a
        pool inside an ``EnvPoolActor`` on that mesh's first host (``RemoteEnvs``)."""
        w = self.cfg.env
        if self.mesh_of("env") == LOCAL:
            # imported here: the env package: +0.08 s at import, measured; only when the env pool is
            # placed
            from forge_agent.env import EnvPool

            return EnvPool(
                env, size=w.count() * w.envs_per_worker, envs_per_worker=w.envs_per_worker
            )
        # imported here: Monarch actors: +0.26 s at import, measured; only for env workers on other
        # hosts
        from forge_agent.env.remote_pool import EnvPoolActor, RemoteEnvs

        actor = self.spawn("env", 1, service="env", host=0).spawn(
            "env_pool",
            EnvPoolActor,
            env,
            workers=w.num_replicas,
            per_core=w.per_core,
            envs_per_worker=w.envs_per_worker,
        )
        return await RemoteEnvs.start(actor)

    async def stop(self) -> None:
        """Stop every proc this placement started, then release the host meshes (their
        workers stay up for the next run)."""
        import asyncio
        import contextlib

        for mesh in reversed(self.meshes):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(mesh.stop(), 30)
        self.meshes.clear()
        for host in self.host_meshes.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(host.stop(), 30)


HOST_PROBE_S = 30.0  # a host that does not answer a fresh proc by then is lost


class HostLostError(RuntimeError):
    """A service's host no longer answers (its Monarch host process is gone)."""


PROC_TITLE_TAG = "[forge-agent:{}]"
"""Appended to a proc's command line (`ps`, /proc/PID/cmdline) by its bootstrap: which mesh
it serves (trainer, generator0, store, reward, env, ...); the benches label memory by it."""


def _bootstrap(
    devices: tuple[str, ...], environ: tuple[tuple[str, str], ...], name: str = ""
) -> None:
    """Proc bootstrap (before the actors' modules import torch): ``environ``'s variables
    where the proc's environment lacks them, this proc's own GPUs (chosen by its rank in
    the mesh) when ``devices``, and its mesh ``name`` on its command line (`PROC_TITLE_TAG`,
    through setproctitle where installed: vLLM depends on it)."""
    import os

    if name:
        try:
            import setproctitle
        except ImportError:
            pass
        else:
            title = setproctitle.getproctitle()
            setproctitle.setproctitle(f"{title} {PROC_TITLE_TAG.format(name)}")

    for key, value in environ:
        os.environ.setdefault(key, value)
    if devices:
        from monarch.actor import current_rank

        os.environ["CUDA_VISIBLE_DEVICES"] = devices[current_rank().rank]
