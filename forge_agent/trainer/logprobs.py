"""Per-token logprobs (and entropy) of a causal LM on packed micro-batches: from whole logits
(`logprobs_from_logits`), or with the LM head run only at the tokens the loss reads, in
checkpointed chunks of at most `trainer.logits_chunk_mib` MiB of logits (`hf_logprobs_at`,
`chunked_head_logprobs`). The trainer's forward passes (`core.Trainer`) go through these.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as run_checkpointed

from forge_agent.trainer.packing import MicroBatch


def hf_logits(model: nn.Module, mb: MicroBatch, attn_implementation: str = "sdpa") -> torch.Tensor:
    """Logits `[R, L, V]` of a transformers causal LM on packed rows, each sequence attending
    only to itself (block-diagonal causal mask; flash-attention uses position_ids instead)."""
    kwargs: dict[str, Any] = {"input_ids": mb.input_ids, "position_ids": mb.position_ids}
    if attn_implementation.startswith("flash"):
        pass  # flash-attention detects packed sequences from position_ids
    elif attn_implementation == "eager":
        kwargs["attention_mask"] = mb.attention_mask("additive", next(model.parameters()).dtype)
    else:
        kwargs["attention_mask"] = mb.attention_mask("bool")
    return model(**kwargs, use_cache=False).logits


def logprobs_from_logits(
    logits: torch.Tensor, mb: MicroBatch, entropy: Literal["none", "metric", "grad"] = "none"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token logprob log pi(y_t | y_<t) of every token, unpacked to `[B, T]` (0 at the
    first token of each sequence and in padding), and optionally the entropy H_t of the
    distribution each token was sampled from (`[B, T]`; "metric": detached, "grad": with
    gradient for an entropy bonus). `logits` are the packed rows' `[R, L, V]`."""
    flat = logits.float().reshape(-1, logits.shape[-1])  # [R * L, V]
    lse = torch.logsumexp(flat, dim=-1)  # [R * L]
    pred = mb.pred_index  # [B, T] the position predicting each token
    tok = mb.input_ids.reshape(-1)[mb.gather_index]  # [B, T]
    keep = mb.valid & ~mb.seq_start  # [B, T]
    logp = (flat[pred, tok] - lse[pred]) * keep  # [B, T]
    ent = None
    if entropy != "none":
        with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
            lg = flat if entropy == "grad" else flat.detach()
            h = lse - (lg.softmax(-1) * lg).sum(-1)  # [R * L]
            ent = h[pred] * keep
    return logp, ent


def _head_logprobs(
    head: nn.Module,
    h: torch.Tensor,
    nxt: torch.Tensor,
    entropy: Literal["none", "metric", "grad"],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LM head, log-softmax and (optionally) entropy on hidden states `h` `[N, H]`: logprob of
    each `nxt` `[N]` token, and H = lse - sum(softmax * logits)."""
    logits = head(h).float()  # [N, V]
    lse = torch.logsumexp(logits, dim=-1)  # [N]
    logp = logits.gather(-1, nxt[:, None]).squeeze(-1) - lse
    ent = None
    if entropy != "none":
        with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
            lg = logits if entropy == "grad" else logits.detach()
            ent = lse - (lg.softmax(-1) * lg).sum(-1)
    return logp, ent


def chunked_head_logprobs(
    head: nn.Module,
    h: torch.Tensor,
    nxt: torch.Tensor,
    entropy: Literal["none", "metric", "grad"] = "none",
    chunk_mib: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`_head_logprobs` in chunks of rows whose fp32 logits take at most `chunk_mib` MiB, each
    chunk under activation checkpointing when gradients flow: the `[N, V]` logits (and their
    softmax and gradient) never exist whole, only `[chunk, V]` at a time, in the forward and
    in the backward (which recomputes a chunk's head matmul: +1/3 of the head's FLOPs).

    With a 152k vocabulary (Qwen3) and 16k loss tokens a micro-batch, whole fp32 logits are
    10 GB a copy, and the log-softmax, entropy and backward keep several (the same idea as
    Liger-Kernel's fused linear cross-entropy, here in plain torch). `chunk_mib` 0: one chunk.
    Same values and gradients as one chunk (tests/test_trainer_head_chunks.py)."""
    vocab = head.weight.shape[0]
    rows = max(1, (chunk_mib << 20) // (4 * vocab)) if chunk_mib > 0 else h.shape[0]
    if h.shape[0] <= rows:
        return _head_logprobs(head, h, nxt, entropy)
    checkpoint = torch.is_grad_enabled() and (h.requires_grad or head.weight.requires_grad)
    parts = []
    for start in range(0, h.shape[0], rows):
        args = (head, h[start : start + rows], nxt[start : start + rows], entropy)
        if checkpoint:
            parts.append(run_checkpointed(_head_logprobs, *args, use_reentrant=False))
        else:
            parts.append(_head_logprobs(*args))
    logp = torch.cat([p[0] for p in parts])
    ent = torch.cat([p[1] for p in parts]) if entropy != "none" else None
    return logp, ent


def hf_logprobs_at(
    model: nn.Module,
    mb: MicroBatch,
    targets: torch.Tensor,
    entropy: Literal["none", "metric", "grad"] = "none",
    attn_implementation: str = "sdpa",
    chunk_mib: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`logprobs_from_logits` for the `targets` tokens only (`[B, T]` bool; 0 elsewhere): the
    decoder runs on every token, the LM head only at the positions that predict a target, in
    chunks of at most `chunk_mib` MiB of logits (`chunked_head_logprobs`).
    In RL most tokens are prompt and tool output (no loss), so this skips most of the LM
    head's work and of the `[R, L, V]` logits' memory."""
    kwargs: dict[str, Any] = {"input_ids": mb.input_ids, "position_ids": mb.position_ids}
    if attn_implementation == "eager":
        kwargs["attention_mask"] = mb.attention_mask("additive", next(model.parameters()).dtype)
    elif not attn_implementation.startswith("flash"):
        kwargs["attention_mask"] = mb.attention_mask("bool")
    hidden = model.get_decoder()(**kwargs, use_cache=False).last_hidden_state  # [R, L, H]
    flat = mb.gather_index[targets]  # [N] positions of the target tokens in [R * L]
    h = hidden.reshape(-1, hidden.shape[-1])[mb.pred_index[targets]]  # [N, H] predicting them
    nxt = mb.input_ids.reshape(-1)[flat]  # [N]
    logp_t, ent_t = chunked_head_logprobs(model.get_output_embeddings(), h, nxt, entropy, chunk_mib)
    logp = torch.zeros(targets.shape, dtype=logp_t.dtype, device=logp_t.device)
    logp[targets] = logp_t
    ent = None
    if ent_t is not None:
        ent = torch.zeros_like(logp)
        ent[targets] = ent_t
    return logp, ent


def token_logprobs(
    model: nn.Module,
    mb: MicroBatch,
    entropy: Literal["none", "metric", "grad"] = "none",
    attn_implementation: str = "sdpa",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`logprobs_from_logits(hf_logits(model, mb))`: per-token logprobs (and entropy) `[B, T]`."""
    return logprobs_from_logits(hf_logits(model, mb, attn_implementation), mb, entropy)
