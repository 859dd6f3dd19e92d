"""The trainer's config as plain data (an actor receives it; the run's config loads it without
torch), and the torchtitan parallelism degrees it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from forge_agent.algorithms.config import LossConfig
from forge_agent.typed_config import check_field


@dataclass
class LoraConfig:
    """LoRA adapters (Hu et al. 2021, arXiv:2106.09685) on the policy, through `peft`: each
    targeted linear layer W becomes W + (alpha / rank) * B A with A `[rank, in]`, B `[out, rank]`
    (B starts at 0, so step 0 is the base model). Only A and B train; the optimizer holds their
    states only, and the reference policy is the base model with the adapters off.

    `target_modules`: names (the last part of a module's name, e.g. ``q_proj``) of the linear
    layers that get adapters; "all-linear" is every linear layer but the LM head (peft's
    shorthand). `sync`: what a weight sync hands the generator: "adapter" (the adapter's
    tensors only; vLLM serves each version as a new LoRA) or "merged" (the base weights with the
    adapters merged in: engines that cannot serve adapters).

    `adapters`: the names of the adapters trained on the one base (one per role or player;
    one engine serves them all in the same batches). `route`: which adapter plays an episode:
    the task field naming it (needed with several adapters), or "seat": in a multi-seat env
    (`env.seats`) each policy seat plays the adapter of its name.
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    sync: Literal["adapter", "merged"] = "adapter"
    adapters: list[str] = field(default_factory=lambda: ["default"])
    route: str | None = None  # task field naming each episode's adapter, or "seat"

    def __post_init__(self) -> None:
        names = self.adapters
        check_field(
            isinstance(names, list)
            and bool(names)
            and all(isinstance(n, str) and n.isidentifier() and n not in "lora_" for n in names)
            and len(set(names)) == len(names),
            "adapters",
            names,
            "a non-empty list of distinct names (identifiers, e.g. [solver, verifier], none a "
            "part of 'lora_', which peft's tensor names hold)",
        )
        check_field(
            len(names) == 1 or self.route is not None,
            "route",
            self.route,
            f"the task field naming each episode's adapter (one of {names}) when "
            "trainer.lora.adapters has several",
        )
        check_field(
            len(names) == 1 or self.sync == "adapter",
            "sync",
            self.sync,
            "adapter when trainer.lora.adapters has several (a merged model holds one adapter)",
        )
        check_field(
            self.rank >= 1, "rank", self.rank, "an int >= 1 (trainer.lora=null trains every weight)"
        )
        check_field(self.alpha > 0, "alpha", self.alpha, "a float > 0")
        check_field(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "a float in [0, 1)")
        check_field(
            bool(self.target_modules)
            and all(isinstance(m, str) and m for m in self.target_modules),
            "target_modules",
            self.target_modules,
            'a non-empty list of module names (e.g. [q_proj, v_proj]) or ["all-linear"]',
        )

    @property
    def scaling(self) -> float:
        """alpha / rank: the factor of the adapter's update B A."""
        return self.alpha / self.rank


LORA_BACKENDS = ("hf",)
"""Trainer backends that train LoRA adapters (torchtitan's models are not transformers modules,
which `peft` wraps)."""


@dataclass
class TrainerConfig:
    """The trainer's settings, as plain data (so an actor can receive it).

    The model it trains, the device, dtype and seed are the run's (``Trainer``'s arguments).
    `backend`: "hf" (transformers; FSDP2 when the trainer mesh has several procs) or "titan"
    (torchtitan; `titan` holds its parallelism degrees: ``tensor_parallel_degree``,
    ``data_parallel_shard_degree``, -1 = the rest); the actor picks the class from them.
    `lora`: train LoRA adapters (`LoraConfig`, hf backend) instead of every weight (null).
    """

    backend: Literal["hf", "titan"] = "hf"
    titan: dict[str, Any] = field(default_factory=dict)
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    lr: float | None = 1e-5  # null: FULL_LR, or LORA_LR with trainer.lora (`learning_rate`)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0  # null: no clipping
    loss: LossConfig = field(default_factory=LossConfig)
    packing: bool = True
    row_tokens: int = 4096  # max tokens per packed row
    microbatch_tokens: int = 16384  # token budget of one forward/backward
    compute_entropy: bool = True  # entropy metric (and bonus when loss.entropy_coef > 0)
    # the LM head's fp32 logits at loss tokens in chunks of at most this many MiB, each
    # recomputed in the backward (logprobs.chunked_head_logprobs); 0: all at once
    logits_chunk_mib: int = 1024
    gradient_checkpointing: bool = False
    # "bfloat16": forward and backward under torch.autocast in bf16 (weights, gradients and
    # AdamW stay fp32); CPUs with AVX512-BF16/AMX and GPUs run its matmuls faster. null: the
    # model's dtype throughout. "auto": bf16 where the device runs it natively (a CUDA device
    # with bf16; a CPU with avx512_bf16 or amx_bf16), else null: a CPU without them emulates
    # bf16, ~32x slower a matmul (trainer/precision.py)
    autocast: Literal["auto", "bfloat16"] | None = None
    # a group's common prompt computed once per row (its episodes attend to that one copy);
    # same logprobs and gradients, fewer tokens (packing.py); hf backend, sdpa/eager attention
    share_prefix: bool = True
    # episodes whose every loss token has advantage 0 add exactly 0 to the gradient when the
    # loss has no KL and no entropy bonus: not forwarded (their tokens still count in the
    # loss's normalisation, so the step is the same). Metrics are then over the trained ones.
    # Single-process trainers only (a data-parallel rank must run every pass)
    skip_zero_advantage: bool = True
    lora: LoraConfig | None = None  # null: full fine-tuning
    # torch.compile backend for every decoder layer ("inductor"; null: eager). hf backend.
    # GPU: 1.36x a step on Qwen3-0.6B (docs/gpu.md); CPU default: not measured, so off
    compile: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.loss, dict):  # from plain dicts
            self.loss = LossConfig(**self.loss)
        if isinstance(self.lora, dict):
            self.lora = LoraConfig(**self.lora)
        check_field(
            self.lora is None or self.backend in LORA_BACKENDS,
            "backend",
            self.backend,
            f"one of {list(LORA_BACKENDS)} when trainer.lora is set (peft wraps transformers "
            "models, not torchtitan's); or trainer.lora=null for full fine-tuning",
        )
        check_field(self.lr is None or self.lr > 0.0, "lr", self.lr, "a float > 0 or null")
        check_field(self.weight_decay >= 0.0, "weight_decay", self.weight_decay, "a float >= 0")
        norm = self.max_grad_norm
        check_field(norm is None or norm > 0, "max_grad_norm", norm, "a float > 0 or null")
        check_field(
            self.compile is None or self.backend == "hf",
            "compile",
            self.compile,
            "null with trainer.backend=titan (torchtitan compiles through its own config)",
        )
        check_field(
            self.compile is None or (isinstance(self.compile, str) and bool(self.compile)),
            "compile",
            self.compile,
            'a torch.compile backend name (e.g. "inductor") or null',
        )
        check_field(
            self.autocast in (None, "auto", "bfloat16"),
            "autocast",
            self.autocast,
            "auto (bf16 where the device runs it natively), bfloat16 or null (no autocast)",
        )
        chunk = self.logits_chunk_mib
        check_field(chunk >= 0, "logits_chunk_mib", chunk, "an int >= 0 (0: no chunks)")
        for key in ("row_tokens", "microbatch_tokens"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        check_field(
            self.row_tokens <= self.microbatch_tokens,
            "row_tokens",
            self.row_tokens,
            f"an int <= microbatch_tokens ({self.microbatch_tokens})",
        )

    @property
    def learning_rate(self) -> float:
        """The optimizer's learning rate: `lr`, or when it is null the default of the kind of
        training: `LORA_LR` for LoRA adapters (they need a larger step: on multihop 1e-3 took
        the held-out reward from 0.242 to 0.852 in 20 steps, 1e-4 to 0.441 in 30), else
        `FULL_LR`."""
        if self.lr is not None:
            return self.lr
        return LORA_LR if self.lora is not None else FULL_LR


FULL_LR = 1e-4
"""The learning rate of full fine-tuning when `trainer.lr` is null (the run's default)."""

LORA_LR = 1e-3
"""The learning rate of LoRA adapters when `trainer.lr` is null (docs/lora.md)."""

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
