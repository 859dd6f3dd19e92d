"""Trainer: packing parity, learning direction, gradient accumulation, SFT, and the actor."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.trainer import Trainer, TrainerConfig, pack_trajectories
from forge_agent.types import Trajectory
from tests.helpers import spawn_test_procs

VOCAB = 512


def tiny_model(seed: int = 0, attn: str = "sdpa"):
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model

    shape = TinyModelConfig(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=128, seed=seed,
    )  # fmt: skip
    return build_model(shape, VOCAB, attn_implementation=attn)


def make_traj(prompt: list[int], completion: list[int], adv: float = 0.0, segs=None) -> Trajectory:
    ids = prompt + completion
    mask = [0] * len(prompt) + [1] * len(completion)
    return Trajectory(
        task_id="t",
        group_id=f"g{len(ids)}",
        token_ids=ids,
        loss_mask=mask,
        logprobs=[0.0] * len(ids),
        advantage=adv,
        segment_starts=segs or [0],
    )


def random_trajs(n: int, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = [rng.randrange(VOCAB) for _ in range(rng.randint(2, 12))]
        c = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 20))]
        out.append(make_traj(p, c, adv=rng.choice([-1.0, 1.0])))
    return out


def reference_logprobs(model, traj: Trajectory) -> torch.Tensor:
    """Each segment run alone through the model, no packing (the ground truth)."""
    out = torch.zeros(len(traj.token_ids))
    starts = [*traj.segment_starts, len(traj.token_ids)]
    with torch.no_grad():
        for s, e in itertools.pairwise(starts):
            ids = torch.tensor([traj.token_ids[s:e]])
            logp = model(ids).logits.float().log_softmax(-1)[0]
            out[s + 1 : e] = logp[:-1].gather(-1, ids[0, 1:, None]).squeeze(-1)
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_equal_unpacked_per_sequence_logprobs(attn):
    model = tiny_model(attn=attn)
    trajs = random_trajs(7)
    trajs.append(make_traj(list(range(5)), list(range(5, 14)), segs=[0, 6]))  # two segments
    trainer = Trainer(TrainerConfig(row_tokens=40, microbatch_tokens=80), model=model)
    mbs = pack_trajectories(trajs, row_tokens=40, microbatch_tokens=80)
    assert any((mb.segment_ids.max(dim=1).values > 0).any() for mb in mbs)  # rows hold >1 seq
    packed = trainer.compute_logprobs(trajs)
    for t, lp in zip(trajs, packed, strict=True):
        torch.testing.assert_close(lp, reference_logprobs(model, t), atol=1e-5, rtol=0)


def group_trajs(seed: int = 0) -> list[Trajectory]:
    """Three groups whose episodes start from their group's prompt (as a run's do), one of
    them with an episode re-rendered into a second segment, and one group of a single one."""
    rng = random.Random(seed)
    out = []
    for g, size in enumerate((4, 3, 1)):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(8, 14))]
        for k in range(size):
            completion = [rng.randrange(VOCAB) for _ in range(rng.randint(3, 12))]
            t = make_traj(prompt, completion, adv=rng.choice([-1.0, 1.0]))
            t.group_id = f"group{g}"
            if g == 1 and k == 2:  # a second segment after the first turn
                t.segment_starts = [0, len(prompt) + 2]
            out.append(t)
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prefix_rows_give_every_trajectory_its_own_logprobs(attn):
    model = tiny_model(attn=attn)
    trajs = group_trajs()
    mbs = pack_trajectories(trajs, row_tokens=64, microbatch_tokens=128, share_prefix=True)
    computed = sum(mb.computed_tokens for mb in mbs)
    assert computed < sum(mb.num_tokens for mb in mbs) == sum(len(t.token_ids) for t in trajs)
    assert sorted(i for mb in mbs for i in mb.traj_indices) == list(range(len(trajs)))
    trainer = Trainer(TrainerConfig(row_tokens=64, microbatch_tokens=128), model=model)
    for t, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
        torch.testing.assert_close(lp, reference_logprobs(model, t), atol=1e-5, rtol=0)


def test_a_train_step_on_shared_prefix_rows_equals_one_on_plain_rows():
    results = []
    for share in (True, False):
        trainer = Trainer(
            TrainerConfig(lr=1e-2, row_tokens=64, microbatch_tokens=128, share_prefix=share),
            model=tiny_model(seed=2),
        )
        m = trainer.train_step(group_trajs(seed=1))
        results.append((m, [p.detach().clone() for p in trainer.model.parameters()]))
    (shared, p1), (plain, p2) = results
    assert shared["train/shared_prefix_frac"] > 0.2 and plain["train/shared_prefix_frac"] == 0
    assert shared["loss/total"] == pytest.approx(plain["loss/total"], abs=1e-6)
    assert shared["entropy"] == pytest.approx(plain["entropy"], abs=1e-5)
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_packing_wastes_only_row_tails_while_padding_wastes_more():
    trajs = random_trajs(16, seed=3)
    real = sum(len(t.token_ids) for t in trajs)
    packed = pack_trajectories(trajs, row_tokens=64, microbatch_tokens=256, packing=True)
    padded = pack_trajectories(trajs, row_tokens=64, microbatch_tokens=256, packing=False)
    assert sum(mb.num_tokens for mb in packed) == real == sum(mb.num_tokens for mb in padded)
    waste = lambda mbs: 1 - real / sum(mb.padded_tokens for mb in mbs)  # noqa: E731
    assert waste(packed) < 0.15 < waste(padded)
    assert sorted(i for mb in packed for i in mb.traj_indices) == list(range(16))


def test_pack_rejects_mismatched_per_token_arrays():
    t = make_traj([1, 2], [3])
    t.logprobs = [0.0]
    with pytest.raises(
        ValueError, match="token_ids has 3 entries but loss_mask has 3 and logprobs 1"
    ):
        pack_trajectories([t])


def on_policy(trainer: Trainer, trajs: list[Trajectory]) -> list[Trajectory]:
    for t, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
        t.logprobs = [v if m else 0.0 for v, m in zip(lp.tolist(), t.loss_mask, strict=True)]
    return trajs


def completion_logprob(trainer: Trainer, t: Trajectory) -> float:
    lp = trainer.compute_logprobs([t])[0]
    return float(sum(v for v, m in zip(lp.tolist(), t.loss_mask, strict=True) if m))


def test_training_raises_rewarded_and_lowers_penalised_token_logprobs():
    trainer = Trainer(
        TrainerConfig(lr=3e-3, loss=LossConfig.preset("dapo"), max_grad_norm=1.0),
        model=tiny_model(),
    )
    prompt = [5, 6, 7, 8]
    good = make_traj(prompt, [10, 11, 12], adv=1.0)
    bad = make_traj(prompt, [20, 21, 22], adv=-1.0)
    before = completion_logprob(trainer, good), completion_logprob(trainer, bad)
    for _ in range(4):
        metrics = trainer.train_step(on_policy(trainer, [good, bad]))
    after = completion_logprob(trainer, good), completion_logprob(trainer, bad)
    assert after[0] > before[0] + 0.5 and after[1] < before[1] - 0.5
    assert trainer.policy_version == 4 and metrics["train/grad_norm"] > 0
    assert {"loss/total", "entropy", "clip/high_frac", "train/tokens_per_s"} <= set(metrics)


def two_turn_traj(adv: float, turn_advs: list[float]) -> Trajectory:
    """prompt [5, 6, 7], turn 0 = [10, 11], env token 30, turn 1 = [20, 21]."""
    t = make_traj([5, 6, 7], [10, 11, 30, 20, 21], adv=adv)
    t.loss_mask[5] = 0  # the env's token
    t.turn_spans, t.turn_advantages = [(3, 5), (6, 8)], list(turn_advs)
    return t


def test_equal_turn_advantages_train_exactly_like_one_per_episode():
    results = []
    for turn_level in (False, True):
        trainer = Trainer(TrainerConfig(lr=1e-2), model=tiny_model(seed=3))
        trajs = [two_turn_traj(1.0, [1.0, 1.0]), two_turn_traj(-0.5, [-0.5, -0.5])]
        if not turn_level:
            for t in trajs:
                t.turn_advantages = []
        m = trainer.train_step(on_policy(trainer, trajs))
        results.append((m, [p.detach().clone() for p in trainer.model.parameters()]))
    (m1, p1), (m2, p2) = results
    assert m1["loss/total"] == pytest.approx(m2["loss/total"], abs=1e-7)
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_turn_advantages_raise_one_turn_and_lower_the_other_in_one_episode():
    trainer = Trainer(TrainerConfig(lr=3e-3, max_grad_norm=1.0), model=tiny_model())
    traj = two_turn_traj(0.0, [1.0, -1.0])  # the episode's mean says nothing; the turns do

    def turn_logprobs() -> tuple[float, float]:
        lp = trainer.compute_logprobs([traj])[0].tolist()
        return sum(lp[3:5]), sum(lp[6:8])

    before = turn_logprobs()
    for _ in range(4):
        trainer.train_step(on_policy(trainer, [traj]))
    after = turn_logprobs()
    assert after[0] > before[0] + 0.3 and after[1] < before[1] - 0.3


def test_gradient_accumulation_matches_one_big_batch():
    trajs = random_trajs(6, seed=1)
    results = []
    for mb_tokens in (10_000, 40):  # one micro-batch vs several
        trainer = Trainer(
            TrainerConfig(
                lr=1e-2, microbatch_tokens=mb_tokens, row_tokens=40, loss=LossConfig.preset("gspo")
            ),
            model=tiny_model(seed=1),
        )
        m = trainer.train_step(trajs)
        results.append((m, [p.detach().clone() for p in trainer.model.parameters()]))
    (m1, p1), (m2, p2) = results
    assert m1["train/microbatches"] == 1 and m2["train/microbatches"] > 2
    assert m1["loss/total"] == pytest.approx(m2["loss/total"], abs=1e-5)
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_kl_to_frozen_reference_is_zero_at_start_and_grows():
    trainer = Trainer(TrainerConfig(lr=1e-2, loss=LossConfig.preset("grpo")), model=tiny_model())
    assert trainer.ref_model is not None
    trajs = random_trajs(4, seed=2)
    m0 = trainer.train_step(on_policy(trainer, trajs))
    m1 = trainer.train_step(on_policy(trainer, trajs))
    assert m0["kl/k3"] == pytest.approx(0.0, abs=1e-7) and m1["kl/k3"] > 1e-6


def test_sft_step_lowers_cross_entropy_on_masked_tokens():
    trainer = Trainer(TrainerConfig(lr=1e-2), model=tiny_model())
    trajs = random_trajs(4, seed=4)
    first = trainer.sft_step(trajs)["loss/total"]
    for _ in range(5):
        last = trainer.sft_step(trajs)["loss/total"]
    assert last < first - 0.5


def test_train_step_without_sampled_tokens_names_the_problem():
    trainer = Trainer(TrainerConfig(), model=tiny_model())
    t = make_traj([1, 2, 3], [])
    with pytest.raises(ValueError, match="none has a sampled token"):
        trainer.train_step([t])


@pytest.fixture(scope="module")
def trainer_procs():
    procs = spawn_test_procs(1)
    yield procs
    procs.stop().get()


def test_trainer_actor_trains_and_pushes_weights_to_the_store(trainer_procs, tmp_path):
    from forge_agent.trainer.actor import TrainerActor
    from forge_agent.weights.store import MonarchWeightStore

    model = tiny_model()
    model.save_pretrained(tmp_path / "policy")
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    async def run():
        store = await MonarchWeightStore.spawn(trainer_procs, name="ws_trainer_test")
        cfg = TrainerConfig(lr=1e-2)
        actor = trainer_procs.spawn("trainer", TrainerActor, cfg, str(tmp_path / "policy"), store)
        assert await actor.setup.call_one() == 0
        metrics = await actor.train_step.call_one(random_trajs(4))
        version = await actor.push_weights.call_one()
        got = await store.get(version, into={k: torch.empty_like(v) for k, v in initial.items()})
        await store.close()
        return metrics, version, got

    metrics, version, got = asyncio.run(run())
    assert version == 1 and metrics["train/policy_version"] == 1.0
    assert set(got) == set(initial)
    assert any(not torch.equal(got[k], initial[k]) for k in initial)  # weights moved
