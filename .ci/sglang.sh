#!/usr/bin/env bash
# The second real engine for the `engine` tests: SGLang on the CPU in its own venv, serving the same
# generated tiny Llama. Best effort: when anything here fails the SGLang tests skip, saying why.
# Idempotent: a venv that already imports the pinned SGLang is kept.
#
# Recipe (issue 24, item 8):
# - sglang 0.5.10.post1 without dependencies, then its runtime requirements less the GPU ones
#   (sgl-kernel's CUDA wheel, flashinfer, triton, cuda-python...) and the multimedia ones, pinned
#   where SGLang pins them;
# - torch 2.14.1 with torchvision 0.29.1, both from this machine's disk (SGLang pins torch 2.9.1,
#   whose x86_64 wheels are CUDA builds of several GB; PyPI's torchvision does not load beside the
#   2.13 CPU wheel, and SGLang imports torchvision at start-up);
# - sgl-kernel: its CPU kernels are built from SGLang's source tree, which no registry this machine
#   reaches carries (PyPI has CUDA wheels only), and they need AMX. On a CPU without AMX SGLang runs
#   its layers' torch-native paths (forward_native, the torch_native attention backend) and never
#   calls them, but imports the package at start-up: .ci/sgl_kernel/ is a stand-in that answers the
#   imports and raises, naming the kernel, on any call. On a host with AMX SGLang would take its AMX
#   paths (cpu_has_amx_support); the stand-in has no AMX ops, so SGLang falls back to the same
#   torch-native paths there too.
#
# Paths (tests/engine/paths.py reads the same variables):
#   PDSIM_SGLANG_VENV   the venv            (default /work/venvs/sglang)
#   PDSIM_SGLANG_MODEL  the tiny Llama dir  (default <venv>-models/tiny-llama)
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${PDSIM_SGLANG_VENV:-/work/venvs/sglang}"
MODEL="${PDSIM_SGLANG_MODEL:-${VENV}-models/tiny-llama}"
SGLANG_VERSION=0.5.10.post1
log() { echo "sglang.sh: $*"; }

have_sglang() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "
import importlib.metadata as md, sys
sys.exit(0 if md.version('sglang') == '$SGLANG_VERSION' else 1)" >/dev/null 2>&1
}

if ! have_sglang; then
  log "building $VENV (sglang $SGLANG_VERSION, torch 2.14.1)"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || { log "cannot create the venv: SGLang tests will skip"; exit 0; }
  PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${PIP[@]}" torch==2.14.1 torchvision==0.29.1 || { log "torch 2.14.1 not installable: SGLang tests will skip"; exit 0; }
  "${PIP[@]}" --no-deps "sglang==$SGLANG_VERSION" || { log "sglang not installable: SGLang tests will skip"; exit 0; }
  "${PIP[@]}" torch==2.14.1 aiohttp fastapi uvicorn uvloop "pyzmq>=25.1.2" orjson msgspec pybase64 psutil \
    setproctitle "transformers==5.3.0" interegular partial_json_parser pillow "prometheus-client>=0.20.0" \
    python-multipart requests scipy sentencepiece tiktoken tqdm einops packaging numpy pydantic huggingface_hub \
    "openai==2.6.1" "openai-harmony==0.0.4" "xgrammar==0.1.32" "llguidance>=0.7.11,<0.8.0" compressed-tensors \
    "blobfile==3.0.0" "intel-openmp==2024.2.1" ninja gguf tabulate IPython watchfiles "anthropic>=0.20.0" \
    "mistral_common>=1.9.0" "outlines==0.1.11" "smg-grpc-servicer>=0.5.0" datasets build \
    || { log "SGLang's requirements not installable: SGLang tests will skip"; exit 0; }
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  rm -rf "$SITE/sgl_kernel" && cp -r .ci/sgl_kernel "$SITE/sgl_kernel"
  have_sglang || { log "sglang does not import after installation: SGLang tests will skip"; exit 0; }
fi
log "SGLang venv ready: $VENV"

"$VENV/bin/python" tests/engine/make_tiny_llama.py --out "$MODEL" \
  || { log "could not generate the tiny Llama: SGLang tests will skip"; exit 0; }
log "tiny Llama ready: $MODEL"
