"""The ``docmultilock demo`` command: worker processes racing for locks on a real server."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from docmultilock import cli
from docmultilock._cli_args import hosts
from docmultilock._demo_worker import DATABASE

Doc = dict[str, Any]


def summary_row(out: str, name: str) -> list[str]:
    """The cells of the summary row named ``name`` (``["acquisitions", "12", "3", "15"]``)."""
    for line in out.splitlines():
        if line.startswith(f"  {name}  "):
            return [name, *line[len(name) + 2 :].split()]
    raise AssertionError(f"no summary row {name!r} in:\n{out}")


def demo_collections(client: MongoClient[Doc]) -> set[str]:
    return set(client[DATABASE].list_collection_names())


@pytest.mark.slow
def test_the_demo_takes_both_tags_without_a_violation(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["demo", "--uri", uri, "--seconds", "3", "--workers", "2", "--seed", "7"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    _, reads, writes, _ = summary_row(out, "acquisitions")
    assert int(reads) > 0
    assert int(writes) > 0
    assert summary_row(out, "violations") == ["violations", "0"]
    assert summary_row(out, "worker errors") == ["worker errors", "0"]
    assert "OK: no mutual-exclusion violation" in out
    assert "violations 0" in err  # the progress line


@pytest.mark.slow
def test_the_demo_leaves_no_collection_behind(
    uri: str, client: MongoClient[Doc], capsys: pytest.CaptureFixture[str]
) -> None:
    before = demo_collections(client)
    assert cli.main(["demo", "--uri", uri, "--seconds", "0.5", "--workers", "1"]) == 0
    assert demo_collections(client) == before


@pytest.fixture
def saboteur(client: MongoClient[Doc]) -> Iterator[None]:
    """Pretend a writer is always inside the next demo's documents, as a broken lock would."""
    before = demo_collections(client)
    done = threading.Event()

    def sabotage() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            for name in demo_collections(client) - before:
                client[DATABASE][name].update_many({}, {"$set": {"writers_inside": 5}})
            time.sleep(0.05)

    thread = threading.Thread(target=sabotage, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.mark.slow
@pytest.mark.usefixtures("saboteur")
def test_the_demo_fails_when_it_sees_a_violation(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["demo", "--uri", uri, "--seconds", "2", "--workers", "1"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert int(summary_row(out, "violations")[1]) > 0
    assert "writers_inside=5" in out
    assert "FAIL:" in out


def test_an_unreachable_server_fails_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nowhere = "mongodb://127.0.0.1:1/?directConnection=true&timeoutMS=300"
    assert cli.main(["demo", "--uri", nowhere]) == 1
    assert "docmultilock demo: cannot use the server:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (["--workers", "0"], "argument --workers: must be from 1 to 64, not 0"),
        (["--documents", "many"], "argument --documents: expected a whole number, not 'many'"),
        (["--seconds", "-1"], "argument --seconds: must be more than 0 and at most 3600, not -1"),
    ],
)
def test_a_bad_argument_is_refused_with_a_clear_message(
    argument: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["demo", *argument]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_command_is_refused() -> None:
    assert cli.main([]) == 2


def test_python_m_docmultilock_demo_help_describes_the_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "docmultilock", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: docmultilock demo")
    for option in ("--uri", "--workers", "--documents", "--seconds", "--seed"):
        assert option in done.stdout


def test_the_printed_server_has_no_credentials() -> None:
    assert hosts("mongodb://user:secret@h1:27017,h2/db?replicaSet=rs") == "h1:27017,h2"
    assert hosts("mongodb+srv://user:secret@cluster.example/?tls=true") == "cluster.example"
