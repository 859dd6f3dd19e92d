"""The whole loop on Monarch with the real stack on CPU: a shortened default run with every kind
of fault injected, and a run killed mid-training then resumed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_agent.run.config import load_config

REPO = Path(__file__).resolve().parents[1]


def _short_overrides(model: Path, out: Path) -> list[str]:
    return [
        f"model.name={model}",
        "warm_start.enabled=false",
        f"output_dir={out}",
        "training.groups_per_step=2",
        "training.group_size=4",
        "rollout.max_concurrent_episodes=16",
        "services.env.num_replicas=4",
        "eval.num_tasks=4",
        "eval.k=2",
        "metrics.console=false",
    ]


@pytest.fixture(scope="module")
def faulty_run(policy_model_path, tmp_path_factory):
    """Three GRPO steps of the real stack, with env, tool, sandbox, reward and generator
    faults injected; returns the summary and the output folder."""
    from forge_agent.run.controller import train
    from tests.faults import FlakyGenerate

    out = tmp_path_factory.mktemp("faulty_run")
    (out / "started").touch()  # leftovers older than the run are not its own
    cfg = load_config(
        None,
        [
            *_short_overrides(policy_model_path, out),
            "env.id=tests.faults:FaultyCalculatorEnv",
            "env.step_timeout_s=10",
            "training.steps=3",
            "eval.every=3",
            "checkpoint.every=2",  # step 3 is not a multiple: the last step checkpoints anyway
            "rewards.components={tests.faults:flaky_reward: 0.1}",
        ],
    )
    summary = asyncio.run(train(cfg, generate_wrapper=FlakyGenerate))
    return summary, out


def test_short_run_trains_syncs_and_writes_metrics_and_traces(faulty_run, policy_model_path):
    summary, out = faulty_run
    assert summary["steps"] == 3 and summary["policy_version"] == 3
    # weights changed: the final checkpoint's policy differs from the starting weights
    start = load_file(str(next(Path(policy_model_path).glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start)
    # versions advanced in the generator: later traces carry newer versions
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert max(t["max_version"] for t in traces) >= 2
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]  # the step-0 eval on a row of its own
    assert "eval/reward/mean" in metrics[0]["metrics"]
    trained = metrics[1:]
    assert all("loss/total" in m["metrics"] and "reward/mean" in m["metrics"] for m in trained)
    assert (out / "traces.html").stat().st_size > 1000
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [e["step"] for e in summary["evals"]] == [0, 3]


def test_the_last_step_leaves_a_checkpoint_off_the_checkpoint_cadence(faulty_run):
    _, out = faulty_run
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step_000002", "step_000003"]


def test_the_training_loop_clock_leaves_out_setup_and_evaluation(faulty_run):
    summary, _ = faulty_run  # setup (actors, engine start) took longer than the evals here
    loop, wall = summary["timing"]["train_loop_s"], summary["wall_s"]
    assert 0.0 < loop < wall
    assert summary["evals"][0]["wall_s"] < 1.0  # the step-0 eval: no training before it


def test_on_policy_run_generates_no_group_it_cannot_train(faulty_run):
    summary, out = faulty_run
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert summary["counts"]["replay_evicted"] == 0
    assert [m["metrics"]["replay/evicted_stale"] for m in metrics[1:]] == [0, 0, 0]
    # no dynamic sampling (the default): a dropped group is not replaced, so every step's
    # batch is the 2 groups it started (a step whose every group was dropped trains nothing)
    counts = summary["counts"]
    steps_started = 3 + counts.get("steps_without_kept_groups", 0)
    assert counts["groups_produced"] == 2 * steps_started


def test_killed_env_worker_is_counted_and_survived(faulty_run):
    assert faulty_run[0]["counts"].get("status/env_error", 0) > 0


def test_hanging_tool_and_dying_sandbox_become_tool_errors(faulty_run):
    summary, out = faulty_run
    assert summary["counts"].get("tool_errors", 0) > 0
    texts = (out / "traces.jsonl").read_text()
    assert "timed out" in texts  # the hung tool's error message reached the model
    assert "sandbox failed" in texts  # the dead sandbox's error message too


def test_raising_reward_function_is_counted_not_fatal(faulty_run):
    assert faulty_run[0]["counts"].get("reward_errors", 0) > 0


def test_generator_request_errors_are_marked(faulty_run):
    assert faulty_run[0]["counts"].get("status/generator_error", 0) > 0


def test_the_run_leaves_no_workspace_cgroup_or_sandbox_behind(faulty_run):
    """The faulty run kills env workers mid-episode (their sandboxes cannot be closed): their
    janitors must still remove every workspace, mount and cgroup, and no bwrap may outlive them.
    Only what the run made counts: leftovers of processes that are gone, made after it started
    (other runs may share the machine, and an earlier run may have been killed)."""
    import glob
    import tempfile

    started = (faulty_run[1] / "started").stat().st_mtime

    def dead(path: str, prefix: str) -> bool:  # made during the run by a process now gone
        pid = os.path.basename(path)[len(prefix) :].split("-", 1)[0]
        try:
            new = os.stat(path).st_ctime >= started
        except OSError:
            return False
        return new and pid.isdigit() and not os.path.exists(f"/proc/{pid}")

    def leftovers() -> list[str]:
        found = [
            p
            for p in glob.glob(os.path.join(tempfile.gettempdir(), "forge-ws-*"))
            if dead(p, "forge-ws-")
        ]
        for path in glob.glob("/sys/fs/cgroup/*/**/forge-sandbox-*", recursive=True):
            if dead(path, "forge-sandbox-"):
                found.append(path)
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if comm == "bwrap" and fields[1] == "1" and _started_after(int(pid), started):
                found.append(f"bwrap {pid}")
        return found

    deadline = time.monotonic() + 15
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftovers() == []


def _started_after(pid: int, when: float) -> bool:
    import psutil

    try:
        return psutil.Process(pid).create_time() >= when
    except psutil.Error:
        return False


def _vllm_pids() -> set[int]:
    import psutil

    return {
        p.pid for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM")
    }


# the lines the project itself prints on a run's console (setup, warm start, evals, resume, the
# progress line, the summary); everything else is a third-party line
_PROJECT_LINES = (
    *("[setup]", "[warm start]", "[fresh run]", "[eval]", "[resume]", "[curriculum]"),
    *("[WARNING]", "[SIG"),
    *("step ", "held-out reward", "done:", "replay:", "stopped:"),
)


def _third_party_lines(console: str) -> list[str]:
    lines = [line.strip() for line in console.splitlines() if line.strip()]
    return [
        line
        for line in lines
        if not line.startswith(_PROJECT_LINES) and " s per step: " not in line
    ]


def _group(pgid: int) -> list[str]:
    """The processes left in process group `pgid`."""
    return subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()


def _run_main(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "apps.agent.main", *args],
        cwd=REPO,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so the kill takes every child
    )


def test_run_killed_mid_training_resumes_from_its_checkpoint(policy_model_path, tmp_path):
    out = tmp_path / "run"
    args = [*_short_overrides(policy_model_path, out), "training.steps=4", "eval.every=0"]
    args += ["checkpoint.every=1", "checkpoint.keep=5"]
    # a ladder that moves up after any group with a reward: the level must survive the kill
    args += ["env.curriculum.kwarg=difficulty", "env.curriculum.levels=[1,2,3]"]
    args += ["env.curriculum.window=1", "env.curriculum.advance_at=0.01"]
    args += ["advantages.drop_zero_variance=false"]  # difficulty 2+ may earn nothing yet
    engines_before = _vllm_pids()
    first = _run_main(args, tmp_path / "first.log")
    marker = out / "checkpoints" / "step_000002" / "COMPLETE"
    deadline = time.monotonic() + 420
    while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker.exists(), (tmp_path / "first.log").read_text()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)  # the whole run dies at once
    first.wait()
    time.sleep(1.0)
    leftover = subprocess.run(
        ["pgrep", "-g", str(first.pid)], capture_output=True, text=True
    ).stdout.split()
    assert leftover == []
    # vLLM's engine processes sit outside the group; the generator's reaper must end them.
    deadline = time.monotonic() + 15
    while _vllm_pids() - engines_before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _vllm_pids() - engines_before == set()
    saved = sorted(
        p.name for p in (out / "checkpoints").glob("step_*") if (p / "COMPLETE").exists()
    )
    last = out / "checkpoints" / saved[-1]
    state = torch.load(last / "trainer.pt", weights_only=False)

    second = _run_main([*args, "resume=true"], tmp_path / "second.log")
    assert second.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()
    step = int(saved[-1].split("_")[1])
    assert f"[resume] {saved[-1]}: step {step}, policy version {step}" in log
    # quiet by default: vLLM, torch, Triton and Monarch logs go to run.log, not the console
    assert _third_party_lines(log) == []
    run_log = (out / "run.log").read_text()
    assert "[cpu_worker.py:" in run_log  # vLLM's own warnings reached the log file
    assert "Passing raw prompts" not in run_log  # prompts reach vLLM as engine inputs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["policy_version"] == 4
    assert summary["resumed_from"]["step"] == step
    assert summary["resumed_from"]["tasks"] == state["data_position"]["tasks"]
    saved_level = state["data_position"]["tasks"]["level_index"]
    assert summary["curriculum"]["level_index"] >= saved_level  # resumed at its level


def test_ctrl_c_shuts_the_whole_run_down(policy_model_path, tmp_path):
    out = tmp_path / "run"
    args = [*_short_overrides(policy_model_path, out), "training.steps=50", "eval.every=0"]
    engines_before = _vllm_pids()
    run = _run_main(args, tmp_path / "run.log")
    deadline = time.monotonic() + 420
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
        assert run.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        time.sleep(0.5)
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=120) == 130
    log = (tmp_path / "run.log").read_text()
    assert "[SIGINT] stopping" in log and "actors, env workers and sandboxes were shut down" in log
    left = subprocess.run(["pgrep", "-g", str(run.pid)], capture_output=True, text=True)
    assert left.stdout.split() == []
    assert _vllm_pids() - engines_before == set()


def test_ctrl_c_during_the_warm_start_stops_within_seconds(tiny_model_path, tmp_path):
    """The warm start blocks the main thread for minutes; SIGINT there stops the run at once
    (main 7df18c1 was still running 30 s after it). A fresh seed makes the warm start uncached."""
    out = tmp_path / "run"
    args = [f"output_dir={out}", "metrics.console=false", "warm_start.steps=100000"]
    args.append(f"warm_start.seed={time.time_ns() % 1_000_000}")
    # a few demonstrations: preparing the default 2000 took 12-14 s before the steps start
    args.append("warm_start.num_demos=64")
    log = tmp_path / "run.log"
    run = _run_main(args, log)
    deadline = time.monotonic() + 300
    while "supervised steps on" not in log.read_text():
        assert run.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    time.sleep(2)  # inside the optimizer steps
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=15) == 130
    assert "[SIGINT] stopping" in log.read_text() and "were shut down" in log.read_text()
    # the warm start's child is stopped before the run exits; multiprocessing's resource
    # tracker, which its spawn started, exits once the run has (at the end of its pipe)
    deadline = time.monotonic() + 10
    while (left := _group(run.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], subprocess.run(
        ["ps", "-o", "pid,args", "-g", str(run.pid)], capture_output=True, text=True
    ).stdout
