#!/usr/bin/env bash
# Optional test dependencies: best effort, so a registry hiccup skips (not fails) those tests.
set -uo pipefail
if command -v apt-get >/dev/null && ! command -v chromedriver >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "chromium not installed: browser tests will skip"
fi
