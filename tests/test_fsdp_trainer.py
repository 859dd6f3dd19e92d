"""The hf trainer on 2 ranks (2 Monarch procs, FSDP2 over gloo on CPU) against 1 rank."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.generator import SamplingConfig
from forge_agent.run.config import load_config
from forge_agent.trainer import Trainer, TrainerConfig
from forge_agent.types import Trajectory
from tests.helpers import spawn_test_procs
from tests.test_controller import _short_overrides

LOSS_RTOL = 1e-5  # float32; the ranks sum their shares in another order than one rank does
WEIGHT_ATOL = 1e-5  # 1% of one Adam step at lr 1e-3: near-zero gradients make a few elements
# of the first step sensitive to the summation order (1.8e-6 seen)


def _batch(vocab: int, n: int, seed: int) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(3, 20))]
        sampled = [rng.randrange(vocab) for _ in range(rng.randint(2, 30))]
        ids = prompt + sampled
        out.append(
            Trajectory(
                task_id=f"t{i}",
                group_id=f"g{i}",
                token_ids=ids,
                loss_mask=[0] * len(prompt) + [1] * len(sampled),
                logprobs=[0.0] * len(prompt) + [-3.0] * len(sampled),
                versions=[-1] * len(prompt) + [0] * len(sampled),
                advantage=rng.choice([-1.0, 1.0]),
            )
        )
    return out


def _config() -> TrainerConfig:
    # small rows and micro-batches: several micro-batches, a different count on each rank
    return TrainerConfig(
        lr=1e-3, loss=LossConfig(aggregation="token_mean"), row_tokens=48, microbatch_tokens=96
    )


@pytest.fixture(scope="module")
def scenario(policy_model_path, tmp_path_factory):
    """One rank in this process and two ranks on Monarch procs train on the same batches;
    the two-rank trainer is checkpointed after step 1 and a fresh two-rank trainer resumes."""
    from transformers import AutoConfig

    from forge_agent.run.services import free_port
    from forge_agent.trainer.actor import TrainerActor
    from forge_agent.weights.store import MonarchWeightStore

    vocab = AutoConfig.from_pretrained(policy_model_path).vocab_size
    first, second = _batch(vocab, 7, seed=1), _batch(vocab, 7, seed=2)
    ckpt = tmp_path_factory.mktemp("fsdp") / "step_1"
    one = Trainer(_config(), str(policy_model_path))
    ref = {"m1": one.train_step(first)}
    ref["w1"] = {k: v.clone() for k, v in one.state_dict().items()}
    ref["m2"] = one.train_step(second)
    ref["w2"] = one.state_dict()

    async def two_ranks(resume: bool) -> dict:
        procs, store_procs = spawn_test_procs(2), spawn_test_procs(1)
        store = await MonarchWeightStore.spawn(store_procs, name=f"ws_fsdp_{int(resume)}")
        actor = procs.spawn(
            "trainer",
            TrainerActor,
            _config(),
            str(policy_model_path),
            store,
            master_port=free_port(),
        )
        into = {k: torch.empty_like(v) for k, v in ref["w1"].items()}
        got: dict = {}
        try:
            await actor.setup.call()
            if resume:
                await actor.load_checkpoint.call(str(ckpt))
            else:
                got["m1"] = [m for _, m in (await actor.train_step.call(first)).items()]
                await actor.push_weights.call()
                got["w1"] = {k: v.clone() for k, v in (await store.get(1, into=into)).items()}
                await actor.save_checkpoint.call(str(ckpt), {"step": 1})
            got["m2"] = [m for _, m in (await actor.train_step.call(second)).items()]
            await actor.push_weights.call()
            got["w2"] = await store.get(2, into=into)
        finally:
            await store.close()
            await procs.stop()
            await store_procs.stop()
        return got

    fresh = asyncio.run(two_ranks(resume=False))
    resumed = asyncio.run(two_ranks(resume=True))
    return ref, fresh, resumed


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= LOSS_RTOL * max(abs(a), abs(b), 1e-6)


def test_two_ranks_give_the_one_rank_loss_and_grad_norm(scenario):
    ref, fresh, _ = scenario
    for rank_metrics in fresh["m1"]:  # every rank reports the whole batch
        for key in ("loss/total", "train/grad_norm", "ratio/mean"):
            assert _close(rank_metrics[key], ref["m1"][key]), (key, rank_metrics[key], ref["m1"])
        assert rank_metrics["train/trajectories"] == 7.0
    print(f"loss 1 rank {ref['m1']['loss/total']:.8f}, 2 ranks {fresh['m1'][0]['loss/total']:.8f}")


def test_two_ranks_reach_the_one_rank_weights_and_push_them_whole(scenario):
    ref, fresh, _ = scenario
    assert set(fresh["w1"]) == set(ref["w1"])
    for k, v in ref["w1"].items():
        torch.testing.assert_close(fresh["w1"][k], v, atol=WEIGHT_ATOL, rtol=0)


def test_a_two_rank_checkpoint_resumes_to_the_same_next_step(scenario):
    """Weights and optimizer state come back: the resumed step equals the uninterrupted one
    (Adam's moments matter for the weights after step 2)."""
    ref, fresh, resumed = scenario
    for key in ("loss/total", "train/grad_norm"):
        assert _close(resumed["m2"][0][key], fresh["m2"][0][key])
        assert _close(resumed["m2"][0][key], ref["m2"][key])
    assert resumed["m2"][0]["train/policy_version"] == 2.0
    for k, v in fresh["w2"].items():
        torch.testing.assert_close(resumed["w2"][k], v, atol=WEIGHT_ATOL, rtol=0)
        torch.testing.assert_close(ref["w2"][k], v, atol=WEIGHT_ATOL, rtol=0)


def test_two_rank_weights_reach_the_generator(scenario, generator, policy_model_path):
    """The weights rank 0 pushed serve completions whose logprobs match the 1-rank model."""
    from transformers import AutoModelForCausalLM

    ref, fresh, _ = scenario
    hf = AutoModelForCausalLM.from_pretrained(policy_model_path, dtype=torch.float32).eval()
    original = {k: v.clone() for k, v in hf.state_dict().items()}
    hf.load_state_dict(ref["w1"])
    ids = list(range(5, 40))
    version = generator.version.call_one().get() + 1
    generator.update_weights.call_one(version, fresh["w1"]).get()
    try:
        c = generator.generate.call_one(ids, SamplingConfig(max_tokens=1, prompt_logprobs=True))
        got = c.get().prompt_logprobs[1:]
    finally:
        generator.update_weights.call_one(version + 1, original).get()
    with torch.no_grad():
        logps = hf(torch.tensor([ids])).logits[0].log_softmax(-1)
    want = [logps[i - 1, ids[i]].item() for i in range(1, len(ids))]
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= 1e-4


def test_a_two_rank_run_is_one_setting_and_resumes_from_its_checkpoint(policy_model_path, tmp_path):
    """`services.trainer.procs=2` is all a user sets; the run checkpoints and resumes."""
    from forge_agent.run.controller import train

    out = tmp_path / "run"
    base = [*_short_overrides(policy_model_path, out), "services.trainer.procs=2"]
    base += ["eval.every=0", "checkpoint.every=1"]
    first = asyncio.run(train(load_config(None, [*base, "training.steps=2"])))
    assert first["steps"] == 2 and first["policy_version"] == 2
    second = asyncio.run(train(load_config(None, [*base, "training.steps=3", "resume=true"])))
    assert second["resumed_from"]["step"] == 2
    assert second["steps"] == 3 and second["policy_version"] == 3
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
