"""``docmultilock bench``: the commands-per-operation counts, and a smoke run of the command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from docmultilock import cli
from docmultilock._bench import FLOORED, SCENARIOS
from docmultilock._bench._commands import count_commands


def test_every_lock_operation_sends_exactly_one_find_and_modify(uri: str) -> None:
    counts, _ = count_commands(uri)
    sent = {(c.lock, c.operation): c.docmultilock for c in counts}
    assert sent == dict.fromkeys(sent, ("findAndModify",))
    assert {c.lock for c in counts} == {"WriteLock", "MultiLock", "NamedLocks"}


def test_the_floor_sends_one_find_and_modify_per_operation_too(uri: str) -> None:
    counts, _ = count_commands(uri)
    assert {c.floor for c in counts} == {("findAndModify",)}


#: Scenario 9 in a second: 5 locks of 0.6 s, renewed every 0.2 s.
TINY_KEEPALIVE = [
    "--keepalive-locks",
    "5",
    "--keepalive-lifetime",
    "0.6",
    "--keepalive-seconds",
    "1",
]


def _bench_json(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert cli.main(["bench", "--uri", uri, "--json", *args]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    for row in report["rows"]:
        assert isinstance(row["docmultilock"], (int, float)), row
    return report


@pytest.mark.slow
def test_the_bench_reports_every_scenario_beside_its_floor(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--uri", uri, "--duration", "0.4", "--json", *TINY_KEEPALIVE]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert {row["scenario"] for row in report["rows"]} == set(SCENARIOS)
    for row in report["rows"]:
        assert isinstance(row["docmultilock"], (int, float)), row
        if row["scenario"] in FLOORED:
            assert isinstance(row["floor"], (int, float)), row
            assert row["ratio"] is not None, row
        else:
            assert row["floor"] is None, row
    assert {row["met"] for row in report["rows"] if row["scenario"] == 1} == {True}
    assert report["cpus"] >= 1
    assert report["server"]
    assert re.search(r"^\[1/\d+\] commands per operation", err, re.MULTILINE)


@pytest.mark.slow
def test_the_keepalive_scenario_counts_locks_kept_lost_and_lateness(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _bench_json(uri, capsys, "--scenarios", "9", *TINY_KEEPALIVE)
    rows = {row["name"]: row for row in report["rows"]}
    assert set(rows) == {
        "locks kept alive (5 locks of 0.6 s, held 1 s)",
        "locks lost",
        "worst lateness of a renewal after its due time",
        "renewals started",
        "keep-alive commands sent",
        "locks per keep-alive command",
        "client CPU per kept lock per renewal",
    }
    assert rows["locks kept alive (5 locks of 0.6 s, held 1 s)"]["target"] == "value == 5"
    kept = rows["locks kept alive (5 locks of 0.6 s, held 1 s)"]["docmultilock"]
    lost = rows["locks lost"]["docmultilock"]
    assert kept + lost == 5
    assert rows["worst lateness of a renewal after its due time"]["target"] == "value < 0.4"
    assert "--keepalive-locks 5 --keepalive-lifetime 0.6" in report["command"]


@pytest.mark.slow
def test_the_async_scenario_sets_async_beside_sync_and_measures_the_stall(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _bench_json(uri, capsys, "--scenarios", "10", "--duration", "1")
    names = [row["name"] for row in report["rows"]]
    assert names == [
        "sync acquire+release cycles, 1 thread, 1 document",
        "async acquire+release cycles, 1 coroutine, 1 document",
        "client CPU per cycle, async / sync, 1 worker",
        "sync acquire+release cycles, 50 threads, 50 documents",
        "async acquire+release cycles, 50 coroutines on one loop, 50 documents",
        "client CPU per cycle, async / sync, 50 workers",
        "largest event-loop stall, 10 ms ticker, 100 coroutines in hold(wait=...) on 1 document",
    ]
    targets = {row["name"]: row["target"] for row in report["rows"] if row["target"]}
    assert set(targets.values()) == {"value <= 1.1", "value < 50"}


def test_a_scenario_outside_the_list_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--scenarios", "1,15"]) == 2
    assert "scenarios are 1 to 14" in capsys.readouterr().err


def test_only_the_bench_command_imports_the_bench_modules() -> None:
    probe = (
        "import sys\n"
        "from docmultilock import cli\n"
        "cli.build_parser().parse_args(['demo', '--seconds', '1'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('docmultilock._bench')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
