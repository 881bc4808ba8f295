#!/usr/bin/env bash
# Makes sure the Debian packages the tests start are installed: Chromium (browser tests), PgBouncer
# (tests behind a transaction-mode pooler), promtool of package prometheus (checks the metrics
# exposition) and docker-compose (validates docker-compose.yml without a Docker engine). `npm test`
# runs this first, so a fresh machine needs no other step. Installing needs root; otherwise it says
# what to run.
set -euo pipefail
missing=()
[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ] || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "The tests need these Debian packages: ${missing[*]}. Run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages) for the tests…" >&2
apt-get update -qq
# RUNLEVEL=1: install only; the tests start what they need themselves (no system Prometheus server).
RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
