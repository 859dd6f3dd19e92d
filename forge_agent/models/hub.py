"""Model names to local folders: a folder as given, a hub name through the local HF cache, a
GGUF file or a packaged GGUF model converted once (`forge_agent/models/gguf.py`).

    resolve_model("Qwen/Qwen3-8B")  # -> <HF cache>/models--Qwen--Qwen3-8B/snapshots/<revision>
    resolve_model("smollm2-135m")   # -> <model cache>/gguf/smollm2-135m-<digest>-float32
    resolve_model("~/m/x.Q4.gguf")  # -> <model cache>/gguf/x.Q4-<digest>-float32

Nothing is downloaded: the run uses what is already in the Hugging Face cache (``HF_HUB_CACHE``
/ ``HF_HOME``), so one folder serves the trainer, the generator, the titan loader and the trace
page. A name that is neither a folder nor cached is an error naming the model and the cache.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from forge_agent.errors import SetupError
from forge_agent.models import gguf
from forge_agent.models.tiny import default_cache_dir

__all__ = ["ModelNotFoundError", "parameter_count", "resolve_model"]


class ModelNotFoundError(SetupError, FileNotFoundError):
    """A model name that is neither a local folder nor in the local Hugging Face cache."""


def _looks_like_path(name: str) -> bool:
    """A folder path rather than a hub repo id (`org/name`: one slash, no leading `.`/`/`/`~`)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def _missing_folder(path: Path, key: str) -> ModelNotFoundError:
    """'no such folder', listing what the parent or grandparent holds when one exists (the
    checkpoints of a run folder, say)."""
    near: list[str] = []
    for ancestor in (path.parent, path.parent.parent):
        if ancestor.is_dir() and ancestor != path:
            near = sorted(p.name for p in ancestor.iterdir() if p.is_dir())
            hint = f"; {str(ancestor)!r} holds: {', '.join(near[:8]) or 'no folders'}"
            return ModelNotFoundError(f"{key}={str(path)!r}: no such folder{hint}")
    return ModelNotFoundError(f"{key}={str(path)!r}: no such folder")


def resolve_model(name: str | Path, key: str = "model.name", dtype: str = "float32") -> Path:
    """The local folder of model ``name``: an existing folder, a hub name (``org/model``,
    optionally ``org/model@revision``) found in the local Hugging Face cache, or a GGUF model
    (a ``*.gguf`` file, or a name in ``gguf.PACKAGED`` such as ``smollm2-135m``) converted to
    a folder in `dtype` on first use.

    Raises ``ModelNotFoundError`` naming ``key`` (the option that gave the name): "no such
    folder" for a path, the cache and the download command for a hub name; ``GGUFError`` for
    a GGUF model that is missing or cannot be converted.
    """
    if str(name) in gguf.PACKAGED or str(name).endswith(".gguf"):
        packaged = str(name) in gguf.PACKAGED
        file = gguf.packaged_gguf(str(name), key, default_cache_dir()) if packaged else Path(name)
        label = str(name) if packaged else None
        return gguf.convert_gguf(file, default_cache_dir(), dtype, name=label, key=key)
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if _looks_like_path(str(name)) or path.exists():
        raise _missing_folder(path, key)
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    repo_id, _, revision = str(name).partition("@")
    cache = constants.HF_HUB_CACHE
    try:
        return Path(snapshot_download(repo_id, revision=revision or None, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError) as exc:
        raise ModelNotFoundError(
            f"{key}={str(name)!r} is not a local folder, and the Hugging Face cache "
            f"{cache} holds no copy of it ({type(exc).__name__}); download it first "
            f"(`hf download {repo_id}`) or point HF_HUB_CACHE at a cache that has it"
        ) from None


def parameter_count(folder: str | Path) -> int | None:
    """Parameters of the model in `folder`, read from its `*.safetensors` headers (nothing is
    loaded); None when the folder holds no safetensors file."""
    total, found = 0, False
    for path in sorted(Path(folder).glob("*.safetensors")):
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
        found = True
    return total if found else None
