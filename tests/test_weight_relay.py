"""Weights across namespace hosts: a trainer on one host puts versions into a
`CrossHostWeightStore`; consumers on two other hosts (own network namespace, hostname and
/dev/shm each) get every version from their own host's store, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_agent.hosts.netns import NetnsHosts, netns_available, start_host

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))


def test_versions_broadcast_from_trainer_host_reach_every_other_host():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with NetnsHosts(3) as net:
        for h in net.hosts:
            start_host(net, h, 26610, env, ROOT)
        workers = [f"tcp://{h.address}:26610" for h in net.hosts]
        argv = [
            "--client",
            f"tcp://{net.client_ip}:0",
            "--mb",
            "8",
            "--repeats",
            "2",
        ]
        out = subprocess.run(
            [sys.executable, "-m", "apps.bench.cross_host_sync", *argv, *workers],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["checksum_hosts"]) == {"host1", "host2"}
    for got in result["checksum_hosts"].values():
        assert got == result["checksum_trainer"]
    # five versions pushed (3 warm-up + 2), two kept (max_versions=2) on every host
    assert result["versions"] == {"host0": [4, 5], "host1": [4, 5], "host2": [4, 5]}
    assert result["transport"].startswith("torch.distributed gloo")
