"""Logging: JSON lines in a cluster, readable text locally; context via `extra`."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Context keys carried in `extra=` that formatters render (service, ScaledObject, target...).
CONTEXT_KEYS = ("service", "research_class", "scaled_object", "namespace", "target", "method")


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k in CONTEXT_KEYS:
            if hasattr(record, k):
                out[k] = getattr(record, k)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS if hasattr(record, k))
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            ctx = " ".join([ctx, *(f"{k}={v}" for k, v in fields.items())]).strip()
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{t} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if ctx:
            line += f"  [{ctx}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(fmt: str = "auto", level: str = "INFO") -> None:
    """fmt: json | text | auto (JSON inside Kubernetes, text on a terminal)."""
    import os

    if fmt == "auto":
        fmt = "json" if os.environ.get("KUBERNETES_SERVICE_HOST") else "text"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
