"""A loss preset's values reach the trainer actor unless the user sets a key explicitly.

Each case builds the run's config from `trainer.loss.*` overrides, hands its `trainer` section
to a real `TrainerActor` as the controller does, trains one step and reads the clip and KL
values the loss used from the step's metrics.
"""

from __future__ import annotations

import pytest

from forge_agent.run.config import load_config
from tests.helpers import random_trajectories, spawn_test_procs


@pytest.fixture(scope="module")
def procs():
    mesh = spawn_test_procs(1)
    yield mesh
    mesh.stop().get()


CASES = [
    # overrides, (clip_eps_low, clip_eps_high, kl_coef, sequence-level ratio)
    (["trainer.loss.name=gspo"], (3e-4, 4e-4, 0.0, 1.0)),
    (["trainer.loss.name=cispo"], (1.0, 4.0, 0.0, 0.0)),
    (["trainer.loss.name=dapo"], (0.2, 0.28, 0.0, 0.0)),
    (["trainer.loss.name=grpo"], (0.2, 0.2, 0.04, 0.0)),
    (
        ["trainer.loss.name=gspo", "trainer.loss.clip_eps_high=5e-4", "trainer.loss.kl_coef=0.01"],
        (3e-4, 5e-4, 0.01, 1.0),
    ),
]


@pytest.mark.parametrize(("overrides", "expected"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_trainer_actor_uses_the_preset_unless_a_key_is_set(
    procs, tiny_model_path, tiny_tokenizer, overrides, expected
):
    from forge_agent.trainer.actor import TrainerActor

    cfg = load_config(None, overrides)
    trainer = procs.spawn(
        f"trainer_{'_'.join(overrides).replace('.', '_').replace('=', '_')}",
        TrainerActor,
        cfg.trainer,
        str(tiny_model_path),
    )
    trainer.setup.call_one().get()
    metrics = trainer.train_step.call_one(random_trajectories(len(tiny_tokenizer))).get()
    keys = ("clip_eps_low", "clip_eps_high", "kl_coef", "sequence_ratio")
    used = tuple(metrics[f"loss_config/{k}"] for k in keys)
    assert used == pytest.approx(expected)
    assert ("loss/kl" in metrics) == (expected[2] > 0)  # the KL term really ran
