"""A tiny GGUF model written by the `gguf` package (llama architecture, byte-level BPE with
ChatML's special tokens), the shape of the files users hold (SmolLM2, Llama, Qwen exports)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 128, 256, 2, 2, 1  # head_dim 64: vLLM CPU attention
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the symbol a byte-level BPE vocabulary writes per byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A 2-layer llama with random weights and a 262-token vocabulary, in float32 GGUF."""
    import gguf

    rng = np.random.default_rng(seed)
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = [*_byte_symbols(), "Ġt", "he", "Ġthe", *SPECIALS]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    types += [gguf.TokenType.CONTROL] * len(SPECIALS)
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|im_end|>"))

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    kv = HIDDEN // HEADS * KV_HEADS
    weight("token_embd.weight", vocab, HIDDEN)  # tied: no output.weight
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        weight(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        weight(f"blk.{i}.attn_k.weight", kv, HIDDEN)
        weight(f"blk.{i}.attn_v.weight", kv, HIDDEN)
        weight(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        weight(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        weight(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        weight(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
