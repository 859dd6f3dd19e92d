"""Warm MCP servers: a sandbox session and its started servers, kept across episodes.

Starting a stdio server costs a sandbox and a process start, an interpreter's imports and the
MCP handshake: 0.44 s for mcp-server-sqlite alone, 2.65 s each with 16 starting at once on two
cores, against 3 ms for a query. An env worker builds a new env instance for every episode, so
an `MCPToolEnv` that opts in (`reuse_servers = True`) hands its session and servers to this
process's `WARM_SERVERS` at close, and its next instance takes them back at reset: the
workspace is emptied and written afresh for the new task, the servers keep running with their
private `/tmp` emptied and their CPU budget renewed (`SandboxSession.renew_spawned`), so no
episode can read what the last one left or start with its budget spent; a sandbox that cannot
renew them (Docker) has its set closed and started afresh instead.

    servers = WARM_SERVERS.take(key)        # a healthy idle set, or None
    ...                                     # run an episode on servers.sandbox / .connections
    WARM_SERVERS.give(key, servers)         # idle again (closed if a server died)

A set whose server died (crashed, killed for its CPU rlimit, hung and being restarted) is
closed when it is taken or given back, and the episode starts a fresh one. An idle set keeps
its sandbox's reservation of the host's sandbox memory budget, so it is kept only while the
budget has room for another sandbox like it: where sandboxes wait for room, a finished
episode's set is closed as before and nothing waits on an idle one.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from forge_agent.sandbox.admission import room_mb
from forge_agent.toolkit.mcp.client import MCPConnection

__all__ = ["WARM_SERVERS", "ServerSet", "WarmServers"]


@dataclass
class ServerSet:
    """One episode's sandbox session and the connections to the servers started in it."""

    sandbox: Any
    connections: list[MCPConnection]

    @property
    def alive(self) -> bool:
        """True while every server answers (its session is open, its process runs)."""
        return all(conn.alive for conn in self.connections)

    def fits_beside(self) -> bool:
        """Whether another sandbox like this one could start now: the host's sandbox memory
        budget (`forge_agent.sandbox.admission`) has room for its limits. An idle set holds
        its reservation, so it is kept only while it does not make others wait."""
        limits = getattr(self.sandbox, "limits", None)
        if limits is None:
            return True
        backend = getattr(self.sandbox, "backend", None)
        budget = getattr(backend, "memory_budget_mb", None)
        try:
            return room_mb(budget) >= limits.memory_mb + limits.workspace_mb
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """End the servers, then the sandbox session. Never raises."""
        for conn in self.connections:
            conn.close()
        if self.sandbox is not None and hasattr(self.sandbox, "close"):
            with contextlib.suppress(Exception):
                self.sandbox.close()


class WarmServers:
    """Idle `ServerSet`s of this process, by key (one key per env class and server set).

    Args:
        max_idle: most idle sets kept per key; a set given back beyond it is closed.

    Attributes:
        stats: ``reused`` (sets taken back), ``given`` (sets kept idle), ``dead`` (sets found
            dead and closed), ``closed`` (live sets closed: no room to keep them).
    """

    def __init__(self, max_idle: int = 64) -> None:
        self.max_idle = max_idle
        self.stats: collections.Counter[str] = collections.Counter()
        self._idle: dict[Hashable, list[ServerSet]] = {}
        self._lock = threading.Lock()

    def take(self, key: Hashable) -> ServerSet | None:
        """A live idle set of `key` (the most recently used), or None; dead ones are closed."""
        dead = []
        found = None
        with self._lock:
            idle = self._idle.get(key, [])
            while idle and found is None:
                servers = idle.pop()
                if servers.alive:
                    found = servers
                else:
                    dead.append(servers)
            self.stats["dead"] += len(dead)
            self.stats["reused"] += found is not None
        for servers in dead:
            servers.close()
        return found

    def give(self, key: Hashable, servers: ServerSet) -> None:
        """Keep `servers` idle for the next episode of `key`; closed instead when a server
        is dead, when `max_idle` sets wait already, or when the host's sandbox memory budget
        has no room left for another like it (sandboxes waiting for room get this one's)."""
        keep = servers.alive and servers.fits_beside()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            keep = keep and len(idle) < self.max_idle
            if keep:
                idle.append(servers)
                self.stats["given"] += 1
            elif not servers.alive:
                self.stats["dead"] += 1
            else:
                self.stats["closed"] += 1
        if not keep:
            servers.close()

    def idle(self, key: Hashable) -> int:
        """How many sets of `key` wait idle."""
        with self._lock:
            return len(self._idle.get(key, []))

    def close(self) -> None:
        """Close every idle set (at interpreter exit, or in tests)."""
        with self._lock:
            sets = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for servers in sets:
            servers.close()


WARM_SERVERS = WarmServers()
"""The process's warm servers (an env worker's, or the controller's for in-process envs)."""
atexit.register(WARM_SERVERS.close)
