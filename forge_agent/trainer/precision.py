"""`trainer.autocast: auto`: bf16 autocast only where the device runs bf16 matmuls natively.

On a CPU without AVX512-BF16 or AMX (e.g. an AVX2 AMD EPYC, 2026-12-07) oneDNN emulates bf16
and a 512x576x1536 matmul took 1,156 ms against fp32's 36 ms (~32x); SmolLM2's warm start's
first step took 999 s under bf16 autocast. With AVX512-BF16 the same config's step was 0.74x
fp32's. So "auto" is bf16 on a CUDA device that supports it natively and on a CPU whose flags
name avx512_bf16 or amx_bf16, fp32 (no autocast) elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of x86 CPUs that run bf16 matmuls natively (oneDNN's bf16 kernels)."""

AUTOCAST_CHOICES = ("auto", "bfloat16")
"""The values `trainer.autocast` takes besides null."""

_announced: set[tuple[str | None, str]] = set()


def resolve_device(device: torch.device | str) -> torch.device:
    """`device` as a torch device; "auto": CUDA where a device is visible, else the CPU (the
    run's `device`, the trainer's and the warm start's)."""
    import torch  # a cached warm start and `--check` resolve "auto" without it otherwise

    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags from the first ``flags`` line of `cpuinfo` (x86 Linux);
    None where there is no such file or line (then bf16 support is unknown)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            return set(value.split())
    return None


def choose_autocast(
    setting: str | None, device: torch.device | str, flags: set[str] | str | None = "read"
) -> tuple[str | None, str]:
    """(`trainer.autocast` resolved: "bfloat16" or None, the reason in words) for `setting`
    ("auto", "bfloat16" or None) on torch device `device` (a ``torch.device`` or its type).
    `flags`: the CPU's flags (default: read from /proc/cpuinfo; None: unknown)."""
    if setting is None:
        return None, "trainer.autocast=null: the model's dtype throughout"
    if setting not in AUTOCAST_CHOICES:
        raise ValueError(
            f"trainer.autocast: got {setting!r}; expected one of {list(AUTOCAST_CHOICES)} or null"
        )
    if setting == "bfloat16":
        return "bfloat16", "trainer.autocast=bfloat16 (set)"
    kind = resolve_device(device).type
    if kind == "cuda":
        import torch

        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch: no emulation argument
            native = torch.cuda.is_bf16_supported()
        if native:
            return "bfloat16", "auto: the CUDA device supports bf16 natively"
        return None, "auto: fp32, the CUDA device has no native bf16"
    if kind == "cpu":
        if isinstance(flags, str):
            flags = cpu_flags()
        if flags is None:
            return None, "auto: fp32, the CPU's flags are unknown (no /proc/cpuinfo flags line)"
        native = [f for f in NATIVE_BF16_CPU_FLAGS if f in flags]
        if native:
            return "bfloat16", f"auto: bf16, the CPU has {' and '.join(native)}"
        return None, (
            "auto: fp32, the CPU has neither avx512_bf16 nor amx_bf16 (bf16 would be emulated, "
            "~32x slower a matmul on an AVX2 EPYC)"
        )
    return None, f"auto: fp32 on device type {kind!r} (bf16 chosen on cuda and bf16 CPUs only)"


def announce_autocast(setting: str | None, device: torch.device | str, who: str) -> str | None:
    """`choose_autocast` for `setting` on `device`; prints the choice and its reason once per
    process (per setting and device type) when `setting` is "auto". Returns the choice."""
    value, why = choose_autocast(setting, device)
    key = (setting, resolve_device(device).type)
    if setting == "auto" and key not in _announced:
        _announced.add(key)
        print(
            f"[{who}] trainer.autocast=auto -> {value or 'fp32 (no autocast)'}: {why}", flush=True
        )
    return value


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The trainer's weights dtype: "auto" is bf16 on CUDA and fp32 on the CPU; else the named
    torch dtype ("float32", "bfloat16"...)."""
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; expected e.g. 'float32' or 'bfloat16'")
    return dtype
