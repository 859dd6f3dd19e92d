"""Shared fixtures: one tiny model and one real vLLM engine (in a Monarch actor) per test run."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path():
    """The project's tiny Qwen3 model folder (built once, cached on disk)."""
    from forge_agent.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from forge_agent.models.tiny import load_tokenizer

    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="session")
def policy_model_path(tiny_model_path):
    """The tiny model after a short supervised pass on tool-using demonstrations of the
    calculator and code_exec envs, so its episodes really are multi-turn (cached on disk)."""
    from forge_agent.warm_start import WarmStartConfig, warm_start

    cfg = WarmStartConfig(steps=120, batch_size=32, lr=1e-3, demo_fraction=1.0, num_demos=512)
    return warm_start(tiny_model_path, {"calculator": {}, "code_exec": {}}, cfg)


@pytest.fixture(scope="session")
def generator(policy_model_path):
    """A real vLLM CPU engine inside a Monarch actor, shared by the whole run (start ~20 s)."""
    from monarch.actor import this_host

    from forge_agent.generator import Generator, GeneratorConfig

    procs = this_host().spawn_procs(per_host={"procs": 1})
    gen = procs.spawn("generator", Generator, GeneratorConfig(model=str(policy_model_path)))
    gen.setup.call_one().get()
    yield gen
    gen.shutdown.call_one().get()
    procs.stop().get()
