"""Controller-side programs for the namespace-host tests, run as their own process
(`python tests/host_programs.py COMMAND ...`): Monarch takes one transport per process, and
the pytest process already uses the local one. Each prints one JSON line.

    actors CLIENT_ADDR WORKER...       one proc + HostInfo actor on each worker; where they ran
    attach CLIENT_ADDR TIMEOUT WORKER...  a placement naming the workers; the error and time
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def actors(client: str, workers: list[str], shutdown: bool) -> dict:
    from forge_agent.hosts import HostInfo, attach_hosts, describe_host, enable_client_transport

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
    from forge_agent.host_placement import HostsConfig, resolve_host_meshes

    cfg = HostsConfig(
        kind="workers",
        workers={"generators": workers},
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


def main() -> None:
    cmd, client, *rest = sys.argv[1:]
    if cmd == "actors":
        shutdown = "--shutdown" in rest
        out = asyncio.run(actors(client, [w for w in rest if w != "--shutdown"], shutdown))
    elif cmd == "attach":
        out = asyncio.run(attach(client, float(rest[0]), rest[1:]))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
