#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/browser.py): Debian's package, installed here when
# it is missing and this runs as root with apt-get (a fresh machine, CI). Otherwise it says so and
# the browser tests skip with that reason; under CI=true they fail instead (CI always runs them).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make test: installing Debian's chromium for the browser tests (apt-get)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
cat >&2 <<'MSG'
********************************************************************************
make test: chromium is not installed and this is not root with apt-get, so the
browser tests (HTML pages at 1280 px) will be SKIPPED. To run them:
    sudo apt-get install chromium        (Debian/Ubuntu)
CI installs it and always runs them.
********************************************************************************
MSG
