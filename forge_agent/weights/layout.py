"""The flat-buffer layout of a state dict: one contiguous byte buffer plus a table of tensor
metadata. Torch only (no Monarch), so vLLM's worker processes can map a stored version too.

    metas, nbytes = layout(state_dict); pack_into(state_dict, metas, buf)   # writer
    views = unpack(metas, buf)                                              # reader, no copy
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from forge_agent.lazy import LazyModule

# imported on first use (`LazyModule`): the driver hosts the store's actor, no tensor
torch = LazyModule("torch")

StateDict = dict[str, "torch.Tensor"]
_ALIGN = 64  # byte alignment of every tensor inside the flat buffer


class LayoutError(ValueError):
    """A state dict that cannot be laid out (an entry that is not a tensor)."""


@dataclass(frozen=True)
class TensorMeta:
    """Where one tensor lives inside a flat byte buffer."""

    name: str
    dtype: str  # e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int  # bytes
    nbytes: int


def layout(state_dict: Mapping[str, torch.Tensor]) -> tuple[list[TensorMeta], int]:
    """Offsets of each tensor in one flat buffer (each aligned to 64 bytes); total size."""
    metas, offset = [], 0
    for name, t in state_dict.items():
        if not isinstance(t, torch.Tensor):
            raise LayoutError(f"state dict entry {name!r} is {type(t).__name__}, not Tensor")
        nbytes = t.numel() * t.element_size()
        dtype = str(t.dtype).removeprefix("torch.")
        metas.append(TensorMeta(name, dtype, tuple(t.shape), offset, nbytes))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return metas, offset


def pack_into(state_dict: Mapping[str, torch.Tensor], metas: list[TensorMeta], buf: torch.Tensor):
    """Copy every tensor into its slot of the uint8 buffer `buf` (one pass, no allocation)."""
    for m in metas:
        t = state_dict[m.name]
        dst = buf[m.offset : m.offset + m.nbytes].view(t.dtype).view(t.shape)
        dst.copy_(t.detach(), non_blocking=False)


def unpack(metas: list[TensorMeta], buf: torch.Tensor) -> StateDict:
    """Views of the tensors inside the uint8 buffer `buf` (no copy)."""
    out = {}
    for m in metas:
        dtype = getattr(torch, m.dtype)
        out[m.name] = buf[m.offset : m.offset + m.nbytes].view(dtype).view(m.shape)
    return out


@dataclass(frozen=True)
class SharedView:
    """A stored version's place in shared memory, as plain data (it crosses RPC boundaries):
    the file, its used bytes and each tensor's (name, dtype, shape, offset, nbytes)."""

    version: int
    path: str
    nbytes: int
    metas: list[tuple[str, str, list[int], int, int]]


def meta_table(metas: list[TensorMeta]) -> list[tuple[str, str, list[int], int, int]]:
    """`metas` as plain tuples (name, dtype, shape, offset, nbytes), as views carry them."""
    return [(m.name, m.dtype, list(m.shape), m.offset, m.nbytes) for m in metas]


def map_shared_view(path: str, nbytes: int, metas: list) -> StateDict:
    """Views of a `SharedView`'s tensors, mapped from its file (read in place, no copy)."""
    buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    return unpack([TensorMeta(n, d, tuple(s), o, b) for n, d, s, o, b in metas], buf)


TIED_HEAD = "lm_head.weight"
"""The LM head's name in the transformers layout: the input embedding itself (the same
tensor, under a second name) in a model that ties its embeddings."""


def tied_names(model_config: object) -> frozenset[str]:
    """Names a model's state dict carries twice when it ties its embeddings (`model_config`: a
    transformers `PretrainedConfig`, or anything with `tie_word_embeddings`; a multimodal one
    through its text config). Its checkpoint holds them once, vLLM loads them once, so a sync
    sends and loads them once."""
    text = getattr(model_config, "get_text_config", lambda: model_config)()
    tied = getattr(text, "tie_word_embeddings", getattr(model_config, "tie_word_embeddings", False))
    return frozenset({TIED_HEAD}) if tied else frozenset()
