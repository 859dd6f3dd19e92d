"""Which weight store a run uses, as plain data (loads without torch or Monarch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from forge_agent.typed_config import check_field

OnFull = Literal["evict", "block"]


@dataclass
class WeightStoreConfig:
    """Which weight store a run uses and how many versions it keeps.

    ``backend``: "monarch" (a `WeightStoreActor`; shared memory on one host, messages across
    hosts), "torchstore" (the real TorchStore package, 0.1.2 through
    `forge_agent.weights.torchstore_compat`; one host or several, see docs/hosts.md) or
    "local" (in-process; single-process runs and tests).
    """

    backend: Literal["monarch", "torchstore", "local"] = "monarch"
    max_versions: int = 2
    on_full: OnFull = "evict"
    put_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check_field(self.max_versions >= 1, "max_versions", self.max_versions, "an int >= 1")
        check_field(self.put_timeout_s > 0, "put_timeout_s", self.put_timeout_s, "seconds > 0")
