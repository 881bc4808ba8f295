#!/usr/bin/env bash
# Makes sure the Debian packages the tests start are installed: Chromium (browser tests), PgBouncer
# (tests behind a transaction-mode pooler), promtool of package prometheus (checks the metrics
# exposition) and docker-compose (validates docker-compose.yml without a Docker engine). `npm test`
# runs this first, so a fresh machine needs no other step. Installing needs root; apt's lock, when
# another process holds it, is waited for (APT_LOCK_TIMEOUT seconds, default 600).
# Exit status: 0 when all are there; outside CI, 0 also when some could not be installed (the tests
# that need them are skipped by name, test/packages.ts); under CI=true, 1 when any is missing.
set -uo pipefail
missing=()
[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ] || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
[ ${#missing[@]} -eq 0 ] && exit 0

give_up() {
  echo "Could not install the Debian packages ${missing[*]}: $1" >&2
  if [ "${CI:-}" = "true" ]; then
    echo "Under CI=true every test must run: failing." >&2
    exit 1
  fi
  echo "The tests that need them are skipped (named in the run). To run them: sudo apt-get install -y ${missing[*]}" >&2
  exit 0
}

[ "$(id -u)" = 0 ] || give_up "installing needs root"
echo "installing ${missing[*]} (Debian packages) for the tests…" >&2
lock=(-o "DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT:-600}")
apt-get "${lock[@]}" update -qq || give_up "apt-get update failed (no package mirror reachable?)"
# RUNLEVEL=1: install only; the tests start what they need themselves (no system Prometheus server).
RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq "${missing[@]}" >/dev/null ||
  give_up "apt-get install failed"
exit 0
