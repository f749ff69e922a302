#!/usr/bin/env bash
# Make sure a redis-server binary is on PATH (the research queue tests start their own
# server on a free loopback port; no system service is used or started).
# Debian/Ubuntu: installs the distribution package as root, or through passwordless sudo.
# Anywhere else it fails with what to install: the tests never skip for want of Redis.
set -euo pipefail
if command -v redis-server >/dev/null; then
  redis-server --version
  exit 0
fi
if command -v apt-get >/dev/null; then
  sudo=""
  if [[ "$(id -u)" != 0 ]]; then
    if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
      echo "ensure-redis: redis-server is missing and this user cannot apt-get install it;" \
        "run: sudo apt-get install -y redis-server" >&2
      exit 1
    fi
  fi
  echo "ensure-redis: installing redis-server (Debian package)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  redis-server --version
  exit 0
fi
echo "ensure-redis: redis-server is missing: install Redis >= 6.2 (brew install redis," \
  "dnf install redis, ...) so that redis-server is on PATH" >&2
exit 1
