"""Several LoRA adapters on one base (`trainer.lora.adapters`): each adapter trains on its own
episodes only, one vLLM engine serves all of them in the same batches (each request sampled
under its own adapter, logprobs equal to the trainer's under that adapter), checkpoints hold
one peft adapter per name, and a run routes each episode by a task field.

The run test is a plumbing test, not a learning claim: `short_training` adds the
`likelier_is_better` reward so that every group has variance in two steps."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from forge_agent.generator import SamplingConfig
from forge_agent.run.config import ConfigError, load_config
from forge_agent.trainer.config import LoraConfig, TrainerConfig
from forge_agent.types import Trajectory
from forge_agent.weights.store import MonarchWeightStore
from tests.helpers import short_training, spawn_lora_generator, spawn_test_procs

PARITY_BOUND = 1e-4  # fp32 sampler vs trainer, as in test_weight_sync_parity
ROLES = ["solver", "verifier"]


def _lora(**kw) -> LoraConfig:
    return LoraConfig(rank=4, alpha=8.0, adapters=list(ROLES), route="role", **kw)


def _episodes(tokenizer, adapter: str, rewarded: str, penalised: str) -> list[Trajectory]:
    """Two answers to one prompt under `adapter`: `rewarded` gets advantage +1, `penalised` -1."""
    out = []
    for answer, advantage in ((rewarded, 1.0), (penalised, -1.0)):
        ids = tokenizer.encode(f"What is 12 * 3? {answer}", add_special_tokens=False)
        mask = [0] * (len(ids) - 2) + [1, 1]
        out.append(
            Trajectory(
                task_id=adapter,
                group_id=adapter,
                token_ids=ids,
                loss_mask=mask,
                logprobs=[0.0] * len(ids),
                versions=[0 if m else -1 for m in mask],
                advantage=advantage,
                adapter=adapter,
            )
        )
    return out


def _adapter_tensors(trainer, name: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items() if f".lora_B.{name}." in k}


@pytest.fixture(scope="module")
def two_adapters(tiny_model_path, tiny_tokenizer):
    """A trainer with a solver and a verifier adapter, trained apart then together: the solver
    is rewarded for "36", the verifier for "99"."""
    from forge_agent.trainer.core import Trainer

    trainer = Trainer(TrainerConfig(lr=1e-3, lora=_lora()), str(tiny_model_path))
    solver = _episodes(tiny_tokenizer, "solver", "36", "99")
    verifier = _episodes(tiny_tokenizer, "verifier", "99", "36")
    trajs = solver + verifier
    for traj, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
        traj.logprobs = [float(x) if m else 0.0 for x, m in zip(lp, traj.loss_mask, strict=True)]
    untouched = _adapter_tensors(trainer, "verifier")
    trainer.train_step(solver)  # the verifier has no episode in this batch
    after_solver_only = _adapter_tensors(trainer, "verifier")
    solver_moved = _adapter_tensors(trainer, "solver")
    for _ in range(3):
        trainer.train_step(trajs)  # both adapters, one optimizer step each time
    return trainer, trajs, untouched, after_solver_only, solver_moved


def test_each_adapter_trains_on_its_own_episodes_only(two_adapters):
    trainer, trajs, untouched, after_solver_only, solver_moved = two_adapters
    assert all(torch.equal(untouched[k], after_solver_only[k]) for k in untouched)
    assert any(v.abs().max() > 0 for v in solver_moved.values())  # B left zero: it trained
    logp = trainer.compute_logprobs(trajs)  # each trajectory under its own adapter
    answer = [float(lp[-2:].sum()) for lp in logp]  # log p(answer tokens)
    # solver: "36" rewarded above "99"; verifier: the reverse, on the same prompt
    assert answer[0] > answer[1] and answer[2] > answer[3]
    swapped = [Trajectory(**{**t.__dict__, "adapter": "verifier"}) for t in trajs[:2]]
    under_verifier = [float(lp[-2:].sum()) for lp in trainer.compute_logprobs(swapped)]
    assert under_verifier[0] < under_verifier[1]  # the solver's episodes read by the verifier


def test_one_engine_serves_both_adapters_in_the_same_batches(
    two_adapters, tiny_model_path, tiny_tokenizer
):
    """Requests of both adapters run at once on one engine; each is sampled under its own
    adapter: vLLM's logprobs equal the trainer's under that adapter, not under the other."""
    trainer, trajs, *_ = two_adapters
    procs = spawn_test_procs(1)
    gen = spawn_lora_generator(procs, "two_adapter_generator", tiny_model_path, _lora())
    store = asyncio.run(MonarchWeightStore.spawn(procs, name="ws_two_adapters"))
    try:
        adapters = trainer.sync_state_dict()
        assert {k.split("/")[0] for k in adapters} == set(ROLES)
        asyncio.run(store.put(1, adapters))
        assert gen.update_weights.call_one(1, None, store).get() == 1
        prompt = trajs[0].token_ids[:-2]
        pending = [  # all eight in flight together: one batch mixes the two adapters
            (
                name,
                gen.generate.call_one(prompt, SamplingConfig(max_tokens=6, seed=i, adapter=name)),
            )
            for i in range(4)
            for name in ROLES
        ]
        gaps, other_gaps = [], []
        for name, future in pending:
            c = future.get()
            ids = prompt + c.token_ids
            n = len(prompt)
            sampled = torch.tensor(c.logprobs)
            other = next(r for r in ROLES if r != name)
            for adapter, out in ((name, gaps), (other, other_gaps)):
                episode = Trajectory(
                    task_id="s",
                    group_id="s",
                    token_ids=ids,
                    loss_mask=[0] * n + [1] * len(c.token_ids),
                    logprobs=[0.0] * len(ids),
                    adapter=adapter,
                )
                lp = trainer.compute_logprobs([episode])[0][n:]
                out.append(float((lp - sampled).abs().max()))
        print(f"two adapters: own max|dlogp| {max(gaps):.2e}, other {min(other_gaps):.2e}")
        assert max(gaps) <= PARITY_BOUND
        assert max(other_gaps) > 100 * PARITY_BOUND  # the adapters differ: routing is seen

        with pytest.raises(Exception, match=r"no LoRA adapter 'critic'.*\['solver', 'verifier'\]"):
            gen.generate.call_one(prompt, SamplingConfig(max_tokens=2, adapter="critic")).get()
        solver_only = {k: v for k, v in adapters.items() if k.startswith("solver/")}
        with pytest.raises(Exception, match=r"holds the adapters \['solver'\].*serves"):
            gen.update_weights.call_one(2, solver_only).get()
    finally:
        gen.shutdown.call_one().get()
        procs.stop().get()


def test_a_checkpoint_holds_one_peft_adapter_per_name_and_resumes(
    two_adapters, tiny_model_path, tmp_path
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from forge_agent.trainer.core import Trainer

    trainer, trajs, *_ = two_adapters
    path = trainer.save_checkpoint(tmp_path / "step_4")
    for name in ROLES:
        assert (path / "policy" / name / "adapter_config.json").exists()
    resumed = Trainer(TrainerConfig(lr=1e-3, lora=_lora()), str(tiny_model_path))
    resumed.load_checkpoint(path)
    assert resumed.policy_version == trainer.policy_version
    want = trainer.compute_logprobs(trajs)
    got = resumed.compute_logprobs(trajs)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    # each adapter folder is peft's own format: it loads onto the base with PeftModel
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    verifier = PeftModel.from_pretrained(base, str(path / "policy" / "verifier")).eval()
    ids = torch.tensor([trajs[2].token_ids])
    with torch.no_grad():
        logits = verifier(input_ids=ids).logits[0, :-1].log_softmax(-1)
    peft_lp = logits.gather(-1, ids[0, 1:, None])[:, 0]
    assert float((peft_lp[-2:] - want[2][-2:]).abs().max()) <= 1e-5
    # apps.export merges the adapter it is asked for, and asks which one otherwise
    from apps.export.__main__ import export
    from forge_agent.errors import SetupError

    with pytest.raises(SetupError, match=r"several adapters \['solver', 'verifier'\].*--adapter"):
        export(path, tmp_path / "merged", merge=True)
    merged = export(path, tmp_path / "merged", merge=True, adapter="verifier")
    again = Trainer(TrainerConfig(), str(merged)).compute_logprobs(trajs[2:3])[0]
    assert float((again[-2:] - want[2][-2:]).abs().max()) <= 1e-5
    other = Trainer(
        TrainerConfig(lora=LoraConfig(rank=4, adapters=["critic"])), str(tiny_model_path)
    )
    with pytest.raises(
        ValueError, match=r"holds the adapters \['solver', 'verifier'\].*\['critic'\]"
    ):
        other.load_checkpoint(path)


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("trainer.lora={rank: 4, adapters: [solver, verifier]}", "trainer.lora.route"),
        ("trainer.lora={rank: 4, adapters: [sol, sol], route: role}", "trainer.lora.adapters"),
        ("trainer.lora={rank: 4, adapters: [], route: role}", "trainer.lora.adapters"),
        ("trainer.lora={rank: 4, adapters: [ora, b], route: role}", "trainer.lora.adapters"),
        (
            "trainer.lora={rank: 4, adapters: [sol, ver], route: role, sync: merged}",
            "trainer.lora.sync",
        ),
    ],
)
def test_bad_adapter_lists_fail_naming_the_key(override, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [override])


def test_plumbing_a_run_routes_each_episode_to_its_tasks_adapter(policy_model_path, tmp_path):
    """Tasks carry a `role` column; `trainer.lora.route=role` sends each episode to that
    adapter: the trace records it, both adapters train, the checkpoint holds both."""
    from envs.calculator.tasks import generate_tasks
    from forge_agent.env.sources import Dataset, in_eval_split
    from forge_agent.run.controller import train

    # two training tasks per role: every epoch (a seeded shuffle of the train split) holds
    # both roles, so both adapters get groups whatever order the stream draws them in
    rows = [
        {**task, "task_id": f"{ROLES[i % 2]}-{i}", "role": ROLES[i % 2]}
        for i, task in enumerate(generate_tasks(64, seed=3))
    ]
    dataset = Dataset(rows)
    kept = [r for r in rows if not in_eval_split(dataset.task_key(r))]
    rows = [r for role in ROLES for r in [r for r in kept if r["role"] == role][:2]]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    overrides = [
        *short_training(policy_model_path, out),
        f"env.dataset={data}",
        "training.groups_per_step=4",
        "eval.every=0",
        "checkpoint.every=2",
        "metrics.console=false",
        "trainer.lora={rank: 4, alpha: 8, adapters: [solver, verifier], route: role}",
    ]
    summary = asyncio.run(train(load_config(None, overrides)))
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    routed = {(t["task_id"].split("-")[0], t["adapter"]) for t in traces}
    assert routed == {("solver", "solver"), ("verifier", "verifier")}
    policy = out / "checkpoints" / "step_000002" / "policy"
    from safetensors.torch import load_file

    for name in ROLES:  # B starts at zero: a nonzero B means the adapter trained
        weights = load_file(str(policy / name / "adapter_model.safetensors"))
        assert any(v.abs().max() > 0 for k, v in weights.items() if ".lora_B." in k)


def test_route_seat_needs_one_adapter_per_policy_seat():
    from forge_agent.run.setup_checks import LoraSetupError, check_lora

    lora = "trainer.lora={rank: 4, adapters: [player_0, player_1], route: seat}"
    with pytest.raises(LoraSetupError, match=r"route=seat.*policy seats of env\.seats \(none\)"):
        check_lora(load_config(None, [lora]), None)
