#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer on this machine, starting them when they are installed
# but stopped. Used by `npm start` and by CI. With Docker, `docker compose up -d postgres redis` instead.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    echo "starting PostgreSQL…"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  fi
  pg_up || { echo "PostgreSQL is not running on 127.0.0.1:5432 and is not installed here. Run: docker compose up -d postgres redis" >&2; exit 1; }
fi

if ! redis_up; then
  if command -v redis-server >/dev/null 2>&1; then
    echo "starting Redis…"
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 1 30); do redis_up && break; sleep 0.5; done
  fi
  redis_up || { echo "Redis is not running on 127.0.0.1:6379 and is not installed here. Run: docker compose up -d postgres redis" >&2; exit 1; }
fi
echo "PostgreSQL and Redis are up."
