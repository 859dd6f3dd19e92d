"""`hosts.kind: slurm` on a real Slurm (Debian's slurm-wlm 22.05.8 and munge): one slurmctld and
three compute nodes, each a slurmd in its own network namespace (`forge_agent.hosts.
slurm_cluster`). The docs' example (docs/hosts.md: the trainer on one node, the generator on
two) trains through Monarch's `SlurmJob` (via `forge_agent.hosts.slurm`) with the default
weight store and with TorchStore; every run, finished, failed or interrupted, gives its job
back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_agent.hosts.slurm_cluster import SlurmCluster, slurm_available

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(slurm_available() is not None, reason=str(slurm_available()))
DOCS_SPLIT = [
    "hosts.kind=slurm",
    "hosts.nodes={train: 1, gen: 2}",
    "hosts.services={trainer: train, generator: gen}",
]


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster(nodes=3) as c:
        yield c


def _on_head(cluster: SlurmCluster, argv: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    """`argv` as a process of the head node (where a user runs the controller)."""
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cluster.head_command(argv), env=env, cwd=cwd, text=True, **kwargs)


def _jobs_left(cluster: SlurmCluster, within_s: float = 20) -> list[str]:
    """The jobs squeue lists once none is (a cancelled job is listed while it completes)."""
    deadline = time.monotonic() + within_s
    while (jobs := cluster.jobs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return jobs


def _submitted(cwd: Path) -> list[str]:
    """The ids of the jobs Monarch submitted from `cwd` (its `slurm_<id>_*.out` logs)."""
    return sorted(p.name.split("_")[1] for p in cwd.glob("slurm_*_monarch_job_*.out"))


FAULTS = {"monarch": "kill-generator", "torchstore": ""}  # one run of each also takes a fault


@pytest.fixture(scope="module", params=sorted(FAULTS))
def docs_run(request, cluster, policy_model_path, tmp_path_factory):
    """Two GRPO steps of the docs' split (tests/host_programs.py slurm_train) with each
    weight-store backend (the default one's generator process killed on its node in step 2):
    the report, and the jobs squeue lists after it."""
    cwd = tmp_path_factory.mktemp(f"slurm-{request.param}")
    program = [sys.executable, str(ROOT / "tests" / "host_programs.py"), "slurm_train"]
    argv = [*program, str(cwd / "run"), str(policy_model_path), request.param]
    argv += [FAULTS[request.param]]
    started = time.monotonic()
    proc = _on_head(cluster, argv, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:] + cluster.logs()
    report = json.loads(out.strip().splitlines()[-1])
    report["wall_s"] = time.monotonic() - started
    (cwd / "report.json").write_text(json.dumps(report, indent=2))
    return report, _jobs_left(cluster), request.param


def test_the_docs_split_places_each_service_on_its_node(docs_run):
    report, _, backend = docs_run
    where = {name: info["hostname"] for name, info in report["where"].items()}
    assert where["trainer"] == "fa-host0" and where["generator0"] == "fa-host1"
    if backend == "monarch":  # the relay's store on each generator node
        assert where["store0"] == "fa-host1"
    assert report["store"] == {"monarch": "CrossHostWeightStore"}.get(
        backend, "TorchStoreWeightStore"
    )


def test_weights_cross_slurm_nodes_and_versions_advance(docs_run):
    report, _, _ = docs_run
    assert report["summary"]["steps"] == 2 and report["summary"]["policy_version"] == 2
    assert report["generator_version"] == 2
    assert report["changed"] > 1e-3  # the generator's logprobs moved with the new weights
    assert report["max_abs_diff"] <= 1e-4  # ... to exactly the trainer's


def test_a_generator_killed_on_its_node_is_replaced_and_the_run_goes_on(docs_run):
    report, _, backend = docs_run
    restarts = report["summary"]["counts"]["restarts/generator0"]
    if FAULTS[backend]:
        assert report["fault"]["node"] == "fa-host1" and report["fault"]["step"] >= 1
        assert restarts == 1  # ... and the run above finished its steps, weights in sync
    else:
        assert report["fault"] is None and restarts == 0


def test_a_finished_run_leaves_no_job(docs_run):
    report, jobs_after, _ = docs_run
    assert report["job"] is not None  # the run did submit one
    assert jobs_after == []


def _agent(cluster, cwd: Path, model: Path, *overrides: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "apps.agent.main", *DOCS_SPLIT, f"model.name={model}"]
    argv += ["warm_start.enabled=false", f"output_dir={cwd / 'run'}", *overrides]
    return _on_head(cluster, argv, cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_an_interrupted_run_gives_its_job_back(cluster, policy_model_path, tmp_path):
    """Ctrl-C (SIGINT) once the job runs and the controller is starting the services."""
    proc = _agent(cluster, tmp_path, policy_model_path, "training.steps=50")
    deadline = time.monotonic() + 120
    while "RUNNING" not in cluster.slurm("squeue", "-h", "-o", "%T"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    assert _submitted(tmp_path) and _jobs_left(cluster) == []


def test_a_kept_job_is_reused_by_the_next_run_and_a_failed_run_gives_it_back(
    cluster, policy_model_path, tmp_path
):
    """Two runs that fail once their job is up (a generator that asks for a GPU the nodes do
    not have: the placement refuses it; a config error such as weight_store.backend=local
    fails before any job, tests/test_config_before_resources.py): the first keeps its job
    (`hosts.keep_allocation`); the second, from the same folder, reuses it through Monarch's
    cache (no second sbatch) and cancels it."""
    failing = "services.generator.with_gpus=true"
    kept = _agent(cluster, tmp_path, policy_model_path, failing, "hosts.keep_allocation=true")
    out, _ = kept.communicate(timeout=180)
    assert kept.returncode != 0 and "needs 1 more GPU(s)" in out, out[-3000:]
    try:
        assert cluster.jobs() == _submitted(tmp_path) != []
        assert (tmp_path / ".monarch" / "job_state.pkl").exists()  # Monarch's cache of it
        again = _agent(cluster, tmp_path, policy_model_path, failing)
        out, _ = again.communicate(timeout=180)
        assert again.returncode != 0 and "Connecting to cached job" in out, out[-3000:]
        assert len(_submitted(tmp_path)) == 1 and _jobs_left(cluster) == []
        assert not (tmp_path / ".monarch" / "job_state.pkl").exists()
    finally:
        if left := cluster.jobs():
            cluster.slurm("scancel", *left)
            _jobs_left(cluster)


def test_the_compat_layer_reads_only_its_own_jobs_nodes(cluster, monkeypatch):
    """Slurm 22.05's `squeue --job N --json` lists every job in its own layout (the reason
    for `forge_agent.hosts.slurm`); the layer answers for job N alone."""
    from forge_agent.hosts.slurm import job_info

    first, second = (
        cluster.slurm(
            "sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "sleep 60"
        ).strip()
        for _ in range(2)
    )
    try:
        deadline = time.monotonic() + 30
        while cluster.slurm("squeue", "-h", "-t", "R", "-o", "%i").split() != [first, second]:
            assert time.monotonic() < deadline, cluster.slurm("squeue")
            time.sleep(0.2)
        raw = json.loads(cluster.slurm("squeue", "--job", second, "--json"))["jobs"]
        ids = [str(j["job_id"]) for j in raw]
        assert first in ids and ids[0] != second  # the filter is ignored: jobs[0] is another
        nodes = raw[ids.index(second)]["job_resources"]["nodes"]
        assert nodes == "fa-host1"  # a string, where Monarch reads a dict with an allocation
        monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
        info = job_info(second)
        assert info["job_state"] == ["RUNNING"]
        assert info["job_resources"]["nodes"]["allocation"] == [{"name": "fa-host1"}]
    finally:
        cluster.slurm("scancel", first, second)
        _jobs_left(cluster)


def test_the_cluster_runs_jobs_on_its_nodes_and_leaves_nothing_behind():
    with SlurmCluster(nodes=2) as c:
        out = c.slurm("srun", "-N2", "hostname", timeout=60)
        assert sorted(out.split()) == ["fa-host0", "fa-host1"]
    assert c.leftovers() == [] and not Path(c.dir).exists()
