#!/usr/bin/env bash
# Makes sure headless Chromium (Debian's package) is installed for the browser tests; `npm test`
# runs this first, so a fresh machine needs no other step. Needs root (or an existing install).
set -euo pipefail
path="${CHROMIUM_PATH:-/usr/bin/chromium}"
[ -x "$path" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "Chromium is missing at $path and installing it needs root: run 'sudo apt-get install -y chromium' (or set CHROMIUM_PATH)." >&2
  exit 1
fi
echo "installing Chromium (Debian package) for the browser tests…"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
