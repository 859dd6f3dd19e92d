"""Training curves as one PNG, from the metrics JSONL that `metrics.JsonlSink` writes.

Seven panels by default: reward, held-out reward, episode length, tool-call rate, KL (or, when
no KL penalty is on, the sampler/trainer mismatch, titled so), entropy and policy lag. Each
panel names the metric names it looks for (first found wins: an exact name, then any metric
whose name ends with "/<candidate>"); a panel with none of them says "not recorded" instead of
failing. Drawn with matplotlib's Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

Series = dict[str, tuple[list[int], list[float]]]
"""metric name -> (steps, values), in file order."""


@dataclass(frozen=True)
class Panel:
    """One subplot: a title and the metric names that can fill it, most preferred first.

    `retitle` gives a fallback metric its own title (name suffix -> title), for a candidate
    that measures something else than the title says.
    """

    title: str
    candidates: tuple[str, ...]
    retitle: tuple[tuple[str, str], ...] = ()

    def title_for(self, name: str | None) -> str:
        """The title drawn over metric `name` (the panel's title unless `retitle` names it)."""
        for suffix, title in self.retitle:
            if name is not None and (name == suffix or name.endswith("/" + suffix)):
                return title
        return self.title


MISMATCH_TITLE = "sampler/trainer mismatch (k3 KL; not a policy KL: ~0 when they agree)"


DEFAULT_PANELS: tuple[Panel, ...] = (
    Panel("reward (training rollouts)", ("reward/mean", "reward")),
    Panel("held-out reward (eval)", ("eval/reward/mean", "eval/pass@1")),
    Panel("episode length (tokens)", ("episode/length", "episode/num_tokens", "episode_length")),
    Panel("tool-call rate", ("tools/call_rate", "tool_call_rate", "episode/tool_calls")),
    # KL to the reference policy when kl_coef > 0; else the sampler-vs-trainer mismatch
    # (~1e-9 on CPU, float noise can make its mean negative), titled as what it is.
    Panel(
        "KL",
        ("loss/kl", "kl", "sampler_ratio/mismatch_kl_k3"),
        retitle=(("sampler_ratio/mismatch_kl_k3", MISMATCH_TITLE),),
    ),
    Panel("entropy", ("loss/entropy", "entropy")),
    Panel("policy lag", ("policy/lag", "policy_lag")),
)


def read_metrics(path: str | Path) -> Series:
    """Read a metrics JSONL ({"step", "time", "metrics": {...}} per line) into series.

    A final line cut short by a crash is ignored; any other bad line raises `ValueError`.
    """
    lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    series: Series = {}
    for k, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if k == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {k + 1} is not JSON: {err}") from err
        step = int(row["step"])
        for name, value in (row.get("metrics") or {}).items():
            steps, values = series.setdefault(name, ([], []))
            steps.append(step)
            values.append(float("nan") if value is None else float(value))
    return series


def find_series(series: Series, candidates: Sequence[str]) -> str | None:
    """The first metric in `series` that matches a candidate name, or None."""
    for cand in candidates:
        if cand in series:
            return cand
    for cand in candidates:
        for name in sorted(series):
            if name.endswith("/" + cand):
                return name
    return None


def _moving_average(values: list[float], window: int) -> list[float]:
    """Centered moving average over a `window`-point neighbourhood, skipping NaNs (no lag)."""
    half = window // 2
    out = []
    for i in range(len(values)):
        near = [v for v in values[max(0, i - half) : i + half + 1] if not math.isnan(v)]
        out.append(sum(near) / len(near) if near else float("nan"))
    return out


def plot_curves(
    metrics: str | Path | Series,
    out: str | Path,
    panels: Sequence[Panel] = DEFAULT_PANELS,
    title: str | None = None,
) -> dict[str, str | None]:
    """Write the curves PNG to `out`; return panel title -> metric plotted (None if missing)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = metrics if isinstance(metrics, dict) else read_metrics(metrics)
    if title is None:
        title = Path(metrics).name if not isinstance(metrics, dict) else "training curves"
    ncols = 2 if len(panels) > 1 else 1
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig = Figure(figsize=(6 * ncols, 3.2 * nrows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title)
    used: dict[str, str | None] = {}
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        name = find_series(series, panel.candidates)
        ax.set_title(panel.title_for(name), fontsize=10 if name and panel.retitle else None)
        used[panel.title] = name
        if name is None:
            ax.text(
                0.5,
                0.55,
                "not recorded",
                ha="center",
                va="center",
                fontsize=14,
                color="0.45",
                transform=ax.transAxes,
            )
            ax.text(
                0.5,
                0.38,
                "looked for: " + ", ".join(panel.candidates),
                ha="center",
                va="center",
                fontsize=8,
                color="0.6",
                transform=ax.transAxes,
                wrap=True,
            )
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        steps, values = series[name]
        if len(values) >= 20:
            ax.plot(steps, values, color="C0", alpha=0.3, linewidth=1)
            smooth = _moving_average(values, window=max(3, len(values) // 15))
            ax.plot(steps, smooth, color="C0", linewidth=2, label=f"{name} (smoothed)")
        else:
            ax.plot(steps, values, color="C0", marker="o", markersize=3, label=name)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return used
