"""Metrics: reductions, the per-process buffer and the sinks."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from forge_agent.observability import metrics
from forge_agent.observability.metrics import (
    ConsoleSink,
    JsonlSink,
    MetricLogger,
    MetricsConfig,
    TensorBoardSink,
    progress_line,
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


def test_drained_states_are_plain_json():
    metrics.record("kl", 0.25)
    states = metrics.drain()
    assert json.loads(json.dumps(states)) == states


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


def test_a_flush_without_progress_writes_step_0_to_the_files_but_not_the_progress(tmp_path):
    stream = io.StringIO()
    console = ConsoleSink(total_steps=2, use_tqdm=False, every_s=0, stream=stream)
    logger = MetricLogger([console, JsonlSink(tmp_path / "m.jsonl")])
    metrics.record("eval/reward/mean", 0.25, "last")  # the eval before the first step
    logger.flush(0, progress=False)
    metrics.record("reward/mean", 0.5)
    logger.flush(1)

    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [(r["step"], list(r["metrics"])) for r in rows] == [
        (0, ["eval/reward/mean"]),
        (1, ["reward/mean"]),
    ]
    assert stream.getvalue().startswith("step 1/2 | reward 0.500")


def test_progress_line_shows_the_episodes_a_step_left_out_as_infra():
    line = progress_line(3, total_steps=10, reward=0.5, steps_per_s=1.0, excluded=2)
    assert "reward 0.500 | infra excluded 2 |" in line
    assert "infra" not in progress_line(3, total_steps=10, reward=0.5, steps_per_s=1.0)
