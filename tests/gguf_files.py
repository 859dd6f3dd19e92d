"""Tiny GGUF models written by the `gguf` package, the shapes of the files users hold:

- `write_tiny_gguf`: llama architecture, byte-level BPE with ChatML's special tokens (SmolLM2,
  most Llama and Qwen 2 exports);
- `write_tiny_qwen3_gguf`: qwen3, byte-level BPE with Qwen's tool and thinking tokens;
- `write_tiny_gemma3_gguf`: gemma3, a sentencepiece vocabulary with byte fallback and Gemma's
  `<start_of_turn>` / `<end_of_turn>` (Gemma 3 270M's shape: no chat template in the file).

Each takes `chat_template`: a template written into the file's metadata, or None (none)."""

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


QWEN3_SPECIALS = (
    *SPECIALS,
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


def write_tiny_gguf(
    path: Path,
    seed: int = 0,
    arch: str = "llama",
    chat_template: str | None = None,
    specials: tuple[str, ...] | None = None,
) -> Path:
    """A 2-layer llama (or `arch` qwen3: with q/k norms and Qwen's tool tokens) with random
    weights and a byte-level vocabulary, in float32 GGUF; `specials` replaces ChatML's special
    tokens (the first is the start, the second the end of a sequence)."""
    import gguf

    rng = np.random.default_rng(seed)
    specials = specials or (QWEN3_SPECIALS if arch == "qwen3" else SPECIALS)
    bos, eos = ("<|im_start|>", "<|im_end|>") if "<|im_end|>" in specials else specials[:2]
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = [*_byte_symbols(), "Ġt", "he", "Ġthe", *specials]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(specials))
    types += [gguf.TokenType.CONTROL] * len(specials)
    vocab = len(tokens)
    # transformers reads no head size from a qwen3 file (its config's head_dim is 128): one head
    heads, kv_heads = (1, 1) if arch == "qwen3" else (HEADS, KV_HEADS)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(bos))
    writer.add_eos_token_id(tokens.index(eos))
    writer.add_pad_token_id(tokens.index(eos))
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    kv = HIDDEN // heads * kv_heads
    weight("token_embd.weight", vocab, HIDDEN)  # tied: no output.weight
    for i in range(LAYERS):
        if arch == "qwen3":
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(HIDDEN // heads, np.float32))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(HIDDEN // heads, np.float32))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        _block_weights(weight, i, kv)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    return _finish(writer, path)


def _block_weights(weight, i: int, kv: int) -> None:
    """Layer `i`'s attention and feed-forward matrices (llama.cpp's names)."""
    weight(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
    weight(f"blk.{i}.attn_k.weight", kv, HIDDEN)
    weight(f"blk.{i}.attn_v.weight", kv, HIDDEN)
    weight(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
    weight(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
    weight(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
    weight(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)


def _finish(writer, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")


def write_tiny_gemma3_gguf(path: Path, seed: int = 0, chat_template: str | None = None) -> Path:
    """A 2-layer gemma3 with random weights and a sentencepiece vocabulary (Gemma's specials,
    the 256 byte-fallback pieces, printable ASCII and the word boundary), in float32 GGUF."""
    import gguf

    rng = np.random.default_rng(seed)
    pieces = ["\u2581", *(chr(c) for c in range(ord("!"), ord("~") + 1)), "\n"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    tokens = [*GEMMA_SPECIALS, *byte_pieces, *pieces]
    types = [gguf.TokenType.CONTROL] * len(GEMMA_SPECIALS) + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * len(pieces)
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_block_count(LAYERS)
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HIDDEN // HEADS)
    writer.add_value_length(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_sliding_window(512)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(GEMMA_SPECIALS) + [0.0] * 256 + [-1.0] * len(pieces))
    writer.add_token_types(types)
    writer.add_bos_token_id(tokens.index("<bos>"))
    writer.add_eos_token_id(tokens.index("<eos>"))
    writer.add_unk_token_id(tokens.index("<unk>"))
    writer.add_pad_token_id(tokens.index("<pad>"))
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    def norm(name: str, size: int) -> None:  # GGUF stores Gemma's norms as 1 + weight
        writer.add_tensor(name, np.ones(size, np.float32))

    head, kv = HIDDEN // HEADS, HIDDEN // HEADS * KV_HEADS
    weight("token_embd.weight", vocab, HIDDEN)  # tied
    for i in range(LAYERS):
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            norm(f"blk.{i}.{n}.weight", HIDDEN)
        norm(f"blk.{i}.attn_q_norm.weight", head)
        norm(f"blk.{i}.attn_k_norm.weight", head)
        _block_weights(weight, i, kv)
    norm("output_norm.weight", HIDDEN)
    return _finish(writer, path)


def logprob_gap(folder: Path) -> float:
    """The largest |prompt logprob| difference between vLLM (a Generator actor) and the trainer
    on two fixed 24-token episodes of the model in `folder` (fp32)."""
    import torch

    from forge_agent.generator import Generator, GeneratorConfig, SamplingConfig
    from forge_agent.trainer.core import Trainer, TrainerConfig
    from forge_agent.types import Trajectory
    from tests.helpers import spawn_test_procs

    trainer = Trainer(TrainerConfig(), str(folder), device="cpu")
    vocab = trainer.model.config.vocab_size
    trajs = [
        Trajectory(
            task_id="t",
            group_id="g",
            token_ids=[(7 * i + 13 * j + 5) % (vocab - 3) for j in range(24)],
            loss_mask=[0] * 20 + [1] * 4,
            logprobs=[0.0] * 24,
            advantage=1.0,
        )
        for i in range(2)
    ]
    procs = spawn_test_procs(1)
    gen = procs.spawn("gguf_generator", Generator, GeneratorConfig(), str(folder))
    try:
        gen.setup.call_one().get()
        worst = 0.0
        for traj, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
            c = gen.generate.call_one(
                traj.token_ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)
            ).get()
            worst = max(worst, float((torch.tensor(c.prompt_logprobs[1:]) - lp[1:]).abs().max()))
    finally:
        gen.shutdown.call_one().get()
        procs.stop().get()
    return worst
