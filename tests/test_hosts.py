"""Monarch host processes on real network hosts (network namespaces on a private bridge, see
tests/netns.py): the fixture's isolation, the worker entry point, actors on each host, and
bounded, named failure for a host that cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_agent.hosts import netns
from forge_agent.hosts.netns import NetnsHosts, netns_available, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
PORT = 26600
pytestmark = pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def start_host(net: NetnsHosts, host, port: int = PORT) -> subprocess.Popen:
    return netns.start_host(net, host, port, _env(), ROOT)


def client(*args: str, timeout: float = 120) -> dict:
    """Run a tests/host_programs.py command as the controller process; its JSON answer."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "host_programs.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def net():
    with NetnsHosts(3) as hosts:
        yield hosts


def _python(net: NetnsHosts, host, code: str) -> str:
    out = net.run(host, [sys.executable, "-c", code], timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_namespace_hosts_reach_each_other_and_nothing_else(net):
    probe = (
        "import socket,sys\n"
        "try:\n socket.create_connection((sys.argv[1], 9), timeout=2); print('open')\n"
        "except OSError as e: print(e.errno)\n"
    )
    h0, h1 = net.hosts[0], net.hosts[1]
    server = net.popen(h1, [sys.executable, "-m", "http.server", "8111", "-b", h1.address])
    try:
        wait_for_port(h1.address, 8111, 30, server)
        reach = f"import socket; socket.create_connection(('{h1.address}', 8111), 5); print('ok')"
        assert _python(net, h0, reach) == "ok"
    finally:
        server.kill()
    # no default route: the machine's own gateway (and the internet beyond) is unreachable
    gateway = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True)
    outside = gateway.stdout.split()[2] if gateway.stdout.split() else "192.0.2.1"
    out = net.run(h0, [sys.executable, "-c", probe, outside])
    assert out.stdout.strip() == "101", out  # ENETUNREACH


def test_namespace_hosts_have_own_hostname_and_shared_memory(net):
    names = [_python(net, h, "import socket; print(socket.gethostname())") for h in net.hosts]
    assert names == [h.hostname for h in net.hosts]
    marker = "/dev/shm/forge_netns_marker"
    _python(net, net.hosts[0], f"open({marker!r}, 'w').write('x'); print('w')")
    seen = _python(net, net.hosts[1], f"import os; print(os.path.exists({marker!r}))")
    assert seen == "False"
    assert not os.path.exists(marker)


def test_fixture_cleans_up_when_the_test_fails():
    with pytest.raises(RuntimeError, match="test body failed"), NetnsHosts(2) as hosts:
        proc = hosts.popen(hosts.hosts[0], ["sleep", "600"])
        assert hosts.leftovers()
        raise RuntimeError("test body failed")
    assert hosts.leftovers() == []
    assert proc.poll() is not None
    assert not any(Path("/etc/netns", h.netns).exists() for h in hosts.hosts)


def test_worker_rejects_an_address_it_cannot_serve():
    out = subprocess.run(
        [sys.executable, "-m", "forge_agent.hosts.serve", "--address", "tcp://*:26600"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert out.returncode == 2
    assert "tcp://*:26600" in out.stderr and "tcp://HOST:PORT" in out.stderr


def test_actors_run_on_each_namespace_host_and_stop(net):
    workers = [start_host(net, h) for h in net.hosts]
    addresses = [f"tcp://{h.address}:{PORT}" for h in net.hosts]
    out = client("actors", f"tcp://{net.client_ip}:0", *addresses, "--shutdown")
    for host, where in zip(net.hosts, out["actors"], strict=True):
        assert where["hostname"] == host.hostname
        assert where["addresses"] == [host.address]
    assert net.client_ip in out["client"]["addresses"]
    for w in workers:  # shutting the host meshes down ends each worker and its procs
        w.wait(timeout=30)
    assert [net.pids(h) for h in net.hosts] == [[], [], []]


def test_unreachable_host_fails_within_bound_naming_it(net):
    live = start_host(net, net.hosts[0], PORT + 1)
    dead = f"tcp://{net.hosts[2].address}:{PORT + 1}"  # no worker listens there
    try:
        out = client(
            "attach",
            f"tcp://{net.client_ip}:0",
            "5",
            f"tcp://{net.hosts[0].address}:{PORT + 1}",
            dead,
        )
    finally:
        live.kill()
    assert out["error"] is not None and out["error"].startswith("HostUnreachableError")
    assert dead in out["error"] and "'generators'" in out["error"]
    assert out["elapsed_s"] < 10


def test_a_run_naming_a_host_that_never_answers_fails_within_its_timeout(net, tmp_path):
    silent = f"tcp://{net.client_ip.rsplit('.', 1)[0]}.250:{PORT}"  # no host has this address
    out = client("run", f"tcp://{net.client_ip}:0", "3", str(tmp_path / "run"), silent)
    assert out["error"] is not None and out["error"].startswith("HostUnreachableError")
    assert silent in out["error"] and "'gen'" in out["error"] and "within 3s" in out["error"]
    assert out["elapsed_s"] < 8


def test_generator_replicas_take_the_hosts_of_their_mesh_in_turn(net):
    workers = [start_host(net, h, PORT + 2) for h in net.hosts[:2]]
    try:
        addresses = [f"tcp://{h.address}:{PORT + 2}" for h in net.hosts[:2]]
        out = client("replicas", f"tcp://{net.client_ip}:0", *addresses)
    finally:
        for w in workers:
            w.kill()
    h0, h1 = (h.hostname for h in net.hosts[:2])
    assert out["replicas"] == [h0, h1, h0]
