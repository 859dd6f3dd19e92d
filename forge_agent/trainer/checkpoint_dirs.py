"""A run's checkpoint folders (`step_000010` under one root, each complete once its COMPLETE
marker is written; `trainer.checkpoint` writes and reads them): listed and pruned without
torch, which the driver does not import (0.15 GB of PSS, measured)."""

from __future__ import annotations

import shutil
from pathlib import Path

DONE = "COMPLETE"
"""The marker written last into a checkpoint folder: a folder without it is an interrupted
save."""


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete checkpoints (`step_*` folders holding COMPLETE) under `root`, oldest first;
    an interrupted save (no COMPLETE) is not one."""
    root = Path(root)
    if not root.exists():
        return []
    return sorted(p for p in root.glob("step_*") if (p / DONE).exists())


def prune_checkpoints(root: str | Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints under `root`; returns the kept."""
    done = complete_checkpoints(root)
    for old in done[:-keep] if keep > 0 else done:
        shutil.rmtree(old, ignore_errors=True)
    return done[-keep:] if keep > 0 else []
