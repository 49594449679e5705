"""Run docmultilock against a real server in tests and demos.

:class:`EmbeddedServer` starts the embedded MongoDB-compatible server (SecantusDB, from the
``embedded`` extra) as a separate process on a free loopback port, and stops it on exit::

    with EmbeddedServer() as server:
        client = MongoClient(server.uri)

The server never outlives the process that started it, however that process ends (see
:class:`EmbeddedServer`).

:func:`mongodb_uri` yields ``DOCMULTILOCK_MONGODB_URI`` when it is set (a real MongoDB
replica set), and an embedded server otherwise. The pytest fixtures built on these live in
:mod:`docmultilock.pytest_plugin`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

__all__ = ["URI_VARIABLE", "EmbeddedServer", "EmbeddedServerError", "mongodb_uri"]

#: The environment variable naming a real MongoDB to use instead of the embedded server.
URI_VARIABLE = "DOCMULTILOCK_MONGODB_URI"


#: Run first in the server's process: a thread reads the parent's end of a pipe (the
#: server's stdin) and stops the server at end of file, which comes when the parent closes
#: it or dies in any way (the kernel closes a dead process's files, even after SIGKILL).
_PARENT_WATCH = """\
import os, signal, sys, threading, time
def _watch_parent():
    while sys.stdin.buffer.read(1):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    # A server caught starting up or shutting down can miss its SIGTERM: end it anyway.
    time.sleep(5)
    os._exit(1)
threading.Thread(target=_watch_parent, name="parent-watch", daemon=True).start()
"""


#: Run first in the server's process on Linux: ask the kernel to SIGTERM it when its parent
#: dies (``PR_SET_PDEATHSIG``, set here after exec, so nothing runs between fork and exec),
#: then check that the parent is still the one that started it: one that died before the
#: request was made would never signal.
_PARENT_DEATH = """\
import ctypes, os, signal
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
except (OSError, AttributeError):
    pass
if os.getppid() != {parent}:
    raise SystemExit(143)
"""


def _parent_death_script() -> str:
    """The launcher's ``PR_SET_PDEATHSIG`` lines on Linux from the main thread, else nothing.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not only the
    process, so it is asked for only when starting from the main thread (which lives as
    long as the process); from another thread the parent-watch pipe alone stops the server.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return ""
    return _PARENT_DEATH.format(parent=os.getpid())


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started (its log tail is in the message)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _check_port_free(port: int) -> None:
    """Refuse a port something already listens on: its server would answer for the child.

    Bound as the server binds (with ``SO_REUSEADDR``), so a port left in ``TIME_WAIT`` by
    an earlier server counts as free.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise EmbeddedServerError(f"port {port} is in use") from None


class EmbeddedServer:
    """A SecantusDB server in a child process, for tests and demos; a context manager.

    :param storage_path: ``":memory:"`` (default) or a directory, to survive a restart.
    :param enable_test_commands: allow ``configureFailPoint`` (fault injection).
    :param ttl_sweep_seconds: how often TTL indexes are swept (the server's default is 60 s).
    :param sync_on_commit: journal every commit, for crash-and-restart tests on disk.
    :param port: a fixed port; a free one is picked when ``None``.
    :param startup_timeout: seconds to wait for the server to answer ``hello``.

    The server does not outlive this process: if it ends without :meth:`stop` (killed with
    SIGKILL or SIGTERM, or it simply exits), the server stops within a second. Two watches
    do it: the server reads a pipe from this process and stops at its end of file (every
    platform), and on Linux the kernel also sends it SIGTERM when its parent dies
    (``PR_SET_PDEATHSIG``, set only when started from the main thread, since the kernel
    ties it to the thread that started the child). A process forked (not spawned) from this
    one after the start holds the pipe too, so the server then lasts until both have ended.
    """

    def __init__(
        self,
        *,
        storage_path: str | os.PathLike[str] = ":memory:",
        enable_test_commands: bool = False,
        ttl_sweep_seconds: float | None = None,
        sync_on_commit: bool = False,
        port: int | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.storage_path = os.fspath(storage_path)
        self.enable_test_commands = enable_test_commands
        self.ttl_sweep_seconds = ttl_sweep_seconds
        self.sync_on_commit = sync_on_commit
        self.port = port if port is not None else _free_port()
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def uri(self) -> str:
        """A connection string for this server (direct connection, quick heartbeats)."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true&heartbeatFrequencyMS=500"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs."""
        return self._process.pid if self._process is not None else None

    def _command(self) -> list[str]:
        """The server's command line: the parent watch, then the server in the same process."""
        if self.ttl_sweep_seconds is not None or self.sync_on_commit:
            # The command line has no TTL sweep option; the Python API does.
            script = (
                _parent_death_script()
                + _PARENT_WATCH
                + "from secantus import SecantusDBServer as S\n"
                f"s = S(host='127.0.0.1', port={self.port}, storage_path={self.storage_path!r}, "
                f"enable_test_commands={self.enable_test_commands!r}"
                + (
                    f", ttl_sweep_seconds={self.ttl_sweep_seconds!r}"
                    if self.ttl_sweep_seconds is not None
                    else ""
                )
                + (", sync_on_commit=True" if self.sync_on_commit else "")
                + ")\ns.start()\ns.wait()\n"
            )
            return [sys.executable, "-c", script]
        arguments = [
            "--host", "127.0.0.1", "--port", str(self.port),
            "--storage-path", self.storage_path,
        ]  # fmt: skip
        if self.enable_test_commands:
            arguments.append("--enable-test-commands")
        # What `python -m secantus` runs, after the watch.
        script = f"from secantus.cli import main\nraise SystemExit(main({arguments!r}))\n"
        return [sys.executable, "-c", _parent_death_script() + _PARENT_WATCH + script]

    def start(self) -> None:
        """Start the server and wait until it answers ``hello``."""
        if self._process is not None:
            return
        if importlib.util.find_spec("secantus") is None:
            raise EmbeddedServerError(
                "the embedded server is not installed; docmultilock's 'embedded' extra brings"
                " it: pip install -e '.[embedded]' in a clone of docmultilock, or"
                ' pip install "$(echo dist/docmultilock-*.whl)[embedded]" for a built wheel'
            )
        _check_port_free(self.port)
        fd, name = tempfile.mkstemp(prefix="docmultilock-server-", suffix=".log")
        self._log_path = Path(name)
        with os.fdopen(fd, "wb") as log:
            # A session of its own: a Ctrl-C meant for the caller must not stop the server
            # before the caller has cleaned up; stop(), or this process's end, ends it.
            # stdin is the parent-watch pipe: nothing is written, its end of file counts.
            self._process = process = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
        try:
            self._wait_until_ready(process)
        except BaseException:
            self.stop()
            raise

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise EmbeddedServerError(
                    f"the embedded server exited with code {process.returncode}:\n"
                    + self.log_tail()
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                # A child that failed to bind exits: the answer then came from another server.
                if self._answers_hello() and process.poll() is None:
                    return
            time.sleep(0.1)
        raise EmbeddedServerError(
            f"the embedded server did not answer within {self.startup_timeout} s:\n"
            + self.log_tail()
        )

    def _answers_hello(self) -> bool:
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.uri, serverSelectionTimeoutMS=2000, connectTimeoutMS=2000
        )
        try:
            client.admin.command("hello")
        except PyMongoError:
            return False
        finally:
            client.close()
        return True

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        text = self._log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the server's process exits (or ``timeout`` passes); its exit status.

        ``None`` when it is still running at the timeout, or was never started.
        """
        process = self._process
        if process is None:
            return None
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, *, kill: bool = False, grace: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``grace`` seconds (or at once)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None and process.stdin is not None:
            process.stdin.close()
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def mongodb_uri(*, enable_test_commands: bool = False) -> Iterator[str]:
    """Yield ``DOCMULTILOCK_MONGODB_URI`` if set, else the URI of a fresh embedded server."""
    uri = os.environ.get(URI_VARIABLE)
    if uri:
        yield uri
        return
    with EmbeddedServer(enable_test_commands=enable_test_commands) as server:
        yield server.uri
