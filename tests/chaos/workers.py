"""The chaos workers: processes that take, use and give back locks while faults rain down.

A worker (started with the ``spawn`` context, so this module must stay importable) loops
until its deadline: it picks a random resource (``resources.py``) and tag, acquires, makes
one to three protected writes (sometimes extending the lock in between), now and then
stalls past its lock's expiry and tries one more write, and releases. It never stops on
an error: every exception a docmultilock call raises is journaled and the loop goes on.

The journal is the checker's independent record. Each worker appends JSON lines to a
file of its own with one ``os.write`` each (a SIGKILL cannot tear a line, and nothing here
depends on the server under test surviving). Times are epoch milliseconds: the Lock's own
server times, and this host's clock (``time.time()``, the clock the embedded server's
``$$NOW`` reads too) where the worker notes when something happened. Events:

``grant``      id, resource, tag, fence, acq and exp (the Lock's server times), and recv:
               the host time the grant's reply arrived. The server stamps ``acq`` with the
               ``$$NOW`` bound when the command *started*, so the grant was decided
               somewhere in ``[acq, recv]``.
``extend``     id, the new exp
``write``      a protected write's id and whether it was acknowledged as applied
``releasing``  id, and the host time just before the release was sent: until then the
               lock certainly counted (unless it expired first)
``released``   id, and how it ended: ``ok``, ``expired`` (LockNotFound past the lock's
               expiry), ``abandoned`` or ``refused_live`` (LockNotFound while live)
``error``      a documented LockError: operation and class name
``undocumented`` anything else a docmultilock call raised (a violation)
``stale``      a write tried after a stall past expiry, and whether it was applied
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pymongo import MongoClient, monitoring
from pymongo.errors import PyMongoError

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    IncompatibleLockField,
    Lock,
    LockError,
    LockNotFound,
    ResourceNotFound,
)
from tests.chaos.resources import DB_NAME, Resource, ms, resources

Doc = dict[str, Any]
T = TypeVar("T")

#: The application name of every worker connection: fail points target it alone.
APP_NAME = "chaos-worker"

#: Share of holds that stall past their lock's expiry before one more write.
STALL_RATE = 0.03
#: Share of write locks taken (the rest are reads) on a document.
WRITE_RATE = 0.4
#: How long a pending writer keeps waiting for readers to drain.
PENDING_PATIENCE = 3.0


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker process needs (picklable, for ``spawn``)."""

    uri: str
    journal_dir: str
    slot: int
    generation: int
    seed: int
    deadline: float  # time.time() at which to stop
    documents: int
    names: int

    @property
    def label(self) -> str:
        return f"{self.slot}.{self.generation}"

    @property
    def journal_path(self) -> str:
        return os.path.join(self.journal_dir, f"w{self.slot}-{self.generation}.jsonl")


def client_options() -> dict[str, Any]:
    """Client settings that ride out a server restart and fail fast on a hang."""
    return {
        "directConnection": True,
        "heartbeatFrequencyMS": 500,
        "serverSelectionTimeoutMS": 2000,
        "connectTimeoutMS": 2000,
        "timeoutMS": 3000,
    }


class Journal:
    """Append-only JSON lines, one ``os.write`` per event."""

    def __init__(self, path: str, worker: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._worker = worker

    def __call__(self, event: str, **data: Any) -> None:
        line = json.dumps({"e": event, "w": self._worker, **data}, separators=(",", ":"))
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class RetryWatch(monitoring.CommandListener):
    """Counts retried writes: a started command whose (session, txnNumber) was seen before."""

    def __init__(self) -> None:
        self.retries = 0
        self._seen: set[tuple[bytes, int]] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        number = event.command.get("txnNumber")
        lsid = event.command.get("lsid")
        if number is None or lsid is None:
            return
        key = (bytes(lsid["id"]), int(number))
        if key in self._seen:
            self.retries += 1
        self._seen.add(key)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class Worker:
    """One worker's loop; ``run`` returns at the deadline."""

    def __init__(self, config: WorkerConfig, holding: Any) -> None:
        self.config = config
        self.holding = holding
        self.rng = random.Random(config.seed)
        self.retries = RetryWatch()
        self.client: MongoClient[Doc] = MongoClient(
            config.uri, appName=APP_NAME, event_listeners=[self.retries], **client_options()
        )
        self.resources = list(
            resources(self.client[DB_NAME], config.documents, config.names).values()
        )
        self.journal = Journal(config.journal_path, config.label)
        self.writes = 0

    # -- helpers ----------------------------------------------------------------------

    @staticmethod
    def now() -> int:
        """This host's clock in epoch milliseconds (the server shares it)."""
        return int(time.time() * 1000)

    def call(self, op: str, action: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one docmultilock call; journal every LockError it raises, then re-raise it."""
        try:
            return action(*args, **kwargs)
        except LockError as err:
            self.journal("error", op=op, code=err.code)
            if isinstance(err, (ResourceNotFound, IncompatibleLockField)):
                # Documented, yet impossible here: every resource exists and is ours.
                self.journal("undocumented", op=op, type=err.code, msg=str(err))
            raise

    def set_holding(self, value: int) -> None:
        self.holding[self.config.slot] = value

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        self.journal("start", pid=os.getpid())
        try:
            while time.time() < self.config.deadline:
                resource = self.rng.choice(self.resources)
                tag = "write" if self.rng.random() < WRITE_RATE else "read"
                if tag not in resource.tags:
                    tag = resource.tags[0]
                try:
                    self.cycle(resource, tag)
                except LockError:
                    time.sleep(0.05)  # journaled by call(); documented
                except Exception as exc:  # anything else from docmultilock is a violation
                    self.journal("undocumented", op="cycle", type=type(exc).__name__, msg=str(exc))
                finally:
                    self.set_holding(0)
                time.sleep(self.rng.uniform(0, 0.03))
        finally:
            self.journal("end")
            self.journal.close()
            self.client.close()

    def cycle(self, resource: Resource, tag: str) -> None:
        lock = self.obtain(resource, tag)
        if lock is None:
            return
        self.journal(
            "grant",
            id=lock.id,
            r=resource.key,
            doc=lock.document_id,
            tag=lock.tag,
            fence=lock.fence,
            acq=ms(lock.acquired_at),
            exp=ms(lock.expires_at),
            recv=self.now(),
        )
        self.set_holding(1)
        lock = self.hold(resource, lock)
        self.set_holding(0)
        self.release(resource, lock)

    def obtain(self, resource: Resource, tag: str) -> Lock | None:
        """A granted lock, or None (refused, gave up waiting, or the database failed)."""
        locks, target = resource.locks, resource.target
        try:
            return self.call("acquire", locks.acquire, target, tag=tag)
        except AssertiveLock as err:
            pending = err.lock
        except LockError:
            return None
        give_up = time.monotonic() + PENDING_PATIENCE
        while time.monotonic() < give_up:
            time.sleep(0.02)
            try:
                return self.call("continue", locks.acquire, target, lock=pending)
            except AssertiveLock as err:
                pending = err.lock
            except DbError:
                continue  # the call may have been applied; continuing again tells
            except (CooperativeLock, LockNotFound):
                return None
        return None

    def hold(self, resource: Resource, lock: Lock) -> Lock:
        """Make the protected writes; return the lock as last extended."""
        for index in range(self.rng.randint(1, 3)):
            if index and self.rng.random() < 0.25:
                try:
                    lock = self.call("extend", resource.locks.extend, resource.target, lock)
                except LockNotFound:
                    return lock
                except LockError:
                    pass  # the database failed; the extension may or may not have happened
                else:
                    self.journal("extend", id=lock.id, exp=ms(lock.expires_at))
            self.write(resource, lock)
            time.sleep(self.rng.uniform(0, 0.08))
        if self.rng.random() < STALL_RATE:
            # A holder paused past its lock's expiry (a GC pause, a stalled network).
            time.sleep((ms(lock.expires_at) - ms(lock.acquired_at)) / 1000 + 0.3)
            applied = self.write(resource, lock)
            self.journal("stale", id=lock.id, r=resource.key, applied=applied)
        return lock

    def write(self, resource: Resource, lock: Lock) -> bool | None:
        """One protected write; True when acknowledged as applied, None when unknown."""
        self.writes += 1
        write_id = f"{self.config.label}.{self.writes}"
        entry = {
            "s": {"$literal": write_id},
            "l": {"$literal": lock.id},
            "k": lock.tag[0],
            "f": lock.fence,
            "at": "$$NOW",
        }
        changes: Doc = {
            "n": {"$add": [{"$ifNull": ["$n", 0]}, 1]},
            "log": {"$concatArrays": [{"$ifNull": ["$log", []]}, [entry]]},
        }
        try:
            if resource.named:
                # The counter is not in the lock document: check the lock first, then let
                # the fence refuse the write if a later holder has written meanwhile.
                held = resource.lock_collection().count_documents(resource.guard(lock))
                if not held:
                    self.journal("write", s=write_id, id=lock.id, ok=False, skipped=True)
                    return False
                where: Doc = {"_id": resource.counter_id, "fence": {"$lte": lock.fence}}
                changes["fence"] = lock.fence
            else:
                where = resource.guard(lock)
                if lock.tag == "write":
                    # Read-modify-write: two overlapping writers would lose an update.
                    current = resource.counter.find_one({"_id": resource.counter_id}, {"rmw": 1})
                    changes["rmw"] = (current or {}).get("rmw", 0) + 1
            result = resource.counter.update_one(where, [{"$set": changes}])
        except PyMongoError:
            self.journal("write", s=write_id, id=lock.id, ok=None)
            return None
        applied = result.matched_count == 1
        self.journal("write", s=write_id, id=lock.id, ok=applied)
        return applied

    def release(self, resource: Resource, lock: Lock) -> None:
        """Release, retrying after a database error; journal how it ended."""
        self.journal("releasing", id=lock.id, t=self.now())
        for _ in range(4):
            try:
                self.call("release", resource.locks.release, resource.target, lock)
            except LockNotFound:
                # Release is idempotent: after a lost reply (an earlier attempt applied) it
                # still succeeds while the lock is live. Only an expired lock may be lost.
                # (The checker knows the one exception, which is the embedded server's: a
                # retry pymongo makes itself is executed again and finds the entry gone.)
                outcome = "expired" if self.now() >= ms(lock.expires_at) else "refused_live"
                self.journal("released", id=lock.id, outcome=outcome, t=self.now())
                return
            except LockError:
                time.sleep(0.1)
                continue
            self.journal("released", id=lock.id, outcome="ok", t=self.now())
            return
        self.journal("released", id=lock.id, outcome="abandoned", t=self.now())


def work(config: WorkerConfig, holding: Any) -> None:
    """A worker process's entry point."""
    Worker(config, holding).run()
