"""The ``docmultilock demo`` race: worker processes taking read and write locks on shared documents.

Each worker process has its own client and a :class:`~docmultilock.MultiLock` with the
readers-writer table, and loops over a few documents taking mostly read locks. A writer
changes its document in two separate guarded writes (``a``, then ``b``), so anyone who
could look between them would see ``a != b``. Both sides also count themselves in and out
of the document (``readers_inside``, ``writers_inside``), so every overlap the locks must
prevent is seen by whoever comes second, and counted as a violation. The parent shows live
progress and prints a summary; :func:`run_demo` returns 1 on any violation or worker error.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import pymongo
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock._demo_worker import DATABASE, Job, Message, Tally, connect, worker_main
from docmultilock._workers import STARTUP_LIMIT, Pool, Ready

__all__ = ["DemoSettings", "Tally", "run_demo"]

OVERRUN_LIMIT = 20.0  # how long past the end a worker may take to report before it is killed
SHOWN_PROBLEMS = 20  # ... and the summary lists this many

Doc = dict[str, Any]


@dataclass(frozen=True)
class DemoSettings:
    """What to run: the server's URI (and how to name it in the output) and the race's size."""

    uri: str
    server: str = ""
    workers: int = 4
    documents: int = 3
    seconds: float = 8.0
    seed: int | None = None


class _Progress:
    """The live line: rewritten in place on a terminal, else printed every two seconds."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self._every = 0.1 if self.live else 2.0
        self._shown_at: float | None = None
        self._width = 0

    def show(self, elapsed: float, tally: Tally, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and self._shown_at is not None and now - self._shown_at < self._every:
            return
        self._shown_at = now
        line = (
            f"{elapsed:5.1f}s  read {tally['read']}  write {tally['write']}  conflicts "
            f"{tally.conflicts}  waits {tally['waits']}  violations {tally['violations']}"
        )
        if self.live:
            self.stream.write("\r  " + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(f"  {line}\n")
        self.stream.flush()

    def end(self) -> None:
        if self.live and self._shown_at is not None:
            self.stream.write("\n")
            self.stream.flush()


class _Race:
    """The parent's side: start the workers, follow their reports, stop them all."""

    def __init__(self, job: Job, workers: int, progress: _Progress) -> None:
        self._pool = Pool("demo", workers, worker_main, job)
        self._progress = progress
        self._reports = {index: Tally() for index in range(workers)}
        self._ready: set[int] = set()
        self._final: set[int] = set()
        self._vanishing: set[int] = set()
        self._own = Tally()  # errors seen by the parent (a worker that died or hung)
        self.problems: list[str] = []
        self.started: float | None = None
        self.interrupted = False

    def total(self) -> Tally:
        """Sum the latest counts from every worker and the parent's own findings."""
        total = self._own.copy()
        for tally in self._reports.values():
            total.update(tally)
        return total

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def run(self, seconds: float) -> float:
        """Race for ``seconds`` once every worker is ready; return the seconds it took."""
        everyone = len(self._reports)
        try:
            self._pool.start()
            self._pump(lambda: len(self._ready | self._final) == everyone, STARTUP_LIMIT)
            self._pool.go.set()
            self.started = time.monotonic()
            self._pump(lambda: len(self._final) == everyone, seconds + OVERRUN_LIMIT)
        except KeyboardInterrupt:
            self.interrupted = True
            self._pool.stop.set()
            self._pool.go.set()
            self._pump(lambda: len(self._final) == everyone, 5.0)
        finally:
            elapsed = self.elapsed()
            if self.started is not None:
                self._progress.show(elapsed, self.total(), force=True)
                self._progress.end()
            self._pool.close()
        return elapsed

    def _pump(self, done: Callable[[], bool], limit: float) -> None:
        """Take reports until ``done()``; after ``limit`` seconds, count the silent as errors."""
        give_up = time.monotonic() + limit
        while not done():
            if time.monotonic() > give_up:
                for index in self._reports:
                    if index not in self._final:
                        self._fail(index, f"did not report within {limit:.0f} s")
                return
            message = self._pool.receive(0.1)
            if message is None:
                self._check_exits()
            else:
                self._take(message)
            if self.started is not None:
                self._progress.show(self.elapsed(), self.total())

    def _take(self, message: Message) -> None:
        if isinstance(message, Ready):
            self._ready.add(message.worker)
        elif message.worker not in self._final:
            self._reports[message.worker] = message.tally
            self.problems.extend(message.problems)
            if message.final:
                self._final.add(message.worker)

    def _check_exits(self) -> None:
        # A worker's last report is in the pipe before it exits, so a worker already seen
        # dead before an empty wait has nothing more to say.
        for index, process in enumerate(self._pool.processes):
            if index in self._final or process.exitcode is None:
                continue
            if index in self._vanishing:
                self._fail(index, f"exited with code {process.exitcode} without a report")
            else:
                self._vanishing.add(index)

    def _fail(self, index: int, text: str) -> None:
        self._own["errors"] += 1
        self.problems.append(f"worker {index}: {text}")
        self._final.add(index)


def _server_version(client: MongoClient[Doc]) -> str:
    info = client.admin.command("buildInfo")
    if "secantusVersion" in info:
        return f"SecantusDB {info['secantusVersion']}"
    return f"MongoDB {info.get('version', '?')}"


def _drop(collection: Collection[Doc]) -> None:
    # Briefly: a server gone by now (Ctrl-C reaches an embedded one too) has nothing to drop.
    with contextlib.suppress(PyMongoError), pymongo.timeout(2.0):
        collection.drop()


def run_demo(
    settings: DemoSettings, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the race against ``settings.uri`` and print the summary; return the exit status.

    Live progress goes to ``err`` (stderr), the header and summary to ``out`` (stdout). The
    documents live in a new collection of the ``docmultilock_demo`` database, dropped at
    the end. Returns 0 when there was no violation and no worker error, 1 otherwise (also
    when the server cannot be used), and 130 when interrupted with Ctrl-C.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    seed = settings.seed if settings.seed is not None else random.randrange(1_000_000)
    name = f"run_{secrets.token_hex(6)}"
    with contextlib.ExitStack() as cleanup:
        try:
            client = cleanup.enter_context(connect(settings.uri))
            version = _server_version(client)
            collection = client[DATABASE][name]
            cleanup.callback(_drop, collection)
            fresh = {"a": 0, "b": 0, "readers_inside": 0, "writers_inside": 0}
            collection.insert_many([{"_id": i, **fresh} for i in range(settings.documents)])
        except PyMongoError as exc:
            print(f"docmultilock demo: cannot use the server: {exc}", file=err)
            return 1
        server = f"{version} ({settings.server})" if settings.server else version
        print(
            f"docmultilock demo: {settings.workers} worker processes, {settings.documents} "
            f"documents, {settings.seconds:g} s, seed {seed}\n"
            f"server: {server}, collection {DATABASE}.{name}\n"
            "writers set a, then b, under their lock; readers check that a == b and that no "
            "writer is inside",
            file=out,
            flush=True,
        )
        job = Job(settings.uri, name, settings.documents, settings.seconds, seed)
        race = _Race(job, settings.workers, _Progress(err))
        elapsed = race.run(settings.seconds)
    out.write(_summary(race, elapsed, server))
    out.flush()
    total = race.total()
    if total["violations"] or total["errors"]:
        return 1
    return 130 if race.interrupted else 0


def _summary(race: _Race, elapsed: float, server: str) -> str:
    t = race.total()

    def row(name: str, read: object = "", write: object = "", total: object = "") -> str:
        return f"  {name:<18}{read!s:>8}{write!s:>8}{total!s:>8}\n"

    text = (
        f"\nsummary{' (interrupted)' if race.interrupted else ''}\n"
        + row("", "read", "write", "total")
        + row("acquisitions", t["read"], t["write"], t.acquired)
        + row("conflicts", t["read_conflicts"], t["write_conflicts"], t.conflicts)
        + row("assertive waits", "", t["waits"], t["waits"])
        + row("waits given up", "", t["gave_up"], t["gave_up"])
        + row("lost locks", t["read_lost"], t["write_lost"], t.lost)
        + row("violations", total=t["violations"])
        + row("worker errors", total=t["errors"])
        + f"  {'elapsed':<18}{elapsed:.1f} s\n"
        + f"  {'server':<18}{server}\n"
    )
    if race.problems:
        shown = race.problems[:SHOWN_PROBLEMS]
        text += "\nproblems:\n" + "".join(f"  {problem}\n" for problem in shown)
        more = t["violations"] + t["errors"] + t.lost - len(shown)
        text += f"  ... and {more} more\n" if more > 0 else ""
    if t["violations"] or t["errors"]:
        verdict = f"FAIL: {t['violations']} violation(s), {t['errors']} worker error(s)"
    else:
        verdict = "INTERRUPTED" if race.interrupted else "OK"
        verdict += f": no mutual-exclusion violation in {t.acquired} locks taken"
        if t.lost:
            verdict += f" ({t.lost} lost: a holder stalled past its lock's lifetime)"
    return f"{text}\n{verdict}\n"
