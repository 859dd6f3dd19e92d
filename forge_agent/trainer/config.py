"""The trainer's config as plain data (an actor receives it; the run's config loads it without
torch), and the torchtitan parallelism degrees it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from forge_agent.algorithms.loss_config import LossConfig


@dataclass
class TrainerConfig:
    """The trainer's settings, as plain data (so an actor can receive it).

    The model it trains, the device, dtype and seed are the run's (``Trainer``'s arguments).
    `backend`: "hf" (transformers; FSDP2 when the trainer mesh has several procs) or "titan"
    (torchtitan; `titan` holds its parallelism degrees: ``tensor_parallel_degree``,
    ``data_parallel_shard_degree``, -1 = the rest); the actor picks the class from them.
    """

    backend: Literal["hf", "titan"] = "hf"
    titan: dict[str, Any] = field(default_factory=dict)
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0  # null: no clipping
    loss: LossConfig = field(default_factory=LossConfig)
    packing: bool = True
    row_tokens: int = 4096  # max tokens per packed row
    microbatch_tokens: int = 16384  # token budget of one forward/backward
    compute_entropy: bool = True  # entropy metric (and bonus when loss.entropy_coef > 0)
    gradient_checkpointing: bool = False
    # a group's common prompt computed once per row (its episodes attend to that one copy);
    # same logprobs and gradients, fewer tokens (packing.py); hf backend, sdpa/eager attention
    share_prefix: bool = True

    def __post_init__(self) -> None:
        from forge_agent.typed_config import check_field

        if isinstance(self.loss, dict):  # from plain dicts
            self.loss = LossConfig(**self.loss)
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        check_field(self.lr > 0.0, "lr", self.lr, "a float > 0")
        check_field(self.weight_decay >= 0.0, "weight_decay", self.weight_decay, "a float >= 0")
        norm = self.max_grad_norm
        check_field(norm is None or norm > 0, "max_grad_norm", norm, "a float > 0 or null")
        for key in ("row_tokens", "microbatch_tokens"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        check_field(
            self.row_tokens <= self.microbatch_tokens,
            "row_tokens",
            self.row_tokens,
            f"an int <= microbatch_tokens ({self.microbatch_tokens})",
        )


TITAN_KEYS = ("tensor_parallel_degree", "data_parallel_shard_degree")


def titan_degrees(titan: dict[str, Any], world: int) -> tuple[int, int]:
    """(tensor parallel, FSDP shard) degrees of ``trainer.titan`` for ``world`` trainer procs.

    ``data_parallel_shard_degree`` -1 means "the rest": ``world // tensor_parallel_degree``.
    """
    unknown = sorted(set(titan) - set(TITAN_KEYS))
    if unknown:
        raise ValueError(f"trainer.titan: unknown key(s) {unknown}; expected {list(TITAN_KEYS)}")
    tp = int(titan.get("tensor_parallel_degree", 1))
    dp = int(titan.get("data_parallel_shard_degree", -1))
    if tp < 1 or world % tp:
        raise ValueError(
            f"trainer.titan.tensor_parallel_degree={tp} does not divide the "
            f"{world} trainer procs (services.trainer.procs)"
        )
    if dp == -1:
        dp = world // tp
    if dp * tp != world:
        raise ValueError(
            f"trainer.titan.data_parallel_shard_degree={dp} x tensor_parallel_degree={tp} != "
            f"{world} trainer procs (services.trainer.procs); use -1 for the rest"
        )
    return tp, dp
