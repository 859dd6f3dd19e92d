"""A run's metric sinks and trace recording (`metrics` in the run's config), as plain data."""

from __future__ import annotations

from dataclasses import dataclass

from forge_agent.typed_config import check_field

__all__ = ["MetricsConfig"]


@dataclass
class MetricsConfig:
    """A run's metric sinks (their files land in its output folder) and trace recording."""

    console: bool = True
    jsonl: bool = True  # <output>/metrics.jsonl
    tensorboard: bool = False  # <output>/tb; skipped with a warning when tensorboard is missing
    wandb_project: str | None = None  # skipped with a warning when wandb is missing
    plot_every: int = 0  # steps between <output>/curves.png refreshes; 0 = at the end only
    traces_last: int = 64  # episodes kept in traces.jsonl and shown by traces.html

    def __post_init__(self) -> None:
        check_field(self.plot_every >= 0, "plot_every", self.plot_every, "an int >= 0 (0 = off)")
        check_field(self.traces_last >= 0, "traces_last", self.traces_last, "an int >= 0")
