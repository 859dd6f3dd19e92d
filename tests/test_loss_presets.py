"""A loss preset's values reach the trainer actor unless the user sets a key explicitly.

Each case builds the run's config from `grpo.*` overrides, builds the trainer config the
controller builds from it, trains one step in a real `TrainerActor` and reads the clip and KL
values the loss used from the step's metrics.
"""

from __future__ import annotations

import random

import pytest

from forge_agent.config import load_config
from forge_agent.types import Trajectory
from tests.helpers import spawn_test_procs


@pytest.fixture(scope="module")
def procs():
    mesh = spawn_test_procs(1)
    yield mesh
    mesh.stop().get()


def trajectories(vocab: int, n: int = 4) -> list[Trajectory]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        prompt = [rng.randrange(vocab) for _ in range(6)]
        completion = [rng.randrange(vocab) for _ in range(5)]
        out.append(
            Trajectory(
                task_id="t",
                group_id="g",
                token_ids=prompt + completion,
                loss_mask=[0] * 6 + [1] * 5,
                logprobs=[-1.0] * 11,
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    return out


CASES = [
    # overrides, (clip_eps_low, clip_eps_high, kl_coef, sequence-level ratio)
    (["grpo.loss=gspo"], (3e-4, 4e-4, 0.0, 1.0)),
    (["grpo.loss=cispo"], (1.0, 4.0, 0.0, 0.0)),
    (["grpo.loss=dapo"], (0.2, 0.28, 0.0, 0.0)),
    (["grpo.loss=grpo"], (0.2, 0.2, 0.04, 0.0)),
    (["grpo.loss=gspo", "grpo.clip_high=5e-4", "grpo.beta=0.01"], (3e-4, 5e-4, 0.01, 1.0)),
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
        cfg.trainer_config(tiny_model_path),
    )
    trainer.setup.call_one().get()
    metrics = trainer.train_step.call_one(trajectories(len(tiny_tokenizer))).get()
    keys = ("clip_eps_low", "clip_eps_high", "kl_coef", "sequence_ratio")
    used = tuple(metrics[f"loss_config/{k}"] for k in keys)
    assert used == pytest.approx(expected)
    assert ("loss/kl" in metrics) == (expected[2] > 0)  # the KL term really ran
