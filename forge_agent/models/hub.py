"""Model names to local folders: a folder as given, a hub name through the local HF cache.

    resolve_model("Qwen/Qwen3-8B")  # -> <HF cache>/models--Qwen--Qwen3-8B/snapshots/<revision>

Nothing is downloaded: the run uses what is already in the Hugging Face cache (``HF_HUB_CACHE``
/ ``HF_HOME``), so one folder serves the trainer, the generator, the titan loader and the trace
page. A name that is neither a folder nor cached is an error naming the model and the cache.
"""

from __future__ import annotations

from pathlib import Path


def resolve_model(name: str | Path) -> Path:
    """The local folder of model ``name``: an existing folder, or a hub name (``org/model``,
    optionally ``org/model@revision``) found in the local Hugging Face cache."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    repo_id, _, revision = str(name).partition("@")
    cache = constants.HF_HUB_CACHE
    try:
        return Path(snapshot_download(repo_id, revision=revision or None, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError) as exc:
        raise FileNotFoundError(
            f"model.name={str(name)!r} is not a local folder, and the Hugging Face cache "
            f"{cache} holds no copy of it ({type(exc).__name__}); download it first "
            f"(`hf download {repo_id}`) or point HF_HUB_CACHE at a cache that has it"
        ) from None
