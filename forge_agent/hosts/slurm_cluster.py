"""A real Slurm cluster on one machine (tests): Debian's slurm-wlm and munge over netns hosts.

    with SlurmCluster(nodes=3) as cluster:      # munged, slurmctld, one slurmd per node
        cluster.env                              # SLURM_CONF for sbatch / squeue / scancel
        cluster.run_on_head(["sbatch", "--wrap", "hostname"])
        cluster.jobs()                           # job ids still in squeue

The compute nodes are `forge_agent.hosts.netns` hosts (a network namespace each, on a private
bridge, with their own hostname and `/dev/shm`); each runs a `slurmd` with its own spool. The
head node is this machine's network namespace under its own hostname (`slurm-head`, the
bridge's address): `slurmctld` and every process started by `head_command` (the controller of
a run: it calls sbatch and reaches the workers by node name) see the cluster's `/etc/hosts`
through a private mount namespace, so node names resolve as on a real cluster and this
machine's files are not touched. One `munged` with its own key and socket signs every message.

Two facts of slurmd 22.05 here: the namespaces are entered with `nsenter --net` (`ip netns
exec` remounts /sys and so hides the cgroup mount slurmd reads) and the nodes' real CPU and
memory are overridden by the config (`SlurmdParameters=config_overrides`: every node is this
machine). `close()` (also at interpreter exit) cancels every job, stops the daemons and deletes
the namespaces. Needs root, slurm-wlm and munge (`scripts/setup.sh` installs them).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from forge_agent.hosts.netns import NetnsHost, NetnsHosts, netns_available

HEAD = "slurm-head"
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol",
         "sinfo", "nsenter")  # fmt: skip
# a private mount namespace in which /etc/hosts is the cluster's and the hostname is the host's
_ENTER = (
    'mount --bind "$0" /etc/hosts && hostname "$1" && '
    '{ [ "$2" = shm ] && mount -t tmpfs -o size=16g tmpfs /dev/shm || true; } && '
    'shift 2 && exec "$@"'
)


def slurm_available() -> str | None:
    """None when a cluster can be started here, else the reason it cannot."""
    if (reason := netns_available()) is not None:
        return reason
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool!r} not found (scripts/setup.sh installs slurm-wlm and munge)"
    return None


class SlurmCluster:
    """A controller and `nodes` compute nodes; see the module docstring."""

    def __init__(self, nodes: int = 3, start_timeout_s: float = 60.0) -> None:
        if (reason := slurm_available()) is not None:
            raise RuntimeError(reason)
        self.dir = Path(tempfile.mkdtemp(prefix="forge-slurm-"))
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        atexit.register(self.close)
        try:
            self.net = NetnsHosts(nodes)
            self.nodes: list[NetnsHost] = self.net.hosts
            self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}
            self._write_files()
            self._start(start_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def head_address(self) -> str:
        return self.net.client_ip

    def _write_files(self) -> None:
        d = self.dir
        (d / "state").mkdir()
        for h in self.nodes:
            (d / f"spool-{h.hostname}").mkdir()
        (d / "hosts").write_text(
            f"127.0.0.1 localhost\n{self.head_address} {HEAD}\n"
            + "".join(f"{h.address} {h.hostname}\n" for h in self.nodes)
        )
        subprocess.run(["mungekey", "-c", "-k", str(d / "munge.key")], check=True)
        os.chmod(d, 0o700)
        (d / "slurm.conf").write_text(_slurm_conf(self, _free_port()))
        (d / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")

    def _start(self, timeout_s: float) -> None:
        d = self.dir
        files = {"socket": "munge.sock", "key-file": "munge.key", "pid-file": "munged.pid",
                 "log-file": "munged.log", "seed-file": "munged.seed"}  # fmt: skip
        self._popen(["munged", "-F", "--force", *(f"--{k}={d / v}" for k, v in files.items())])
        _wait_for(lambda: (d / "munge.sock").exists(), timeout_s, "munged's socket")
        self._popen(self.head_command(["slurmctld", "-D", "-f", str(d / "slurm.conf")]))
        for h in self.nodes:
            argv = ["slurmd", "-D", "-N", h.hostname, "-f", str(d / "slurm.conf")]
            self._popen(self.node_command(h, argv))
        _wait_for(self._all_idle, timeout_s, f"{len(self.nodes)} idle nodes in sinfo")

    def head_command(self, argv: Sequence[str]) -> list[str]:
        """`argv` on the head node: this network namespace, hostname `slurm-head`, the
        cluster's /etc/hosts."""
        return ["unshare", "--uts", "--mount", "sh", "-c", _ENTER, str(self.dir / "hosts"), HEAD,
                "-", *argv]  # fmt: skip

    def node_command(self, node: NetnsHost, argv: Sequence[str]) -> list[str]:
        """`argv` on compute node `node` (its network namespace, hostname and /dev/shm)."""
        return ["nsenter", f"--net=/var/run/netns/{node.netns}", "unshare", "--uts", "--mount",
                "sh", "-c", _ENTER, str(self.dir / "hosts"), node.hostname, "shm",
                *argv]  # fmt: skip

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{Path(argv[0]).name}-{len(self._procs)}.out", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self._procs.append(proc)
        return proc

    def slurm(self, *argv: str, timeout: float = 30) -> str:
        """A Slurm client command's output (e.g. `squeue -h -o %i`); raises on failure. It
        runs in the cluster's folder, so a batch job's default output (`slurm-<id>.out`)
        lands there, not in the caller's working directory."""
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, cwd=self.dir
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def jobs(self) -> list[str]:
        """The ids of the jobs squeue still lists (any state)."""
        return self.slurm("squeue", "-h", "-o", "%i").split()

    def _all_idle(self) -> bool:
        for proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[:6]} exited with {proc.returncode}: {self.logs()}")
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            states = self.slurm("sinfo", "-h", "-N", "-o", "%t", timeout=5).split()
            return len(states) == len(self.nodes) and set(states) == {"idle"}
        return False

    def logs(self, tail: int = 2000) -> str:
        """The tail of every daemon's log (for error messages)."""
        out = []
        for f in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def close(self) -> None:
        """Cancel every job, stop the daemons, delete the namespaces and the files."""
        if self._closed:
            return
        self._closed = True
        if self._procs:
            with contextlib.suppress(Exception):
                self.slurm("scancel", "--full", "--quiet", *self.jobs(), timeout=10)
        for proc in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if hasattr(self, "net"):
            self.net.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Daemons of this cluster still alive, namespaces and links still there."""
        alive = [str(p.args[0]) for p in self._procs if p.poll() is None]
        return alive + (self.net.leftovers() if hasattr(self, "net") else [])

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _slurm_conf(cluster: SlurmCluster, port: int) -> str:
    d, cpus = cluster.dir, len(os.sched_getaffinity(0))
    nodes = "".join(
        f"NodeName={h.hostname} NodeAddr={h.address} CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
        for h in cluster.nodes
    )
    names = ",".join(h.hostname for h in cluster.nodes)
    return f"""\
ClusterName=forge
SlurmctldHost={HEAD}({cluster.head_address})
SlurmctldPort={port}
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
{nodes}PartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"slurm cluster: no {what} within {timeout_s:.0f}s")
        time.sleep(0.2)
