"""The examples run as scripts against the test server and say what the docs say they do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from docmultilock.testing import URI_VARIABLE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, uri: str) -> str:
    """Run ``examples/<name>`` with the test server's URI; return its output."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env={**os.environ, URI_VARIABLE: uri},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_shows_the_write_lock_then_the_readers_and_writer(uri: str) -> None:
    lines = run_example("quickstart.py", uri).splitlines()

    assert "guarded write while held: matched 1" in lines
    assert any(
        line.startswith("second acquire refused: LockAlreadyTaken (HTTP 409)") for line in lines
    )
    assert "guarded write after release: matched 0" in lines
    assert "writer registered as pending, waits for ('read',)" in lines
    assert "new reader refused while the writer waits for ('write',)" in lines
    assert any(line.startswith("writer granted") and "pending=False" in line for line in lines)
    assert lines[-1] == "order now: {'_id': 1, 'status': 'paid', 'total': 10}"


def test_edit_example_writes_guarded_and_reports_the_loss(uri: str) -> None:
    lines = run_example("edit_document.py", uri).splitlines()

    assert lines[:5] == [
        "editing INV-1: 1 line(s), total 10",
        "guarded write: matched 1",
        "second editor gave up: LockTimeout (HTTP 409)",
        "reader refused during the edit: CooperativeLock",
        "edit done, lock released",
    ]
    assert lines[-4:] == [
        "guarded write after the loss: matched 0",
        "hold() raised after the block: LockNotFound",
        "on_lost was called with: ['LockNotFound']",
        "invoice now: status=draft total=90",
    ]


def test_web_example_answers_conflicts_with_problem_json(uri: str) -> None:
    lines = run_example("web_werkzeug.py", uri).splitlines()

    assert lines[0] == "POST /orders/1/lock -> 201 application/json"
    assert lines[2] == "POST /orders/1/lock -> 409 application/problem+json"
    assert lines[3].startswith("  editor B: Lock already taken (LockAlreadyTaken): ")
    assert "  saved: {'_id': 1, 'status': 'paid', 'total': 10}" in lines
    assert "  stale lock: LockWasReacquired" in lines
    assert "POST /orders/2/lock -> 404 application/problem+json" in lines
    assert "POST /orders/%7B%22$ne%22:null%7D/lock -> 404 text/html" in lines
    assert f"POST /orders/{2**64}/lock -> 404 text/html" in lines


def test_nightly_report_runs_on_exactly_one_instance(uri: str) -> None:
    lines = run_example("nightly_report.py", uri).splitlines()

    running = [line for line in lines if line.endswith(": running nightly-report")]
    skipped = [line for line in lines if ": skipped, another instance" in line]
    assert (len(running), len(skipped)) == (2, 4)  # one of three instances, two nights
    assert "anyone holding nightly-report after the run: False" in lines
    assert lines[-1] == "the next night's fence is larger: True"
