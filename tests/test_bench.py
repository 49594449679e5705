"""``docmultilock bench``: the commands-per-operation counts, and a smoke run of the command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from docmultilock import cli
from docmultilock._bench import SCENARIOS
from docmultilock._bench._commands import count_commands


def test_every_lock_operation_sends_exactly_one_find_and_modify(uri: str) -> None:
    counts, _ = count_commands(uri)
    sent = {(c.lock, c.operation): c.docmultilock for c in counts}
    assert sent == dict.fromkeys(sent, ("findAndModify",))
    assert {c.lock for c in counts} == {"WriteLock", "MultiLock", "NamedLocks"}


def test_the_floor_sends_one_find_and_modify_per_operation_too(uri: str) -> None:
    counts, _ = count_commands(uri)
    assert {c.floor for c in counts} == {("findAndModify",)}


@pytest.mark.slow
def test_the_bench_reports_every_scenario_beside_its_floor(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--uri", uri, "--duration", "0.4", "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert {row["scenario"] for row in report["rows"]} == set(SCENARIOS)
    for row in report["rows"]:
        assert isinstance(row["docmultilock"], (int, float)), row
        assert isinstance(row["floor"], (int, float)), row
        assert row["ratio"] is not None, row
    assert {row["met"] for row in report["rows"] if row["scenario"] == 1} == {True}
    assert report["cpus"] >= 1
    assert report["server"]
    assert "[1/6] commands per operation" in err


def test_a_scenario_outside_the_list_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--scenarios", "1,9"]) == 2
    assert "scenarios are 1 to 8" in capsys.readouterr().err


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
