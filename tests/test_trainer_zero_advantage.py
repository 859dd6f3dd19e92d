"""`trainer.skip_zero_advantage`: episodes whose loss tokens all have advantage 0 are not
forwarded, and the step is the one that forwards them (their gradient is exactly 0)."""

from __future__ import annotations

import pytest
import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.trainer import Trainer, TrainerConfig
from tests.test_trainer import group_trajs, tiny_model, two_turn_traj


def zeroed(advantages: list[float], seed: int = 1):
    trajs = group_trajs(seed=seed)  # 8 episodes in groups of 4, 3, 1
    for t, a in zip(trajs, advantages, strict=True):
        t.advantage = a
    return trajs


def step_twice(skip: bool, batches, loss: str = "dapo", **kw):
    cfg = TrainerConfig(
        lr=1e-2, row_tokens=64, microbatch_tokens=128, skip_zero_advantage=skip,
        loss=LossConfig.preset(loss), **kw,
    )  # fmt: skip
    trainer = Trainer(cfg, model=tiny_model(seed=2))
    metrics = [trainer.train_step(b) for b in batches]
    return metrics, [p.detach().clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("loss", ["dapo", "dr_grpo", "gspo", "cispo"])
def test_skipping_zero_advantage_episodes_gives_the_same_weights(loss):
    # a group all 0 (the first 4), a mixed one, and a second step with every advantage 0
    # (AdamW's moments still move the weights: the skipped step must too)
    batches = [zeroed([0, 0, 0, 0, 1, -1, 0, 0.5], s) for s in (1, 3)] + [zeroed([0] * 8, 4)]
    (m_skip, p_skip), (m_full, p_full) = (step_twice(s, batches, loss) for s in (True, False))
    assert [m["train/zero_advantage_skipped"] for m in m_skip] == [5, 5, 8]
    assert [m["train/zero_advantage_skipped"] for m in m_full] == [0, 0, 0]
    for a, b in zip(m_skip, m_full, strict=True):
        assert a["loss/total"] == pytest.approx(b["loss/total"], abs=1e-6)
        assert a["train/grad_norm"] == pytest.approx(b["train/grad_norm"], rel=1e-4, abs=1e-7)
        assert a["train/tokens"] < b["train/tokens"]  # fewer tokens forwarded
    # AdamW divides by sqrt(v) + 1e-8: a gradient entry near 1e-8 (an embedding row barely
    # used) turns summation-order noise (other rows, other packing) into up to a few % of one
    # lr step; 2e-4 is 2% of one step of lr 1e-2
    for a, b in zip(p_skip, p_full, strict=True):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)


def test_turn_advantages_count_per_loss_token():
    nonzero_turn = two_turn_traj(0.0, [0.0, 1.0])
    all_zero = two_turn_traj(0.0, [0.0, 0.0])
    trainer = Trainer(TrainerConfig(lr=1e-2), model=tiny_model())
    m = trainer.train_step([nonzero_turn, all_zero])
    assert m["train/zero_advantage_skipped"] == 1


@pytest.mark.parametrize(
    "kw",
    [
        {"loss": LossConfig(kl_coef=0.1)},  # the KL term has a gradient at advantage 0
        {"loss": LossConfig(entropy_coef=0.01)},  # so has the entropy bonus
        {"skip_zero_advantage": False},
    ],
)
def test_no_skip_where_a_zero_advantage_episode_has_a_gradient(kw):
    trainer = Trainer(TrainerConfig(lr=1e-2, row_tokens=64, microbatch_tokens=128, **kw),
                      model=tiny_model())  # fmt: skip
    m = trainer.train_step(zeroed([0, 0, 0, 0, 1, -1, 0, 0.5]))
    assert m["train/zero_advantage_skipped"] == 0
