"""Reading back KEDA's HPAs: is our answer followed, or swallowed by the HPA's tolerance?"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from scaler.app import Options, Scaler
from scaler.config import load_config
from scaler.ingest.hpa import HpaChecker, HpaView, hpa_views, ignored_by_tolerance
from tests.support.exposition import ExpositionServer
from tests.support.paths import FIXTURES
from tests.support.scaler import wait_for, write_config


def hpa(
    service: str = "chat",
    *,
    current: int = 10,
    desired: int = 10,
    tolerance: float | str | None = None,
    metric: str | None = None,
) -> dict[str, Any]:
    behavior: dict[str, Any] = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    if tolerance is not None:
        behavior = {"scaleUp": {"tolerance": tolerance}, "scaleDown": {"tolerance": tolerance}}
    return {
        "metadata": {"name": f"keda-hpa-{service}", "namespace": "serving"},
        "spec": {
            "behavior": behavior,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": metric or f"s0-inference-{service}"},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
        },
        "status": {"currentReplicas": current, "desiredReplicas": desired},
    }


def test_views_read_our_metric_and_the_tolerance_in_force() -> None:
    views = hpa_views(
        [
            hpa("chat", tolerance=0.0),
            hpa("code"),  # no tolerance field: the API server dropped it (gate off)
            hpa("other", metric="s0-prometheus-queue"),  # not ours
        ]
    )
    assert [(v.service, v.tolerance_up, v.tolerance_field) for v in views] == [
        ("chat", 0.0, True),
        ("code", 0.1, False),
    ]


@pytest.mark.parametrize(
    ("stored", "tolerance"),
    [
        pytest.param("50m", 0.05, id="canonical-milli-as-the-api-server-returns-it"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param("1500m", 1.5, id="above-one"),
        pytest.param("0.05", 0.05, id="decimal"),
        pytest.param("bogus", 0.1, id="unparsable-reads-as-the-default"),
    ],
)
def test_tolerance_is_read_as_a_kubernetes_quantity(stored: str, tolerance: float) -> None:
    """Seen on the real API server (cluster/e2e.py): a tolerance of 0.05 comes back "50m";
    read as a float it failed and the scaler reported the 10 % default instead."""
    (v,) = hpa_views([hpa("chat", tolerance=stored)])
    assert v.tolerance_up == pytest.approx(tolerance)
    assert v.tolerance_down == pytest.approx(tolerance)


def view(current: int, desired: int, tolerance: float = 0.1) -> HpaView:
    return hpa_views([hpa(current=current, desired=desired, tolerance=tolerance)])[0]


@pytest.mark.parametrize(
    ("ours", "hpa_view", "ignored"),
    [
        pytest.param(12, view(11, 11), True, id="one-step-up-from-11-swallowed-by-10pct"),
        # Exactly 10 %: 11/10 - 1 is 0.10000000000000009 in float64, as in the HPA
        # controller's own comparison, so that step goes through; 9/10 is just inside.
        pytest.param(11, view(10, 10), False, id="exactly-10pct-up-goes-through"),
        pytest.param(9, view(10, 10), True, id="one-step-down-from-10-swallowed"),
        pytest.param(12, view(10, 10), False, id="20pct-step-followed"),
        pytest.param(11, view(10, 10, tolerance=0.0), False, id="tolerance-0-follows"),
        pytest.param(11, view(10, 11), False, id="hpa-already-moving"),
        pytest.param(10, view(10, 10), False, id="agree"),
        pytest.param(None, view(10, 10), False, id="no-answer-from-us"),
        pytest.param(3, view(2, 2), False, id="small-counts-never-within-10pct"),
        # 5/4 and 3/4 are exact in float64: exactly the tolerance is within it, as
        # replica_calculator.go compares (|1 - ratio| <= tolerance keeps the count).
        pytest.param(5, view(4, 4, tolerance=0.25), True, id="exactly-the-tolerance-up-kept"),
        pytest.param(3, view(4, 4, tolerance=0.25), True, id="exactly-the-tolerance-down-kept"),
        # At 0 replicas KEDA activates the workload; the HPA's tolerance is not involved.
        pytest.param(1, view(0, 0), False, id="from-zero-is-keda-s-activation"),
    ],
)
def test_ignored_by_tolerance(ours: int | None, hpa_view: HpaView, ignored: bool) -> None:
    why = ignored_by_tolerance(ours, hpa_view)
    assert (why is not None) == ignored, why
    if why:
        assert "keda-hpa-chat" in why and "tolerance" in why


def test_checker_polls_at_its_period_and_survives_api_errors() -> None:
    now = [0.0]
    calls: list[str] = []
    fail = [False]

    def list_hpas(ns: str) -> list[dict[str, Any]]:
        calls.append(ns)
        if fail[0]:
            raise RuntimeError("403 Forbidden")
        return [hpa()]

    c = HpaChecker(list_hpas, period_s=60, clock=lambda: now[0])
    assert c.poll(["serving"]) and c.views["chat"].current == 10
    now[0] = 30
    assert not c.poll(["serving"]) and calls == ["serving"]  # not due yet
    now[0], fail[0] = 61, True
    assert c.poll(["serving"]) and c.error and "403" in c.error
    assert c.views["chat"].current == 10  # the last good read stays


class FakeHpaApi:
    """Serves HPA lists at the autoscaling/v2 path, for the real kubernetes client."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if (
                    "/apis/autoscaling/v2/namespaces/serving/horizontalpodautoscalers"
                    not in self.path
                ):
                    self.send_response(404)
                    self.end_headers()
                    return
                # the label every KEDA-built HPA carries, whoever manages the ScaledObject
                assert "scaledobject.keda.sh" in urllib.parse.unquote(self.path), self.path
                body = json.dumps(
                    {"kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": outer.items}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def client(self) -> kubernetes.client.ApiClient:
        conf = kubernetes.client.Configuration(host=f"http://127.0.0.1:{self.httpd.server_port}")
        return kubernetes.client.ApiClient(conf)


@pytest.fixture
def fake_api() -> Iterator[FakeHpaApi]:
    api = FakeHpaApi()
    yield api
    api.httpd.shutdown()


async def test_the_scaler_warns_and_counts_while_its_answer_is_swallowed(
    tmp_path: Path,
    exposition_server: Any,
    fake_api: FakeHpaApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    target: ExpositionServer = exposition_server((FIXTURES / "metrics_idle.txt").read_text())
    path = write_config(tmp_path / "pool.yaml", [target.address], minReplicas=12, maxReplicas=16)
    cfg = yaml.safe_load(path.read_text())
    cfg["server"] = {"hpaCheck": "on", "hpaCheckSeconds": 5}
    path.write_text(yaml.safe_dump(cfg))
    # KEDA's HPA sits at 11 with the default tolerance; we ask for 12 (minReplicas).
    fake_api.items = [hpa(current=11, desired=11)]
    scaler = Scaler(
        load_config(path),
        Options(str(path), grpc_port=0, metrics_port=0, host="127.0.0.1", kube_api=fake_api.client),
    )
    running = await scaler.start()
    reg = running.metrics.registry
    try:
        assert running.snapshots.latest().services["chat"].desired == 12
        await wait_for(
            lambda: (
                reg.get_sample_value("gpu_pool_scaler_hpa_ignoring_answer", {"service": "chat"})
                == 1
            ),
            within=20,
        )
        assert reg.get_sample_value(
            "gpu_pool_scaler_hpa_tolerance", {"service": "chat", "direction": "up"}
        ) == pytest.approx(0.1)
        assert any(
            "keeps 11 replicas while the scaler asks for 12" in r.getMessage()
            for r in caplog.records
        )
        # The cluster turns the tolerance field on (0): the HPA follows; the warning clears.
        fake_api.items = [hpa(current=11, desired=11, tolerance=0.0)]
        await wait_for(
            lambda: (
                reg.get_sample_value("gpu_pool_scaler_hpa_ignoring_answer", {"service": "chat"})
                == 0
            ),
            within=20,
        )
    finally:
        await scaler.shutdown(running)
    await asyncio.sleep(0)
