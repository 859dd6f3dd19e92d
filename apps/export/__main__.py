"""Export a checkpoint's policy as a folder other tools load.

    python -m apps.export runs/default/checkpoints/step_000040 --out DIR [--merge] [--base PATH]
        [--adapter NAME]

A checkpoint's `policy/` is a transformers folder (full fine-tuning) or, with `trainer.lora`,
peft's adapter folder (`PeftModel.from_pretrained`, vLLM's `LoRARequest`). Without `--merge`
the folder is copied as it is; with `--merge` a LoRA adapter is merged into its base model
(`--base`, default the base the adapter names) and written as a plain transformers folder that
`from_pretrained`, vLLM and `python -m apps.eval --model` load. A checkpoint of full weights is
already one: `--merge` copies it. A run with several adapters (`trainer.lora.adapters`) keeps
each in `policy/<name>/`: `--adapter NAME` picks the one to export.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from forge_agent.errors import SetupError, report_setup_error


def export(
    checkpoint: Path, out: Path, merge: bool, base: str | None = None, adapter: str | None = None
) -> Path:
    """Write `checkpoint`'s policy (a checkpoint folder or its `policy/`) to `out`; `adapter`:
    which of several LoRA adapters."""
    from forge_agent.trainer.lora import adapter_folder, export_merged, saved_adapters, saved_lora

    policy = checkpoint / "policy" if (checkpoint / "policy").is_dir() else checkpoint
    names = sorted(saved_adapters(policy))
    if adapter is not None:
        if adapter not in names:
            raise SetupError(f"--adapter {adapter}: {policy} holds the adapters {names}")
        policy = adapter_folder(policy, adapter)
    elif len(names) > 1:
        raise SetupError(f"{policy} holds several adapters {names}: pick one with --adapter")
    if not (policy / "config.json").exists() and saved_lora(policy) is None:
        raise SetupError(
            f"{checkpoint} holds no policy: expected a checkpoint folder (step_*/ with policy/) "
            "or a transformers / peft adapter folder"
        )
    if out.exists() and any(out.iterdir()):
        raise SetupError(f"--out {out} exists and is not empty: give a new folder")
    if merge and saved_lora(policy) is not None:
        return export_merged(policy, out, base)
    shutil.copytree(policy, out, dirs_exist_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m apps.export", description=summary)
    parser.add_argument("checkpoint", type=Path, help="a checkpoint folder or its policy/ folder")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--merge", action="store_true", help="merge a LoRA adapter into its base")
    parser.add_argument("--base", default=None, help="the adapter's base model (default: named)")
    parser.add_argument("--adapter", default=None, help="which adapter of several to export")
    args = parser.parse_args(argv)
    try:
        out = export(args.checkpoint, args.out, args.merge, args.base, args.adapter)
    except SetupError as exc:
        return report_setup_error(exc)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
