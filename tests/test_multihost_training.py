"""A short training run across three real network hosts (network namespaces on a private
bridge, `forge_agent.hosts.netns`), each running `python -m forge_agent.hosts.serve`: the trainer
on one, the generator on another, the env workers (and reward) on the third; weights cross hosts
by a torch.distributed broadcast (`CrossHostWeightStore`, the default backend). The real
TorchStore across hosts (`weight_store.backend=torchstore`: its storage volume on the trainer's
host) trains in tests/test_slurm.py's docs split, on the same network-namespace hosts, with the
same checks of placement, versions and sampler-trainer agreement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_agent.hosts.netns import NetnsHosts, netns_available, start_host

ROOT = Path(__file__).resolve().parent.parent
PORT = 26630
pytestmark = pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))


@pytest.fixture(scope="module")
def run(policy_model_path, tmp_path_factory):
    """The run's report (tests/host_programs.py train), the hosts and their workers."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path_factory.mktemp("multihost")
    with NetnsHosts(3) as net:  # closed (procs killed, namespaces gone) even when a test fails
        workers = [start_host(net, h, PORT, env, ROOT) for h in net.hosts]
        addresses = [f"tcp://{h.address}:{PORT}" for h in net.hosts]
        argv = ["train", f"tcp://{net.client_ip}:0", str(out), str(policy_model_path)]
        program = str(ROOT / "tests" / "host_programs.py")
        proc = subprocess.run(
            [sys.executable, program, *argv, *addresses, "monarch"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        (out / "report.json").write_text(json.dumps(report, indent=2))
        yield report, net, _leftover_procs(net, workers), out


def _leftover_procs(net: NetnsHosts, workers: list, within_s: float = 15) -> dict[str, list]:
    """Each host's processes other than its worker, once none is left (or `within_s` passed)."""
    deadline = time.monotonic() + within_s
    while True:
        left = {
            h.hostname: sorted(set(net.pids(h)) - {w.pid})
            for h, w in zip(net.hosts, workers, strict=True)
        }
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_each_service_runs_on_its_own_host(run):
    report, net, _, _ = run
    train, gen, env = (h.hostname for h in net.hosts)
    where = {name: info["hostname"] for name, info in report["where"].items()}
    assert where == {"trainer": train, "generator0": gen, "env": env, "reward": env}
    assert report["env_pool"]["hostname"] == env
    assert report["store"] == "CrossHostWeightStore"


def test_weights_change_versions_advance_and_cross_hosts(run):
    report, _, _, out = run
    assert report["summary"]["steps"] == 2 and report["summary"]["policy_version"] == 2
    assert report["generator_version"] == 2
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert max(t["max_version"] for t in traces) >= 1  # step 2 trained on version-1 samples
    assert report["changed"] > 1e-3  # the generator's logprobs moved with the new weights
    assert report["max_abs_diff"] <= 1e-4  # ... to exactly the trainer's


def test_the_run_leaves_no_proc_on_any_host(run):
    _, _, left, _ = run
    assert left == {"fa-host0": [], "fa-host1": [], "fa-host2": []}
