"""What a run leaves in `output_dir`: its config, curves, the trace page and `summary.json`.

prepare_output_dir(dir, resume, cfg)make the folder, clear a previous run's outputs unless
                                 resuming, write config.yaml
plot_curves_safely(out)          curves.png from metrics.jsonl so far (never fails the run)
write_trace_page(out, ...)       traces.html from the last traces
run_summary(result, ...)         summary.json's content, from what the loop returned
write_summary(out, summary)      summary.json
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_agent.models.tiny import load_tokenizer
from forge_agent.observability.metrics import record
from forge_agent.observability.plots import plot_curves
from forge_agent.observability.trace_html import load_token_decoder, write_html
from forge_agent.observability.traces import read_traces
from forge_agent.run.loop_result import LoopResult
from forge_agent.typed_config import dump_yaml

if TYPE_CHECKING:
    from forge_agent.observability.config import MetricsConfig
    from forge_agent.observability.metrics import MetricLogger
    from forge_agent.observability.trace_html import Decode
    from forge_agent.observability.traces import TraceWriter

logger = logging.getLogger(__name__)

PREVIOUS_RUN = ("metrics.jsonl", "traces.jsonl", "checkpoints")
"""What a fresh run in a used `output_dir` clears (resume=true continues the run instead)."""


def prepare_output_dir(output_dir: str | Path, resume: bool, config: object) -> Path:
    """The run's output folder, made; a previous run's metrics, traces and checkpoints cleared
    unless `resume` (`checkpoint.resume`: appending to them would mix two runs); the run's
    `config` (a config dataclass) written as config.yaml."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    old = [out / name for name in PREVIOUS_RUN if (out / name).exists()]
    if old and not resume:
        print(
            f"[fresh run] clearing the previous run's outputs in {out} "
            "(pass resume=true to continue it)",
            flush=True,
        )
        for path in old:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    dump_yaml(config, out / "config.yaml")
    return out


def plot_curves_safely(out: Path) -> None:
    """curves.png from metrics.jsonl so far; a failed plot is logged, never raised."""

    try:
        plot_curves(out / "metrics.jsonl", out / "curves.png")
    except Exception as exc:
        logger.warning("plotting curves failed: %s", exc)


def write_trace_page(out: Path, last: int, decode: Decode) -> None:
    """traces.html: the last `last` episodes of traces.jsonl, tokens decoded by `decode`."""

    try:
        write_html(read_traces(out / "traces.jsonl", last=last), out / "traces.html", decode=decode)
    except Exception as exc:
        logger.warning("writing the trace page failed: %s", exc)


def policy_decoder(policy: str | Path) -> Decode:
    """`load_token_decoder(policy)`, a policy folder's tokenizer loaded by `load_tokenizer`
    (local files only, as there): the tiny model's without torch, which the driver does not
    import otherwise (0.26 GB of PSS with transformers' `AutoTokenizer`, measured, while the
    actors still run)."""
    if not Path(policy).is_dir():
        return load_token_decoder(policy)
    tokenizer = load_tokenizer(policy, local_files_only=True)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """summary.json: steps, wall time, where the time went, evals, counts, restarts."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2))


def run_summary(
    result: LoopResult, policy_path: Path | str, resumed_from: dict[str, Any] | None
) -> dict[str, Any]:
    """summary.json's content: what the training loop measured (`result`: steps, wall time,
    where the time went, evals, counts, restarts, the curriculum), the policy folder and where
    the run resumed from."""
    return {
        "steps": result.steps,
        "policy_version": result.policy_version,
        "wall_s": result.wall_s,
        "timing": result.timing,
        "profile": result.profile,
        "evals": result.evals,
        "counts": result.counts,
        "restarts": result.restarts,
        "policy_path": str(policy_path),
        "resumed_from": resumed_from,
        "curriculum": result.curriculum,
    }


def finish(
    out: Path,
    traces: TraceWriter,
    metrics: MetricLogger,
    metrics_cfg: MetricsConfig,
    policy: str | Path,
) -> None:
    """At shutdown: close the trace writer and the metric sinks, then write traces.html (the
    last `metrics.traces_last` episodes, decoded with `policy`'s tokenizer) and curves.png.
    Never raises."""

    with contextlib.suppress(Exception):
        traces.close()
    with contextlib.suppress(Exception):
        write_trace_page(out, metrics_cfg.traces_last, policy_decoder(policy))
    with contextlib.suppress(Exception):
        metrics.close()
    plot_curves_safely(out)


def log_step(
    metrics: MetricLogger,
    step: int,
    train_metrics: dict[str, float],
    lags: list[int],
    gauges: dict[str, float],
    curves: Path | None,
) -> None:
    """A finished step's metrics to the sinks: the trainer's, the trained tokens' policy lag
    (mean and max) and `gauges` (their last value: replay and restart counts, where the step's
    time went), flushed at `step`; curves.png into `curves` when given (`metrics.plot_every`)."""

    for name, value in train_metrics.items():
        record(name, value)
    record("policy/lag", sum(lags) / len(lags))  # mean over trained tokens
    record("policy/lag_max", max(lags), "max")
    for name, value in gauges.items():
        record(name, value, "last")
    metrics.flush(step)
    if curves is not None:
        plot_curves_safely(curves)
