#!/usr/bin/env bash
# Print the path of a promtool binary (Prometheus' rule checker), for tests/test_alerts.py:
# built from the published github.com/prometheus/prometheus module at the version
# cluster/modules/prometheus pins, when Go is here (cluster/build.sh, cached; ~3 min on
# 2 cores the first time); else the one on PATH; else Debian's `prometheus` package (not
# exercised on the project's machines, which have Go). Fails loudly otherwise: the alert
# tests never skip.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if command -v go >/dev/null; then
  out="$("$HERE/../cluster/build.sh" promtool)"
  echo "${out#promtool=}"
  exit 0
fi
if command -v promtool >/dev/null; then
  command -v promtool
  exit 0
fi
rc=0
bash "$HERE/apt-install.sh" prometheus "ensure-promtool: promtool" || rc=$?
if ((rc == 3)); then
  echo "ensure-promtool: promtool is missing: install Go (cluster/build.sh then builds it)" \
    "or Prometheus so that promtool is on PATH" >&2
fi
((rc == 0)) || exit 1
command -v promtool
