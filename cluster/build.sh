#!/usr/bin/env bash
# Build (once per machine) every binary of the local cluster from PUBLISHED Go
# modules, through the wrapper modules in cluster/modules/*/ (go.mod + go.sum
# committed, so the dependency graph is pinned).
#
#   cluster/build.sh            build what is not cached yet, then print name=path lines
#   cluster/build.sh --paths    print name=path lines; fail if anything is not built
#   cluster/build.sh --force    rebuild everything
#   cluster/build.sh [--paths|--force] NAME...   only those binaries (e.g. promtool)
#
# Binaries are cached outside the repo:
#   ${GPS_CLUSTER_CACHE:-$HOME/.cache/gpu-pool-scaler/cluster}/bin/<binary>-<version>/<binary>
# next to a .stamp (hash of the wrapper go.mod/go.sum, go version, flags) and the
# measured build time (build-seconds). A stamp mismatch rebuilds that binary.
# Progress and errors go to stderr; build logs to .../logs/<binary>-<version>.log.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODULES="$HERE/modules"
CACHE="${GPS_CLUSTER_CACHE:-$HOME/.cache/gpu-pool-scaler/cluster}"
GO="${GO:-go}"
MODE=build
ONLY=()
for a in "$@"; do
  case "$a" in
    --paths) MODE=paths ;;
    --force) MODE=force ;;
    -*) echo "usage: $0 [--paths|--force] [NAME...]" >&2; exit 2 ;;
    *) ONLY+=("$a") ;;
  esac
done

# The machine has 2 cores: two parallel compile jobs, never more.
export GOFLAGS="-p=2 -mod=readonly -buildvcs=false ${GOFLAGS:-}"
export GOTOOLCHAIN=local
export CGO_ENABLED=0

# binary | wrapper module | module whose version keys the cache | package
TARGETS=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3"
  "kube-apiserver|k8s|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager|k8s|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler|k8s|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-scheduler"
  "kwok|kwok|sigs.k8s.io/kwok|sigs.k8s.io/kwok/cmd/kwok"
  "keda-operator|keda|github.com/kedacore/keda/v2|github.com/kedacore/keda/v2/cmd/operator"
  "keda-adapter|keda|github.com/kedacore/keda/v2|github.com/kedacore/keda/v2/cmd/adapter"
  "promtool|prometheus|github.com/prometheus/prometheus|github.com/prometheus/prometheus/cmd/promtool"
)

log() { echo "[build] $*" >&2; }

# Version of a required module, read from the wrapper go.mod (no network).
module_version() {
  awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$MODULES/$1/go.mod"
}

ldflags_for() { # binary version
  local flags="-s -w"
  case "$1" in
    kube-*)
      local v="$2" major minor
      major="${v#v}"; major="${major%%.*}"
      minor="${v#v*.}"; minor="${minor%%.*}"
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
      done ;;
    keda-*)
      flags+=" -X github.com/kedacore/keda/v2/version.Version=$2 -X github.com/kedacore/keda/v2/version.GitCommit=module-proxy" ;;
  esac
  echo "$flags"
}

stamp_for() { # wrapper flags
  { cat "$MODULES/$1/go.mod" "$MODULES/$1/go.sum"; "$GO" version; echo "$2 $GOFLAGS"; } | sha256sum | cut -c1-16
}

for name in "${ONLY[@]}"; do
  if ! printf '%s\n' "${TARGETS[@]}" | grep -q "^$name|"; then
    echo "[build] no binary named $name (known: $(printf '%s\n' "${TARGETS[@]}" | cut -d'|' -f1 | xargs))" >&2
    exit 2
  fi
done

FAILED=()
OUT=()
for t in "${TARGETS[@]}"; do
  IFS='|' read -r bin wrapper mod pkg <<<"$t"
  if ((${#ONLY[@]})) && [[ " ${ONLY[*]} " != *" $bin "* ]]; then continue; fi
  ver="$(module_version "$wrapper" "$mod")"
  if [[ -z "$ver" ]]; then
    echo "[build] cannot read the version of $mod from $MODULES/$wrapper/go.mod" >&2; exit 1
  fi
  dir="$CACHE/bin/$bin-$ver"
  exe="$dir/$bin"
  flags="$(ldflags_for "$bin" "$ver")"
  stamp="$(stamp_for "$wrapper" "$flags")"
  if [[ "$MODE" == paths ]]; then
    if [[ ! -x "$exe" ]]; then
      echo "[build] $bin ($mod@$ver) is not built: run cluster/build.sh (or make cluster-build)" >&2
      FAILED+=("$bin"); continue
    fi
    OUT+=("$bin=$exe"); continue
  fi
  if [[ "$MODE" != force && -x "$exe" && "$(cat "$dir/.stamp" 2>/dev/null)" == "$stamp" ]]; then
    log "$bin $ver: cached (its last build took $(cat "$dir/build-seconds" 2>/dev/null || echo "?") s)"
    OUT+=("$bin=$exe"); continue
  fi
  mkdir -p "$dir" "$CACHE/logs"
  blog="$CACHE/logs/$bin-$ver.log"
  log "$bin: building $pkg from $mod@$ver (log: $blog) ..."
  start=$(date +%s)
  if (cd "$MODULES/$wrapper" && "$GO" build -trimpath -ldflags="$flags" -o "$exe.tmp" "$pkg") >"$blog" 2>&1; then
    secs=$(( $(date +%s) - start ))
    mv "$exe.tmp" "$exe"
    echo "$stamp" >"$dir/.stamp"
    echo "$secs" >"$dir/build-seconds"
    log "$bin $ver: built in ${secs}s, $(du -h "$exe" | cut -f1) -> $exe"
    OUT+=("$bin=$exe")
  else
    rm -f "$exe.tmp"
    echo "[build] FAILED: $bin from module $mod@$ver (wrapper $MODULES/$wrapper), last lines of $blog:" >&2
    tail -n 25 "$blog" | sed 's/^/    /' >&2
    FAILED+=("$bin")
  fi
done

printf '%s\n' "${OUT[@]}"
if ((${#FAILED[@]})); then
  echo "[build] not available: ${FAILED[*]}" >&2
  exit 1
fi
