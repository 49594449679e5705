"""Worker processes for the tooling: the one harness ``docmultilock demo`` and ``bench`` share.

A :class:`Pool` starts ``count`` processes with multiprocessing's spawn method, each running
``target(link, *args)``: the same arguments for all, and a :class:`Link` that is the worker's
end (its index, the queue to the parent, its own inbox, the start and stop signals). The body
of a worker runs inside :meth:`Link.working`, which ends the process with its parent (SIGKILL
included, so no worker lingers) and reports an error to the parent instead of raising it::

    def target(link: Link, uri: str) -> None:
        with link.working(), connect(uri) as client:
            link.ready(client)
            for order in link.orders():
                link.put(work(order))

    with Pool("bench", 4, target, uri, inboxes=True) as pool:
        pool.collect(Ready, STARTUP_LIMIT)
        pool.send(order)

The pool always stops its processes on the way out: a polite stop, then a kill.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from pymongo import MongoClient

__all__ = [
    "STARTUP_LIMIT",
    "Failed",
    "Link",
    "Pool",
    "Ready",
    "WorkerError",
    "exit_with_parent",
    "unless_given",
]

#: How long workers may take to start and connect, in seconds.
STARTUP_LIMIT = 60.0
#: The exit status of a worker whose parent died (as after SIGTERM, by convention).
ORPHANED = 143

M = TypeVar("M")


class WorkerError(RuntimeError):
    """A worker process failed or fell silent."""


@dataclass(frozen=True)
class Ready:
    """A worker is connected and waits for its work."""

    worker: int


@dataclass(frozen=True)
class Failed:
    """A worker stopped on an error: its type and text."""

    worker: int
    text: str


def exit_with_parent() -> None:
    """In a multiprocessing child, end this process as soon as its parent has ended.

    A daemon thread waits on the parent's sentinel, which becomes ready when the parent
    ends in any way (SIGKILL included), and then ends the worker at once.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        # No cleanup to run: the parent that would read our report is gone.
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def unless_given(uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The client ``options`` that ``uri`` does not set itself (names in any case)."""
    given = {key.lower() for key in parse_qs(urlsplit(uri).query)}
    return {key: value for key, value in options.items() if key.lower() not in given}


@dataclass(frozen=True)
class Link:
    """A worker's end of its pool: its index, the parent's queue, its inbox, the signals."""

    index: int
    outbox: Queue[Any]
    inbox: Queue[Any] | None
    go: Event
    stop: Event

    @contextlib.contextmanager
    def working(self, failed: Callable[[str], None] | None = None) -> Iterator[None]:
        """Run a worker's body: end with the parent; an error goes to ``failed``, not up.

        By default an error is sent to the parent as :class:`Failed`.
        """
        exit_with_parent()
        try:
            yield
        except KeyboardInterrupt:
            pass  # Ctrl-C reached the parent too; it reports the interruption
        except Exception as exc:  # reported to the parent, which decides what it means
            text = f"{type(exc).__name__}: {exc}"
            if failed is None:
                self.put(Failed(self.index, text))
            else:
                failed(text)

    def ready(self, client: MongoClient[Any]) -> None:
        """Connect now, before any clock starts, then tell the parent."""
        client.admin.command("ping")
        self.put(Ready(self.index))

    def orders(self) -> Iterator[Any]:
        """What the parent sends to this worker's inbox, until it sends ``None``."""
        assert self.inbox is not None, "a pool made with inboxes=True"
        while (order := self.inbox.get()) is not None:
            yield order

    def put(self, message: object) -> None:
        """Send ``message`` to the parent."""
        self.outbox.put(message)


class Pool:
    """``count`` worker processes running ``target(link, *args)``, started with spawn."""

    def __init__(
        self, name: str, count: int, target: Callable[..., None], *args: Any, inboxes: bool = False
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.outbox: Queue[Any] = ctx.Queue()
        self.inboxes: list[Queue[Any]] = [ctx.Queue() for _ in range(count)] if inboxes else []
        self.go = ctx.Event()
        self.stop = ctx.Event()
        links = [
            Link(i, self.outbox, self.inboxes[i] if inboxes else None, self.go, self.stop)
            for i in range(count)
        ]
        self.processes = [
            ctx.Process(
                target=target, args=(link, *args), name=f"docmultilock-{name}-{i}", daemon=True
            )
            for i, link in enumerate(links)
        ]

    def __enter__(self) -> Pool:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start every process."""
        for process in self.processes:
            process.start()

    def receive(self, timeout: float) -> Any | None:
        """The next message from any worker, or ``None`` after ``timeout`` seconds."""
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def collect(self, kind: type[M], limit: float) -> list[M]:
        """One ``kind`` message from every worker within ``limit`` seconds.

        :raises WorkerError: a worker failed, or they did not all answer in time.
        """
        got: list[M] = []
        give_up = time.monotonic() + limit
        while len(got) < len(self.processes):
            message = self.receive(max(0.1, give_up - time.monotonic()))
            if message is None:
                raise WorkerError(f"workers did not answer within {limit:.0f} s")
            if isinstance(message, Failed):
                raise WorkerError(f"worker {message.worker}: {message.text}")
            if isinstance(message, kind):
                got.append(message)
        return got

    def send(self, order: object) -> None:
        """Put ``order`` in every worker's inbox."""
        for inbox in self.inboxes:
            inbox.put(order)

    def close(self) -> None:
        """Tell every worker to stop, wait a little, kill the ones still running."""
        self.stop.set()
        self.go.set()
        self.send(None)
        for process in self.processes:
            if process.ident is None:
                continue  # never started
            process.join(timeout=5.0)
            if process.exitcode is None:
                process.kill()
                process.join()
            process.close()
        self.outbox.close()
        self.outbox.join_thread()
        for inbox in self.inboxes:
            inbox.close()
