"""Fixtures shared by every test; plain helpers live in tests/support/."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.exposition import ExpositionServer


@pytest.fixture
def exposition_server() -> Iterator[Callable[[str], ExpositionServer]]:
    servers: list[ExpositionServer] = []

    def make(body: str | Callable[[], tuple[int, bytes]]) -> ExpositionServer:
        s = ExpositionServer(body)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
