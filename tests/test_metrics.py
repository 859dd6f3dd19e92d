"""Metrics: reductions, the per-process buffer, cross-process merge and the sinks."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from forge_agent import metrics
from forge_agent.metrics import (
    ConsoleSink,
    JsonlSink,
    MetricBuffer,
    MetricLogger,
    MetricsConfig,
    TensorBoardSink,
    progress_line,
    reduce_states,
    tensorboard_available,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def empty_buffer():
    metrics.drain()
    yield
    metrics.drain()


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_each_reduction_reduces_the_values_recorded_since_the_last_flush():
    for value in [3.0, 1.0, 2.0]:
        for reduce in ["mean", "sum", "max", "min", "last", "count"]:
            metrics.record(f"x/{reduce}", value, reduce=reduce)

    out = MetricLogger().flush(step=1)

    assert out == {
        "x/count": 3.0,
        "x/last": 2.0,
        "x/max": 3.0,
        "x/mean": 2.0,
        "x/min": 1.0,
        "x/sum": 6.0,
    }


def test_flush_empties_the_buffer_so_each_step_starts_fresh():
    logger = MetricLogger()
    metrics.record("loss", 5.0)
    logger.flush(step=1)
    metrics.record("loss", 1.0)

    assert logger.flush(step=2) == {"loss": 1.0}
    assert logger.flush(step=3) == {}


def test_one_name_recorded_with_two_reductions_is_an_error_naming_both():
    metrics.record("reward", 1.0, reduce="mean")
    with pytest.raises(ValueError, match=r"reduce='max'.*reduce='mean'"):
        metrics.record("reward", 1.0, reduce="max")


def test_an_unknown_reduction_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'median'"):
        metrics.record("reward", 1.0, reduce="median")


def test_merging_drained_buffers_equals_reducing_all_values_in_one_buffer():
    values = {"a": [1.0, 7.0, -2.0], "b": [4.0, 0.5]}
    together, parts = MetricBuffer(), [MetricBuffer(), MetricBuffer()]
    for buf, name in zip(parts, values, strict=True):
        for v in values[name]:
            for reduce in ["mean", "sum", "max", "min", "count"]:
                buf.add(f"m/{reduce}", v, reduce)
                together.add(f"m/{reduce}", v, reduce)

    merged = MetricBuffer()
    for buf in parts:
        merged.merge(buf.drain())

    assert reduce_states(merged.drain()) == reduce_states(together.drain())


def test_drained_states_are_plain_json():
    metrics.record("kl", 0.25)
    states = metrics.drain()
    assert json.loads(json.dumps(states)) == states


def test_values_recorded_in_another_process_reach_the_controller_through_merge():
    child = textwrap.dedent(
        """
        import json
        from forge_agent import metrics
        for v in [1.0, 2.0, 6.0]:
            metrics.record("env/step_time", v)
            metrics.record("env/steps", 1, reduce="sum")
        print(json.dumps(metrics.drain()))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        env=_subprocess_env(),
        timeout=60,
        check=True,
    )
    metrics.record("env/step_time", 3.0)  # the controller's own value for the same step

    metrics.merge(json.loads(proc.stdout))

    assert MetricLogger().flush(step=1) == {"env/step_time": 3.0, "env/steps": 3.0}


def test_values_recorded_inside_a_monarch_actor_come_back_with_its_endpoint_results(tmp_path):
    script = tmp_path / "actor_metrics.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            from monarch.actor import Actor, endpoint, this_host
            from forge_agent import metrics
            from forge_agent.metrics import JsonlSink, MetricLogger

            class Worker(Actor):
                @endpoint
                def work(self, x: float):
                    metrics.record("worker/x", x, reduce="sum")
                    metrics.record("worker/pid", os.getpid(), reduce="last")
                    return x * 2, metrics.drain()

            if __name__ == "__main__":
                procs = this_host().spawn_procs(per_host={"procs": 2})
                workers = procs.spawn("workers", Worker)
                logger = MetricLogger([JsonlSink(sys.argv[1])])
                for step, x in enumerate([1.0, 10.0]):
                    for _, (out, states) in workers.work.call(x).get().items():
                        metrics.merge(states)
                    logger.flush(step)
                logger.close()
                procs.stop().get()
                print(json.dumps({"controller_pid": os.getpid()}))
            """
        )
    )
    out = tmp_path / "metrics.jsonl"
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True,
        text=True,
        env=_subprocess_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    controller_pid = json.loads(proc.stdout.strip().splitlines()[-1])["controller_pid"]

    rows = [json.loads(line) for line in out.read_text().splitlines()]

    assert [(r["step"], r["metrics"]["worker/x"]) for r in rows] == [(0, 2.0), (1, 20.0)]
    assert all(r["metrics"]["worker/pid"] != controller_pid for r in rows)


def test_jsonl_sink_writes_one_line_per_flush_with_step_time_and_metrics(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    with MetricLogger([JsonlSink(path)]) as logger:
        for step in range(3):
            metrics.record("reward/mean", step / 2)
            logger.flush(step)

    rows = [json.loads(line) for line in path.read_text().splitlines()]

    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [r["metrics"] for r in rows] == [{"reward/mean": v} for v in (0.0, 0.5, 1.0)]
    assert all(isinstance(r["time"], float) for r in rows)


def test_progress_line_shows_step_reward_rate_and_eta():
    line = progress_line(10, total_steps=100, reward=0.5312, steps_per_s=2.0)

    assert line == "step 10/100 | reward 0.531 | 2.00 steps/s | ETA 0m45s"


def test_progress_line_without_a_total_or_reward_shows_step_and_rate():
    assert progress_line(7, total_steps=None, reward=None, steps_per_s=0.5) == (
        "step 7 | 0.50 steps/s"
    )


def test_console_sink_prints_at_most_one_plain_line_per_interval_and_the_last_step():
    stream = io.StringIO()
    sink = ConsoleSink(total_steps=5, use_tqdm=False, every_s=3600, stream=stream)
    for step in range(1, 6):
        sink.write(step, {"reward/mean": step / 10})

    lines = stream.getvalue().splitlines()

    assert len(lines) == 2
    assert lines[0].startswith("step 1/5 | reward 0.100 |")
    assert lines[1].startswith("step 5/5 | reward 0.500 |")


def test_console_sink_draws_a_tqdm_bar_with_the_reward_when_tqdm_is_installed():
    pytest.importorskip("tqdm")
    stream = io.StringIO()
    sink = ConsoleSink(total_steps=4, use_tqdm=True, stream=stream)
    for step in range(1, 5):
        sink.write(step, {"reward/mean": 0.25 * step})
    sink.close()

    text = stream.getvalue()

    assert "4/4" in text
    assert "reward=1.000" in text


def test_from_config_builds_requested_sinks_and_skips_missing_optional_backends(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    config = MetricsConfig(console=False, tensorboard=True, wandb_project="forge-agent-test")
    logger = MetricLogger.from_config(config, tmp_path)
    try:
        kinds = {type(s).__name__ for s in logger.sinks}
        assert "JsonlSink" in kinds
        assert ("TensorBoardSink" in kinds) == tensorboard_available()
        metrics.record("reward/mean", 1.0)
        logger.flush(step=0)
    finally:
        logger.close()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def test_tensorboard_sink_writes_scalars_readable_by_tensorboard(tmp_path):
    if not tensorboard_available():
        pytest.skip("tensorboard is not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path)
    for step in range(3):
        sink.write(step, {"reward/mean": step * 0.5})
    sink.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()

    scalars = events.Scalars("reward/mean")

    assert [(e.step, e.value) for e in scalars] == [(0, 0.0), (1, 0.5), (2, 1.0)]


def test_merging_an_empty_accumulator_adds_nothing():
    buffer = MetricBuffer()
    empty = {
        "reduce": "mean",
        "sum": 0.0,
        "count": 0,
        "min": math.inf,
        "max": -math.inf,
        "last": 0.0,
    }

    buffer.merge({"x": empty})

    assert buffer.drain() == {}
