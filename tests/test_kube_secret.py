"""Reading the research queue's Secret through the Kubernetes API (a real HTTP server in the
API's place): its data decoded, each refusal one line that says what to fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scaler.ingest.kube_secret import SecretUnreadable, read_secret
from tests.support.kubeapi import FakeKubeAPI, make_secret

KEY = ("research", "research-redis")


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        yield api


def gets(api: FakeKubeAPI) -> int:
    return sum(1 for r in api.requests if r.resource == "secrets")


def test_the_data_is_decoded_and_non_text_values_left_out(api: FakeKubeAPI) -> None:
    data = {"password": b"p@ss:/w#rd", "url": b"redis://x:6379/0", "bin": b"\xff\xfe"}
    api.put("secrets", make_secret(*KEY, data))
    got = read_secret(api.client(), *KEY, timeout_s=5)
    assert got == {"password": "p@ss:/w#rd", "url": "redis://x:6379/0"}
    assert gets(api) == 1


# (HTTP status the API answers, words in the error)
REFUSED = [
    pytest.param(403, "Secret research/research-redis: forbidden (the scaler's", id="no-role"),
    pytest.param(404, "Secret research/research-redis: not found", id="missing"),
    pytest.param(401, "unauthorized", id="bad-token"),
    pytest.param(500, "Secret research/research-redis: HTTP 500", id="server-error"),
]


@pytest.mark.parametrize(("status", "words"), REFUSED)
def test_a_refusal_says_why(api: FakeKubeAPI, status: int, words: str) -> None:
    api.put("secrets", make_secret(*KEY, {"password": b"secret-value"}))
    if status == 404:
        api.delete("secrets", KEY[1], KEY[0])
    else:
        api.fail(status, resources=("secrets",))
    with pytest.raises(SecretUnreadable) as e:
        read_secret(api.client(), *KEY, timeout_s=5)
    assert words in str(e.value)
    assert "secret-value" not in str(e.value)


def test_an_api_that_does_not_answer_says_so() -> None:
    api = FakeKubeAPI().start()
    client = api.client()
    api.stop()  # the port is closed now
    client.configuration.retries = 0
    with pytest.raises(SecretUnreadable, match="the Kubernetes API did not answer"):
        read_secret(client, *KEY, timeout_s=2)
