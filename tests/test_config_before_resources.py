"""What the config alone decides fails before a cluster is asked for anything: c257d3d submitted
the docs' 3-node Slurm job for `weight_store.backend=local`, waited for it, and only then said
the store cannot cross hosts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_agent.hosts.config import HostsConfig
from forge_agent.hosts.meshes import weight_store_problem
from forge_agent.run.config import load_config
from forge_agent.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DOCS_SLURM_SPLIT = [  # docs/hosts.md, "On a cluster"
    "hosts.kind=slurm",
    "hosts.nodes={train: 1, gen: 2}",
    "hosts.services={trainer: train, generator: gen}",
]

STAND_IN_SBATCH = """#!/bin/sh
# a stand-in for Slurm's sbatch (no cluster here): it records that it was called
echo called >> "$(dirname "$0")/sbatch_called"
echo "Submitted batch job 1"
"""


def test_the_docs_slurm_split_with_a_local_store_fails_in_one_line_before_sbatch(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(STAND_IN_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    args = [*DOCS_SLURM_SPLIT, "weight_store.backend=local", f"output_dir={tmp_path / 'run'}"]
    out = subprocess.run(
        [sys.executable, "-m", "apps.agent.main", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("config error: weight_store.backend='local' is invalid")
    assert "'monarch' or 'torchstore'" in lines[0]
    assert not (bin_dir / "sbatch_called").exists()  # no job was submitted
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend", ["monarch", "torchstore"])
def test_the_docs_slurm_split_loads_with_a_store_that_crosses_hosts(backend):
    cfg = load_config(None, [*DOCS_SLURM_SPLIT, f"weight_store.backend={backend}"])
    assert cfg.weight_store.backend == backend


def test_a_local_store_is_refused_only_where_the_weights_cross_hosts():
    one_host = HostsConfig(
        kind="slurm", nodes={"all": 1}, services={"trainer": "all", "generator": "all"}
    )
    assert weight_store_problem(one_host, "local") is None
    assert weight_store_problem(HostsConfig(), "local") is None  # everything on this machine
    two_gen = HostsConfig(kind="slurm", nodes={"gen": 2}, services={"generator": "gen"})
    assert "'monarch' or 'torchstore'" in (weight_store_problem(two_gen, "local") or "")
    addresses = HostsConfig(
        kind="addresses",
        addresses={"train": ["tcp://a:1"], "gen": ["tcp://b:1"]},
        services={"trainer": "train", "generator": "gen"},
    )
    assert weight_store_problem(addresses, "local") is not None
    assert weight_store_problem(addresses, "monarch") is None
    k8s = HostsConfig(
        kind="kubernetes", nodes={"t": 1, "g": 1}, services={"trainer": "t", "generator": "g"}
    )
    assert "Kubernetes" in (weight_store_problem(k8s, "monarch") or "")
    assert weight_store_problem(k8s, "torchstore") is None
    with pytest.raises(ConfigError, match=r"^weight_store\.backend='local' is invalid"):
        load_config(None, ["hosts.kind=addresses", "hosts.addresses={train: [tcp://a:1], gen: "
                           "[tcp://b:1]}", "hosts.services={trainer: train, generator: gen}",
                           "weight_store.backend=local"])  # fmt: skip
