"""Checkpoints: exact resume (weights, optimizer, step, version, RNG, data position) and a
policy folder that transformers loads as a standard Hugging Face model."""

from __future__ import annotations

import random

import pytest
import torch

from forge_agent.trainer import Trainer, TrainerConfig, complete_checkpoints, prune_checkpoints
from forge_agent.types import Trajectory


@pytest.fixture(scope="module")
def tiny_path():
    from forge_agent.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


def trajs(seed: int) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for i in range(4):
        n_p, n_c = rng.randint(3, 8), rng.randint(2, 10)
        ids = [rng.randrange(300) for _ in range(n_p + n_c)]
        out.append(
            Trajectory(
                task_id="t",
                group_id=str(i),
                token_ids=ids,
                loss_mask=[0] * n_p + [1] * n_c,
                logprobs=[0.0] * (n_p + n_c),
                advantage=rng.choice([-1.0, 1.0]),
            )
        )
    return out


def test_resume_restores_everything_and_continues_identically(tiny_path, tmp_path):
    cfg = TrainerConfig(lr=1e-3)
    a = Trainer(cfg, str(tiny_path))
    for s in range(2):
        a.train_step(trajs(s))
    a.save_checkpoint(tmp_path / "ckpt", data_position={"epoch": 0, "index": 17})
    draw_a = torch.rand(3)  # RNG continues from the saved state
    a.train_step(trajs(2))

    b = Trainer(cfg, str(tiny_path))
    assert b.load_checkpoint(tmp_path / "ckpt") == {"epoch": 0, "index": 17}
    assert (b.step, b.policy_version) == (2, 2)
    torch.testing.assert_close(torch.rand(3), draw_a)
    b.train_step(trajs(2))  # identical Adam moments -> identical update
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-5, msg=name)


def test_saved_policy_is_a_standard_hugging_face_folder(tiny_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer = Trainer(TrainerConfig(lr=1e-3), str(tiny_path))
    trainer.train_step(trajs(0))
    trainer.save_checkpoint(tmp_path / "ckpt")
    policy = tmp_path / "ckpt" / "policy"
    model = AutoModelForCausalLM.from_pretrained(policy).eval()
    tok = AutoTokenizer.from_pretrained(policy)
    ids = torch.tensor([tok.encode("hello 12")])
    trainer.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, trainer.model(ids).logits)


def test_pruning_keeps_the_newest_complete_checkpoints(tiny_path, tmp_path):
    trainer = Trainer(TrainerConfig(lr=1e-3), str(tiny_path))
    root = tmp_path / "run"
    assert complete_checkpoints(root) == []
    for s in range(3):
        trainer.train_step(trajs(s))
        trainer.save_checkpoint(root / f"step_{trainer.step:06d}", data_position=s)
        prune_checkpoints(root, keep=2)
    (root / "step_000009").mkdir()  # an interrupted save: no COMPLETE marker
    assert [p.name for p in complete_checkpoints(root)] == ["step_000002", "step_000003"]
    fresh = Trainer(TrainerConfig(), str(tiny_path))
    assert fresh.load_checkpoint(complete_checkpoints(root)[-1]) == 2 and fresh.step == 3


def test_loading_an_incomplete_checkpoint_names_the_folder(tiny_path, tmp_path):
    trainer = Trainer(TrainerConfig(), str(tiny_path))
    with pytest.raises(FileNotFoundError, match="is not a complete checkpoint"):
        trainer.load_checkpoint(tmp_path)
