"""Controller-side programs for the namespace-host tests, run as their own process
(`python tests/host_programs.py COMMAND ...`): Monarch takes one transport per process, and
the pytest process already uses the local one. Each prints one JSON line.

    actors CLIENT_ADDR WORKER...       one proc + HostInfo actor on each worker; where they ran
    attach CLIENT_ADDR TIMEOUT WORKER...  a placement naming the workers; the error and time
    replicas CLIENT_ADDR WORKER...     Placement of 3 generator replicas on one mesh of the
                                       workers; the host each replica's proc ran on
    run CLIENT_ADDR TIMEOUT OUT WORKER  a whole run (`train`) whose generators are on WORKER;
                                       the error and time
    train CLIENT_ADDR OUT MODEL TRAIN GEN ENV [BACKEND]   a short run, trainer / generator /
                                       env workers (and reward) each on its own worker, weights
                                       through weight_store.backend=BACKEND; what it saw
    slurm_train OUT MODEL [BACKEND]    the same short run as docs/hosts.md's Slurm example
                                       (trainer on one node, generator on two), on the Slurm
                                       that SLURM_CONF names; what it saw and its job id
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def actors(client: str, workers: list[str], shutdown: bool) -> dict:
    from forge_agent.hosts.attach import (
        HostInfo,
        attach_hosts,
        describe_host,
        enable_client_transport,
    )

    enable_client_transport(client)
    meshes = [await attach_hosts(f"host{i}", [w], timeout_s=30) for i, w in enumerate(workers)]
    procs = [m.spawn_procs(per_host={"procs": 1}, name=f"p{i}") for i, m in enumerate(meshes)]
    infos = [p.spawn("info", HostInfo) for p in procs]
    where = [await info.describe.call_one() for info in infos]
    for p in procs:
        await p.stop()
    if shutdown:
        for m in meshes:
            await m.shutdown()
    return {"client": describe_host(), "actors": where}


async def attach(client: str, timeout_s: float, workers: list[str]) -> dict:
    from forge_agent.hosts.config import HostsConfig
    from forge_agent.hosts.meshes import resolve_host_meshes

    cfg = HostsConfig(
        kind="addresses",
        addresses={"generators": workers},
        services={"generator": "generators"},
        client_address=client,
        connect_timeout_s=timeout_s,
    )
    started = time.monotonic()
    try:
        await resolve_host_meshes(cfg)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    return {"error": error, "elapsed_s": time.monotonic() - started}


async def train(
    client: str, out: str, model: str, train: str, gen: str, env: str, backend: str = "monarch"
) -> dict:
    hosts = [
        "hosts.kind=addresses",
        f"hosts.client_address={client}",
        f"hosts.addresses={{train: [{train}], gen: [{gen}], env: [{env}]}}",
        "hosts.services={trainer: train, generator: gen, env: env, reward: env}",
    ]
    return await _short_run(out, model, backend, hosts, ("trainer", "generator0", "env", "reward"))


async def slurm_train(out: str, model: str, backend: str = "monarch", fault: str = "") -> dict:
    """The docs' Slurm example (docs/hosts.md), run on this process's Slurm (`SLURM_CONF`);
    `fault` "kill-generator": the generator's process on its node is SIGKILLed in step 2."""
    hosts = [
        "hosts.kind=slurm",
        "hosts.nodes={train: 1, gen: 2}",
        "hosts.services={trainer: train, generator: gen}",
    ]
    services = ("trainer", "generator0", "store0")
    inject = _kill_generator if fault == "kill-generator" else None
    report = await _short_run(out, model, backend, hosts, services, inject)
    return {**report, "job": _slurm_job_of(out)}


async def _kill_generator(controller) -> dict:
    """SIGKILL generator replica 0's process (on its Slurm node: one machine here, so its pid
    is this machine's) once step 2's requests are in flight; what was killed."""
    import os
    import signal

    async def until(predicate, what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"fault injector: waited too long for {what}")
            await asyncio.sleep(0.05)

    gen = controller.services.generators[0]
    await until(lambda: controller.state.step >= 1 and controller.rollouts.open.is_set(), "step 1")
    await until(lambda: controller.profile.active["generate"] > 0, "requests in flight")
    pid = gen.mesh_pids[0]
    with open(f"/proc/{pid}/environ", "rb") as f:  # the node the proc runs on, as Slurm says
        node = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    os.kill(pid, signal.SIGKILL)
    return {
        "pid": pid,
        "node": node.get(b"SLURMD_NODENAME", b"").decode(),
        "step": controller.state.step,
    }


async def _short_run(
    out: str, model: str, backend: str, hosts: list[str], services: tuple[str, ...], inject=None
) -> dict:
    """Two GRPO steps with `hosts`; where `services` ran, versions and logprobs after;
    `inject(controller)`: a fault injected while the run goes on (what it did: "fault")."""
    from forge_agent.generator import SamplingConfig
    from forge_agent.hosts.attach import HostInfo
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import Controller
    from forge_agent.types import Trajectory

    overrides = [
        f"model.name={model}",
        "warm_start.enabled=false",
        f"output_dir={out}",
        "training.steps=2",
        "training.groups_per_step=1",
        "training.group_size=4",
        "rollout.max_concurrent_episodes=8",
        "services.env.num_replicas=4",
        "eval.every=0",
        "checkpoint.every=0",
        "metrics.console=false",
        # the tiny policy rarely solves a task; a length reward gives every group a signal
        "rewards.components={tests.host_programs:sampled_length: 1.0}",
        *hosts,
        f"weight_store.backend={backend}",
    ]
    controller = Controller(load_config(None, overrides))
    try:
        await controller.setup()
        where = {
            name: await mesh.spawn("where", HostInfo).describe.call_one()
            for name, mesh in controller.services.placement.named.items()
            if name in services
        }
        start = await _prompt_logprobs(controller.services.generators[0], SamplingConfig)
        injector = asyncio.ensure_future(inject(controller)) if inject else None
        summary = await controller.run()
        # after the last cross-host sync: the generator serves the trainer's weights
        ids = list(range(5, 40))
        got = await _prompt_logprobs(controller.services.generators[0], SamplingConfig, ids)
        n = len(ids)
        traj = Trajectory("t", "g", ids, [0] * n, [0.0] * n, [-1] * n)
        (want,) = await controller.services.trainer.compute_logprobs.call_one([traj])
        return {
            "summary": {k: summary[k] for k in ("steps", "policy_version", "counts")},
            "generator_version": await controller.services.generators[0].version.call_one(),
            "where": where,
            "env_pool": getattr(controller.services.pool, "where", None),
            "max_abs_diff": max(abs(a - b) for a, b in zip(got, want[1:], strict=True)),
            "changed": max(abs(a - b) for a, b in zip(got, start, strict=True)),
            "store": type(controller.services.store).__name__,
            "fault": _injected(injector),
        }
    finally:
        await controller.shutdown()


def _injected(injector) -> dict | str | None:
    """What the fault injector did (its error raises here), or why it did nothing."""
    if injector is None:
        return None
    if not injector.done():
        injector.cancel()
        return "not injected: the run ended first"
    return injector.result()


def _slurm_job_of(out: str) -> str | None:
    """The id of the Slurm job the run's workers logged to (Monarch's `slurm_<id>_*.out`)."""
    import glob
    import os

    logs = glob.glob(os.path.join(os.getcwd(), "slurm_*_monarch_job_*.out"))
    return os.path.basename(logs[0]).split("_")[1] if logs else None


async def replicas(client: str, workers: list[str]) -> dict:
    from forge_agent.hosts.attach import HostInfo
    from forge_agent.hosts.config import HostsConfig, PlacementConfig
    from forge_agent.hosts.meshes import resolve_host_meshes
    from forge_agent.hosts.placement import Placement

    hosts = HostsConfig(
        kind="addresses",
        addresses={"gen": workers},
        services={"generator": "gen"},
        client_address=client,
    )
    meshes = await resolve_host_meshes(hosts)
    placement = Placement(PlacementConfig(), hosts=hosts, host_meshes=meshes)
    where = []
    for i in range(3):
        info = placement.generator_procs(i).spawn("where", HostInfo)
        where.append((await info.describe.call_one())["hostname"])
    await placement.stop()
    return {"replicas": where}


async def run(client: str, timeout_s: float, out: str, worker: str) -> dict:
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import train

    cfg = load_config(
        None,
        [
            f"output_dir={out}",
            "hosts.kind=addresses",
            f"hosts.client_address={client}",
            f"hosts.connect_timeout_s={timeout_s}",
            f"hosts.addresses={{gen: [{worker}]}}",
            "hosts.services={generator: gen}",
        ],
    )
    started = time.monotonic()
    try:
        await train(cfg)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    return {"error": error, "elapsed_s": time.monotonic() - started}


def sampled_length(trajectory) -> float:
    """A reward that differs between episodes: sampled tokens / 100 (test runs only)."""
    return trajectory.num_sampled / 100


async def _prompt_logprobs(generator, sampling_cls, ids=None) -> list[float]:
    ids = ids or list(range(5, 40))
    sampling = sampling_cls(max_tokens=1, prompt_logprobs=True)
    return (await generator.generate.call_one(ids, sampling)).prompt_logprobs[1:]


def main() -> None:
    cmd, client, *rest = sys.argv[1:]
    if cmd == "actors":
        shutdown = "--shutdown" in rest
        out = asyncio.run(actors(client, [w for w in rest if w != "--shutdown"], shutdown))
    elif cmd == "replicas":
        out = asyncio.run(replicas(client, rest))
    elif cmd == "run":
        out = asyncio.run(run(client, float(rest[0]), *rest[1:]))
    elif cmd == "train":
        out = asyncio.run(train(client, *rest))
    elif cmd == "slurm_train":  # no client address: the Slurm job's meshes bring their own
        out = asyncio.run(slurm_train(client, *rest))
    elif cmd == "attach":
        out = asyncio.run(attach(client, float(rest[0]), rest[1:]))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
