"""Reading one Secret through the Kubernetes API (the research queue's credentials).

Needs `get` on that Secret only (the chart's Role names it). Errors become one line that
says what to fix; the value never appears in a message.
"""

from __future__ import annotations

import base64
import binascii

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

_WHY = {
    401: "unauthorized (the scaler's credentials for the Kubernetes API were refused)",
    403: "forbidden (the scaler's ServiceAccount needs get on it: the chart's Role)",
    404: "not found",
}


class SecretUnreadable(RuntimeError):
    """The Secret could not be read; the message says why (never its data)."""


def read_secret(
    api: k8s_client.ApiClient, namespace: str, name: str, timeout_s: float
) -> dict[str, str]:
    """The Secret's data, decoded as UTF-8 (keys whose value is not text are left out)."""
    where = f"Secret {namespace}/{name}"
    try:
        secret = k8s_client.CoreV1Api(api).read_namespaced_secret(
            name, namespace, _request_timeout=timeout_s
        )
    except ApiException as e:
        why = _WHY.get(e.status or 0, f"HTTP {e.status} {e.reason}")
        raise SecretUnreadable(f"{where}: {why}") from None
    except (HTTPError, OSError) as e:
        raise SecretUnreadable(f"{where}: the Kubernetes API did not answer ({e})") from None
    out: dict[str, str] = {}
    for key, value in (secret.data or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            continue
    return out
