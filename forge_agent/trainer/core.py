"""The policy trainer: a transformers causal LM, AdamW, packed micro-batches, GRPO-family loss.

One `train_step(trajectories)` is one optimizer step:

    micro-batches = pack(trajectories)                  # no padding waste, see packing.py
    for mb in micro-batches:                            # gradient accumulation to a token budget
        logp, H = policy(mb, at=loss tokens)            # current logprobs and entropy [B, T]
        ref = reference(mb) if kl_coef else None        # frozen reference (LoRA: adapters off)
        loss = policy_loss(cfg.loss, logp, sampler_logp, A, mask, ...)   # batch-normalised
        loss.backward()
    clip_grad_norm_; optimizer.step(); policy_version += 1

`sft_step` is the same loop with cross-entropy on the loss-masked tokens (warm starts).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from forge_agent.algorithms.losses import policy_loss
from forge_agent.trainer.checkpoint import load_checkpoint, save_checkpoint
from forge_agent.trainer.compile import compile_decoder_layers
from forge_agent.trainer.config import TrainerConfig
from forge_agent.trainer.logprobs import hf_logits, hf_logprobs_at, logprobs_from_logits
from forge_agent.trainer.lora import (
    active_adapter,
    adapter_tensors,
    apply_lora,
    check_checkpoint_kind,
    merge_lora,
    reference_policy,
)
from forge_agent.trainer.packing import MicroBatch, pack_trajectories, pad_rows, unit_lengths
from forge_agent.trainer.precision import choose_autocast, resolve_device, resolve_dtype
from forge_agent.types import Trajectory
from forge_agent.weights.layout import tied_names

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


def _max_token_lag(trajs: Sequence[Trajectory], version: int) -> int:
    """The largest `version - v` over the sampled tokens whose sampling version v is known."""
    lags = [
        version - v
        for t in trajs
        if len(t.versions) == len(t.loss_mask)
        for v, m in zip(t.versions, t.loss_mask, strict=True)
        if m and v >= 0
    ]
    return max(lags, default=0)


def _has_advantage(t: Trajectory) -> bool:
    """Whether some loss token of `t` has a nonzero advantage (turn-level or the episode's)."""
    if t.turn_advantages:
        return any(a != 0.0 for a, m in zip(t.token_advantages(), t.loss_mask, strict=False) if m)
    return t.advantage != 0.0


class Trainer:
    """Owns the policy model, an optional frozen reference model and the optimizer."""

    def __init__(
        self,
        cfg: TrainerConfig,
        model: str | Path | nn.Module,
        *,
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
        tokenizer: PreTrainedTokenizerBase | None = None,
        ref_model: nn.Module | None = None,
    ) -> None:
        """`model`: a Hugging Face folder (or hub id) for AutoModelForCausalLM, or a module.
        `device` "auto": cuda when available, else cpu; `dtype` "auto": bfloat16 on cuda,
        float32 on cpu."""
        self.cfg = cfg
        torch.manual_seed(seed)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        # "auto": bf16 where the device runs it natively (the driver prints the choice once)
        self.autocast, why = choose_autocast(cfg.autocast, self.device)
        logger.info("trainer autocast %s: %s", self.autocast, why)
        self.model_path = "" if isinstance(model, nn.Module) else str(model)
        if not isinstance(model, nn.Module):
            if not self.model_path:
                raise ValueError("Trainer: model is empty; give a model folder or a module")
            model = self._load_model(self.model_path)
            if tokenizer is None and (Path(self.model_path) / "tokenizer_config.json").exists():
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        if cfg.lora is not None:  # adapters on the base model: only they train
            model = apply_lora(model, cfg.lora)
        self.model = self._place(model)
        self.model.train()
        if cfg.gradient_checkpointing and hasattr(self.model, "gradient_checkpointing_enable"):
            self.model.gradient_checkpointing_enable()
        if cfg.compile is not None:
            compile_decoder_layers(self.model, cfg.compile)
        self.attn_implementation = (
            getattr(getattr(model, "config", None), "_attn_implementation", cfg.attn_implementation)
            or cfg.attn_implementation
        )
        self.tokenizer = tokenizer
        self.ref_model = ref_model
        # with LoRA the reference policy is the same model with its adapters off
        if self.ref_model is None and cfg.loss.kl_coef and cfg.lora is None:
            self.ref_model = self._reference_copy()
        if self.ref_model is not None:
            self.ref_model.to(self.device).eval().requires_grad_(False)
        trained = [p for p in self.model.parameters() if p.requires_grad]  # LoRA: A and B only
        self.optimizer = torch.optim.AdamW(
            trained, lr=cfg.learning_rate, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.step = 0
        self.policy_version = 0

    # -- model construction (backends override) -----------------------------------------------

    def _load_model(self, path: str) -> nn.Module:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(
            path, dtype=self.dtype, attn_implementation=self.cfg.attn_implementation
        )

    def _place(self, model: nn.Module) -> nn.Module:
        return model.to(device=self.device, dtype=self.dtype)

    def _reference_copy(self) -> nn.Module:
        return copy.deepcopy(self.model)

    @contextlib.contextmanager
    def _reference(self) -> Iterator[nn.Module]:
        """The reference policy for the KL term: the frozen copy, or with LoRA the policy
        itself with its adapters off while the context lasts."""
        if self.ref_model is not None:
            yield self.ref_model
            return

        with reference_policy(self.model):
            yield self.model

    _loss_scale: float = 1.0  # data-parallel backends undo the gradient averaging

    def _shard(self, trajectories: Sequence[Trajectory]) -> Sequence[Trajectory]:
        """This rank's share of the batch (all of it in a single process)."""
        return trajectories

    def _schedule(self, mbs: list[MicroBatch]) -> list[tuple[MicroBatch, bool]]:
        """The micro-batches this rank runs, each with whether it counts. Data-parallel
        backends add non-counting repeats so every rank runs as many forward/backward passes
        (their collectives must pair up)."""
        return [(mb, True) for mb in mbs]

    def _reduce_metrics(self, sums: dict[str, float], weights: dict[str, float]) -> None:
        """Combine the per-rank metric sums and weights in place (one process: nothing)."""

    # Data-parallel backends run every episode (a rank's passes pair with the others').
    _can_skip_zero_advantage: bool = True

    def _skips_zero_advantage(self) -> bool:
        """Whether episodes of advantage 0 are left out of the step: their gradient is exactly
        0 when the loss has no KL and no entropy term (every policy loss here is the advantage
        times a finite factor; the loss's normalisation counts the whole batch's tokens)."""
        loss = self.cfg.loss
        entropy = self.cfg.compute_entropy and bool(loss.entropy_coef)
        return (
            self.cfg.skip_zero_advantage
            and self._can_skip_zero_advantage
            and not loss.kl_coef
            and not entropy
        )

    # -- forward helpers ----------------------------------------------------------------------

    # The LM head only where a loss token is predicted (`hf_logprobs_at`); backends whose
    # model must run as one module (FSDP's root, torchtitan) keep full logits.
    _head_at_targets: bool = True

    def _logprobs(
        self,
        model: nn.Module,
        mb: MicroBatch,
        entropy: Literal["none", "metric", "grad"],
        targets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token logprobs `[B, T]` of `model` on a micro-batch; with `targets` (`[B, T]`
        bool) only those tokens' (0 elsewhere). Backends override `_logits`."""
        if targets is not None and self._head_at_targets and hasattr(model, "get_decoder"):
            return hf_logprobs_at(
                model, mb, targets, entropy, self.attn_implementation, self.cfg.logits_chunk_mib
            )
        return logprobs_from_logits(self._logits(model, mb), mb, entropy)

    def _logits(self, model: nn.Module, mb: MicroBatch) -> torch.Tensor:
        return hf_logits(model, mb, self.attn_implementation)  # [R, L, V]

    # Shared-prefix rows need the attention mask `MicroBatch.attention_mask` gives (not flash
    # attention's position_ids, not torchtitan's own masks).
    _can_share_prefix: bool = True

    def _pack(self, trajectories: Sequence[Trajectory]) -> list[MicroBatch]:
        """Micro-batches of packed rows. Without flash attention a row's block-diagonal mask is
        dense, so attention costs the square of the row's length whatever it holds: rows are
        then no longer than the longest trajectory, or with shared prefixes the longest group
        block (short episodes share a row only up to that length; apps/bench/train_step.py
        measures it)."""
        cfg = self.cfg
        share = (
            cfg.share_prefix
            and cfg.packing
            and self._can_share_prefix
            and self.attn_implementation in ("sdpa", "eager")
        )
        row = cfg.row_tokens
        if not self.attn_implementation.startswith("flash") and trajectories:
            row = min(row, max(unit_lengths(trajectories, row, share)))
        return pack_trajectories(trajectories, row, cfg.microbatch_tokens, cfg.packing, share)

    def _masks(self, trajs: Sequence[Trajectory], mb: MicroBatch) -> torch.Tensor:
        T = mb.valid.shape[1]
        mask = pad_rows([trajs[i].loss_mask for i in mb.traj_indices], T, torch.float32)
        return mask.to(self.device) * (mb.valid & ~mb.seq_start)  # [B, T]

    @torch.no_grad()
    def compute_logprobs(self, trajectories: Sequence[Trajectory]) -> list[torch.Tensor]:
        """Current policy's logprob of every token of each trajectory (`[T_i]` each, 0.0 at the
        first token of each sequence), in eval mode without gradients."""
        self.model.eval()
        try:
            out: list[torch.Tensor] = [torch.empty(0)] * len(trajectories)
            for adapter, index in self._by_adapter(trajectories):
                part = [trajectories[i] for i in index]
                with self._adapter(adapter):
                    for mb in self._pack(part):
                        mb = mb.to(self.device)
                        logp, _ = self._logprobs(self.model, mb, "none")
                        for b, i in enumerate(mb.traj_indices):
                            out[index[i]] = logp[b, : len(part[i].token_ids)].float().cpu()
            return out
        finally:
            self.model.train()

    def _by_adapter(self, trajs: Sequence[Trajectory]) -> list[tuple[str | None, list[int]]]:
        """The trajectories' indices per LoRA adapter (`Trajectory.adapter`), in first-seen
        order; one part of them all without several adapters."""
        if self.cfg.lora is None or len(self.cfg.lora.adapters) == 1:
            return [(None, list(range(len(trajs))))]
        parts: dict[str, list[int]] = {}
        for i, t in enumerate(trajs):
            parts.setdefault(t.adapter or self.cfg.lora.adapters[0], []).append(i)
        return list(parts.items())

    @contextlib.contextmanager
    def _adapter(self, name: str | None) -> Iterator[None]:
        """Within it the policy is LoRA adapter `name` (None: as it is)."""
        if name is None:
            yield
            return

        with active_adapter(self.model, name):
            yield

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        """`trainer.autocast`'s mixed precision for a forward (and the backward it records)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, self.autocast))

    # -- steps ---------------------------------------------------------------------------------

    def train_step(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One optimizer step of the configured policy loss on trajectories with advantages
        (uses `token_ids`, `loss_mask`, sampler `logprobs` and `advantage`, or per turn
        `turn_advantages` where set)."""
        trajs = [t for t in trajectories if t.num_sampled > 0]
        if not trajs:
            raise ValueError(
                f"train_step got {len(trajectories)} trajectories and none has a sampled token"
            )
        return self._step(trajs, sft=False)

    def sft_step(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One optimizer step of token-mean cross-entropy on the loss-masked tokens:
        L = -(1/N) sum_t m_t log pi_theta(y_t | y_<t)."""
        trajs = [t for t in trajectories if t.num_sampled > 0]
        if not trajs:
            raise ValueError(f"sft_step got {len(trajectories)} trajectories, none with targets")
        return self._step(trajs, sft=True)

    def _step(self, trajs: Sequence[Trajectory], sft: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        num_tokens = float(sum(t.num_sampled for t in trajs))  # whole batch, every rank
        num_sequences = float(len(trajs))
        skipped = 0
        if not sft and self._skips_zero_advantage():
            kept = [t for t in trajs if _has_advantage(t)]
            skipped, trajs = len(trajs) - len(kept), kept
        trajs = self._shard(trajs)  # this rank's share (all of it in one process)
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        self.optimizer.zero_grad(set_to_none=True)
        mbs: list[MicroBatch] = []
        # several LoRA adapters: each trains on its own episodes (rows never mix adapters);
        # the loss is normalised over the whole batch, so the step equals one joint backward
        for adapter, index in self._by_adapter(trajs):
            part = [trajs[i] for i in index]
            part_mbs = self._pack(part)
            mbs += part_mbs
            with self._adapter(adapter):
                self._accumulate(part, part_mbs, sft, num_tokens, num_sequences, sums, weights)
        self._reduce_metrics(sums, weights)
        if skipped:  # a zero gradient, not none: AdamW's moments still decay and move the weights
            for p in self.model.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        grad_norm = self._clip()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.policy_version += 1
        elapsed = time.perf_counter() - t0
        real = sum(mb.num_tokens for mb in mbs)
        computed = sum(mb.computed_tokens for mb in mbs)
        padded = sum(mb.padded_tokens for mb in mbs)
        out = {k: sums[k] / weights[k] if weights[k] else 0.0 for k in sums}
        if skipped and not mbs:  # every episode at advantage 0: the loss is exactly 0
            out.update({"loss/total": 0.0, "loss/policy": 0.0})
        out.update(
            {
                "train/grad_norm": grad_norm,
                "train/trajectories": num_sequences,
                "train/loss_tokens": num_tokens,
                "train/tokens": float(real),
                "train/padding_frac": 1.0 - computed / padded if padded else 0.0,
                "train/shared_prefix_frac": 1.0 - computed / real if real else 0.0,
                "train/microbatches": float(len(mbs)),
                "train/zero_advantage_skipped": float(skipped),
                "train/step_s": elapsed,
                "train/tokens_per_s": real / elapsed if elapsed > 0 else 0.0,
                "train/policy_version": float(self.policy_version),
            }
        )
        if not sft and trajs:
            out["train/advantage_mean"] = sum(t.advantage for t in trajs) / len(trajs)
            out["train/token_lag_max"] = float(_max_token_lag(trajs, self.policy_version - 1))
        return out

    def _accumulate(
        self,
        trajs: Sequence[Trajectory],
        mbs: list[MicroBatch],
        sft: bool,
        num_tokens: float,
        num_sequences: float,
        sums: dict[str, float],
        weights: dict[str, float],
    ) -> None:
        """Forward and backward of `trajs`' micro-batches `mbs`, gradients accumulated; each
        loss normalised by the whole batch's `num_tokens` / `num_sequences`; metric sums and
        weights added to `sums` / `weights`."""
        cfg = self.cfg
        want_entropy = cfg.compute_entropy and not sft
        for mb_cpu, counts in self._schedule(mbs):
            mb = mb_cpu.to(self.device)
            mask = self._masks(trajs, mb)  # [B, T]
            if not counts:
                mask = torch.zeros_like(mask)  # a repeat that keeps the ranks in step
            ent_mode = "none"
            if want_entropy:
                ent_mode = "grad" if cfg.loss.entropy_coef else "metric"
            targets = mask > 0  # the tokens the loss reads
            with self._autocast():
                logp, ent = self._logprobs(self.model, mb, ent_mode, targets)
            T = logp.shape[1]
            n_mb = float(mask.sum())
            if sft:
                loss = -(logp * mask).sum() / max(num_tokens, 1.0)
                metrics = {"loss/total": float(loss.detach())}
            else:
                sampler = pad_rows([trajs[i].logprobs for i in mb.traj_indices], T, torch.float32)
                batch = [trajs[i] for i in mb.traj_indices]
                if any(t.turn_advantages for t in batch):  # turn-level credit: [B, T]
                    adv = pad_rows([t.token_advantages() for t in batch], T, torch.float32)
                else:
                    adv = torch.tensor([t.advantage for t in batch])
                ref = None
                if cfg.loss.kl_coef:
                    with torch.no_grad(), self._reference() as reference, self._autocast():
                        ref, _ = self._logprobs(reference, mb, "none", targets)
                loss, metrics = policy_loss(
                    cfg.loss,
                    logp,
                    sampler.to(self.device),
                    adv.to(self.device),
                    mask,
                    ref_logp=ref,
                    entropy=ent,
                    num_tokens=num_tokens,
                    num_sequences=num_sequences,
                )
            (loss * self._loss_scale).backward()
            for k, v in metrics.items():
                if k.startswith("loss/"):  # already batch-normalised: micro-batch shares add up
                    sums[k] += v
                    weights[k] = 1.0
                else:  # token means: weight by this micro-batch's tokens
                    sums[k] += v * n_mb
                    weights[k] += n_mb

    def _clip(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    # -- weights and checkpoints ---------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights in the transformers layout (detached), for the weight store;
        with LoRA the base weights with the adapters merged in (`lora.merge_lora`)."""
        state = self._full_state_dict()
        if self.cfg.lora is None:
            return state

        return merge_lora(state, self.cfg.lora)

    def sync_state_dict(self) -> dict[str, torch.Tensor]:
        """What a weight sync hands the generator: the adapters' tensors with
        `trainer.lora.sync: adapter`, else the (merged) weights of `state_dict`, a tied LM
        head once (as the embedding: `weights.layout.tied_names`)."""
        lora = self.cfg.lora
        if lora and lora.sync == "adapter":
            return self.adapter_state_dict()

        tied = tied_names(getattr(self.model, "config", None))
        return {k: v for k, v in self.state_dict().items() if k not in tied}

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor of the model as it is (with LoRA: peft's names, adapters apart)."""
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters' tensors only, in peft's saved names, every adapter but "default"
        under a `"<name>/"` prefix (what an engine serving adapters loads); an error without
        `trainer.lora`."""
        if self.cfg.lora is None:
            raise ValueError("adapter_state_dict: trainer.lora is null (full fine-tuning)")

        return adapter_tensors(self._full_state_dict(), self.cfg.lora.adapters)

    def save_checkpoint(self, path: str | Path, data_position: object = None) -> Path:
        """Save policy (HF folder), optimizer, step, version, RNG and data position."""
        return self._write_checkpoint(path, self.model, self.optimizer, data_position)

    def _write_checkpoint(
        self, path: str | Path, model: nn.Module, optimizer: Any, data_position: Any
    ) -> Path:
        """`trainer.checkpoint.save_checkpoint` of `model` (and `optimizer`, None when the
        backend saved its own) with this trainer's step, version and tokenizer."""
        return save_checkpoint(
            path,
            model,
            optimizer,
            step=self.step,
            policy_version=self.policy_version,
            data_position=data_position,
            tokenizer=self.tokenizer,
        )

    def load_checkpoint(self, path: str | Path) -> Any:
        """Restore from `save_checkpoint`; returns the saved data position."""
        check_checkpoint_kind(Path(path) / "policy", self.cfg.lora)
        state = load_checkpoint(path, self.model, self.optimizer)
        self.step, self.policy_version = state.step, state.policy_version
        return state.data_position
