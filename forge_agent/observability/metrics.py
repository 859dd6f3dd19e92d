"""Metrics: one `record` call anywhere, reduced and emitted once per step by a `MetricLogger`.

How values travel
-----------------
Every process keeps one buffer of running accumulators, one per metric name (constant size,
however many values are recorded). `record(name, value, reduce)` adds to the buffer of the
process it runs in; it never does I/O.

- In the controller, `MetricLogger.flush(step)` drains the buffer, reduces each accumulator to
  one number, and writes the numbers to every sink.
- Values recorded in another process stay in that process's buffer: an actor reports its
  numbers in its endpoint's result (the trainer's `train_step` returns its metrics; the reward
  actor returns its own), and the controller records them.

Reductions: mean, sum, max, min, last, count (count ignores the value and counts records).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from forge_agent.observability.config import MetricsConfig

logger = logging.getLogger(__name__)

REDUCTIONS = ("mean", "sum", "max", "min", "last", "count")

AccumulatorState = dict[str, Any]
"""A plain, picklable, JSON-able accumulator: {"reduce", "sum", "count", "min", "max", "last"}."""

MetricStates = dict[str, AccumulatorState]
"""What `drain` returns: metric name -> accumulator state."""


def _new_state(reduce: str) -> AccumulatorState:
    return {
        "reduce": reduce,
        "sum": 0.0,
        "count": 0,
        "min": math.inf,
        "max": -math.inf,
        "last": 0.0,
    }


def _reduce_state(state: AccumulatorState) -> float:
    reduce, count = state["reduce"], state["count"]
    if reduce == "count":
        return float(count)
    if reduce == "sum":
        return float(state["sum"])
    if count == 0:
        return math.nan
    if reduce == "mean":
        return state["sum"] / count
    return float(state[reduce])  # max | min | last


class MetricBuffer:
    """Thread-safe running accumulators for one process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: MetricStates = {}

    def _state_for(self, name: str, reduce: str) -> AccumulatorState:
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = _new_state(reduce)
        elif state["reduce"] != reduce:
            raise ValueError(
                f"metric {name!r} is recorded with reduce={reduce!r} but was first recorded "
                f"with reduce={state['reduce']!r}; one name must keep one reduction"
            )
        return state

    def add(self, name: str, value: float, reduce: str = "mean") -> None:
        """Add one value to the accumulator for `name`."""
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce={reduce!r} for metric {name!r}; expected one of {REDUCTIONS}")
        value = float(value)
        with self._lock:
            state = self._state_for(name, reduce)
            state["sum"] += value
            state["count"] += 1
            state["min"] = min(state["min"], value)
            state["max"] = max(state["max"], value)
            state["last"] = value

    def drain(self) -> MetricStates:
        """Take every accumulator out of the buffer, leaving it empty."""
        with self._lock:
            states, self._states = self._states, {}
        return states


_BUFFER = MetricBuffer()


def record(name: str, value: float, reduce: str = "mean") -> None:
    """Record one value of metric `name` in this process; reduced with `reduce` at flush.

    Cheap and I/O-free; safe from any thread. Values recorded in another process stay in
    that process (see the module docstring).
    """
    _BUFFER.add(name, value, reduce)


def drain() -> MetricStates:
    """Take this process's pending accumulators (`MetricLogger.flush` reduces them)."""
    return _BUFFER.drain()


def reduce_states(states: MetricStates) -> dict[str, float]:
    """Reduce each accumulator to its number, sorted by name."""
    return {name: _reduce_state(states[name]) for name in sorted(states)}


# --- sinks ------------------------------------------------------------------------------------


class Sink(Protocol):
    """Anything that takes one step's reduced metrics."""

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """Emit the reduced metrics of `step`."""
        ...

    def close(self) -> None:
        """Release files, bars and runs."""
        ...


def _format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _pick_reward(metrics: dict[str, float], reward_key: str) -> float | None:
    if reward_key in metrics:
        return metrics[reward_key]
    for name in metrics:
        if "reward" in name:
            return metrics[name]
    return None


INFRA_EXCLUDED = "episodes/infra_excluded"
"""The metric counting a step's episodes left out of training as infra failures (shown by the
console when there are any)."""


def progress_line(
    step: int,
    total_steps: int | None,
    reward: float | None,
    steps_per_s: float,
    excluded: float = 0.0,
) -> str:
    """One plain progress line: `step 12/100 | reward 0.531 | 1.20 steps/s | ETA 1m13s`, with
    `infra excluded N` after the reward when the step left N episodes out as infra."""
    parts = [f"step {step}" + (f"/{total_steps}" if total_steps else "")]
    if reward is not None:
        parts.append(f"reward {reward:.3f}")
    if excluded:
        parts.append(f"infra excluded {excluded:g}")
    parts.append(f"{steps_per_s:.2f} steps/s")
    if total_steps:
        eta = max(total_steps - step, 0) / steps_per_s if steps_per_s > 0 else math.inf
        parts.append(f"ETA {_format_duration(eta)}")
    return " | ".join(parts)


class ConsoleSink:
    """A progress display: step, reward, rate (steps/s) and ETA.

    Uses a `tqdm` bar when tqdm is installed and `use_tqdm` is not False; otherwise prints one
    plain line at most every `every_s` seconds (and on the last step), e.g.
    `step 12/100 | reward 0.531 | 1.20 steps/s | ETA 1m13s`.
    """

    def __init__(
        self,
        total_steps: int | None = None,
        *,
        reward_key: str = "reward/mean",
        use_tqdm: bool | None = None,
        every_s: float = 10.0,
        stream: TextIO | None = None,
    ) -> None:
        self.total_steps = total_steps
        self.reward_key = reward_key
        self.every_s = every_s
        self.stream = stream
        if use_tqdm is None:
            use_tqdm = importlib.util.find_spec("tqdm") is not None
        self._bar = None
        if use_tqdm:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, unit="step", file=stream or sys.stderr, leave=True)
        self._start = time.monotonic()
        self._first_step: int | None = None
        self._last_step = 0
        self._last_print = -math.inf

    def _rate(self, step: int, now: float) -> float:
        if self._first_step is None:
            self._first_step = step
        return (step - self._first_step + 1) / max(now - self._start, 1e-9)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        now = time.monotonic()
        if self._bar is not None:
            if self._first_step is None:  # a resumed run starts the bar at its first step
                self._first_step = step
                self._bar.n = self._bar.initial = self._last_step = max(step - 1, 0)
            self._bar.update(max(step - self._last_step, 0))
            reward = _pick_reward(metrics, self.reward_key)
            postfix = {} if reward is None else {"reward": f"{reward:.3f}"}
            if metrics.get(INFRA_EXCLUDED):
                postfix["infra_excluded"] = f"{metrics[INFRA_EXCLUDED]:g}"
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.refresh()
        else:
            rate = self._rate(step, now)
            reward = _pick_reward(metrics, self.reward_key)
            excluded = metrics.get(INFRA_EXCLUDED, 0.0)
            line = progress_line(step, self.total_steps, reward, rate, excluded)
            is_last = self.total_steps is not None and step >= self.total_steps
            if now - self._last_print >= self.every_s or is_last:
                print(line, file=self.stream or sys.stdout, flush=True)
                self._last_print = now
        self._last_step = step

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class JsonlSink:
    """Appends one line per step: {"step": int, "time": unix seconds, "metrics": {name: value}}.

    `plots.read_metrics` and `python -m apps.plots` read this file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, step: int, metrics: dict[str, float]) -> None:
        line = json.dumps({"step": step, "time": time.time(), "metrics": metrics})
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def tensorboard_available() -> bool:
    """True when the `tensorboard` package (needed by torch's SummaryWriter) is installed."""
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardSink:
    """Scalars through `torch.utils.tensorboard.SummaryWriter` (needs `pip install tensorboard`)."""

    def __init__(self, log_dir: str | Path) -> None:
        if not tensorboard_available():
            raise ImportError(f"TensorBoardSink({str(log_dir)!r}) needs `pip install tensorboard`")
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Weights & Biases run logging (optional: needs `pip install wandb`)."""

    def __init__(self, project: str, run_name: str | None = None, config: dict | None = None):
        import wandb

        self._run = wandb.init(project=project, name=run_name, config=config or {})

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


# --- the logger ---------------------------------------------------------------------------------


class MetricLogger:
    """Reduces this process's buffer once per step into its sinks."""

    def __init__(self, sinks: list[Sink] | None = None) -> None:
        self.sinks: list[Sink] = list(sinks or [])

    @classmethod
    def from_config(
        cls,
        config: MetricsConfig,
        out_dir: str | Path,
        total_steps: int | None = None,
        reward_key: str = "reward/mean",
        run_config: dict[str, Any] | None = None,
    ) -> MetricLogger:
        """Build the sinks `config` asks for, writing under `out_dir`; optional backends that
        are missing are skipped with a warning."""
        out = Path(out_dir)
        sinks: list[Sink] = []
        if config.console:
            sinks.append(ConsoleSink(total_steps, reward_key=reward_key))
        if config.jsonl:
            sinks.append(JsonlSink(out / "metrics.jsonl"))
        if config.tensorboard:
            if tensorboard_available():
                sinks.append(TensorBoardSink(out / "tb"))
            else:
                logger.warning("metrics.tensorboard=true but tensorboard is not installed")
        if config.wandb_project:
            if importlib.util.find_spec("wandb") is not None:
                sinks.append(WandbSink(config.wandb_project, None, run_config or {}))
            else:
                logger.warning(
                    "metrics.wandb_project=%s set but wandb is not installed; skipping",
                    config.wandb_project,
                )
        return cls(sinks)

    def flush(self, step: int, progress: bool = True) -> dict[str, float]:
        """Reduce everything recorded since the last flush, emit it, return it.

        `progress=False` leaves the console's progress display out: for metrics of a step
        no training happened in (the eval before the first step, flushed at step 0, so its
        curves start at 0 rather than sharing step 1 with the first training step).
        """
        metrics = reduce_states(drain())
        for sink in self.sinks:
            if progress or not isinstance(sink, ConsoleSink):
                sink.write(step, metrics)
        return metrics

    def close(self) -> None:
        """Close every sink (flushes files, ends the W&B run)."""
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
