#!/usr/bin/env bash
# Make sure a redis-server binary is on PATH (the research queue tests start their own
# server on a free loopback port; no system service is used or started).
# Debian/Ubuntu: installs the distribution package as root, or through passwordless sudo.
# Anywhere else it fails with what to install: the tests never skip for want of Redis.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v redis-server >/dev/null; then
  rc=0
  bash "$HERE/apt-install.sh" redis-server "ensure-redis: redis-server" || rc=$?
  if ((rc == 3)); then
    echo "ensure-redis: redis-server is missing: install Redis >= 6.2 (brew install redis," \
      "dnf install redis, ...) so that redis-server is on PATH" >&2
  fi
  ((rc == 0)) || exit 1
fi
redis-server --version
