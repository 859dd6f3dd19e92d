"""`trainer.autocast: auto`: bf16 only where the device runs it natively (trainer/precision.py)."""

from __future__ import annotations

import pytest
import torch

from forge_agent.trainer.config import TrainerConfig
from forge_agent.trainer.precision import announce_autocast, choose_autocast, cpu_flags

AVX2_EPYC = {"fpu", "sse4_2", "avx", "avx2", "fma", "f16c"}  # this machine's kind
SAPPHIRE = AVX2_EPYC | {"avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = AVX2_EPYC | {"avx512f", "avx512bw", "avx512_bf16"}


def test_cpu_without_native_bf16_runs_fp32() -> None:
    value, why = choose_autocast("auto", torch.device("cpu"), AVX2_EPYC)
    assert value is None
    assert "avx512_bf16" in why and "amx_bf16" in why


@pytest.mark.parametrize(
    "flags, named", [(SAPPHIRE, "avx512_bf16 and amx_bf16"), (ZEN4, "avx512_bf16")]
)
def test_cpu_with_native_bf16_runs_bf16(flags: set[str], named: str) -> None:
    value, why = choose_autocast("auto", "cpu", flags)
    assert value == "bfloat16"
    assert named in why


def test_unknown_cpu_flags_run_fp32() -> None:
    assert choose_autocast("auto", "cpu", None)[0] is None


def test_explicit_settings_are_kept() -> None:
    assert choose_autocast("bfloat16", "cpu", AVX2_EPYC)[0] == "bfloat16"
    assert choose_autocast(None, "cpu", SAPPHIRE)[0] is None


def test_cuda_follows_native_support(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert choose_autocast("auto", torch.device("cuda"))[0] == "bfloat16"
    calls = []

    def native_only(including_emulation: bool = True) -> bool:
        calls.append(including_emulation)
        return including_emulation  # emulated only (e.g. a V100)

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", native_only)
    assert choose_autocast("auto", "cuda")[0] is None
    assert calls == [False]


def test_cpuinfo_flags_are_read(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "none") is None


def test_bad_setting_names_the_key() -> None:
    with pytest.raises(Exception, match="autocast"):
        TrainerConfig(autocast="float16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"trainer\.autocast"):
        choose_autocast("fp16", "cpu", AVX2_EPYC)


def test_auto_is_announced_once(capsys: pytest.CaptureFixture[str]) -> None:
    announce_autocast("auto", torch.device("meta"), "run")
    announce_autocast("auto", torch.device("meta"), "run")
    out = capsys.readouterr().out
    assert out.count("trainer.autocast=auto") == 1
    assert "fp32" in out


def test_trainer_resolves_auto_on_this_cpu() -> None:
    from forge_agent.trainer.core import Trainer

    model = torch.nn.Linear(2, 2)
    trainer = Trainer(TrainerConfig(autocast="auto"), model, device="cpu")
    flags = cpu_flags() or set()
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    assert trainer.autocast == ("bfloat16" if native else None)


def test_smollm2_configs_default_to_auto() -> None:
    from forge_agent.run.config import load_config

    for name in ("calculator", "word_problems", "dependent", "mixed", "program", "multihop"):
        cfg = load_config(f"apps/agent/smollm2_{name}.yaml")
        assert cfg.trainer.autocast == "auto", name
