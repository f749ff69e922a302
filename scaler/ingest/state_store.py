"""Where the control loop's memory (scaler/core/memory.py) is kept between processes.

* `FileStateStore` (`server.stateFile`): a local file, replaced atomically (write to a
  temporary file in the same directory, fsync, rename), so a crash mid-write leaves the
  previous document.
* `ConfigMapStateStore` (`server.stateConfigMap: namespace/name`): key `state.json` of one
  ConfigMap, created on the first write. RBAC the scaler's ServiceAccount needs, in that
  namespace: `configmaps` `get`, `create`, `update` (resourceNames may be restricted to the
  one name for get/update; create cannot be restricted by name in Kubernetes RBAC).

Both return None from `load` when nothing was saved yet; any other failure raises OSError
(the caller logs it and starts empty, or keeps running without saving).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from urllib3.exceptions import HTTPError

KEY = "state.json"
TIMEOUT_S = 10  # a hung API must not hold the control loop


class StateStore(Protocol):
    def load(self) -> str | None: ...

    def save(self, text: str) -> None: ...

    def describe(self) -> str: ...


class FileStateStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        return f"file {self.path}"

    def load(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError as e:
            raise OSError(f"{self.path}: not UTF-8 text") from e

    def save(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class ConfigMapStateStore:
    """Key `state.json` of ConfigMap `namespace/name` (labels mark it as the scaler's)."""

    def __init__(self, api_client: Any, ref: str) -> None:
        from kubernetes import client as k8s

        self.namespace, _, self.name = ref.partition("/")
        self._k8s = k8s
        self._api = k8s.CoreV1Api(api_client)

    def describe(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self) -> str | None:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = self._api.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=TIMEOUT_S
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise OSError(f"{self.describe()}: HTTP {e.status} {e.reason}") from None
        except HTTPError as e:  # connection refused, timeout, TLS: the API is unreachable
            raise OSError(f"{self.describe()}: {e}") from None
        data = cm.data or {}
        return data.get(KEY)

    def save(self, text: str) -> None:
        from kubernetes.client.exceptions import ApiException

        body = self._k8s.V1ConfigMap(
            metadata=self._k8s.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                labels={"app.kubernetes.io/managed-by": "gpu-pool-scaler"},
            ),
            data={KEY: text},
        )
        try:
            self._api.replace_namespaced_config_map(
                self.name, self.namespace, body, _request_timeout=TIMEOUT_S
            )
        except ApiException as e:
            if e.status != 404:
                raise OSError(f"{self.describe()}: HTTP {e.status} {e.reason}") from None
            try:
                self._api.create_namespaced_config_map(
                    self.namespace, body, _request_timeout=TIMEOUT_S
                )
            except ApiException as e2:
                raise OSError(f"{self.describe()}: HTTP {e2.status} {e2.reason}") from None
            except HTTPError as e2:
                raise OSError(f"{self.describe()}: {e2}") from None
        except HTTPError as e:
            raise OSError(f"{self.describe()}: {e}") from None
