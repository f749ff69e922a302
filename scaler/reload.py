"""The config in force, and reloading it when the file changes on disk.

Polls the file's content (not mtime: a Kubernetes ConfigMap update swaps a symlink, and
editors may keep mtimes). An invalid new file is logged and counted; the old config stays.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

from scaler.config import Config, ConfigError, load_config
from scaler.serve.metrics import ScalerMetrics

log = logging.getLogger("scaler.config")


class ConfigHolder:
    def __init__(self, path: str | Path, initial: Config, metrics: ScalerMetrics) -> None:
        self.path = Path(path)
        self._config = initial
        self._generation = 1
        self._digest = self._read_digest()
        self._metrics = metrics
        self.last_error: str | None = None
        metrics.config_generation.set(self._generation)

    def current(self) -> tuple[Config, int]:
        return self._config, self._generation

    def _read_digest(self) -> bytes | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    def check(self) -> bool:
        """Reload if the file changed. Returns True when a new config took effect."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        try:
            new = load_config(self.path)
        except ConfigError as e:
            self.last_error = str(e)
            self._metrics.config_reloads.record(False)
            log.error("config reload rejected, keeping generation %d: %s", self._generation, e)
            return False
        old = self._config
        restart = [
            f"server.{k}"
            for k in ("listenAddress", "grpcPort", "metricsPort")
            if getattr(new.server, k) != getattr(old.server, k)
        ]
        if restart:
            log.warning("%s changed in the config; takes effect on restart", ", ".join(restart))
        self._config = new
        self._generation += 1
        self.last_error = None
        self._metrics.config_reloads.record(True)
        self._metrics.config_generation.set(self._generation)
        log.info(
            "config reloaded: generation %d, %d services, %d research classes",
            self._generation,
            len(new.inference),
            len(new.research),
        )
        return True

    async def watch(self, stop: asyncio.Event, period_s: float = 2.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=period_s)
            except TimeoutError:
                self.check()
