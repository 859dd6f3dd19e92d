"""Shared fixtures: one tiny model and one real vLLM engine (in a Monarch actor) per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge_agent.env.resolved import ResolvedEnv

pytest_plugins = ["tests.skip_policy"]

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Processes the tests spawn (Monarch procs, env workers, `python -m apps...`) import the
# project and the test helpers from the checkout, installed or not.
_ROOT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)


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
    return warm_start(
        tiny_model_path,
        [ResolvedEnv.of("calculator"), ResolvedEnv.of("code_exec")],
        cfg,
    )


@pytest.fixture(scope="session")
def generator(policy_model_path):
    """A real vLLM CPU engine inside a Monarch actor, shared by the whole run (start ~20 s)."""
    from forge_agent.generator import Generator, GeneratorConfig
    from tests.helpers import spawn_test_procs

    procs = spawn_test_procs(1)
    gen = procs.spawn("generator", Generator, GeneratorConfig(), str(policy_model_path))
    gen.setup.call_one().get()
    yield gen
    gen.shutdown.call_one().get()
    procs.stop().get()


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    """A model cache of each module's own (FORGE_AGENT_CACHE), so conversions start empty."""
    root = tmp_path_factory.mktemp("forge_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FORGE_AGENT_CACHE", str(root))
        yield root / "models"
