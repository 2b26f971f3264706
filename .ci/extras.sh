#!/usr/bin/env bash
# Optional test dependencies, installed into the active (test) venv after the README's commands
# have passed without them: best effort, so a registry hiccup skips (not fails) those tests.
set -uo pipefail
cd "$(dirname "$0")/.."
# Chromium + chromedriver for the headless-browser dashboard tests (marker `browser`);
# set PDSIM_REQUIRE_BROWSER=1 to make their absence a test failure instead of a skip.
if command -v apt-get >/dev/null && ! { command -v chromedriver >/dev/null && command -v chromium >/dev/null; }; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "chromium not installed: browser tests will skip"
fi
# Ray for the sweep-on-Ray test (the optional `ray` extra, marker `ray`)
python3 -m pip install -q -e ".[ray]" || echo "ray not installed: the Ray sweep test will skip"
# The vLLM CPU engine in its own venv (marker `engine`). Its tests re-measure the CPU profile on
# the machine at hand before they record the engine and compare (validation/cpu-vllm/here.py via
# tests/engine/test_engine.py: a few minutes on a host with bf16 GEMM units, ~10 without):
# these hosts differ from session to session, and a profile only fits the machine it was measured on.
bash .ci/engine.sh || echo "engine not built: the engine tests will skip"
# SGLang on the CPU in its own venv (marker `engine`, tests/engine/test_sglang.py): the second real
# engine, the same tiny Llama (.ci/sglang.sh says what it installs and why)
bash .ci/sglang.sh || echo "SGLang not built: its engine tests will skip"
