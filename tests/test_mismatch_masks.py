"""Sampler/trainer mismatch masks (MIS, IcePop) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from forge_agent.algorithms.losses import (
    LossConfig,
    icepop_weights,
    masked_importance_sampling,
    policy_loss,
)

E = math.e


def close(a: torch.Tensor | float, b: list | float, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float64),
        torch.tensor(b, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


TRAINER = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
# rho = exp(trainer - sampler) = [e^2 = 7.389056, e^-0.8 = 0.449329, e^0.5 = 1.648721,
#                                 e^-0.5 = 0.606531]
SAMPLER = torch.tensor([[-3.0, -0.2, -1.5, -0.5]])
ALL = torch.ones(1, 4)


def test_mis_drops_tokens_over_the_cap_and_keeps_the_ratio_of_the_rest():
    sampler = torch.tensor([[-2.0, -0.5, -1.0, -1.5]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w, m = masked_importance_sampling(TRAINER, sampler, mask, cap=2.0)
    # rho = [e^1 = 2.718282 > 2 -> dropped, e^-0.5 = 0.606531, e^0 = 1, not sampled]
    close(w, [[0.0, E**-0.5, 1.0, 0.0]])
    assert not w.requires_grad
    close(m["mis/masked_frac"], 1 / 3)  # one of the three sampled tokens
    close(m["mis/weight_mean"], (E**-0.5 + 1.0) / 3)


def test_mis_is_one_sided_a_small_ratio_is_kept():
    w, m = masked_importance_sampling(TRAINER, SAMPLER, ALL, cap=5.0)
    close(w, [[0.0, E**-0.8, E**0.5, E**-0.5]])  # only 7.389 > 5 is dropped
    close(m["mis/masked_frac"], 0.25)


def test_icepop_masks_both_sides_of_its_band():
    w, m = icepop_weights(TRAINER, SAMPLER, ALL, alpha=0.5, beta=5.0)
    # 7.389 > 5 dropped; 0.449 < 0.5 dropped; 1.6487 and 0.6065 kept with their ratio
    close(w, [[0.0, 0.0, E**0.5, E**-0.5]])
    close(m["icepop/masked_frac"], 0.5)


def test_icepop_in_the_policy_loss_removes_masked_tokens_from_the_gradient():
    cfg = LossConfig(policy_loss="reinforce", icepop_bounds=(0.5, 5.0), aggregation="token_mean")
    logp = TRAINER.clone().requires_grad_(True)
    loss, m = policy_loss(cfg, logp, SAMPLER, torch.tensor([1.0]), ALL)
    # ratio vs the trainer's own old logprobs = 1; loss = mean_t(-w_t * 1 * A), 4 tokens
    close(loss, -(E**0.5 + E**-0.5) / 4)
    loss.backward()
    close(logp.grad, [[0.0, 0.0, -(E**0.5) / 4, -(E**-0.5) / 4]])
    close(m["icepop/masked_frac"], 0.5)


def test_mis_in_the_policy_loss_with_ppo_clip():
    cfg = LossConfig(mis_cap=2.0, aggregation="token_mean")
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    sampler = torch.tensor([[-2.0, -1.2]])  # rho = [e^1 -> dropped, e^0.2 = 1.221403]
    loss, m = policy_loss(cfg, logp, sampler, torch.tensor([2.0]), torch.ones(1, 2))
    # ppo objective with r = 1: min(1 * 2, clip(1) * 2) = 2; loss = -(0 * 2 + e^0.2 * 2) / 2
    close(loss, -(E**0.2))
    close(m["mis/masked_frac"], 0.5)


def test_one_correction_at_a_time():
    with pytest.raises(ValueError, match=r"expected one sampler-mismatch correction"):
        LossConfig(tis_cap=2.0, icepop_bounds=(0.5, 5.0))
    assert LossConfig(mis_cap=2.0).correction == "mis"
    assert LossConfig().correction == "none"


@pytest.mark.parametrize("bounds", [(5.0, 0.5), (-1.0, 2.0)])
def test_bad_icepop_bounds_are_named(bounds):
    with pytest.raises(ValueError, match=r"icepop bounds must satisfy 0 <= low < high"):
        icepop_weights(TRAINER, SAMPLER, ALL, *bounds)


def test_config_selects_a_correction_and_names_a_bad_one():
    from forge_agent.run.config import load_config
    from forge_agent.typed_config import ConfigError

    cfg = load_config(None, ["trainer.loss.icepop_bounds=[0.5, 5.0]"])
    assert cfg.trainer.loss.icepop_bounds == (0.5, 5.0)
    with pytest.raises(ConfigError, match=r"^trainer\.loss\.icepop_bounds="):
        load_config(None, ["trainer.loss.icepop_bounds=[5.0, 0.5]"])
    with pytest.raises(ConfigError, match=r"^trainer\.loss\.mis_cap="):
        load_config(None, ["trainer.loss.tis_cap=2.0", "trainer.loss.mis_cap=2.0"])
