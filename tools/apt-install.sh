#!/usr/bin/env bash
# apt-install.sh PACKAGE WHAT: install a Debian package as root or through passwordless
# sudo (for tools/ensure-*.sh); fails with what to run otherwise. Exit 3: no apt-get here.
set -euo pipefail
pkg="$1"; what="$2"
command -v apt-get >/dev/null || exit 3
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "$what is missing and this user cannot apt-get install it;" \
      "run: sudo apt-get install -y $pkg" >&2
    exit 1
  fi
fi
echo "installing $what (Debian package $pkg)" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
