"""Cross-host weight sync, run as the controller of Monarch host processes on other hosts.

    python -m apps.bench.cross_host_sync --client tcp://IP:0 --mb 1024 --repeats 3 \
        [--model tiny-2.9M] [--backend monarch|torchstore] tcp://HOST0:PORT tcp://HOST1:PORT [...]

A trainer stand-in on the first host puts a transformer-like state dict (or `--model`'s, see
`apps.bench.weight_sync.MODELS`) into a `CrossHostWeightStore` (`--backend monarch`); a
consumer on each other host gets every version into its own preallocated state dict from its
own host's store. Prints one JSON line: per-sync times (put = trainer-host shm write +
broadcast; get = the consumer's read on its host), the broadcast alone, GB/s, and checks
(checksums and versions seen on each host). `--backend torchstore`: the real TorchStore
instead, its storage volume on the first host, its controller in this process; each consumer
gets every tensor from that volume as a Monarch message.
`apps.bench.weight_sync --cross-host` runs this across namespace hosts
(forge_agent/hosts/netns.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import torch
from monarch.actor import Actor, endpoint

from apps.bench.weight_sync import fake_state_dict, model_state_dict

TRANSPORTS = {
    "monarch": "torch.distributed gloo broadcast",
    "torchstore": "TorchStore: a Monarch message per tensor",
}


class SyncEnd(Actor):
    """Stands in for the trainer (`push`) or a generator (`pull`) on its host."""

    def __init__(self) -> None:
        self.sd: dict[str, torch.Tensor] = {}

    @endpoint
    async def make(
        self, total_bytes: int, model: str | None = None
    ) -> list[tuple[str, tuple[int, ...], str]]:
        self.sd = model_state_dict(model) if model else fake_state_dict(total_bytes)
        return [
            (k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in self.sd.items()
        ]

    @endpoint
    async def prepare(self, spec: list[tuple[str, tuple[int, ...], str]]) -> None:
        self.sd = {n: torch.zeros(s, dtype=getattr(torch, d)) for n, s, d in spec}

    @endpoint
    async def push(self, store, version: int) -> tuple[float, dict[str, float]]:
        with torch.no_grad():
            for t in self.sd.values():
                t.add_(1)  # every version differs
        t0 = time.perf_counter()
        await store.put(version, self.sd)
        return time.perf_counter() - t0, getattr(store, "last_put", {})

    @endpoint
    async def pull(self, store, version: int) -> float:
        t0 = time.perf_counter()
        await store.get(version, into=self.sd)
        return time.perf_counter() - t0

    @endpoint
    async def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.sd.values()))


async def spawn_store(backend: str, names: list[str], infra: dict, master: str) -> Any:
    """The store under test: its home (and, for monarch, one relay per host) on `infra`."""
    if backend == "torchstore":
        from forge_agent.weights.torchstore_store import TorchStoreWeightStore

        store = TorchStoreWeightStore(max_versions=2)
        await store.initialize(mesh=infra[names[0]])
        return store
    from forge_agent.weights.relay import CrossHostWeightStore

    return await CrossHostWeightStore.spawn(
        (names[0], infra[names[0]]), {n: infra[n] for n in names[1:]}, master, max_versions=2
    )


async def run(
    client: str,
    workers: list[str],
    mb: int,
    repeats: int,
    fail_last: bool,
    backend: str = "monarch",
    model: str | None = None,
) -> dict:
    from forge_agent.hosts.attach import attach_hosts, enable_client_transport

    enable_client_transport(client)
    names = [f"host{i}" for i in range(len(workers))]
    meshes = [await attach_hosts(n, [w], timeout_s=60) for n, w in zip(names, workers, strict=True)]
    procs = [
        m.spawn_procs(per_host={"procs": 2}, name=f"{n}_procs")
        for n, m in zip(names, meshes, strict=True)
    ]
    infra = {n: p.slice(procs=0) for n, p in zip(names, procs, strict=True)}
    ends = {
        n: p.slice(procs=1).spawn("sync_end", SyncEnd) for n, p in zip(names, procs, strict=True)
    }
    master = workers[0].removeprefix("tcp://").rsplit(":", 1)[0]
    store = await spawn_store(backend, names, infra, master)
    near = store.for_host if backend == "monarch" else lambda _: store
    spec = await ends[names[0]].make.call_one(mb * 2**20, model)
    for n in names[1:]:
        await ends[n].prepare.call_one(spec)
    size = sum(
        torch.Size(s).numel() * torch.empty((), dtype=getattr(torch, d)).element_size()
        for _, s, d in spec
    )
    # the first max_versions + 1 puts write fresh shared-memory pages (a first touch costs
    # ~0.3 GB/s here); from then on every put reuses a dropped version's slot, as in training
    warmup = 3
    times = []
    for version in range(1, repeats + warmup + 1):
        put_s, parts = await ends[names[0]].push.call_one(store, version)
        gets = [await ends[n].pull.call_one(near(n), version) for n in names[1:]]
        times.append((put_s, max(gets), parts.get("broadcast_s", 0.0)))
    want = await ends[names[0]].checksum.call_one()
    got = {n: await ends[n].checksum.call_one() for n in names[1:]}
    homes = store.hosts if backend == "monarch" else {names[0]: store}
    versions = {n: await s.versions() for n, s in homes.items()}
    failure = None
    if fail_last:  # the last host's procs die; the next put must fail, naming that host
        await procs[-1].stop()
        t0 = time.perf_counter()
        try:
            await ends[names[0]].push.call_one(store, repeats + warmup + 1)
        except Exception as e:
            failure = {"error": str(e), "elapsed_s": time.perf_counter() - t0}
    else:
        await store.close()
    for p in procs[: -1 if fail_last else None]:
        await p.stop()
    put_s = statistics.median(t[0] for t in times[warmup:])
    get_s = statistics.median(t[1] for t in times[warmup:])
    broadcast_s = statistics.median(t[2] for t in times[warmup:]) or None
    return {
        "backend": backend,
        "model": model,
        "size_mb": size / 2**20,
        "tensors": len(spec),
        "hosts": len(workers),
        "transport": TRANSPORTS[backend],
        "put_s": put_s,
        "get_s": get_s,
        "total_s": put_s + get_s,
        "broadcast_s": broadcast_s,
        "cold_s": sum(times[0][:2]),  # the first sync: fresh pages on both hosts
        "gb_per_s": size / (put_s + get_s) / 1e9,
        "put_gb_per_s": size / put_s / 1e9,
        "get_gb_per_s": size / get_s / 1e9,
        "broadcast_gb_per_s": size / broadcast_s / 1e9 if broadcast_s else None,
        "checksum_trainer": want,
        "checksum_hosts": got,
        "versions": versions,
        "failure": failure,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--client", required=True)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fail-last", action="store_true", help="then kill the last host's procs")
    ap.add_argument("--backend", choices=sorted(TRANSPORTS), default="monarch")
    ap.add_argument("--model", default=None, help="a model of apps.bench.weight_sync.MODELS")
    ap.add_argument("workers", nargs="+")
    a = ap.parse_args()
    result = asyncio.run(run(a.client, a.workers, a.mb, a.repeats, a.fail_last, a.backend, a.model))
    print(json.dumps(result), flush=True)
