"""The command line for a second hour: a busy port, a collection watched whole, the
database named by the URI, filters quoted for the shell, a light ``--version``, and an
embedded server that says it slows down as writes accumulate."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from pymongo.collection import Collection

from docmultilock import WriteLock, cli
from docmultilock.testing import URI_VARIABLE
from tests.helpers import Doc
from tests.test_cli_ops import cli as run_cli
from tests.test_cli_ops import where

# -- docmultilock server --port ----------------------------------------------------------------


def _server_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != URI_VARIABLE}


def test_server_on_a_port_something_else_listens_on_says_so_and_fails() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        done = run_cli("server", "--port", str(port))

    assert done.returncode == 1
    assert done.stderr.strip() == f"docmultilock server: port {port} is in use"
    assert done.stdout == ""


def test_server_on_the_port_of_a_running_mongodb_fails_instead_of_reporting_it(
    uri: str, require_embedded: Callable[[str], None]
) -> None:
    require_embedded("needs the test server on this machine's loopback")
    port = urlsplit(uri).port
    assert port is not None

    done = run_cli("server", "--port", str(port))

    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr
    assert "Ctrl-C stops it" not in done.stderr
    assert done.stdout == ""


@pytest.fixture
def served() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``docmultilock server`` running, with the URI it printed."""
    server = subprocess.Popen(
        [sys.executable, "-m", "docmultilock", "server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_server_env(),
    )
    try:
        assert server.stdout is not None
        yield server, server.stdout.readline().strip()
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


def test_server_says_it_slows_down_as_writes_accumulate(
    served: tuple[subprocess.Popen[str], str],
) -> None:
    server, uri = served
    assert uri.startswith("mongodb://127.0.0.1:")
    server.send_signal(signal.SIGINT)
    _, stderr = server.communicate(timeout=30)
    lines = stderr.splitlines()
    assert "Ctrl-C stops it" in lines[0]
    assert lines[1].startswith("note: the embedded server slows down as writes accumulate")
    assert "about 5 to 18 times slower after 10,200 writes" in lines[1]


# -- doctor and bench on an embedded server ------------------------------------------------------


def test_doctor_says_how_many_writes_the_embedded_server_has_seen(
    uri: str, collection: Collection[Doc], require_embedded: Callable[[str], None]
) -> None:
    require_embedded("the embedded server's own slowdown")
    collection.insert_one({"_id": 1})

    done = run_cli("doctor", "--uri", uri, "--db", collection.database.name, "--json")

    version = {check["check"]: check["detail"] for check in json.loads(done.stdout)}["version"]
    assert "writes; the embedded server slows down as writes accumulate" in version
    assert "it has seen " in version


def test_bench_on_a_given_embedded_server_reports_the_writes_it_had_seen(
    uri: str,
    collection: Collection[Doc],
    capsys: pytest.CaptureFixture[str],
    require_embedded: Callable[[str], None],
) -> None:
    require_embedded("the embedded server's own slowdown")
    for i in range(3):  # three write commands (the server counts commands, not documents)
        collection.insert_one({"_id": i})

    assert cli.main(["bench", "--uri", uri, "--scenarios", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["writes_before"] >= 3

    assert cli.main(["bench", "--uri", uri, "--scenarios", "1"]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "the embedded server, which had seen" in header
    assert "run without --uri for a fresh one per scenario" in header


# -- inspect ------------------------------------------------------------------------------------


def _read_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the command ended"
    return line


def test_inspect_all_watch_follows_the_whole_collection(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_many([{"_id": i} for i in range(3)])
    locks = WriteLock(collection)
    first = locks.acquire({"_id": 0})
    command = ["inspect", *where(uri, collection), "--all", "--watch", "0.2", "--json"]
    watch = subprocess.Popen(
        [sys.executable, "-m", "docmultilock", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_server_env(),
    )
    try:
        assert [doc["document_id"] for doc in json.loads(_read_line(watch))] == [
            {"$numberInt": "0"}
        ]
        locks.acquire({"_id": 2})
        locks.release({"_id": 0}, first)
        seen: list[object] = []
        while seen != [{"$numberInt": "2"}]:
            seen = [doc["document_id"] for doc in json.loads(_read_line(watch))]
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 130
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        for stream in (watch.stdout, watch.stderr):
            if stream is not None:
                stream.close()


def _naming(uri: str, database: str) -> str:
    """``uri`` with ``database`` as the database it names."""
    parts = urlsplit(uri)
    if parts.path not in ("", "/"):
        pytest.skip("the test server's URI names a database already")
    return parts._replace(path=f"/{database}").geturl()


def test_inspect_takes_the_database_from_the_uri(uri: str, collection: Collection[Doc]) -> None:
    collection.insert_one({"_id": 1})
    WriteLock(collection).acquire({"_id": 1})
    named = _naming(uri, collection.database.name)

    done = run_cli("inspect", "--uri", named, "--collection", collection.name, "--all")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"1 locked document in {collection.full_name}"


def test_a_command_without_db_on_a_uri_naming_none_is_a_usage_error(
    uri: str, collection: Collection[Doc]
) -> None:
    bare = _naming(uri, "")
    done = run_cli("inspect", "--uri", bare, "--collection", collection.name, "--all")
    assert done.returncode == 2
    assert "give --db, or name the database in --uri" in done.stderr


def test_inspect_all_on_a_collection_that_does_not_exist_says_so(
    uri: str, collection: Collection[Doc]
) -> None:
    done = run_cli("inspect", *where(uri, collection), "--all")
    assert done.returncode == 6
    assert f"there is no collection {collection.full_name}" in done.stderr


def test_a_filter_that_is_not_json_hints_at_double_quotes(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 1})
    done = run_cli("inspect", *where(uri, collection), "--filter", "{'_id': 1}")
    assert done.returncode == 5
    assert "keys and strings need double quotes" in done.stderr


# -- --version --------------------------------------------------------------------------------


def test_version_imports_neither_pymongo_nor_the_lock_machinery() -> None:
    probe = (
        "import sys\n"
        "from docmultilock import cli\n"
        "assert cli.main(['--version']) == 0\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    version, modules = done.stdout.splitlines()
    assert version.startswith("docmultilock ")
    loaded = modules.split()
    heavy = [m for m in loaded if m.split(".")[0] in ("pymongo", "bson", "marshmallow")]
    assert heavy == []
    ours = {m for m in loaded if m.startswith("docmultilock")}
    assert ours == {"docmultilock", "docmultilock.cli", "docmultilock._cli_args"}
