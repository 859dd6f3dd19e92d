"""The trainer's CPU shortcuts change no number: the LM head only at loss tokens (on plain and
shared-prefix rows), and rows no longer than the longest trajectory."""

from __future__ import annotations

import copy

import pytest
import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.trainer import Trainer, TrainerConfig, pack_trajectories
from forge_agent.trainer.logprobs import hf_logprobs_at, token_logprobs
from tests.test_trainer import group_trajs, random_trajs, tiny_model


@pytest.mark.parametrize("share_prefix", [False, True])
def test_head_at_targets_matches_full_logits_at_every_loss_token(share_prefix):
    model = tiny_model()
    trajs = group_trajs(seed=3) if share_prefix else random_trajs(12, seed=3)
    for t in trajs[::3]:  # multi-segment trajectories too
        t.segment_starts = [0, len(t.token_ids) // 2]
    (mb,) = pack_trajectories(trajs, 64, microbatch_tokens=4096, share_prefix=share_prefix)
    assert (mb.parent_ids is not None) == share_prefix
    mask = torch.zeros(mb.valid.shape, dtype=torch.bool)
    for b, i in enumerate(mb.traj_indices):
        mask[b, : len(trajs[i].loss_mask)] = torch.tensor(trajs[i].loss_mask, dtype=torch.bool)
    targets = mask & mb.valid & ~mb.seq_start
    full, full_ent = token_logprobs(model, mb, "metric")
    part, part_ent = hf_logprobs_at(model, mb, targets, "metric")
    torch.testing.assert_close(part[targets], full[targets], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(part_ent[targets], full_ent[targets], atol=1e-5, rtol=1e-5)
    assert not part[~targets].any()


def test_a_step_with_the_shortcuts_updates_the_weights_as_the_full_step():
    trajs = random_trajs(16, seed=5)
    cfg = TrainerConfig(lr=1e-3, loss=LossConfig.preset("grpo"), row_tokens=4096)
    fast = Trainer(cfg, model=tiny_model(seed=1))
    full = Trainer(copy.deepcopy(cfg), model=tiny_model(seed=1))
    full._head_at_targets = False
    full._pack = lambda ts: pack_trajectories(ts, 4096, cfg.microbatch_tokens)  # long rows
    assert len(fast._pack(trajs)[0].input_ids[0]) == max(len(t.token_ids) for t in trajs)
    m_fast, m_full = fast.train_step(trajs), full.train_step(trajs)
    for key in ("loss/total", "train/grad_norm"):
        assert abs(m_fast[key] - m_full[key]) < 1e-5, key
    for (name, a), (_, b) in zip(
        fast.model.named_parameters(), full.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
