"""The transformers trainer over N ranks: FSDP2 (`fully_shard`) on a 1-D device mesh.

One process per rank (one Monarch proc each, see `TrainerActor`); the process group is gloo on
CPU and NCCL on GPUs. Each decoder layer and the root module are sharded, so every rank holds
1/N of the parameters, gradients and optimizer state. One `train_step`:

    share = batch[rank::N]                        # this rank's trajectories
    micro-batches = pack(share), padded with non-counting repeats to the ranks' maximum
    loss_r = sum over this rank's tokens, normalised by the *whole batch's* counts
    backward(N * loss_r)                          # FSDP averages gradients over N ranks
    -> the gradient of sum_r loss_r, i.e. of the 1-rank loss on the whole batch

Metrics are summed over ranks, so rank 0 reports the loss and gradient norm of the whole batch.
Weights leave as full tensors in the transformers layout (rank 0 puts them in the store);
checkpoints hold the full weights (an HF folder, as with one rank) and the full optimizer state,
so a run can resume with any number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from forge_agent.trainer.checkpoint import load_checkpoint
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.trainer.lora import apply_lora, base_model, check_checkpoint_kind
from forge_agent.trainer.packing import MicroBatch
from forge_agent.types import Trajectory

_OPTIMIZER_FILE = "optimizer_full.pt"


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a transformers causal LM (`model.model.layers`; under a peft
    model, its base model's)."""
    layers = getattr(getattr(base_model(model), "model", None), "layers", None)
    if layers is None:
        raise ValueError(
            f"{type(model).__name__} has no model.layers: FSDP shards per decoder layer"
        )
    return list(layers)


class FSDPTrainer(Trainer):
    """`Trainer` with the policy sharded over the default process group by FSDP2.

    The process group must be initialised (or the usual RANK / WORLD_SIZE / MASTER_* variables
    set) before construction.
    """

    _can_skip_zero_advantage = False  # every rank runs every pass

    _head_at_targets = False  # the sharded model runs as one module
    _can_share_prefix = False  # not measured with sharded models

    def __init__(self, cfg: TrainerConfig, model: str | Path | nn.Module, **kwargs: Any) -> None:
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self._loss_scale = float(self.world_size)  # undo FSDP's average over ranks
        self._idle = False
        super().__init__(cfg, model, **kwargs)

    # -- model ----------------------------------------------------------------------------------

    def _place(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model = model.to(device=self.device, dtype=self.dtype)
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        for layer in _decoder_layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    def _reference_copy(self) -> nn.Module:
        return self._place(self._load_model(self.model_path))

    # -- data parallelism -----------------------------------------------------------------------

    def _shard(self, trajectories: Sequence[Trajectory]) -> Sequence[Trajectory]:
        share = list(trajectories[self.rank :: self.world_size])
        self._idle = not share
        # a rank without data still runs the passes (zero weight) so the collectives pair up
        return share or list(trajectories[:1])

    def _schedule(self, mbs: list[MicroBatch]) -> list[tuple[MicroBatch, bool]]:
        count = torch.tensor([len(mbs)])
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        plan = [(mb, not self._idle) for mb in mbs]
        plan += [(mbs[-1], False)] * (int(count) - len(mbs))
        return plan

    def _reduce_metrics(self, sums: dict[str, float], weights: dict[str, float]) -> None:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, (dict(sums), dict(weights)))
        sums.clear()
        weights.clear()
        for rank_sums, rank_weights in gathered:
            for k, v in rank_sums.items():
                sums[k] = sums.get(k, 0.0) + v
                # loss/ terms are shares of the batch loss: they add up; the rest are
                # token-weighted means
                weights[k] = 1.0 if k.startswith("loss/") else weights.get(k, 0.0) + rank_weights[k]

    # -- weights and checkpoints ----------------------------------------------------------------

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on rank 0 (CPU); {} on the other ranks. A collective: every rank calls
        it (`state_dict` merges LoRA adapters into them on rank 0)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def _unsharded_model(self) -> nn.Module:
        """A plain (unsharded) copy of the policy's structure on the CPU: the transformers
        model, with fresh adapters when `trainer.lora` is set; checkpoints go through it."""
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=self.dtype)
        if self.cfg.lora is not None:
            hf = apply_lora(hf, self.cfg.lora)
        return hf

    def _full_optimizer_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(self.model, self.optimizer, options=options)

    def save_checkpoint(self, path: str | Path, data_position: object = None) -> Path:
        """Rank 0 writes the full weights (HF folder) and the full optimizer state; the other
        ranks take part in the gathers. Returns when every rank is done."""
        path = Path(path)
        weights = self._full_state_dict()
        optimizer = self._full_optimizer_state()
        if self.rank == 0:
            hf = self._unsharded_model()
            hf.load_state_dict(weights)
            path.mkdir(parents=True, exist_ok=True)
            torch.save(optimizer, path / _OPTIMIZER_FILE)  # before COMPLETE is written
            self._write_checkpoint(path, hf, None, data_position)
        dist.barrier()
        return path

    def load_checkpoint(self, path: str | Path) -> Any:
        """Every rank reads the full weights and optimizer state and keeps its shard."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(path)
        check_checkpoint_kind(path / "policy", self.cfg.lora)
        hf = self._unsharded_model()
        state = load_checkpoint(path, hf, None)
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, hf.state_dict(), options=options)
        optimizer_file = path / _OPTIMIZER_FILE
        if optimizer_file.exists():
            full = torch.load(optimizer_file, weights_only=False)
            set_optimizer_state_dict(self.model, self.optimizer, full, options=options)
        self.step, self.policy_version = state.step, state.policy_version
        dist.barrier()
        return state.data_position
