#!/usr/bin/env bash
# Print the path of a promtool binary (Prometheus' rule checker), for tests/test_alerts.py:
# the one on PATH; else built from the published github.com/prometheus/prometheus module
# at the version cluster/modules/prometheus pins (cluster/build.sh, cached; ~3 min on
# 2 cores the first time); else Debian's `prometheus` package. Fails loudly otherwise:
# the alert tests never skip.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if command -v promtool >/dev/null; then
  command -v promtool
  exit 0
fi
if command -v go >/dev/null; then
  out="$("$HERE/cluster/build.sh" promtool)"
  echo "${out#promtool=}"
  exit 0
fi
if command -v apt-get >/dev/null; then
  sudo=""
  if [[ "$(id -u)" != 0 ]]; then
    if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
      echo "ensure-promtool: no promtool, no Go, and this user cannot apt-get install" \
        "prometheus; install Go (cluster/README.md) or run: sudo apt-get install -y prometheus" >&2
      exit 1
    fi
  fi
  echo "ensure-promtool: installing promtool (Debian package prometheus)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  command -v promtool
  exit 0
fi
echo "ensure-promtool: promtool is missing: install Go (then cluster/build.sh builds it)" \
  "or Prometheus' promtool so that it is on PATH" >&2
exit 1
