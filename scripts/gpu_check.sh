#!/usr/bin/env bash
# The GPU check of issue 40, as one command for a machine with one CUDA GPU and vLLM installed
# (FORGE_GPU=1 bash scripts/setup.sh, or carried; docs/gpu.md). In order of value, each part
# under its own time limit, each part's output written as soon as it ends, so a run cut short
# keeps what finished:
#   1. the machine: GPU, driver, torch, vLLM, Monarch;
#   2. python -m apps.bench.gpu: engine vs LLM.generate, sync (store shared memory and GPU
#      slot, LoRA), colocated steps with the sampler/trainer gap, TRL's colocated GRPOTrainer;
#   3. the tests that skip without a CUDA device, and the start-path ones;
#   4. (`loop`, not in the default parts: it needs Monarch, whose torchmonarch 0.7.0 runs its
#      actor API on torch 2.11, checked on CPU) the CPU default config whole on the one GPU,
#      colocated, its held-out eval at the start and the end (summary.json).
# PYTORCH_NVML_BASED_CUDA_CHECK is unset on purpose: the generator must start without it.
#
#   OUT=results/ bash scripts/gpu_check.sh            # about 8 minutes on one H100
#   GPU_CHECK_PARTS="loop tests" OUT=results/ bash scripts/gpu_check.sh
set -u
out=${OUT:-bench_results/gpu_check}
parts=${GPU_CHECK_PARTS:-"machine bench tests"}
mkdir -p "$out"
unset PYTORCH_NVML_BASED_CUDA_CHECK
export PYTHONUNBUFFERED=1

part() {  # part NAME SECONDS COMMAND...: run it, its output to $out/NAME.log, its status noted
    local name=$1 limit=$2
    shift 2
    [[ " $parts " == *" $name "* ]] || return 0
    local t0=$SECONDS
    echo "== $name (at most ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$out/status.txt"
    tail -n 40 "$out/$name.log"
}

part machine 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python - <<"EOF"
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "vllm", "transformers", "trl", "monarch", "torchtitan"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "?"))
    except Exception as exc:
        print(name, "unavailable:", type(exc).__name__, exc)
try:
    import monarch.actor.concurrent  # noqa: F401  (what the Monarch stack needs)
    print("monarch actor API: ok")
except Exception as exc:
    print("monarch actor API: unavailable:", type(exc).__name__, exc)
EOF'

part bench 420 python -m apps.bench.gpu --out "$out/gpu.json" --section-timeout 200

part tests 240 python -m pytest -q -rs -p no:cacheprovider \
    tests/test_cuda_start.py tests/test_colocation_cuda.py tests/test_generator_defaults.py \
    tests/test_final_only_outputs.py tests/test_weight_store.py tests/test_titan.py

part loop 420 python -m apps.agent.main device=cuda services.colocate=sleep \
    services.trainer.with_gpus=true services.generator.with_gpus=true \
    "output_dir=$out/loop"
