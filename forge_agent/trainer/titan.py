"""torchtitan backend: torchtitan's Qwen3 model and parallelisms (FSDP2 / TP) for multi-GPU.

The same `Trainer` loop (packing, losses, accumulation, clipping) runs on a torchtitan
`Qwen3Model` instead of a transformers model:

- `titan_qwen3_config(hf_config)` builds a torchtitan `Qwen3Model.Config` with the dimensions
  of a transformers `Qwen3Config` (from torchtitan's public building blocks);
- `hf_to_titan` / `titan_to_hf` convert weights with torchtitan's `Qwen3StateDictAdapter`, so
  the weight store and checkpoints always carry the transformers layout that vLLM loads;
- `TitanTrainer` loads an HF folder into the torchtitan model, applies `parallelize_qwen3`
  (FSDP2 over all ranks, TP when `tensor_parallel_degree > 1`) when launched with several
  ranks (torchrun / one Monarch proc per GPU with the usual RANK/WORLD_SIZE env), and takes
  its share of each batch (`trajectories[rank::world_size]`).

Packed rows need no mask tensor here: torchtitan's FlexAttention builds block-causal masks
from `positions`, which restart at 0 for every packed sequence.

Limits measured on CPU (torchtitan 0.3.0): the forward runs, the backward does not
("FlexAttention does not support backward on CPU"), so training with this backend needs a GPU;
on CPU only the forward and the weight conversion are checked (tests/test_titan.py).
Importing this module imports torchtitan (and through it triton).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import (
    get_attention_config,
    make_ffn_config,
    make_gqa_config,
)
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.qwen3 import Qwen3Model
from torchtitan.models.qwen3.model import Qwen3TransformerBlock
from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

from forge_agent.trainer.checkpoint import load_checkpoint
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.trainer.packing import MicroBatch
from forge_agent.types import Trajectory

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_INIT = {"weight": partial(nn.init.normal_, std=0.02)}


def titan_qwen3_config(
    hf_config: PretrainedConfig, attn_backend: str = "flex"
) -> Qwen3Model.Config:
    """A torchtitan dense Qwen3 config with the shape of a transformers `Qwen3Config`."""
    d, hd = hf_config.hidden_size, hf_config.head_dim
    eps = hf_config.rms_norm_eps
    theta = float(getattr(hf_config, "rope_theta", None) or hf_config.rope_parameters["rope_theta"])

    def norm(n: int) -> RMSNorm.Config:
        return RMSNorm.Config(normalized_shape=n, eps=eps, param_init={"weight": nn.init.ones_})

    rope = CosSinRoPE.Config(dim=hd, max_seq_len=hf_config.max_position_embeddings, theta=theta)
    layers = [
        Qwen3TransformerBlock.Config(
            attention_norm=norm(d),
            ffn_norm=norm(d),
            attention=make_gqa_config(
                dim=d,
                n_heads=hf_config.num_attention_heads,
                n_kv_heads=hf_config.num_key_value_heads,
                head_dim=hd,
                wqkv_param_init=_INIT,
                wo_param_init=_INIT,
                inner_attention=get_attention_config(attn_backend),
                fuse_qkv=False,  # separate wq/wk/wv map 1:1 onto q_proj/k_proj/v_proj
                rope=rope,
                qk_norm=norm(hd),
            ),
            feed_forward=make_ffn_config(
                dim=d,
                hidden_dim=hf_config.intermediate_size,
                w1_param_init=_INIT,
                w2w3_param_init=_INIT,
            ),
        )
        for _ in range(hf_config.num_hidden_layers)
    ]
    v = hf_config.vocab_size
    return Qwen3Model.Config(
        vocab_size=v,
        dim=d,
        norm=norm(d),
        enable_weight_tying=bool(hf_config.tie_word_embeddings),
        tok_embeddings=Embedding.Config(num_embeddings=v, embedding_dim=d, param_init=_INIT),
        lm_head=Linear.Config(in_features=d, out_features=v, param_init=_INIT),
        layers=layers,
    )


def hf_to_titan(
    hf_state_dict: dict[str, torch.Tensor], cfg: Qwen3Model.Config
) -> dict[str, torch.Tensor]:
    """transformers Qwen3 weights -> torchtitan Qwen3 weights."""
    return Qwen3StateDictAdapter(cfg, None).from_hf(dict(hf_state_dict))


def titan_to_hf(
    titan_state_dict: dict[str, torch.Tensor], cfg: Qwen3Model.Config
) -> dict[str, torch.Tensor]:
    """torchtitan Qwen3 weights -> transformers Qwen3 weights (DTensors gathered to full)."""
    full = {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach()
        for k, v in titan_state_dict.items()
    }
    return Qwen3StateDictAdapter(cfg, None).to_hf(full)


def titan_logits(model: nn.Module, mb: MicroBatch) -> torch.Tensor:
    """Logits `[R, L, V]` of a torchtitan decoder on packed rows (document masks built from
    positions restarting at 0 per sequence)."""
    masks = model.get_attention_masks(mb.position_ids)
    return model(mb.input_ids, mb.position_ids, masks)


class TitanTrainer(Trainer):
    """`Trainer` on torchtitan's Qwen3 with FSDP2/TP when several ranks run it.

    `model` must be an HF Qwen3 folder; weights go in and come out in the HF layout.
    `tensor_parallel_degree` splits each rank group for TP; the rest is FSDP.
    """

    _can_skip_zero_advantage = False  # every rank runs every pass

    _head_at_targets = False  # the sharded model runs as one module
    _can_share_prefix = False  # torchtitan builds its own attention masks

    def __init__(
        self,
        cfg: TrainerConfig,
        model: str | Path | nn.Module,
        tensor_parallel_degree: int = 1,
        **kwargs: Any,
    ):
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.tp = tensor_parallel_degree
        self._loss_scale = float(self.world_size // self.tp)  # FSDP averages over dp ranks
        super().__init__(cfg, model, **kwargs)

    def _load_model(self, path: str) -> nn.Module:
        from safetensors.torch import load_file
        from transformers import AutoConfig

        self.hf_config = AutoConfig.from_pretrained(path)
        self.titan_config = titan_qwen3_config(self.hf_config)
        model = self.titan_config.build()
        weights: dict[str, torch.Tensor] = {}
        for f in sorted(Path(path).glob("*.safetensors")):
            weights.update(load_file(f))
        missing, unexpected = model.load_state_dict(
            hf_to_titan(weights, self.titan_config), strict=False
        )
        if unexpected or [k for k in missing if "rope" not in k]:
            raise KeyError(f"{path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        return model

    def _place(self, model: nn.Module) -> nn.Module:
        model = model.to(device=self.device, dtype=self.dtype)
        if self.world_size > 1:
            model = self._parallelize(model)
        return model

    def _parallelize(self, model: nn.Module) -> nn.Module:
        import torch.distributed as dist
        from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
        from torchtitan.distributed import ParallelDims
        from torchtitan.models.qwen3 import parallelize_qwen3

        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        parallelism = ParallelismConfig(tensor_parallel_degree=self.tp)
        dims = ParallelDims.from_config(parallelism, self.world_size)
        dims.build_mesh()
        training = TrainingConfig(mixed_precision_param="float32")
        with tempfile.TemporaryDirectory() as dump:
            return parallelize_qwen3(
                model,
                parallel_dims=dims,
                training=training,
                parallelism=parallelism,
                compile_config=CompileConfig(enable=False),
                ac_config=None,
                dump_folder=dump,
            )

    def _reference_copy(self) -> nn.Module:
        ref = self.titan_config.build()
        ref.load_state_dict(
            {
                k: (v.full_tensor() if hasattr(v, "full_tensor") else v)
                for k, v in self.model.state_dict().items()
            },
            strict=False,
        )
        return self._place(ref)

    def _shard(self, trajectories: Sequence[Trajectory]) -> Sequence[Trajectory]:
        dp_rank, dp_size = self.rank // self.tp, self.world_size // self.tp
        return trajectories[dp_rank::dp_size]

    def _logits(self, model: nn.Module, mb: MicroBatch) -> torch.Tensor:
        return titan_logits(model, mb)  # [R, L, V]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Weights in the transformers layout (full tensors) for the weight store."""
        return titan_to_hf(self.model.state_dict(), self.titan_config)

    def hf_model(self) -> nn.Module:
        """A transformers copy of the current policy (CPU), e.g. to save an HF folder."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(self.hf_config)
        model.load_state_dict({k: v.cpu() for k, v in self.state_dict().items()}, strict=False)
        return model

    def save_checkpoint(self, path: str | Path, data_position: object = None) -> Path:
        """HF policy folder (converted) + this rank's torchtitan optimizer state."""
        path = Path(path)
        hf = self.hf_model()  # every rank: gathering the sharded weights is a collective
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.optimizer.state_dict(), path / f"titan_optimizer_rank{self.rank}.pt")
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # every rank's optimizer file is on disk before COMPLETE is
        if self.rank == 0:
            self._write_checkpoint(path, hf, None, data_position)
        return path

    def load_checkpoint(self, path: str | Path) -> Any:
        path = Path(path)
        hf = self.hf_model()
        state = load_checkpoint(path, hf, None)
        titan_sd = hf_to_titan(hf.state_dict(), self.titan_config)
        own = self.model.state_dict()
        with torch.no_grad():
            for k, v in titan_sd.items():
                dst = own[k]
                if hasattr(dst, "full_tensor"):  # DTensor: copy this rank's shard
                    from torch.distributed.tensor import distribute_tensor

                    v = distribute_tensor(v.to(dst.device), dst.device_mesh, dst.placements)
                dst.copy_(v)
        opt = path / f"titan_optimizer_rank{self.rank}.pt"
        if opt.exists():
            self.optimizer.load_state_dict(torch.load(opt, weights_only=False))
        self.step, self.policy_version = state.step, state.policy_version
        return state.data_position
