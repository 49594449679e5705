"""The operators' commands, run through the entry point in a subprocess (`python -m`)."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import MultiLock, NamedLocks
from docmultilock._cli_ops import EXIT, run
from docmultilock.errors import DbTimeout
from docmultilock.testing import URI_VARIABLE
from tests.helpers import skewed_clock, stored_lock

Doc = dict[str, Any]


def cli(
    *args: str, stdin: int | None = subprocess.DEVNULL, under: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``python -m docmultilock ARGS``, without a terminal unless ``stdin`` gives one.

    ``under``: a command prefix to run it under (``faketime ...``).
    """
    env = {key: value for key, value in os.environ.items() if key != URI_VARIABLE}
    return subprocess.run(
        [*under, sys.executable, "-m", "docmultilock", *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def where(uri: str, collection: Collection[Doc]) -> list[str]:
    return ["--uri", uri, "--db", collection.database.name, "--collection", collection.name]


@pytest.fixture
def locks(collection: Collection[Doc], doc: Doc) -> MultiLock:
    return MultiLock(collection, lock_timeouts={"read": 10.0, "write": 10.0})


# -- inspect -----------------------------------------------------------------------------------


def test_inspect_prints_a_table_of_holders(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    lock = locks.acquire({"_id": 1}, tag="read")

    done = cli("inspect", *where(uri, collection), "--filter", '{"_id": 1}')

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"fence {lock.fence}" in lines[0]
    assert "server time" in lines[0]
    assert lines[1].split() == ["ID", "TAG", "STATE", "FENCE", "ACQUIRED", "(UTC)", "EXPIRES", "IN"]
    assert lines[2].split()[:4] == [lock.id, "read", "held", str(lock.fence)]


def test_inspect_json_parses_back(uri: str, collection: Collection[Doc], locks: MultiLock) -> None:
    lock = locks.acquire({"_id": 1}, tag="write", lock_timeout=0.05)
    time.sleep(0.2)

    done = cli("inspect", *where(uri, collection), "--filter", '{"_id": 1}', "--json")

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["document_id"] == {"$numberInt": "1"}
    assert data["fence"] == lock.fence
    (holder,) = data["holders"]
    assert holder["id"] == lock.id
    assert holder["expired"] is True


def test_inspect_a_name(uri: str, collection: Collection[Doc]) -> None:
    named = NamedLocks(collection.database, collection.name)
    lock = named.acquire("nightly")

    done = cli("inspect", *where(uri, collection), "--name", "nightly", "--json")

    assert done.returncode == 0, done.stderr
    assert [h["id"] for h in json.loads(done.stdout)["holders"]] == [lock.id]


def test_inspect_watch_refreshes_until_interrupted(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    env = {key: value for key, value in os.environ.items() if key != URI_VARIABLE}
    command = [sys.executable, "-m", "docmultilock", "inspect", *where(uri, collection)]
    watching = subprocess.Popen(
        [*command, "--filter", '{"_id": 1}', "--watch", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert watching.stdout is not None
        seen = [watching.stdout.readline() for _ in range(4)]  # two refreshes
    finally:
        watching.send_signal(2)  # SIGINT, as Ctrl-C
        watching.communicate(timeout=30)
    assert sum("server time" in line for line in seen) == 2
    assert watching.returncode == 130


# -- break -------------------------------------------------------------------------------------


def test_break_with_yes_removes_and_keeps_the_fence(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    lock = locks.acquire({"_id": 1}, tag="write")

    done = cli(
        "break", *where(uri, collection), "--filter", '{"_id": 1}', "--lock-id", lock.id,
        "--yes", "--json",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert [h["id"] for h in json.loads(done.stdout)["removed"]] == [lock.id]
    assert stored_lock(collection)["holders"] == []
    assert locks.acquire({"_id": 1}, tag="write").fence == lock.fence + 1


def test_break_without_a_terminal_or_yes_writes_nothing(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    locks.acquire({"_id": 1}, tag="read")
    before = stored_lock(collection)

    done = cli("break", *where(uri, collection), "--filter", '{"_id": 1}', "--everyone")

    assert done.returncode == EXIT["not_confirmed"] == 7
    assert "--yes" in done.stderr
    assert stored_lock(collection) == before


def test_break_declined_on_the_terminal_writes_nothing(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    locks.acquire({"_id": 1}, tag="read")
    before = stored_lock(collection)
    main, terminal = pty.openpty()
    try:
        os.write(main, b"n\n")
        done = cli(
            "break", *where(uri, collection), "--filter", '{"_id": 1}', "--everyone",
            stdin=terminal,
        )  # fmt: skip
    finally:
        os.close(main)
        os.close(terminal)

    assert done.returncode == EXIT["not_confirmed"]
    assert "will remove" in done.stderr
    assert stored_lock(collection) == before


def test_break_of_a_name_keeps_its_fence(uri: str, collection: Collection[Doc]) -> None:
    named = NamedLocks(collection.database, collection.name)
    first = named.acquire("job")

    done = cli("break", *where(uri, collection), "--name", "job", "--everyone", "--yes")

    assert done.returncode == 0, done.stderr
    assert "removed 1" in done.stdout
    assert named.inspect("job").fence == first.fence
    assert named.acquire("job").fence > first.fence


# -- ensure-indexes and doctor -----------------------------------------------------------------


def test_ensure_indexes_creates_the_ttl_index(uri: str, collection: Collection[Doc]) -> None:
    collection.insert_one({"_id": "x"})

    done = cli("ensure-indexes", *where(uri, collection))

    assert done.returncode == 0, done.stderr
    assert any(
        index.get("expireAfterSeconds") == 0 for index in collection.index_information().values()
    )


def test_doctor_reports_every_check_ok_on_the_test_server(
    uri: str, collection: Collection[Doc]
) -> None:
    done = cli("doctor", "--uri", uri, "--db", collection.database.name, "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    checks = {check["check"]: check["status"] for check in json.loads(done.stdout)}
    assert checks == dict.fromkeys(
        [
            "version",
            "topology",
            "clock offset",
            "round trip",
            "w:majority",
            "change streams",
        ],
        "ok",
    )


def test_doctor_warns_and_exits_1_when_a_majority_write_fails(
    uri: str, collection: Collection[Doc], fail_point: Any
) -> None:
    fail_point(
        commands=("insert",),
        writeConcernError={"code": 64, "errmsg": "waiting for replication timed out"},
    )

    done = cli("doctor", "--uri", uri, "--db", collection.database.name, "--json")

    assert done.returncode == EXIT["failed"] == 1, done.stdout + done.stderr
    warned = [check for check in json.loads(done.stdout) if check["status"] == "warn"]
    assert [check["check"] for check in warned] == ["w:majority"]
    assert "waiting for replication timed out" in warned[0]["detail"]


def test_doctor_warns_and_exits_1_when_the_clients_clock_is_an_hour_off(
    uri: str, collection: Collection[Doc]
) -> None:
    doctor = ["doctor", "--uri", uri, "--db", collection.database.name, "--json"]
    done = cli(*doctor, under=skewed_clock("+1h"))

    assert done.returncode == EXIT["failed"], done.stdout + done.stderr
    warned = [check for check in json.loads(done.stdout) if check["status"] == "warn"]
    assert [check["check"] for check in warned] == ["clock offset"]
    assert "server is -3600" in warned[0]["detail"]


def test_doctor_prints_one_line_per_check(uri: str, collection: Collection[Doc]) -> None:
    done = cli("doctor", "--uri", uri, "--db", collection.database.name)

    lines = done.stdout.splitlines()
    assert len(lines) == 6
    assert all(line.split()[0] in ("ok", "warn", "error") for line in lines)


# -- exit statuses -----------------------------------------------------------------------------


def test_a_bad_uri_exits_3(collection: Collection[Doc]) -> None:
    done = cli("inspect", "--uri", "http://nope", "--db", "d", "--name", "x")
    assert done.returncode == EXIT["bad_uri"] == 3
    assert "bad --uri" in done.stderr


def test_an_unreachable_server_exits_4_within_the_timeout() -> None:
    start = time.monotonic()
    done = cli("doctor", "--uri", "mongodb://127.0.0.1:9/?directConnection=true", "--timeout", "1")
    assert done.returncode == EXIT["unreachable"] == 4
    assert "cannot reach 127.0.0.1:9 within 1 s" in done.stderr
    assert time.monotonic() - start < 20


def test_bad_filter_json_exits_5(uri: str, collection: Collection[Doc]) -> None:
    done = cli("inspect", *where(uri, collection), "--filter", "{_id: 1")
    assert done.returncode == EXIT["bad_json"] == 5
    assert "--filter" in done.stderr


@pytest.mark.parametrize(
    "text",
    [
        '{"_id": {"$numberDecimal": "x"}}',
        '{"a": {"$numberDecimal": "1e999999999"}}',
        '{"_id": {"$date": 1e400}}',
        "[" * 40_000 + "]" * 40_000,
    ],
    ids=["not-a-decimal", "decimal-overflow", "date-overflow", "deep"],
)
def test_extended_json_out_of_range_exits_5(
    uri: str, collection: Collection[Doc], text: str
) -> None:
    done = cli("inspect", *where(uri, collection), "--filter", text)
    assert done.returncode == EXIT["bad_json"], done.stderr
    assert "Traceback" not in done.stderr


def test_a_uri_naming_an_unreadable_tls_file_exits_3() -> None:
    uri = "mongodb://127.0.0.1:9/?tls=true&tlsCAFile=/nonexistent/ca.pem"
    done = cli("inspect", "--uri", uri, "--db", "d", "--name", "x")
    assert done.returncode == EXIT["bad_uri"], done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_document_exits_6(uri: str, collection: Collection[Doc]) -> None:
    done = cli("inspect", *where(uri, collection), "--filter", '{"_id": "nope"}')
    assert done.returncode == EXIT["not_found"] == 6
    assert f"no document in {collection.full_name} matches" in done.stderr


def test_break_needs_a_mode(uri: str, collection: Collection[Doc]) -> None:
    done = cli("break", *where(uri, collection), "--filter", '{"_id": 1}')
    assert done.returncode == EXIT["usage"] == 2


# -- review fixes ------------------------------------------------------------------------------


def test_break_refuses_a_filter_matching_several_documents(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    collection.insert_one({"_id": 2})
    locks.acquire({"_id": 1}, tag="write")
    locks.acquire({"_id": 2}, tag="write")
    before = list(collection.find())

    done = cli(
        "break", *where(uri, collection), "--filter", '{"_id": {"$in": [1, 2]}}',
        "--everyone", "--yes",
    )  # fmt: skip

    assert done.returncode == EXIT["usage"], done.stderr
    assert "more than one document" in done.stderr
    assert list(collection.find()) == before


def test_break_by_a_filter_matching_one_document_breaks_it(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    collection.update_one({"_id": 1}, {"$set": {"status": "stuck"}})
    lock = locks.acquire({"_id": 1}, tag="write")

    done = cli(
        "break", *where(uri, collection), "--filter", '{"status": "stuck"}',
        "--lock-id", lock.id, "--yes", "--json",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert [holder["id"] for holder in json.loads(done.stdout)["removed"]] == [lock.id]


@pytest.mark.parametrize("lock_id", ["", "not-an-id", "A" * 32])
def test_break_refuses_a_malformed_lock_id(
    uri: str, collection: Collection[Doc], locks: MultiLock, lock_id: str
) -> None:
    locks.acquire({"_id": 1}, tag="write")
    before = stored_lock(collection)

    done = cli(
        "break", *where(uri, collection), "--filter", '{"_id": 1}', "--lock-id", lock_id, "--yes"
    )

    assert done.returncode == EXIT["usage"], done.stderr
    assert stored_lock(collection) == before


def test_break_of_an_id_that_is_not_there_exits_6(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    locks.acquire({"_id": 1}, tag="write")

    done = cli(
        "break", *where(uri, collection), "--filter", '{"_id": 1}', "--lock-id", "b" * 32, "--yes"
    )

    assert done.returncode == EXIT["not_found"], done.stderr
    assert f"no entry {'b' * 32}" in done.stderr


def test_end_of_input_at_the_prompt_declines(
    uri: str, collection: Collection[Doc], locks: MultiLock
) -> None:
    locks.acquire({"_id": 1}, tag="write")
    before = stored_lock(collection)
    main, terminal = pty.openpty()
    try:
        os.write(main, b"\x04")  # Ctrl-D
        done = cli(
            "break", *where(uri, collection), "--filter", '{"_id": 1}', "--everyone",
            stdin=terminal,
        )  # fmt: skip
    finally:
        os.close(main)
        os.close(terminal)

    assert done.returncode == EXIT["not_confirmed"], done.stderr
    assert "Traceback" not in done.stderr
    assert stored_lock(collection) == before


@pytest.mark.parametrize(
    "names", [["--db", "my.db", "--collection", "c"], ["--db", "d", "--collection", "a$b"]]
)
def test_a_name_pymongo_refuses_is_a_usage_error(uri: str, names: list[str]) -> None:
    done = cli("inspect", "--uri", uri, *names, "--filter", '{"_id": 1}')

    assert done.returncode == EXIT["usage"], done.stderr
    assert "Traceback" not in done.stderr


def test_break_exits_4_when_counting_the_filters_documents_times_out(
    uri: str, collection: Collection[Doc], locks: MultiLock, fail_point: Callable[..., None]
) -> None:
    fail_point(
        commands=("find",), blockConnection=True, blockTimeMS=3000, appName="docmultilock-cli"
    )
    done = cli(
        "break", *where(uri, collection), "--filter", '{"_id": 1}', "--everyone", "--yes",
        "--timeout", "1",
    )  # fmt: skip
    assert done.returncode == EXIT["unreachable"], done.stderr
    assert "cannot count the documents" in done.stderr


def test_a_command_timing_out_exits_4_whatever_its_cause(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def times_out(args: argparse.Namespace) -> int:
        raise DbTimeout("inspect failed: ExecutionTimeout: operation exceeded time limit")

    status = run(times_out, argparse.Namespace(command="inspect"))

    assert status == EXIT["unreachable"]
    assert "exceeded time limit" in capsys.readouterr().err
