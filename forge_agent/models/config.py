"""The `model` section's tiny model: `TinyModelConfig`, the sizes of the tiny Qwen3 model and
its tokenizer, and the envs whose text trains that tokenizer (`forge_agent.models.tiny` builds
it)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

DEFAULT_CORPUS_ENVS = ("calculator", "code_exec", "frozen_lake")
"""Env ids (resolved through the env registry) whose text trains the default tokenizer."""

_FORMAT_VERSION = "v2"  # bump when the tokenizer or model recipe changes


@dataclass
class TinyModelConfig:
    """Sizes of the tiny Qwen3 model and its tokenizer (a few million parameters by default)."""

    vocab_size: int = 1024
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    seed: int = 0
    extra_corpus: list[str] = field(default_factory=list)
    corpus_envs: list[str] = field(default_factory=lambda: list(DEFAULT_CORPUS_ENVS))

    def key(self, corpus_digest: str) -> str:
        # The corpus digest stands for `corpus_envs` (what they give is what counts).
        recipe = {k: v for k, v in asdict(self).items() if k != "corpus_envs"}
        blob = json.dumps(recipe, sort_keys=True) + corpus_digest + _FORMAT_VERSION
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
