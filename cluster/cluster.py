"""A real Kubernetes control plane + real KEDA on 127.0.0.1, with kwok fake GPU nodes.

    cluster/up   [--nodes N] [--gpus-per-node G] [--state-dir DIR] [--pod-stages general|fast]
    cluster/down [--state-dir DIR]

Real processes (built from published Go modules by cluster/build.sh): etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok, keda-operator,
keda-adapter.  Simulated: nodes and pods (kwok writes their status; there is no
kubelet and no container).

Network hygiene: every address any of these processes is told to dial or
advertise lies in 127.0.0.0/8 (see ADDRESSES below); nothing here ever names
an address outside it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # kubernetes is imported where used: main() explains a missing venv
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from kubernetes.client import ApiClient

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
CLUSTER_DIR = REPO / "cluster"
DEFAULT_STATE = REPO / "out" / "cluster"

# --- addresses: all inside 127.0.0.0/8 ---------------------------------------------
# Linux routes the whole 127.0.0.0/8 to the loopback device, so a process can bind
# any of these without configuring an interface.
LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "127.96.0.0/16"  # ClusterIPs; nothing listens there except the adapter
KUBERNETES_SERVICE_IP = "127.96.0.1"  # first IP of SERVICE_CIDR (the `kubernetes` Service)
ADAPTER_SERVICE_IP = "127.96.0.20"  # KEDA metrics adapter: Service ClusterIP == its bind address
POD_CIDR = "127.128.0.0/16"  # kwok hands pod IPs out of this range
NODE_IP = "127.64.0.1"  # kwok's InternalIP for every fake node (no kubelet listens there)
for _addr in (SERVICE_CIDR, POD_CIDR, NODE_IP, ADAPTER_SERVICE_IP, KUBERNETES_SERVICE_IP):
    assert ipaddress.IPv4Network(_addr).subnet_of(ipaddress.IPv4Network("127.0.0.0/8")), _addr

KEDA_NS = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
OPERATOR_SERVICE = "keda-operator"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

# start order; `down` stops in reverse
COMPONENTS = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "keda-operator",
    "keda-adapter",
]


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class ClusterError(RuntimeError):
    pass


# --- binaries, module dirs ------------------------------------------------------------


def binaries() -> dict[str, str]:
    """name -> path of each binary, from `cluster/build.sh --paths` (fails if not built)."""
    proc = subprocess.run(
        [str(CLUSTER_DIR / "build.sh"), "--paths", *COMPONENTS], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ClusterError(
            "binaries missing — run `make cluster-build` (or cluster/build.sh) first:\n"
            + proc.stderr
        )
    out = dict(line.split("=", 1) for line in proc.stdout.split())
    missing = [c for c in COMPONENTS if c not in out]
    if missing:
        raise ClusterError(f"build.sh --paths lacks {missing}")
    return out


def module_dir(wrapper: str, module: str) -> Path:
    """Module-cache directory of `module` at the version pinned by cluster/modules/<wrapper>."""
    env = dict(os.environ, GOFLAGS="-mod=readonly", GOTOOLCHAIN="local")
    proc = subprocess.run(
        ["go", "mod", "download", "-json", module],
        cwd=CLUSTER_DIR / "modules" / wrapper,
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise ClusterError(f"go mod download {module} failed: {proc.stderr}{proc.stdout}")
    return Path(json.loads(proc.stdout)["Dir"])


# --- PKI -------------------------------------------------------------------------------


def make_pki(pki: Path) -> None:
    """Cluster CA, front-proxy CA, serving/client certs and the service-account key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=365)

    def write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    def write_cert(path: Path, cert: x509.Certificate) -> None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def name(cn: str, org: str | None = None) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    def new_ca(stem: str, cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        write_key(pki / f"{stem}.key", key)
        write_cert(pki / f"{stem}.crt", cert)
        return key, cert

    def issue(
        ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
        stem: str,
        cn: str,
        org: str | None = None,
        dns: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> None:
        ca_key, ca_cert = ca
        key = ec.generate_private_key(ec.SECP256R1())
        usages: list[x509.ObjectIdentifier] = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn, org))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        write_key(pki / f"{stem}.key", key)
        write_cert(pki / f"{stem}.crt", b.sign(ca_key, hashes.SHA256()))

    ca = new_ca("ca", "gpu-pool-scaler-cluster-ca")
    front = new_ca("front-proxy-ca", "gpu-pool-scaler-front-proxy-ca")
    issue(
        ca,
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ips=[LOOPBACK, KUBERNETES_SERVICE_IP],
    )
    issue(ca, "admin", "kubernetes-admin", org="system:masters", client=True)
    issue(ca, "controller-manager", "system:kube-controller-manager", client=True)
    issue(ca, "scheduler", "system:kube-scheduler", client=True)
    issue(front, "front-proxy-client", "front-proxy-client", client=True)
    # KEDA: one key pair for the operator's gRPC metrics service, the adapter's
    # serving port and the adapter's gRPC client (KEDA uses mTLS between the two,
    # reading ca.crt/tls.crt/tls.key from the same --cert-dir).
    keda_dns = []
    for svc in (OPERATOR_SERVICE, ADAPTER_SERVICE):
        keda_dns += [
            svc,
            f"{svc}.{KEDA_NS}",
            f"{svc}.{KEDA_NS}.svc",
            f"{svc}.{KEDA_NS}.svc.cluster.local",
        ]
    issue(
        ca,
        "keda",
        "keda",
        dns=[*keda_dns, "localhost"],
        ips=[LOOPBACK, ADAPTER_SERVICE_IP],
        server=True,
        client=True,
    )
    keda_dir = pki / "keda"
    keda_dir.mkdir(exist_ok=True)
    shutil.copy(pki / "ca.crt", keda_dir / "ca.crt")
    shutil.copy(pki / "keda.crt", keda_dir / "tls.crt")
    shutil.copy(pki / "keda.key", keda_dir / "tls.key")
    # service-account token signing key (RSA: what the apiserver expects by default)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(pki / "sa.key", sa)
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    import yaml

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gps",
                "cluster": {"server": server, "certificate-authority-data": b64(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki / f"{user}.crt"),
                    "client-key-data": b64(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "gps", "context": {"cluster": "gps", "user": user}}],
        "current-context": "gps",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)


# --- processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # zombie/dead: exited, not yet reaped by its new parent
        return None
    return fields[19]  # field 22: starttime


class State:
    def __init__(self, root: Path):
        self.root = root
        self.pki = root / "pki"
        self.logs = root / "logs"
        self.pids = root / "pids"
        self.kubeconfigs = root / "kubeconfigs"
        self.kubeconfig = root / "kubeconfig"

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        full_env.update(env or {})
        with open(self.logs / f"{name}.log", "ab") as logf:
            logf.write(f"# {' '.join(argv)}\n".encode())
            logf.flush()
            p = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,  # own process group: `down` signals the whole group
                cwd=self.root,
            )
        (self.pids / f"{name}.pid").write_text(f"{p.pid} {proc_start_time(p.pid)}\n")
        return p.pid

    def alive(self, name: str) -> bool:
        pid, start = self._pidfile(name)
        return pid is not None and proc_start_time(pid) == start

    def _pidfile(self, name: str) -> tuple[int, str] | tuple[None, None]:
        try:
            pid, start = (self.pids / f"{name}.pid").read_text().split()
            return int(pid), start
        except (OSError, ValueError):
            return None, None

    def stop(self, name: str, timeout: float = 15.0) -> None:
        pid, start = self._pidfile(name)
        if pid is None:
            return
        # kill only if the PID still belongs to the process we started (PID reuse after a crash)
        if proc_start_time(pid) == start:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and proc_start_time(pid) == start:
                    with contextlib.suppress(ChildProcessError):  # our own child: reap it
                        os.waitpid(pid, os.WNOHANG)
                    time.sleep(0.1)
                if proc_start_time(pid) != start:
                    break
            log(f"stopped {name} (pid {pid})")
        (self.pids / f"{name}.pid").unlink(missing_ok=True)

    def tail(self, name: str, n: int = 30) -> str:
        try:
            lines = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in lines[-n:])


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float,
    state: State | None = None,
    proc: str | None = None,
) -> T:
    """Poll check() until it returns a truthy value; fail early if `proc` died."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        if state is not None and proc is not None and not state.alive(proc):
            raise ClusterError(
                f"{proc} exited while waiting for {what}; log tail:\n{state.tail(proc)}"
            )
        try:
            result = check()
            if result:
                return result
        except Exception as e:
            last_err = e
        time.sleep(0.5)
    detail = f" (last error: {last_err})" if last_err else ""
    tail = f"\n{proc} log tail:\n{state.tail(proc)}" if state is not None and proc else ""
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}{tail}")


def https_get(url: str, pki: Path, timeout: float = 3.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def https_get_insecure(url: str, timeout: float = 3.0) -> int:
    """Health endpoints of kcm/scheduler (self-signed serving certs, /healthz always allowed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# --- up ----------------------------------------------------------------------------------


# What a kubelet does to a Running pod being deleted that kwok's `general` stages leave out:
# at the end of its grace period the containers are killed (exit 143) and the pod turns
# Failed. Without it a pod that carries a finalizer (every Job pod: the Job controller's
# `batch.kubernetes.io/job-tracking`, removed only once the pod is terminal) stays
# Terminating forever and holds its GPUs: preempted research pods never give them back.
# Written here (kwok's Stage API); kwok's own pod-delete stage then deletes the pod.
TERMINATE_STAGE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "gps-pod-terminate"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {
            "matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": ".metadata.finalizers", "operator": "Exists"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            ]
        },
        "delay": {
            "durationMilliseconds": 1000,
            # until deletionTimestamp = deletion request + the pod's grace period
            "jitterDurationFrom": {"expressionFrom": ".metadata.deletionTimestamp"},
        },
        "next": {
            "statusTemplate": """{{ $now := Now }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 143
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"""
        },
    },
}


BINPACK_SCHEDULER = "gpu-binpack"  # the second profile: GPUs packed (docs/install.md)


def scheduler_config(path: Path, kubeconfig: Path) -> None:
    """kube-scheduler's configuration: the default profile untouched (`default-scheduler`,
    LeastAllocated on cpu and memory: pods spread) and BINPACK_SCHEDULER, the profile
    docs/install.md recommends for a GPU pool (MostAllocated on nvidia.com/gpu: the
    fewest GPUs left over). Pods pick one with `schedulerName`; e2e scenario 11 checks
    where each binds against the bench's simulated scheduler."""
    import yaml

    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "enableProfiling": False,
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {
                "schedulerName": BINPACK_SCHEDULER,
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [{"name": "nvidia.com/gpu", "weight": 1}],
                            }
                        },
                    },
                    # Without this, the system's default topology spread (weight 2) still
                    # spreads a Deployment's replicas one per node (e2e scenario 11).
                    {
                        "name": "PodTopologySpread",
                        "args": {"defaultingType": "List", "defaultConstraints": []},
                    },
                ],
            },
        ],
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def kwok_config(path: Path, pod_stages: str) -> None:
    """kwok needs its Stage objects in a config file; take them from the kwok module
    (the same ones kwokctl uses), not from a copy in this repo."""
    import yaml

    kdir = module_dir("kwok", "sigs.k8s.io/kwok")
    docs: list[dict] = []  # options come as flags (--cidr, --node-ip, ...)
    sources = [
        kdir / "kustomize/stage/node/fast/node-initialize.yaml",
        kdir / "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    ]
    pod_dir = kdir / "kustomize/stage/pod" / pod_stages
    kust = yaml.safe_load((pod_dir / "kustomization.yaml").read_text())
    sources += [pod_dir / r for r in kust["resources"]]
    for src in sources:
        docs.extend(d for d in yaml.safe_load_all(src.read_text()) if d)
    if pod_stages == "general":
        docs.append(TERMINATE_STAGE)

    class Dumper(yaml.SafeDumper):
        pass

    def text(
        dumper: yaml.SafeDumper, data: str
    ) -> yaml.ScalarNode:  # keep the Go templates readable as literal blocks
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    path.write_text(yaml.dump_all(docs, Dumper=Dumper, sort_keys=False))


def api_client(kubeconfig: Path) -> ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def manifest(obj: dict[str, Any]) -> Any:
    """A manifest written as a dict, as the `body` of a kubernetes client call: the client
    sends a dict as it is (ApiClient.sanitize_for_serialization), though its types ask for
    the V1* model (V1Node, V1Service, ...)."""
    return obj


def condition_true(status: Any, kind: str) -> bool:
    """Whether an object's `status` (None until a controller writes one) has condition
    `kind` True."""
    conditions = (status.conditions if status is not None else None) or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def create_nodes(
    api: ApiClient, n: int, gpus: int, prefix: str = "gpu-node", pool: str = "shared"
) -> list[str]:
    from kubernetes import client

    core = client.CoreV1Api(api)
    names = []
    for i in range(n):
        nm = f"{prefix}-{i:03d}"
        names.append(nm)
        res = {
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
            "nvidia.com/gpu": str(gpus),
            "ephemeral-storage": "1Ti",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": nm,
                "labels": {
                    "gpu-pool": pool,
                    "type": "kwok",
                    "kubernetes.io/hostname": nm,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "nvidia.com/gpu.count": str(gpus),
                },
                "annotations": {
                    KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1],
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {
                "taints": [
                    {
                        "key": KWOK_NODE_ANNOTATION[0],
                        "value": KWOK_NODE_ANNOTATION[1],
                        "effect": "NoSchedule",
                    }
                ]
            },
            "status": {"allocatable": res, "capacity": res},
        }
        core.create_node(manifest(body))
    return names


def nodes_ready(api: ApiClient, names: list[str]) -> bool:
    from kubernetes import client

    ready = set()
    for n in client.CoreV1Api(api).list_node().items:
        taints = (n.spec.taints if n.spec is not None else None) or []
        if (
            n.metadata is not None
            and condition_true(n.status, "Ready")
            and not any(t.key == "node.kubernetes.io/not-ready" for t in taints)
        ):
            ready.add(n.metadata.name)
    return set(names) <= ready


def apply_keda_crds(api: ApiClient) -> list[str]:
    import yaml
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    crd_dir = module_dir("keda", "github.com/kedacore/keda/v2") / "config/crd/bases"
    names = []
    for f in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                ext.create_custom_resource_definition(doc)
                names.append(doc["metadata"]["name"])
    return names


# Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule), for charts that render them;
# from the module's own example/ manifests, at this pinned version (v0.80.1: the newest the
# module proxy serves here).
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.80.1"


def apply_prometheus_operator_crds(
    api: ApiClient, kinds: Sequence[str] = ("servicemonitors", "prometheusrules")
) -> list[str]:
    import tempfile

    import yaml
    from kubernetes import client

    with tempfile.TemporaryDirectory() as tmp:  # outside any module: plain download
        env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="")
        proc = subprocess.run(
            ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            check=False,
        )
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise ClusterError(
            f"go mod download {PROMETHEUS_OPERATOR}: {info.get('Error') or proc.stderr}"
        )
    crd_dir = Path(info["Dir"]) / "example/prometheus-operator-crd"
    ext = client.ApiextensionsV1Api(api)
    names = []
    for kind in kinds:
        doc = yaml.safe_load((crd_dir / f"monitoring.coreos.com_{kind}.yaml").read_text())
        ext.create_custom_resource_definition(doc)
        names.append(doc["metadata"]["name"])
    return names


def crds_established(api: ApiClient, names: list[str]) -> bool:
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    for n in names:
        crd = ext.read_custom_resource_definition(n)
        if not condition_true(crd.status, "Established"):
            return False
    return True


def register_adapter(api: ApiClient, pki: Path, port: int) -> None:
    """Service (ClusterIP == adapter bind address, no selector) + APIService."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace(manifest({"metadata": {"name": KEDA_NS}}))
    core.create_namespaced_service(
        KEDA_NS,
        manifest(
            {
                "metadata": {"name": ADAPTER_SERVICE, "labels": {"app": ADAPTER_SERVICE}},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": ADAPTER_SERVICE_IP,
                    "ports": [
                        {"name": "https", "port": port, "targetPort": port, "protocol": "TCP"}
                    ],
                },
            }
        ),
    )
    # The aggregator's availability check wants a ready EndpointSlice with the Service's
    # port name even though (routing off) it dials the ClusterIP. IPv4/IPv6 slices may not
    # hold loopback addresses, so this is an FQDN slice whose address is never dialed.
    client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(
        KEDA_NS,
        manifest(
            {
                "metadata": {
                    "name": f"{ADAPTER_SERVICE}-placeholder",
                    "labels": {
                        "kubernetes.io/service-name": ADAPTER_SERVICE,
                        "endpointslice.kubernetes.io/managed-by": "gpu-pool-scaler-cluster",
                    },
                },
                "addressType": "FQDN",
                "endpoints": [
                    {
                        "addresses": [f"{ADAPTER_SERVICE}.{KEDA_NS}.svc.cluster.local"],
                        "conditions": {"ready": True},
                    }
                ],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            }
        ),
    )
    client.ApiregistrationV1Api(api).create_api_service(
        manifest(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
                "spec": {
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "service": {"namespace": KEDA_NS, "name": ADAPTER_SERVICE, "port": port},
                    "caBundle": base64.b64encode((pki / "ca.crt").read_bytes()).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            }
        )
    )


def apiservice_available(api: ApiClient) -> bool:
    from kubernetes import client

    svc = client.ApiregistrationV1Api(api).read_api_service("v1beta1.external.metrics.k8s.io")
    return condition_true(svc.status, "Available")


def default_sa_exists(api: ApiClient) -> bool:
    from kubernetes import client

    client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    return True


def up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    st = State(args.state_dir.resolve())
    bins = binaries()
    if st.root.exists():
        shutil.rmtree(st.root)  # always a fresh cluster (etcd data included)
    for d in (st.pki, st.logs, st.pids, st.kubeconfigs):
        d.mkdir(parents=True)
    make_pki(st.pki)
    pki = st.pki
    ports = {
        k: free_port()
        for k in (
            "etcd_client",
            "etcd_peer",
            "apiserver",
            "kcm",
            "scheduler",
            "keda_operator_metrics",
            "keda_operator_probe",
            "keda_operator_grpc",
            "keda_adapter",
            "keda_adapter_metrics",
        )
    }
    (st.root / "ports.json").write_text(json.dumps(ports, indent=1))
    server = f"https://{LOOPBACK}:{ports['apiserver']}"
    for user in ("admin", "controller-manager", "scheduler"):
        write_kubeconfig(st.kubeconfigs / f"{user}.kubeconfig", server, pki, user)
    admin_kc = st.kubeconfigs / "admin.kubeconfig"

    # etcd -------------------------------------------------------------------------------
    etcd_url = f"http://{LOOPBACK}:{ports['etcd_client']}"
    peer_url = f"http://{LOOPBACK}:{ports['etcd_peer']}"
    st.start(
        "etcd",
        [
            bins["etcd"],
            "--name=gps",
            f"--data-dir={st.root / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=gps={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # throw-away test data: no fsync, much faster on slow disks
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )
    wait_for(
        "etcd /health",
        lambda: (
            json.loads(urllib.request.urlopen(f"{etcd_url}/health", timeout=2).read()).get("health")
            == "true"
        ),
        60,
        st,
        "etcd",
    )
    log(f"etcd up on {etcd_url}")

    # kube-apiserver ---------------------------------------------------------------------
    st.start(
        "kube-apiserver",
        [
            bins["kube-apiserver"],
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={ports['apiserver']}",
            # no `kubernetes` Service endpoints: they would be 127.0.0.1, which Endpoints
            # validation rejects; nothing in this cluster uses in-cluster config anyway
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # aggregation layer (KEDA's external metrics APIService)
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            # the aggregator dials the Service's ClusterIP (127.96.0.20, where the adapter
            # listens) instead of an endpoint IP: endpoint IPs may not be loopback
            "--enable-aggregator-routing=false",
            "--profiling=false",
            "--event-ttl=30m",
            *([f"--feature-gates={args.feature_gates}"] if args.feature_gates else []),
        ],
    )
    wait_for(
        "kube-apiserver /readyz",
        lambda: https_get(f"{server}/readyz", pki)[0] == 200,
        120,
        st,
        "kube-apiserver",
    )
    shutil.copy(admin_kc, st.kubeconfig)
    api = api_client(admin_kc)
    log(f"kube-apiserver ready on {server}")

    # controller-manager, scheduler, kwok --------------------------------------------------
    kcm_kc = st.kubeconfigs / "controller-manager.kubeconfig"
    st.start(
        "kube-controller-manager",
        [
            bins["kube-controller-manager"],
            f"--kubeconfig={kcm_kc}",
            f"--authentication-kubeconfig={kcm_kc}",
            f"--authorization-kubeconfig={kcm_kc}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={ports['kcm']}",
            f"--cert-dir={st.root / 'kcm-certs'}",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allocate-node-cidrs=false",
            f"--horizontal-pod-autoscaler-sync-period={args.hpa_sync_period}",
            "--leader-elect=false",
            "--profiling=false",
            *([f"--feature-gates={args.feature_gates}"] if args.feature_gates else []),
        ],
    )
    sched_kc = st.kubeconfigs / "scheduler.kubeconfig"
    sched_cfg = st.root / "scheduler.yaml"
    scheduler_config(sched_cfg, sched_kc)
    st.start(
        "kube-scheduler",
        [
            bins["kube-scheduler"],
            f"--config={sched_cfg}",  # carries the kubeconfig, leader election, profiling
            f"--authentication-kubeconfig={sched_kc}",
            f"--authorization-kubeconfig={sched_kc}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={ports['scheduler']}",
            f"--cert-dir={st.root / 'scheduler-certs'}",
        ],
    )
    kwok_cfg = st.root / "kwok.yaml"
    kwok_config(kwok_cfg, args.pod_stages)
    st.start(
        "kwok",
        [
            bins["kwok"],
            f"--config={kwok_cfg}",
            f"--kubeconfig={admin_kc}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={'='.join(KWOK_NODE_ANNOTATION)}",
            f"--cidr={POD_CIDR}",
            f"--node-ip={NODE_IP}",
            "--node-lease-duration-seconds=40",
        ],
        env={"HOME": str(st.root)},
    )  # kwok also reads ~/.kwok/kwok.yaml if it exists

    # KEDA CRDs while those start
    crds = apply_keda_crds(api)
    wait_for("KEDA CRDs established", lambda: crds_established(api, crds), 60)
    log(f"KEDA CRDs established: {', '.join(crds)}")
    wait_for(
        "kube-controller-manager /healthz",
        lambda: https_get_insecure(f"https://{LOOPBACK}:{ports['kcm']}/healthz") == 200,
        90,
        st,
        "kube-controller-manager",
    )
    wait_for(
        "kube-scheduler /readyz",
        lambda: https_get_insecure(f"https://{LOOPBACK}:{ports['scheduler']}/readyz") == 200,
        90,
        st,
        "kube-scheduler",
    )
    log("kube-controller-manager and kube-scheduler healthy")

    # fake GPU nodes -----------------------------------------------------------------------
    names = create_nodes(api, args.nodes, args.gpus_per_node)
    wait_for(f"{args.nodes} kwok nodes Ready", lambda: nodes_ready(api, names), 120, st, "kwok")
    log(f"{args.nodes} fake nodes Ready ({args.gpus_per_node} nvidia.com/gpu each)")

    # KEDA operator + metrics adapter ------------------------------------------------------
    register_adapter(api, pki, ports["keda_adapter"])
    keda_env = {
        "KUBECONFIG": str(admin_kc),
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": KEDA_NS,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NS,
    }
    keda_certs = pki / "keda"
    st.start(
        "keda-operator",
        [
            bins["keda-operator"],
            f"--metrics-bind-address={LOOPBACK}:{ports['keda_operator_metrics']}",
            f"--health-probe-bind-address={LOOPBACK}:{ports['keda_operator_probe']}",
            f"--metrics-service-bind-address={LOOPBACK}:{ports['keda_operator_grpc']}",
            "--enable-cert-rotation=false",  # certs come from us (cert-dir), no secret/patching
            f"--cert-dir={keda_certs}",
            f"--ca-dir={keda_certs}",
            "--enable-webhook-patching=false",
            "--enable-apiservice-patching=false",
            "--leader-elect=false",
            "--zap-log-level=info",
            "--zap-encoder=console",
        ],
        env=keda_env,
    )
    st.start(
        "keda-adapter",
        [
            bins["keda-adapter"],
            f"--bind-address={ADAPTER_SERVICE_IP}",
            f"--secure-port={ports['keda_adapter']}",
            f"--cert-dir={keda_certs}",
            f"--tls-cert-file={keda_certs / 'tls.crt'}",
            f"--tls-private-key-file={keda_certs / 'tls.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--lister-kubeconfig={admin_kc}",
            f"--authentication-kubeconfig={admin_kc}",
            f"--authorization-kubeconfig={admin_kc}",
            f"--metrics-service-address={LOOPBACK}:{ports['keda_operator_grpc']}",
            f"--port={ports['keda_adapter_metrics']}",
            "--zap-log-level=info",
            "--zap-encoder=console",
        ],
        env=keda_env,
    )
    wait_for(
        "keda-operator /readyz",
        lambda: (
            urllib.request.urlopen(
                f"http://{LOOPBACK}:{ports['keda_operator_probe']}/readyz", timeout=2
            ).status
            == 200
        ),
        120,
        st,
        "keda-operator",
    )
    wait_for(
        "APIService v1beta1.external.metrics.k8s.io Available",
        lambda: apiservice_available(api),
        120,
        st,
        "keda-adapter",
    )
    wait_for(
        "default ServiceAccount", lambda: default_sa_exists(api), 60, st, "kube-controller-manager"
    )
    took = time.monotonic() - t0
    (st.root / "up-seconds").write_text(f"{took:.1f}\n")
    log(f"cluster up in {took:.1f}s")
    print(f"""
kubeconfig: {st.kubeconfig}
  export KUBECONFIG={st.kubeconfig}
logs:       {st.logs}/
ports:      {st.root / "ports.json"}
stop:       cluster/down --state-dir {st.root}   (or: make cluster-down)""")
    return 0


def down(args: argparse.Namespace) -> int:
    st = State(args.state_dir.resolve())
    if not st.pids.exists():
        log(f"nothing to stop in {st.root}")
        return 0
    for name in reversed(COMPONENTS):
        st.stop(name)
    log("all stopped")
    return 0


def status(args: argparse.Namespace) -> int:
    st = State(args.state_dir.resolve())
    rc = 0
    for name in COMPONENTS:
        ok = st.alive(name)
        rc |= 0 if ok else 1
        print(f"{name:26s} {'running' if ok else 'stopped'}")
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status"):
        sp = sub.add_parser(name)
        sp.add_argument(
            "--state-dir",
            type=Path,
            default=Path(os.environ.get("GPS_CLUSTER_STATE", DEFAULT_STATE)),
        )
        if name == "up":
            sp.add_argument("--nodes", type=int, default=16)
            sp.add_argument("--gpus-per-node", type=int, default=4)
            sp.add_argument(
                "--pod-stages",
                choices=["general", "fast"],
                default="general",
                help="kwok pod lifecycle: 'general' = Ready after ~1-6 s, Job pods "
                "complete after a delay set by the annotation "
                "pod-complete.stage.kwok.x-k8s.io/delay; 'fast' = at once",
            )
            sp.add_argument("--hpa-sync-period", default="5s")
            sp.add_argument(
                "--feature-gates",
                default="",
                help="passed to kube-apiserver and kube-controller-manager, e.g. "
                "HPAConfigurableTolerance=true (the HPA's spec.behavior.*.tolerance field)",
            )
            sp.add_argument(
                "--keep-on-failure",
                action="store_true",
                help="leave the processes running when up fails (debugging)",
            )
    args = p.parse_args(argv)
    try:
        import cryptography  # noqa: F401
        import kubernetes  # noqa: F401
        import yaml  # noqa: F401
    except ImportError as e:
        print(
            f"[cluster] ERROR: {e}: run with the project venv (make venv; .venv/bin/python)",
            file=sys.stderr,
        )
        return 1
    try:
        if args.cmd == "up":
            # checked before anything is started: a failing `up` stops what it started
            st = State(args.state_dir.resolve())
            running = [c for c in COMPONENTS if st.alive(c)]
            if running:
                raise ClusterError(
                    f"a cluster is already running from {st.root} ({', '.join(running)});"
                    " run cluster/down first"
                )
            try:
                return up(args)
            except BaseException:
                if args.keep_on_failure:
                    log("up failed: --keep-on-failure, leaving the processes running")
                else:
                    log("up failed: stopping what was started (logs kept)")
                    down(args)
                raise
        if args.cmd == "down":
            return down(args)
        return status(args)
    except ClusterError as e:
        print(f"[cluster] ERROR: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
