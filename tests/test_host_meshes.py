"""Host placement config: meshes, service assignment, and errors that name the bad key."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

import pytest

from forge_agent.hosts.config import HostsConfig
from forge_agent.typed_config import ConfigError, from_dict


@dataclass
class _Run:
    hosts: HostsConfig = field(default_factory=HostsConfig)


def test_local_is_the_default_and_every_service_stays_here():
    cfg = HostsConfig()
    assert cfg.is_local and cfg.mesh_of("trainer") == "local"


def test_addresses_assign_services_to_named_meshes():
    cfg = HostsConfig(
        kind="addresses",
        addresses={"train": ["tcp://10.0.0.2:26600"], "gen": ["tcp://gpu1:26600"]},
        services={"trainer": "train", "generator": "gen"},
    )
    assert not cfg.is_local
    assert [cfg.mesh_of(s) for s in ("trainer", "generator", "env")] == ["train", "gen", "local"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"addresses": {"gen": ["gpu1:26600"]}}, "gpu1:26600"),
        ({"addresses": {"gen": ["tcp://*:26600"]}}, "tcp://*:26600"),
        ({"addresses": {"gen": ["tcp://a:1"]}, "services": {"generator": "gpus"}}, "gpus"),
        ({"addresses": {"gen": ["tcp://a:1"]}, "services": {"learner": "gen"}}, "learner"),
        ({"addresses": {}}, "addresses"),
    ],
)
def test_bad_placement_names_the_value(kwargs, named):
    with pytest.raises(ConfigError, match="hosts") as e:
        from_dict(_Run, {"hosts": {"kind": "addresses", **kwargs}})
    assert named in str(e.value)


def test_slurm_job_takes_monarchs_arguments():
    """In a process of its own: building a `SlurmJob` switches Monarch's transport for the whole
    process (TCP on the hostname), and a later local mesh in the same process then fails on a
    machine whose hostname resolves only to loopback (test_placement did, run after this)."""
    code = textwrap.dedent(
        """
        import pytest
        from monarch.job import SlurmJob

        from forge_agent.hosts.meshes import slurm_job

        job = slurm_job({"train": 1, "gen": 2}, gpus_per_node=8, partition="gpu")
        assert isinstance(job, SlurmJob)
        with pytest.raises(TypeError, match="gpus_per_host"):
            slurm_job({"train": 1}, gpus_per_host=8)
        print("checked")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["checked"], done.stderr[-2000:]
