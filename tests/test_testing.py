"""docmultilock.testing: the embedded server users can start in their own tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from docmultilock.testing import URI_VARIABLE, EmbeddedServer, EmbeddedServerError, mongodb_uri


def test_mongodb_uri_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URI_VARIABLE, "mongodb://db.example:27017/?replicaSet=rs0")
    with mongodb_uri() as uri:
        assert uri == "mongodb://db.example:27017/?replicaSet=rs0"


@pytest.mark.slow
def test_an_embedded_server_answers_until_it_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(URI_VARIABLE, raising=False)
    with EmbeddedServer() as server:
        pid = server.pid
        assert pid is not None
        client: MongoClient[dict[str, Any]] = MongoClient(server.uri, timeoutMS=10_000)
        try:
            assert client.admin.command("ping")["ok"] == 1
        finally:
            client.close()
    assert server.pid is None


@pytest.mark.slow
def test_a_server_that_cannot_start_reports_why(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    server = EmbeddedServer(storage_path=not_a_directory / "data", startup_timeout=30)
    with pytest.raises(EmbeddedServerError, match="Not a directory"):
        server.start()
    assert server.pid is None


def test_a_missing_embedded_server_says_how_to_install_it_from_a_clone_or_a_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "secantus", None)  # as if not installed
    server = EmbeddedServer()

    with pytest.raises(EmbeddedServerError, match="not installed") as raised:
        server.start()
    assert "pip install -e '.[embedded]'" in str(raised.value)
    assert 'pip install "$(echo dist/docmultilock-*.whl)[embedded]"' in str(raised.value)
    assert server.pid is None
