"""`load_tokenizer` on the tiny model's folder: the tokenizer `AutoTokenizer` gives, loaded
without importing torch (the driver needs the tokenizer only; issue 62's memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MESSAGES = [
    {"role": "user", "content": "What is 12 * (3 + 4)?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "calc", "arguments": {"expr": "12*(3+4)"}}}
        ],
    },
    {"role": "tool", "content": "84"},
]


def test_the_tiny_tokenizer_is_the_one_autotokenizer_loads(tiny_model_path):
    from transformers import AutoTokenizer

    from forge_agent.models.tiny import load_tokenizer

    ours, auto = load_tokenizer(tiny_model_path), AutoTokenizer.from_pretrained(tiny_model_path)
    assert type(ours) is type(auto)
    assert ours.get_vocab() == auto.get_vocab()
    assert ours.chat_template == auto.chat_template
    assert ours.all_special_tokens == auto.all_special_tokens
    assert (ours.eos_token_id, ours.pad_token_id) == (auto.eos_token_id, auto.pad_token_id)
    text = "<|im_start|>user\n12 + 7 = ?<|im_end|> héllo\tworld 0123456789"
    assert ours.encode(text, add_special_tokens=False) == auto.encode(
        text, add_special_tokens=False
    )
    ids = auto.encode(text)
    assert ours.decode(ids, skip_special_tokens=False) == auto.decode(
        ids, skip_special_tokens=False
    )
    for prompt in (False, True):
        kw = {"tokenize": False, "add_generation_prompt": prompt}
        assert ours.apply_chat_template(MESSAGES, **kw) == auto.apply_chat_template(MESSAGES, **kw)


def test_a_non_tiny_folder_goes_through_autotokenizer(tiny_model_path, tmp_path):
    from forge_agent.models.tiny import _tiny_tokenizer

    assert _tiny_tokenizer(Path(tiny_model_path))
    for name in ("tokenizer_config.json", "config.json"):
        (tmp_path / name).write_text((Path(tiny_model_path) / name).read_text())
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    assert not _tiny_tokenizer(tmp_path)
    assert not _tiny_tokenizer(tmp_path / "missing")


def test_loading_the_tiny_tokenizer_and_its_renderer_imports_no_torch(tiny_model_path):
    probe = (
        "import sys\n"
        "from forge_agent.models.tiny import load_tokenizer\n"
        "from forge_agent.rollout import ChatRenderer\n"
        f"renderer = ChatRenderer(load_tokenizer({str(tiny_model_path)!r}))\n"
        "print(renderer.kind, 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["qwen3", "False"]
