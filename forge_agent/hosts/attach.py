"""Host meshes on other machines: join Monarch host processes, in bounded time, naming failures.

    enable_client_transport("tcp://10.0.0.1:0")       # once, before any other Monarch call
    mesh = await attach_hosts("generators", ["tcp://gpu3:26600", "tcp://gpu4:26600"])
    procs = mesh.spawn_procs(per_host={"procs": 1})   # one proc on each of those hosts

Each host runs `python -m forge_agent.hosts.serve --address tcp://HOST:PORT`. Monarch's
`attach_to_workers` (Monarch's name for host processes) returns at once and waits forever
for a host that never answers, so `attach_hosts` first dials every host (a plain TCP
connect, all at once) and then waits for the mesh to come up, both within `timeout_s`; a
host that cannot be reached raises `HostUnreachableError` naming the mesh and the address.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any

from monarch.actor import Actor, endpoint

from forge_agent.hosts.serve import parse_address


class HostUnreachableError(ConnectionError):
    """A Monarch host process named in the placement could not be reached."""


def enable_client_transport(address: str | None = None) -> None:
    """Let this (controller) process talk to host processes on other hosts over TCP.

    `address` None: listen on this machine's hostname (it must resolve to an address the
    hosts can reach). `tcp://IP:0`: listen on that interface, any port. Must run before any
    other Monarch call in the process (Monarch picks one transport per process)."""
    from monarch.actor import enable_transport

    if address is not None and not address.startswith("tcp://"):
        raise ValueError(f"client address {address!r} must be tcp://HOST:PORT (PORT may be 0)")
    enable_transport(address or "tcp")


def probe_host(address: str, timeout_s: float) -> str | None:
    """None when a TCP connection to the host process at `address` opens within `timeout_s`, else
    why it did not (refused, timed out, unknown name, ...)."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g}s"
    except OSError as e:
        return e.strerror or str(e)


async def attach_hosts(name: str, addresses: Sequence[str], timeout_s: float = 30.0) -> Any:
    """A Monarch `HostMesh` named `name` over the host processes at `addresses` (one host each),
    connected within `timeout_s` or `HostUnreachableError` naming the unreachable ones."""
    from monarch.actor import attach_to_workers

    if not addresses:
        raise ValueError(f"host mesh {name!r} lists no host addresses")
    for a in addresses:
        parse_address(a)
    reasons = await asyncio.gather(
        *(asyncio.to_thread(probe_host, a, timeout_s) for a in addresses)
    )
    bad = [f"{a} ({r})" for a, r in zip(addresses, reasons, strict=True) if r is not None]
    if bad:
        raise HostUnreachableError(
            f"host mesh {name!r}: cannot reach host {', '.join(bad)}; is "
            "`python -m forge_agent.hosts.serve --address ...` running there?"
        )
    mesh = attach_to_workers(workers=list(addresses), ca="trust_all_connections", name=name)
    try:
        await asyncio.wait_for(_initialized(mesh), timeout_s)
    except TimeoutError as e:
        raise HostUnreachableError(
            f"host mesh {name!r}: hosts {list(addresses)} accepted a connection but did not "
            f"join within {timeout_s:g}s"
        ) from e
    return mesh


async def _initialized(mesh: Any) -> None:
    await mesh.initialized


def host_addresses() -> list[str]:
    """This machine's IPv4 addresses, loopback excluded."""
    import psutil

    return sorted(
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    )


def describe_host() -> dict[str, Any]:
    """Where the calling process runs: hostname, IPv4 addresses, pid."""
    import os

    return {"hostname": socket.gethostname(), "addresses": host_addresses(), "pid": os.getpid()}


class HostInfo(Actor):
    """Answers where its proc runs (placement checks and logs)."""

    @endpoint
    async def describe(self) -> dict[str, Any]:
        return describe_host()


__all__ = [
    "HostInfo",
    "HostUnreachableError",
    "attach_hosts",
    "describe_host",
    "enable_client_transport",
    "probe_host",
]
