"""Policy trainer: packing, the transformers trainer, its Monarch actor (`.actor`), the
torchtitan backend (`.titan`) and checkpoints (`.checkpoint`).

`import forge_agent.trainer` loads only `TrainerConfig`; the rest (torch) loads on first use.
"""

from forge_agent.lazy import lazy_exports
from forge_agent.trainer.config import TrainerConfig

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

_CHECKPOINT = "forge_agent.trainer.checkpoint"
_CORE = "forge_agent.trainer.core"
__getattr__ = lazy_exports(
    __name__,
    {
        "TrainerState": _CHECKPOINT,
        "complete_checkpoints": "forge_agent.trainer.checkpoint_dirs",
        "load_checkpoint": _CHECKPOINT,
        "prune_checkpoints": "forge_agent.trainer.checkpoint_dirs",
        "save_checkpoint": _CHECKPOINT,
        "Trainer": _CORE,
        "hf_logits": "forge_agent.trainer.logprobs",
        "logprobs_from_logits": "forge_agent.trainer.logprobs",
        "token_logprobs": "forge_agent.trainer.logprobs",
        "MicroBatch": "forge_agent.trainer.packing",
        "pack_trajectories": "forge_agent.trainer.packing",
    },
)
