"""Hub model names resolve through the local Hugging Face cache, and a run trains from one."""

from __future__ import annotations

import asyncio
import shutil

import huggingface_hub.constants
import pytest

from forge_agent.models.hub import resolve_model
from forge_agent.run.config import load_config

HUB_NAME = "forge-test/tiny-qwen3"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(root, model_folder) -> None:
    """Lay `model_folder` out as the hub cache holds a downloaded model (refs + snapshot)."""
    repo = root / f"models--{HUB_NAME.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    shutil.copytree(model_folder, repo / "snapshots" / REVISION)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_an_uncached_hub_name_is_an_error_naming_the_model_and_the_cache(hub_cache):
    with pytest.raises(FileNotFoundError) as err:
        resolve_model("Qwen/Qwen3-8B")
    assert "model.name='Qwen/Qwen3-8B'" in str(err.value)
    assert str(hub_cache) in str(err.value)


def test_a_local_folder_is_used_as_given(tmp_path):
    assert resolve_model(str(tmp_path)) == tmp_path


def test_a_run_trains_from_a_hub_name_in_the_local_cache(hub_cache, policy_model_path, tmp_path):
    from forge_agent.run.controller import train

    fake_hub_cache(hub_cache, policy_model_path)
    out = tmp_path / "run"
    cfg = load_config(
        None,
        [
            f"model.name={HUB_NAME}",
            "warm_start.enabled=false",
            f"output_dir={out}",
            "training.steps=2",
            "training.groups_per_step=1",
            "training.group_size=4",
            "advantages.drop_zero_variance=false",
            "services.env.num_replicas=2",
            "eval.every=0",
            "checkpoint.every=0",
            "metrics.console=false",
        ],
    )
    summary = asyncio.run(train(cfg))
    snapshot = hub_cache / f"models--{HUB_NAME.replace('/', '--')}" / "snapshots" / REVISION
    assert summary["policy_path"] == str(snapshot)
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    assert (out / "traces.html").stat().st_size > 1000  # the trace page decoded with it
