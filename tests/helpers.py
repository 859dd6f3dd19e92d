"""Helpers shared by test modules."""

from __future__ import annotations

import asyncio
import os
import random
import stat
from pathlib import Path
from typing import Any

from monarch.actor import Actor, endpoint

from forge_agent.types import Completion, Trajectory


def spawn_test_procs(n: int) -> Any:
    """A Monarch proc mesh of `n` local processes (stop it with `.stop().get()`)."""
    from monarch.actor import this_host

    return this_host().spawn_procs(per_host={"procs": n})


class VisibleDevices(Actor):
    """Reports its proc's CUDA_VISIBLE_DEVICES (an actor here, not in a test module, so procs
    can unpickle it by an importable module name)."""

    @endpoint
    async def devices(self) -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")


class StoreReader(Actor):
    """Gets a version from a weight store handed to it and reports each tensor's sum (an
    actor here, so procs can unpickle it by an importable module name)."""

    @endpoint
    async def checksums(self, store: Any, version: int) -> dict[str, float]:
        return {k: float(v.double().sum()) for k, v in (await store.get(version)).items()}


def random_trajectories(vocab: int, n: int = 4) -> list[Trajectory]:
    """`n` short trajectories of random tokens, advantages alternating -1/+1."""
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


def short_training(policy: Any, out: Any) -> list[str]:
    """Overrides of a two-step training of `policy` (a warm-started folder) into `out`.

    The policy was warm-started for other envs, so an env's own outcome may be the same for a
    whole group: a small reward on the samples' mean logprob gives every group whose samples
    differ some variance, so both steps update the weights, and no step waits for a varied
    group.
    """
    return [
        f"model.name={policy}",
        "warm_start.enabled=false",
        f"output_dir={out}",
        "training.steps=2",
        "training.groups_per_step=2",
        "training.group_size=4",
        "advantages.drop_zero_variance=false",
        "advantages.truncated=keep",
        "rewards.components={tests.user_envs:likelier_is_better: 0.1}",
    ]


def host_victim(root: Path) -> Path:
    """A host folder (mode 0755, five files) that an attack tries to reach through a link."""
    victim = root / "victim"
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    for i in range(5):
        (victim / f"keep{i}").write_text("host data")
    return victim


def host_victim_intact(victim: Path) -> bool:
    """`victim` still holds its five files at mode 0755."""
    return (
        sorted(p.name for p in victim.iterdir()) == [f"keep{i}" for i in range(5)]
        and stat.S_IMODE(victim.stat().st_mode) == 0o755
    )


def spawn_lora_generator(procs: Any, name: str, model: Any, lora: Any) -> Any:
    """A `Generator` actor on `procs` serving `model` plus LoRA adapters of `lora`'s shape (up to
    eight sequences at once), set up."""
    from forge_agent.generator import Generator, GeneratorConfig

    gen = procs.spawn(name, Generator, GeneratorConfig(max_num_seqs=8), str(model), lora=lora)
    gen.setup.call_one().get()
    return gen


class SlotOnly:
    """A weight source that offers only a store's device view of a version (no `get`: a
    generator handed it cannot pull the tensors itself). Here so actors can unpickle it."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def device_view(self, version: int) -> Any:
        return await self.store.device_view(version)


class ScriptPolicy:
    """A scripted policy (a `GenerateFn`): its messages in order, one per turn, the last one
    repeated."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        self.tokenizer, self.texts = tokenizer, list(texts)

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=0)


class SaysPolicy:
    """A scripted policy (a `GenerateFn`): every turn, the same final message (after
    `delay_s`)."""

    def __init__(self, tokenizer: Any, text: str, delay_s: float = 0.0) -> None:
        self.tokenizer, self.text, self.delay_s = tokenizer, text, delay_s

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        await asyncio.sleep(self.delay_s)
        ids = self.tokenizer.encode(self.text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=0)
