"""Policy trainer: packing, the transformers trainer, its Monarch actor (`.actor`), the
torchtitan backend (`.titan`) and checkpoints (`.checkpoint`)."""

from forge_agent.trainer.checkpoint import (
    TrainerState,
    complete_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from forge_agent.trainer.core import (
    Trainer,
    TrainerConfig,
    hf_logits,
    logprobs_from_logits,
    token_logprobs,
)
from forge_agent.trainer.packing import MicroBatch, pack_trajectories

__all__ = [
    "MicroBatch",
    "Trainer",
    "TrainerConfig",
    "TrainerState",
    "complete_checkpoints",
    "hf_logits",
    "load_checkpoint",
    "logprobs_from_logits",
    "pack_trajectories",
    "prune_checkpoints",
    "save_checkpoint",
    "token_logprobs",
]
