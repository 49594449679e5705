"""No orphaned servers: an embedded server ends with the process that started it.

Each test starts a parent process that starts an :class:`EmbeddedServer` (or the demo,
which does) and reports the server's pid, kills the parent without letting it clean up,
and checks the server is gone within a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from docmultilock.testing import URI_VARIABLE

pytestmark = pytest.mark.slow

#: How long a server may outlive its parent: it is sent SIGTERM and shuts down cleanly,
#: which takes a second or two, longer on a machine busy with other tests.
GONE_WITHIN = 15.0

#: A parent that starts a server, in the main thread or in a thread that then ends, prints
#: the server's pid and the URI, and waits to be killed.
PARENT = """\
import sys, threading, time
from docmultilock.testing import EmbeddedServer
server = EmbeddedServer()
if sys.argv[1] == "thread":
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
else:
    server.start()
print(server.pid, server.uri, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody has reaped yet counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            # The state follows the command name in parentheses: "123 (python3) Z ...".
            return stat.read_text().rpartition(")")[2].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    return True


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Spawned(list[subprocess.Popen[str]]):
    """The processes a test starts, and the pids of the servers (or workers) they start."""

    def __init__(self) -> None:
        super().__init__()
        self.servers: list[int] = []


def _still_ours(pid: int) -> bool:
    """True while ``pid`` runs a process this test started (not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return alive(pid)
    return b"secantus" in command or b"docmultilock" in command or b"spawn_main" in command


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawned]:
    """Processes a test starts; whatever survives the test is killed afterwards.

    A server whose parent was killed is not our child: its pid is recorded and it gets
    SIGKILL too, so a failing test leaves no server behind.
    """
    started = Spawned()
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    for pid in started.servers:
        if alive(pid) and _still_ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_parent(spawn: Spawned, how: str, cwd: Path) -> tuple[int, int]:
    """Start a parent that starts a server (``how``: "main" or "thread"); return both pids."""
    env = {k: v for k, v in os.environ.items() if k != URI_VARIABLE}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, how],
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )
    spawn.append(parent)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, f"the parent exited with {parent.wait()} before starting the server"
    server_pid = int(line.split()[0])
    spawn.servers.append(server_pid)
    assert alive(server_pid)
    return parent.pid, server_pid


@pytest.mark.parametrize("how", ["main", "thread"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_server_ends_when_its_parent_is_killed(
    spawn: Spawned, tmp_path: Path, how: str, sig: signal.Signals
) -> None:
    parent_pid, server_pid = start_parent(spawn, how, tmp_path)

    os.kill(parent_pid, sig)
    spawn[0].wait(timeout=10)

    assert gone_within(server_pid, GONE_WITHIN)


def test_a_server_started_from_a_thread_that_ended_keeps_running(
    spawn: Spawned, tmp_path: Path
) -> None:
    # Linux's parent-death signal is tied to the thread that started the child: it must
    # not stop the server when that thread ends while the process lives on.
    _, server_pid = start_parent(spawn, "thread", tmp_path)

    assert not gone_within(server_pid, 2.0)


def children(pid: int) -> dict[int, bytes]:
    """The processes whose parent is ``pid`` (from /proc), with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found[int(entry.name)] = command
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_demos_server_and_workers_end_when_the_demo_is_killed(
    spawn: Spawned, tmp_path: Path, sig: signal.Signals
) -> None:
    env = {k: v for k, v in os.environ.items() if k != URI_VARIABLE}
    demo = subprocess.Popen(
        [sys.executable, "-m", "docmultilock", "demo", "--seconds", "60", "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    spawn.append(demo)
    assert demo.stderr is not None
    for line in demo.stderr:  # until the first progress line: the race has begun
        if "violations" in line:
            break
    started = children(demo.pid)
    spawn.servers.extend(started)
    assert any(b"secantus" in command for command in started.values())
    assert sum(b"spawn_main" in command for command in started.values()) == 1

    os.kill(demo.pid, sig)
    demo.wait(timeout=10)

    assert [pid for pid in started if not gone_within(pid, GONE_WITHIN)] == []
