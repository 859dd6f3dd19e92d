"""The generator starts on CUDA: no process initialises CUDA before vLLM forks its engine core
(a process that did cannot use CUDA in a forked child: "Cannot re-initialize CUDA in forked
subprocess", issue 40 on an H100). The CPU build initialises nothing, so the project's calls
of CUDA-initialising torch functions are recorded (`tests.cuda_probe`) and must be none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from forge_agent.generator import GeneratorConfig
from forge_agent.generator.config import on_cpu
from forge_agent.generator.engine_args import engine_args, engine_environ, engine_process_environ
from tests.cuda_probe import project_cuda_calls


def test_choosing_the_engines_device_and_arguments_calls_nothing_that_initialises_cuda():
    config = GeneratorConfig()
    with project_cuda_calls() as calls:
        assert on_cpu()  # this machine has no CUDA device
        config.resolved_block_size(), config.resolved_executor(), config.resolved_engine_core()
        engine_environ(config), engine_process_environ(config)
        engine_args(config, "model", "auto", 0)
    assert calls == []


def test_a_generator_starts_and_serves_without_the_project_calling_cuda(tiny_model_path):
    """The whole start path in a fresh process: engine arguments, vLLM's start, one request."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.cuda_probe", str(tiny_model_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("CUDA_CALLS "))
    assert json.loads(line.removeprefix("CUDA_CALLS ")) == []


def test_on_cpu_is_decided_without_torch_on_a_torch_built_without_a_gpu_backend():
    """The driver asks `on_cpu` (the generator's executor) and imports no torch for it where
    torch has no CUDA or ROCm libraries; where it has, torch is asked, as before."""
    probe = (
        "import sys\n"
        "from forge_agent.generator.config import _torch_gpu_build, on_cpu\n"
        "print(on_cpu(), _torch_gpu_build(), 'torch' in sys.modules)\n"
        "import torch\n"
        "print(torch.cuda.device_count() == 0)\n"
    )
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (cpu, gpu_build, imported), (counted_none,) = (
        line.split() for line in done.stdout.strip().splitlines()
    )
    assert cpu == counted_none  # the same answer as torch's
    assert imported == str(gpu_build)  # torch imported only where it has a GPU backend
