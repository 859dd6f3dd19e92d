"""Real network hosts on one machine (tests, benchmarks): network namespaces on a bridge.

    with NetnsHosts(3) as net:                 # 3 namespaces joined by veth pairs on a bridge
        net.hosts[0].address                   # 10.x.y.2, reachable from the other hosts
        net.client_ip                          # the bridge's address (the controller's "host")
        proc = net.popen(net.hosts[0], ["python", "-m", "forge_agent.hosts.serve", ...])

Each host is a network namespace (`ip netns`) with its own veth interface on the bridge, its
own hostname (a UTS namespace) and its own `/dev/shm` (a mount namespace with a fresh tmpfs),
so nothing can cross between hosts except through the network. The namespaces have no default
route: traffic stays on the bridge. `close()` (also run at interpreter exit) kills every
process in the namespaces and deletes the namespaces, veths, bridge and `/etc/netns` files,
whether or not the test passed. Needs root and iproute2 (`ip`, `unshare`).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_instances = itertools.count()
PREFIX = "fa"  # interface and namespace names: fa<tag>br, fa<tag>h<i>, fa<tag>v<i>


@dataclass(frozen=True)
class NetnsHost:
    """One namespace host: its namespace name, hostname and address on the bridge."""

    netns: str
    hostname: str
    address: str


def netns_available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool!r} not found (scripts/setup.sh installs iproute2 and util-linux)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


class NetnsHosts:
    """`n` namespace hosts on a private bridge; see the module docstring."""

    def __init__(self, n: int = 3) -> None:
        if (reason := netns_available()) is not None:
            raise RuntimeError(reason)
        pid, count = os.getpid(), next(_instances)
        self.tag = f"{pid % 100000}{chr(ord('a') + count % 26)}"
        subnet = f"10.{200 + pid % 50}.{(pid // 50 * 8 + count) % 250}"
        self.bridge = f"{PREFIX}{self.tag}br"
        self.client_ip = f"{subnet}.1"
        self.hosts = [
            NetnsHost(f"{PREFIX}{self.tag}h{i}", f"fa-host{i}", f"{subnet}.{i + 2}")
            for i in range(n)
        ]
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        atexit.register(self.close)
        try:
            self._create(subnet)
        except BaseException:
            self.close()
            raise

    def _create(self, subnet: str) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.client_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{h.address} {h.hostname}\n" for h in self.hosts
        )
        for i, h in enumerate(self.hosts):
            veth = f"{PREFIX}{self.tag}v{i}"
            _ip("netns", "add", h.netns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
            _ip("-n", h.netns, "link", "set", "eth0", "up")
            _ip("-n", h.netns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / h.netns  # `ip netns exec` bind-mounts these over /etc
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)

    def command(self, host: NetnsHost, argv: Sequence[str]) -> list[str]:
        """`argv` run on `host`: its network namespace, hostname and private /dev/shm."""
        inner = 'mount -t tmpfs -o size=16g tmpfs /dev/shm && hostname "$0" && exec "$@"'
        return [
            "ip", "netns", "exec", host.netns,
            "unshare", "--uts", "--mount", "sh", "-c", inner, host.hostname, *argv,
        ]  # fmt: skip

    def popen(self, host: NetnsHost, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start `argv` on `host` (killed by `close`)."""
        proc = subprocess.Popen(self.command(host, argv), start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, host: NetnsHost, argv: Sequence[str], timeout: float = 60, **kwargs):
        """Run `argv` on `host` to completion (captured text output)."""
        return subprocess.run(
            self.command(host, argv), capture_output=True, text=True, timeout=timeout, **kwargs
        )

    def pids(self, host: NetnsHost) -> list[int]:
        """Every live process in `host`'s network namespace."""
        out = _ip("netns", "pids", host.netns, check=False).stdout.split()
        return [int(p) for p in out if p.isdigit() and _alive(int(p))]

    def close(self) -> None:
        """Kill everything on the hosts; delete namespaces, veths, bridge, /etc/netns files."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for h in self.hosts:
            for pid in self.pids(h):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for i, h in enumerate(self.hosts):
            _ip("link", "del", f"{PREFIX}{self.tag}v{i}", check=False)
            _ip("netns", "del", h.netns, check=False)
            shutil.rmtree(Path("/etc/netns") / h.netns, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
        atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Names of this instance's namespaces and links that still exist (empty after close)."""
        names = set(_ip("netns", "list", check=False).stdout.split())
        links = _ip("-br", "link", check=False).stdout
        out = [h.netns for h in self.hosts if h.netns in names]
        return out + [w.split("@")[0] for w in links.split() if w.startswith(PREFIX + self.tag)]

    def __enter__(self) -> NetnsHosts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def start_host(
    net: NetnsHosts, host: NetnsHost, port: int, env: dict[str, str], cwd: str | Path
) -> subprocess.Popen:
    """`python -m forge_agent.hosts.serve` on `host`, returned once it accepts connections."""
    import sys

    argv = [
        sys.executable,
        "-m",
        "forge_agent.hosts.serve",
        "--address",
        f"tcp://{host.address}:{port}",
    ]
    proc = net.popen(host, argv, env=env, cwd=cwd)
    wait_for_port(host.address, port, 60, proc)
    return proc


def wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen | None = None):
    """Block until `host:port` accepts a TCP connection (or `proc` exits / time runs out)."""
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"worker for {host}:{port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} did not accept connections within {timeout_s}s")
