"""List + watch of one Kubernetes resource with the official client (a small reflector).

Keeps `objects` current: a full list, then a watch from its resourceVersion (with
bookmarks), re-listing at once on 410 Gone and backing off on errors. Shared by node
capacity (scaler/ingest/capacity.py) and target discovery (scaler/ingest/kube_discovery.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def meta(obj: Obj) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ReflectorStatus:
    resource: str
    synced: bool  # a complete list has been received at least once
    objects: int
    lists: int  # complete lists so far (1 + re-lists)
    events: int  # watch events applied
    confirmed_at: float | None  # clock time of the last list / watch event / clean watch end
    failing_since: float | None  # clock time of the first error of the current failure run
    last_error: str | None


class Reflector:
    """List + watch of one resource kind into a dict of raw API objects (keyed ns/name)."""

    def __init__(
        self,
        resource: str,
        list_fn: Callable[..., Any],
        *,
        label_selector: str,
        field_selector: str,
        clock: Callable[[], float],
        stop_event: threading.Event,
        lock: threading.Lock,
        watch_timeout_seconds: int,
        request_timeout_seconds: float,
        retry_seconds: float,
        max_retry_seconds: float,
    ) -> None:
        self.resource = resource
        self._list_fn = list_fn
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["label_selector"] = label_selector
        if field_selector:
            self._selectors["field_selector"] = field_selector
        self._clock = clock
        self._stop = stop_event
        self._lock = lock
        self._watch_timeout = watch_timeout_seconds
        self._request_timeout = request_timeout_seconds
        self._retry = retry_seconds
        self._max_retry = max_retry_seconds
        self._watch: k8s_watch.Watch | None = None
        self.objects: dict[str, Obj] = {}
        self.synced = False
        self.lists = 0
        self.events = 0
        self.confirmed_at: float | None = None
        self.failing_since: float | None = None
        self.last_error: str | None = None

    @staticmethod
    def _key(obj: Obj) -> str:
        m = meta(obj)
        ns = m.get("namespace")
        return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))

    def status(self) -> ReflectorStatus:
        with self._lock:
            return ReflectorStatus(
                self.resource,
                self.synced,
                len(self.objects),
                self.lists,
                self.events,
                self.confirmed_at,
                self.failing_since,
                self.last_error,
            )

    def _confirmed(self) -> None:
        with self._lock:
            self.confirmed_at = self._clock()
            self.failing_since = None

    def _failed(self, err: str) -> None:
        with self._lock:
            self.last_error = err
            if self.failing_since is None:
                self.failing_since = self._clock()

    def _list(self) -> str:
        resp = self._list_fn(
            _preload_content=False,
            _request_timeout=self._request_timeout,
            **self._selectors,
        )
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        items = body.get("items")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if not isinstance(items, list) or not rv:
            raise ValueError(f"{self.resource} list: malformed response (no items/resourceVersion)")
        with self._lock:
            self.objects = {self._key(o): o for o in items}
            self.synced = True
            self.lists += 1
        self._confirmed()
        return str(rv)

    def _watch_once(self, rv: str) -> str:
        """One watch request from `rv` until the server ends it; returns the latest rv."""
        list_fn = self._list_fn

        # No return annotation or docstring: the client then hands us raw dicts (and its
        # ERROR-event handling, which needs them, keeps working).
        def raw_list(**kwargs: Any) -> Any:
            return list_fn(**kwargs)

        # The server ends a healthy watch after timeoutSeconds; no byte for longer = dead.
        read_timeout = self._watch_timeout + self._request_timeout
        w = k8s_watch.Watch()
        with self._lock:
            self._watch = w
        if self._stop.is_set():
            return rv
        try:
            for event in w.stream(
                raw_list,
                resource_version=rv,
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(self._request_timeout, read_timeout),
                **self._selectors,
            ):
                typ = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, Mapping):
                    raise ValueError(f"{self.resource} watch: event without object: {typ}")
                new_rv = meta(obj).get("resourceVersion")
                with self._lock:
                    if typ in ("ADDED", "MODIFIED"):
                        self.objects[self._key(obj)] = obj
                    elif typ == "DELETED":
                        self.objects.pop(self._key(obj), None)
                    elif typ != "BOOKMARK":
                        raise ValueError(f"{self.resource} watch: unknown event type {typ!r}")
                    self.events += 1
                if new_rv:
                    rv = str(new_rv)
                self._confirmed()
                if self._stop.is_set():
                    break
        finally:
            with self._lock:
                self._watch = None
        if not self._stop.is_set():
            self._confirmed()  # the server ended the watch cleanly (timeoutSeconds)
        return rv

    def run(self) -> None:
        failures = 0
        expired_at_events = -1  # self.events at the last 410, to spot a 410 loop
        while not self._stop.is_set():
            try:
                rv = self._list()
                failures = 0
                while not self._stop.is_set():
                    rv = self._watch_once(rv)
            except ApiException as e:
                if self._stop.is_set():
                    break
                if e.status == 410:
                    # History compacted past our resourceVersion: normal; re-list at once,
                    # unless the last watch expired too without a single event in between.
                    log.info("%s watch expired (410 Gone); re-listing", self.resource)
                    again = expired_at_events == self.events
                    expired_at_events = self.events
                    if not again:
                        continue
                    self._stop.wait(self._retry)
                    continue
                failures += 1
                self._failed(f"HTTP {e.status}: {e.reason}")
                log.warning("%s list/watch failed: HTTP %s %s", self.resource, e.status, e.reason)
            except Exception as e:  # connection refused, reset, read timeout, bad JSON
                if self._stop.is_set():
                    break
                failures += 1
                self._failed(f"{type(e).__name__}: {e}")
                log.warning("%s list/watch failed: %s: %s", self.resource, type(e).__name__, e)
            delay = min(self._max_retry, self._retry * 2 ** max(0, failures - 1))
            self._stop.wait(delay)

    def interrupt(self) -> None:
        with self._lock:
            w = self._watch
        if w is not None:
            w.stop()  # shuts the socket down: the blocked read returns
