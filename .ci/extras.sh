#!/usr/bin/env bash
# Optional test dependencies: best effort, so a registry hiccup skips (not fails) those tests.
set -uo pipefail
# Chromium + chromedriver for the headless-browser dashboard tests (tests/test_dashboard_browser.py);
# set PDSIM_REQUIRE_BROWSER=1 to make their absence a test failure instead of a skip.
if command -v apt-get >/dev/null && ! { command -v chromedriver >/dev/null && command -v chromium >/dev/null; }; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "chromium not installed: browser tests will skip"
fi
# Ray for the sweep-on-Ray test (the optional `ray` extra)
python3 -m pip install -q -e ".[ray]" || echo "ray not installed: the Ray sweep test will skip"
# Selenium drives the headless-browser dashboard test (Dash's testing tools use it too)
python3 -m pip install -q selenium || echo "selenium not installed: the browser test will skip"
bash .ci/engine.sh || echo "engine not built: the engine tests will skip"
