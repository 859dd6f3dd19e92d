"""Policy-gradient losses as small composable primitives.

Every primitive works on right-padded per-trajectory tensors (`[B, T]`, with a 0/1 `mask`
marking the tokens the policy sampled) and returns `(tensor, metrics)`. `policy_loss`
composes them from a `LossConfig`; named presets (`grpo`, `dr_grpo`, `dapo`, `gspo`,
`cispo`) are `LossConfig(name=...)`; explicitly set fields stand over a preset's.

Notation: `logp` = log pi_theta(y_t | y_<t) of the trainer's current policy (with grad),
`logp_old` = the behaviour policy's logprob (by default the sampler's, as returned by vLLM),
`A` = the trajectory's advantage broadcast over its tokens (per token with turn-level credit),
`m` = loss mask.

Aggregation and gradient accumulation: each aggregator accepts the *global* token /
sequence counts of the whole batch, so the loss of each micro-batch is that micro-batch's
share of the batch loss and summing micro-batch losses gives exactly the batch loss.
"""

from __future__ import annotations

import torch

from forge_agent.algorithms.config import (
    Aggregation,
    KLEstimator,
    LossConfig,
    Metrics,
)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = mask.sum()
    return float((x * mask).sum() / n) if n > 0 else 0.0


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(x.masked_fill(mask == 0, float("-inf")).max()) if mask.any() else 0.0


# ---------------------------------------------------------------------------------------------
# Importance ratios
# ---------------------------------------------------------------------------------------------


def token_log_ratio(
    logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, Metrics]:
    """Token-level log importance ratio log r_t = log pi_theta(y_t) - log pi_old(y_t).

    PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms") per-token ratio
    r_t = exp(log r_t). Masked positions are set to 0 (ratio 1). Shapes: all `[B, T]`.
    Metrics: mean/max of r_t and the k3 estimate of KL(pi_old || pi_theta) on sampled tokens,
    which measures the sampler/trainer mismatch when `logp_old` are the sampler's logprobs.
    """
    log_ratio = (logp - logp_old) * mask  # [B, T]
    with torch.no_grad():
        ratio = log_ratio.exp()
        mismatch_k3 = ratio - 1 - log_ratio  # k3 of KL(old || theta), Schulman 2020
        metrics = {
            "ratio/mean": _masked_mean(ratio, mask),
            "ratio/max": _masked_max(ratio, mask),
            "ratio/mismatch_kl_k3": _masked_mean(mismatch_k3, mask),
        }
    return log_ratio, metrics


def sequence_log_ratio(
    logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, Metrics]:
    """GSPO sequence-level log ratio, broadcast to tokens (Zheng et al. 2025, "Group Sequence
    Policy Optimization", GSPO-token form, eq. 13-14).

        log s_i = (1/|y_i|) sum_t (log pi_theta(y_i,t) - log pi_old(y_i,t))
        log s_i,t = sg[log s_i] + log pi_theta(y_i,t) - sg[log pi_theta(y_i,t)]

    so every token of trajectory i carries the value s_i while the gradient of token t is
    s_i * grad log pi_theta(y_i,t) (the length-normalised sequence-level gradient of GSPO).
    Shapes: inputs `[B, T]`, output `[B, T]` (0 where masked).
    """
    n = mask.sum(-1).clamp(min=1)  # [B]
    seq = ((logp - logp_old) * mask).sum(-1) / n  # [B]
    log_ratio = (seq.detach()[:, None] + logp - logp.detach()) * mask  # [B, T]
    with torch.no_grad():
        has = mask.sum(-1) > 0
        s = seq.exp()[has]
        metrics = {
            "ratio/seq_mean": float(s.mean()) if s.numel() else 0.0,
            "ratio/seq_max": float(s.max()) if s.numel() else 0.0,
        }
    return log_ratio, metrics


def truncated_importance_weights(
    logp_trainer: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, Metrics]:
    """Truncated importance sampling weights for the sampler/trainer mismatch (Yao et al. 2025,
    "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training").

        w_t = min(pi_trainer(y_t) / pi_sampler(y_t), C)     (no gradient)

    The sampler (vLLM) and the trainer compute different probabilities for the same weights;
    w_t reweights each token's policy-gradient term toward the trainer's distribution.
    Shapes: `[B, T]`; the returned weights are detached and 0 where masked.
    """
    if cap <= 0:
        raise ValueError(f"truncated importance sampling cap must be > 0, got {cap}")
    with torch.no_grad():
        raw = (logp_trainer - logp_sampler).exp()
        w = raw.clamp(max=cap) * mask  # [B, T]
        metrics = {
            "tis/weight_mean": _masked_mean(w, mask),
            "tis/truncated_frac": _masked_mean((raw > cap).float(), mask),
        }
    return w, metrics


def masked_importance_weights(
    logp_trainer: torch.Tensor,
    logp_sampler: torch.Tensor,
    mask: torch.Tensor,
    low: float,
    high: float,
    name: str = "mis",
) -> tuple[torch.Tensor, Metrics]:
    """Importance weights that drop the tokens whose sampler/trainer ratio is out of bounds.

        rho_t = pi_trainer(y_t) / pi_sampler(y_t)                     (no gradient)
        w_t   = rho_t * 1[low <= rho_t <= high]

    A kept token is reweighted by rho_t as in TIS; a token outside `[low, high]` gets weight 0,
    so it leaves the policy gradient instead of being truncated (it still counts in the
    aggregation's token / sequence normalisation). The masks `masked_importance_sampling` and
    `icepop_weights` below are this with their papers' bounds. Shapes: `[B, T]`; the returned
    weights are detached and 0 where `mask` is 0. Metric `<name>/masked_frac`: the fraction of
    sampled tokens dropped.
    """
    if not 0.0 <= low < high:
        raise ValueError(f"{name} bounds must satisfy 0 <= low < high, got [{low}, {high}]")
    with torch.no_grad():
        rho = (logp_trainer - logp_sampler).exp()  # [B, T]
        keep = ((rho >= low) & (rho <= high)).to(rho.dtype) * mask  # [B, T]
        w = rho * keep
        metrics = {
            f"{name}/masked_frac": _masked_mean(1.0 - keep, mask),
            f"{name}/weight_mean": _masked_mean(w, mask),
        }
    return w, metrics


def masked_importance_sampling(
    logp_trainer: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, Metrics]:
    """Token-level masked importance sampling, MIS (Liu, Li, Fu, Wang, Liu, Yao et al. 2025,
    "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
    Mismatch"): instead of truncating a large ratio as TIS does, drop the token.

        w_t = rho_t * 1[rho_t <= C],    rho_t = pi_trainer(y_t) / pi_sampler(y_t)

    Shapes: `[B, T]`. Metrics: `mis/masked_frac`, `mis/weight_mean`.
    """
    if cap <= 0:
        raise ValueError(f"masked importance sampling cap must be > 0, got {cap}")
    return masked_importance_weights(logp_trainer, logp_sampler, mask, 0.0, cap, "mis")


def icepop_weights(
    logp_trainer: torch.Tensor,
    logp_sampler: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 0.5,
    beta: float = 5.0,
) -> tuple[torch.Tensor, Metrics]:
    """IcePop two-sided token masking (Ling Team, inclusionAI 2025, "Every Step Evolves:
    Scaling Reinforcement Learning for Trillion-Scale Thinking Model" (Ring-1T), IcePop):
    a token's gradient is kept, calibrated by k_t, only while the training/inference ratio
    stays inside a band on both sides.

        M(k_t) = k_t * 1[alpha <= k_t <= beta],    k_t = pi_train(y_t) / pi_infer(y_t)

    The paper uses alpha = 0.5, beta = 5. Shapes: `[B, T]`. Metrics: `icepop/masked_frac`,
    `icepop/weight_mean`.
    """
    return masked_importance_weights(logp_trainer, logp_sampler, mask, alpha, beta, "icepop")


# ---------------------------------------------------------------------------------------------
# Policy objectives (per-token losses; aggregate them with one of the aggregators below)
# ---------------------------------------------------------------------------------------------


def ppo_clip_loss(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Per-token clipped surrogate loss.

    PPO (Schulman et al. 2017) with separate lower/upper clip ranges ("clip-higher", DAPO, Yu et
    al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"):

        o_t = min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A)

    and optionally the dual clip for negative advantages (Ye et al. 2020, "Mastering Complex
    Control in MOBA Games with Deep Reinforcement Learning"), bounding the objective of
    tokens whose ratio explodes while A < 0:

        o_t = max(o_t, c A)   if A < 0,   c > 1

    loss_t = -o_t. Shapes: `log_ratio`, `mask` `[B, T]`; `advantages` `[B]` or `[B, T]`.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]  # [B, 1]
    ratio = log_ratio.exp()  # [B, T]
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    obj = torch.minimum(unclipped, clipped)  # [B, T]
    metrics: Metrics = {}
    if dual_clip_c is not None:
        if dual_clip_c <= 1:
            raise ValueError(f"dual_clip_c must be > 1 (Ye et al. 2020), got {dual_clip_c}")
        lower = dual_clip_c * advantages
        dual = (advantages < 0) & (obj < lower)
        obj = torch.where(dual, lower.expand_as(obj), obj)
        metrics["clip/dual_frac"] = _masked_mean(dual.float(), mask)
    with torch.no_grad():
        adv = advantages.expand_as(ratio)
        metrics["clip/low_frac"] = _masked_mean(((ratio < 1 - eps_low) & (adv < 0)).float(), mask)
        metrics["clip/high_frac"] = _masked_mean(((ratio > 1 + eps_high) & (adv > 0)).float(), mask)
    return -obj * mask, metrics


def cispo_loss(
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 1.0,
    eps_high: float = 4.0,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO per-token loss (MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently
    with Lightning Attention", eq. 4-5): clip the importance-sampling weight, not the update.

        loss_t = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A * log pi_theta(y_t)

    Every token keeps a gradient (none is dropped by clipping), weighted by the clipped ratio.
    MiniMax-M1 leaves the lower bound open (eps_low large) and tunes eps_high; the defaults
    here (1.0 and 4.0) are ours. Shapes: `[B, T]`; `advantages` `[B]` or `[B, T]`.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    with torch.no_grad():
        ratio = log_ratio.exp()
        w = ratio.clamp(1 - eps_low, 1 + eps_high)  # [B, T]
        metrics = {"clip/is_weight_clipped_frac": _masked_mean((w != ratio).float(), mask)}
    return -w * advantages * logp * mask, metrics


def reinforce_loss(
    log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, Metrics]:
    """Unclipped importance-weighted policy gradient: loss_t = -r_t A (Williams 1992, with the
    off-policy ratio r_t). On-policy (r_t = 1) its gradient is -A grad log pi_theta(y_t)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return -log_ratio.exp() * advantages * mask, {}


# ---------------------------------------------------------------------------------------------
# Regularisers
# ---------------------------------------------------------------------------------------------


def kl_penalty(
    logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor, estimator: KLEstimator = "k3"
) -> tuple[torch.Tensor, Metrics]:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman 2020,
    "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html). With
    log rho = log pi_ref(y_t) - log pi_theta(y_t):

        k1 = -log rho                      (unbiased, high variance, can be negative)
        k2 = (log rho)^2 / 2               (biased, low variance)
        k3 = (rho - 1) - log rho           (unbiased, low variance, >= 0; used by GRPO)

    Shapes: `[B, T]`; output 0 where masked.
    """
    log_rho = logp_ref - logp  # [B, T]
    if estimator == "k1":
        kl = -log_rho
    elif estimator == "k2":
        kl = 0.5 * log_rho**2
    elif estimator == "k3":
        kl = log_rho.exp() - 1 - log_rho
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected 'k1', 'k2' or 'k3'")
    kl = kl * mask
    return kl, {f"kl/{estimator}": _masked_mean(kl.detach(), mask)}


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """Per-token entropy bonus as a loss term: loss_t = -H(pi_theta(. | y_<t)) (Williams & Peng
    1991; Mnih et al. 2016, "Asynchronous Methods for Deep RL"). Shapes: `[B, T]`."""
    return -entropy * mask, {"entropy": _masked_mean(entropy.detach(), mask)}


# ---------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token_mean",
    *,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    horizon: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss `[B, T]` to a scalar.

    - token_mean:    sum_i sum_t l_it / sum_i |y_i|               (DAPO, Yu et al. 2025)
    - sequence_mean: (1/G) sum_i (1/|y_i|) sum_t l_it             (GRPO, Shao et al. 2024)
    - fixed_horizon: sum_i sum_t l_it / (G * H), H a constant      (Dr.GRPO, Liu et al. 2025,
      "Understanding R1-Zero-Like Training: A Critical Perspective"; removes the length bias)

    `num_tokens` / `num_sequences` are the counts over the *whole batch* (default: this
    tensor's own), so micro-batch losses add up to the batch loss under gradient accumulation.
    """
    mask = mask.to(per_token.dtype)
    total = (per_token * mask).sum()
    if mode == "token_mean":
        denom = float(mask.sum()) if num_tokens is None else num_tokens
        return total / max(denom, 1.0)
    n_seq = float(per_token.shape[0]) if num_sequences is None else num_sequences
    if mode == "sequence_mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
        return per_seq.sum() / max(n_seq, 1.0)
    if mode == "fixed_horizon":
        if horizon is None or horizon <= 0:
            raise ValueError(f"fixed_horizon aggregation needs a positive horizon, got {horizon}")
        return total / (max(n_seq, 1.0) * horizon)
    raise ValueError(
        f"unknown aggregation {mode!r}; expected 'token_mean', 'sequence_mean' or 'fixed_horizon'"
    )


# ---------------------------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------------------------


def importance_correction(
    cfg: LossConfig,
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, Metrics]:
    """The sampler/trainer correction `cfg.correction` selects: `(logp_old, w, metrics)`.

    With no correction the ratio is taken against the sampler, logp_old = `sampler_logp`, and
    w = None. With one, logp_old = the trainer's logprob under the sampling policy (`old_logp`,
    default `logp.detach()`) and w_t is the TIS, MIS or IcePop weight of pi_trainer / pi_sampler
    (see `truncated_importance_weights`, `masked_importance_sampling`, `icepop_weights`).
    The metrics always carry the sampler mismatch, `sampler_ratio/*`. Shapes: `[B, T]`.
    """
    metrics: Metrics = {}
    if cfg.correction == "none":
        ratio_ref, w = sampler_logp, None
    else:
        ratio_ref = logp.detach() if old_logp is None else old_logp
        if cfg.tis_cap is not None:
            w, metrics = truncated_importance_weights(ratio_ref, sampler_logp, mask, cfg.tis_cap)
        elif cfg.mis_cap is not None:
            w, metrics = masked_importance_sampling(ratio_ref, sampler_logp, mask, cfg.mis_cap)
        else:
            assert cfg.icepop_bounds is not None
            w, metrics = icepop_weights(ratio_ref, sampler_logp, mask, *cfg.icepop_bounds)
    _, m = token_log_ratio(logp.detach(), sampler_logp, mask)
    return ratio_ref, w, {**metrics, **{f"sampler_{k}": v for k, v in m.items()}}


def policy_objective(
    cfg: LossConfig,
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, Metrics]:
    """The per-token policy loss `[B, T]` of `cfg`: the ratio at `cfg.ratio_level` (token,
    PPO; or sequence, GSPO) fed to `cfg.policy_loss` (`ppo_clip_loss`, `cispo_loss` or
    `reinforce_loss`). Shapes: `[B, T]`; `advantages` `[B]` or `[B, T]`."""
    if cfg.ratio_level == "token":
        log_ratio, metrics = token_log_ratio(logp, logp_old, mask)
    elif cfg.ratio_level == "sequence":
        log_ratio, metrics = sequence_log_ratio(logp, logp_old, mask)
    else:
        raise ValueError(f"unknown ratio_level {cfg.ratio_level!r}; expected 'token'/'sequence'")
    if cfg.policy_loss == "ppo_clip":
        per_token, m = ppo_clip_loss(
            log_ratio, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high, cfg.dual_clip_c
        )
    elif cfg.policy_loss == "cispo":
        per_token, m = cispo_loss(
            logp, log_ratio, advantages, mask, cfg.clip_eps_low, cfg.clip_eps_high
        )
    elif cfg.policy_loss == "reinforce":
        per_token, m = reinforce_loss(log_ratio, advantages, mask)
    else:
        raise ValueError(
            f"unknown policy_loss {cfg.policy_loss!r}; expected 'ppo_clip', 'cispo', 'reinforce'"
        )
    return per_token, {**metrics, **m}


def policy_loss(
    cfg: LossConfig,
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    old_logp: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Compose the configured loss: policy term (+ beta KL) (- entropy bonus), aggregated.

        loss = agg( w_t * policy_t + beta * KL_t - c_H * H_t )

    with w_t the truncated (TIS), masked (MIS) or IcePop-masked importance weight of the
    sampler/trainer ratio when the config selects one (else 1).
    Shapes: `logp`, `sampler_logp`, `mask`, `ref_logp`, `entropy`, `old_logp` `[B, T]`;
    `advantages` `[B]` (one per trajectory) or `[B, T]` (turn-level credit). `old_logp` is
    the trainer's logprob under the policy that sampled (only used with a correction; default:
    `logp.detach()`, exact when the trainer takes one optimizer step per batch of fresh data).
    """
    mask = mask.to(logp.dtype)
    metrics: Metrics = cfg.as_metrics()
    ratio_ref, w, m = importance_correction(cfg, logp, sampler_logp, mask, old_logp)
    metrics.update(m)
    per_token, m = policy_objective(cfg, logp, ratio_ref, advantages, mask)
    metrics.update(m)
    if w is not None:
        per_token = per_token * w

    agg = dict(num_tokens=num_tokens, num_sequences=num_sequences, horizon=cfg.horizon)
    pg = aggregate(per_token, mask, cfg.aggregation, **agg)
    loss = pg
    metrics["loss/policy"] = float(pg.detach())
    if cfg.kl_coef:
        if ref_logp is None:
            raise ValueError(f"kl_coef={cfg.kl_coef} needs reference logprobs, got ref_logp=None")
        kl, m = kl_penalty(logp, ref_logp, mask, cfg.kl_estimator)
        metrics.update(m)
        kl_loss = aggregate(kl, mask, cfg.aggregation, **agg)
        loss = loss + cfg.kl_coef * kl_loss
        metrics["loss/kl"] = float(kl_loss.detach())
    if entropy is not None:
        ent, m = entropy_bonus(entropy, mask)
        metrics.update(m)
        if cfg.entropy_coef:
            ent_loss = aggregate(ent, mask, cfg.aggregation, **agg)
            loss = loss + cfg.entropy_coef * ent_loss
            metrics["loss/entropy"] = float(ent_loss.detach())
    metrics["loss/total"] = float(loss.detach())
    return loss, metrics
