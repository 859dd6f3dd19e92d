"""Loss primitives against values computed by hand (the arithmetic is written out)."""

from __future__ import annotations

import math

import pytest
import torch

from forge_agent.algorithms.losses import (
    LossConfig,
    aggregate,
    cispo_loss,
    entropy_bonus,
    kl_penalty,
    policy_loss,
    ppo_clip_loss,
    sequence_log_ratio,
    token_log_ratio,
    truncated_importance_weights,
)

E = math.e


def close(a: torch.Tensor | float, b: list | float, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float64),
        torch.tensor(b, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


def test_token_log_ratio_is_logp_minus_sampler_logp_and_zero_where_masked():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.2, -1.5, -0.9]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    lr, m = token_log_ratio(logp, old, mask)
    # -1.0 - (-1.2) = 0.2 ; -2.0 - (-1.5) = -0.5 ; masked -> 0
    close(lr, [[0.2, -0.5, 0.0]])
    # ratio mean over sampled tokens = (e^0.2 + e^-0.5) / 2 = (1.221403 + 0.606531) / 2
    close(m["ratio/mean"], 0.913967)


def test_ppo_clip_higher_clips_each_side_and_zeroes_clipped_gradients():
    # ratios r: row 0 (A = +2): 1.5, 0.7 ; row 1 (A = -1): 1.5, 0.5 ; eps_low 0.2, eps_high 0.28
    log_ratio = torch.log(torch.tensor([[1.5, 0.7], [1.5, 0.5]])).requires_grad_()
    adv = torch.tensor([2.0, -1.0])
    mask = torch.ones(2, 2)
    loss, m = ppo_clip_loss(log_ratio, adv, mask, eps_low=0.2, eps_high=0.28)
    # r=1.5,A=2:  min(3.0, clip(1.5,0.8,1.28)*2 = 2.56) = 2.56 -> loss -2.56 (clipped, no grad)
    # r=0.7,A=2:  min(1.4, 0.8*2 = 1.6)                  = 1.4  -> loss -1.4  (grad -r*A = -1.4)
    # r=1.5,A=-1: min(-1.5, 1.28*-1 = -1.28)             = -1.5 -> loss 1.5   (grad -r*A = 1.5)
    # r=0.5,A=-1: min(-0.5, 0.8*-1 = -0.8)               = -0.8 -> loss 0.8   (clipped, no grad)
    close(loss, [[-2.56, -1.4], [1.5, 0.8]])
    loss.sum().backward()
    close(log_ratio.grad, [[0.0, -1.4], [1.5, 0.0]])
    assert m["clip/high_frac"] == 0.25 and m["clip/low_frac"] == 0.25


def test_dual_clip_bounds_negative_advantage_objective_at_c_times_a():
    log_ratio = torch.log(torch.tensor([[4.0, 1.1]])).requires_grad_()
    adv = torch.tensor([-1.0])
    loss, m = ppo_clip_loss(log_ratio, adv, torch.ones(1, 2), 0.2, 0.2, dual_clip_c=3.0)
    # r=4:   min(-4, 1.2*-1 = -1.2) = -4 ; max(-4, c*A = -3) = -3 -> loss 3 (no grad)
    # r=1.1: min(-1.1, -1.1) = -1.1 ; max(-1.1, -3) = -1.1        -> loss 1.1 (grad -r*A = 1.1)
    close(loss, [[3.0, 1.1]])
    loss.sum().backward()
    close(log_ratio.grad, [[0.0, 1.1]])
    assert m["clip/dual_frac"] == 0.5


def test_gspo_sequence_ratio_is_length_normalised_and_gradient_is_s_over_len():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.1, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    lr, _ = sequence_log_ratio(logp, old, mask)
    # log s = ((-1 + 1.5) + (-2 + 2.1)) / 2 = (0.5 + 0.1) / 2 = 0.3, on every sampled token
    close(lr, [[0.3, 0.3, 0.0]])
    # unclipped objective (wide clip), A = 1, sequence mean: loss = -(1/2)(s + s) = -s
    loss_t, _ = ppo_clip_loss(lr, torch.tensor([1.0]), mask, eps_low=0.9, eps_high=9.0)
    loss = aggregate(loss_t, mask, "sequence_mean")
    s = math.exp(0.3)  # 1.349859
    close(loss, -s)
    loss.backward()
    # GSPO: grad(-s) = -s * grad log s = -s * (1/2) * sum_t grad logp_t  -> -0.674929 per token
    close(logp.grad, [[-s / 2, -s / 2, 0.0]])


def test_cispo_weights_logp_gradient_by_clipped_detached_ratio():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0 - math.log(2), -2.0 + math.log(2)]])  # r = 2.0, 0.5
    mask = torch.ones(1, 2)
    lr, _ = token_log_ratio(logp, old, mask)
    loss, _ = cispo_loss(logp, lr, torch.tensor([1.5]), mask, eps_low=0.2, eps_high=0.5)
    # w = clip(r, 0.8, 1.5) = [1.5, 0.8]; loss_t = -w * A * logp
    #   = [-1.5 * 1.5 * -1.0, -0.8 * 1.5 * -2.0] = [2.25, 2.4]
    close(loss, [[2.25, 2.4]])
    loss.sum().backward()
    # d loss / d logp = -w * A = [-2.25, -1.2] (no gradient through the detached weight)
    close(logp.grad, [[-2.25, -1.2]])


@pytest.mark.parametrize(
    ("estimator", "value", "grad"),
    [
        # log rho = ref - logp = [-0.5, 1.0]
        ("k1", [0.5, -1.0], [1.0, 1.0]),  # -log rho ; d/dlogp = 1
        ("k2", [0.125, 0.5], [0.5, -1.0]),  # (log rho)^2 / 2 ; d/dlogp = -log rho
        # rho - 1 - log rho = [e^-0.5 - 0.5, e - 2] ; d/dlogp = 1 - rho = [1 - e^-0.5, 1 - e]
        ("k3", [E**-0.5 - 0.5, E - 2.0], [1 - E**-0.5, 1 - E]),
    ],
)
def test_kl_estimators_match_schulman_formulas(estimator, value, grad):
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    kl, m = kl_penalty(logp, ref, torch.ones(1, 2), estimator)
    close(kl, [value])
    kl.sum().backward()
    close(logp.grad, [grad])
    close(m[f"kl/{estimator}"], sum(value) / 2)


def test_truncated_importance_weights_cap_trainer_over_sampler_ratio():
    trainer = torch.tensor([[-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.5, -0.5, -1.0]])
    w, m = truncated_importance_weights(trainer, sampler, torch.tensor([[1.0, 1.0, 0.0]]), cap=1.2)
    # raw = [e^0.5 = 1.648721, e^-0.5 = 0.606531, masked] -> min(raw, 1.2) = [1.2, 0.606531, 0]
    close(w, [[1.2, 0.606531, 0.0]])
    assert not w.requires_grad
    close(m["tis/truncated_frac"], 0.5)


def test_entropy_bonus_is_negative_entropy():
    ent = torch.tensor([[0.5, 1.5]])
    loss, m = entropy_bonus(ent, torch.tensor([[1.0, 0.0]]))
    close(loss, [[-0.5, 0.0]])
    close(m["entropy"], 0.5)


def test_aggregations_token_sequence_and_fixed_horizon():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    close(aggregate(per_token, mask, "token_mean"), 10 / 4)  # (1+2+3+4) / 4 tokens
    close(aggregate(per_token, mask, "sequence_mean"), (6 / 3 + 4 / 1) / 2)  # = 3
    close(aggregate(per_token, mask, "fixed_horizon", horizon=4), 10 / (2 * 4))  # = 1.25


@pytest.mark.parametrize("mode", ["token_mean", "sequence_mean", "fixed_horizon"])
def test_microbatch_losses_add_up_to_the_batch_loss_with_global_counts(mode):
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [0.5, 0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    full = aggregate(per_token, mask, mode, horizon=8)
    kw = dict(num_tokens=float(mask.sum()), num_sequences=3.0, horizon=8)
    parts = aggregate(per_token[:2], mask[:2], mode, **kw) + aggregate(
        per_token[2:], mask[2:], mode, **kw
    )
    close(parts, float(full))


def test_grpo_preset_combines_clip_kl_and_sequence_mean_by_hand():
    cfg = LossConfig.preset("grpo")
    assert (cfg.kl_coef, cfg.kl_estimator, cfg.aggregation) == (0.04, "k3", "sequence_mean")
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -2.0]])  # on-policy: r = 1
    ref = torch.tensor([[-1.5, -1.0]])
    loss, m = policy_loss(cfg, logp, sampler, torch.tensor([1.0]), torch.ones(1, 2), ref_logp=ref)
    # policy: -r A per token = -1, sequence mean = -1
    # kl k3 = [e^-0.5 - 0.5, e - 2] = [0.106531, 0.718282], sequence mean = 0.412406
    # total = -1 + 0.04 * 0.412406 = -0.983504
    close(loss, -1 + 0.04 * ((E**-0.5 - 0.5) + (E - 2)) / 2)
    loss.backward()
    # d/dlogp: policy -r A / 2 = -0.5 ; kl 0.04 * (1 - rho) / 2 = 0.02 * [1 - e^-0.5, 1 - e]
    close(logp.grad, [[-0.5 + 0.02 * (1 - E**-0.5), -0.5 + 0.02 * (1 - E)]])
    close(m["loss/policy"], -1.0)


def test_dr_grpo_preset_divides_by_constant_horizon():
    cfg = LossConfig.preset("dr_grpo", horizon=4)
    logp = torch.tensor([[-1.0, -2.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = policy_loss(cfg, logp, logp.detach(), torch.tensor([1.0]), mask)
    close(loss, -2 / (1 * 4))  # sum of -r A over 2 tokens / (G=1 * H=4)
    loss.backward()
    close(logp.grad, [[-0.25, -0.25, 0.0]])


def test_dapo_preset_uses_clip_higher_and_token_mean():
    cfg = LossConfig.preset("dapo")
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.aggregation) == (0.2, 0.28, "token_mean")
    logp = torch.log(torch.tensor([[1.5, 0.7]]))  # sampler logp = 0 -> r = 1.5, 0.7
    loss, _ = policy_loss(cfg, logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.ones(1, 2))
    close(loss, (-2.56 - 1.4) / 2)  # see the clip-higher test above


def test_gspo_and_cispo_presets_select_their_primitives():
    gspo, cispo = LossConfig.preset("gspo"), LossConfig.preset("cispo")
    assert (gspo.ratio_level, gspo.clip_eps_low, gspo.clip_eps_high) == ("sequence", 3e-4, 4e-4)
    assert (cispo.policy_loss, cispo.aggregation) == ("cispo", "token_mean")
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    # CISPO on-policy: w = 1, loss = mean(-A logp) = -(1.5 * -1 + 1.5 * -2) / 2 = 2.25
    loss, _ = policy_loss(cispo, logp, logp.detach(), torch.tensor([1.5]), torch.ones(1, 2))
    close(loss, 2.25)
    with pytest.raises(ValueError, match="name='nope' is invalid: expected one of"):
        LossConfig.preset("nope")


def test_tis_reweights_policy_term_by_capped_trainer_over_sampler_ratio():
    cfg = LossConfig(policy_loss="reinforce", tis_cap=1.2, aggregation="token_mean")
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    sampler = torch.tensor([[-1.5, -0.5]])
    loss, m = policy_loss(cfg, logp, sampler, torch.tensor([1.0]), torch.ones(1, 2))
    # ratio vs the trainer's own old logprobs = 1 ; w = min(e^{0.5}, 1.2), min(e^{-0.5}, 1.2)
    # loss = mean(-w * r * A) = -(1.2 + 0.606531) / 2
    close(loss, -(1.2 + E**-0.5) / 2)
    loss.backward()
    close(logp.grad, [[-1.2 / 2, -(E**-0.5) / 2]])
    assert m["tis/truncated_frac"] == 0.5


def test_kl_without_reference_logprobs_names_the_problem():
    with pytest.raises(ValueError, match=r"kl_coef=0\.04 needs reference logprobs"):
        policy_loss(
            LossConfig.preset("grpo"),
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            torch.ones(1),
            torch.ones(1, 1),
        )
