"""The chaos conductor: runs the workers and injects faults into their run.

Faults, chosen at random over the run (see ``FAULTS`` and ``Conductor.run``):

* **Fail points** (``configureFailPoint failCommand``, scoped to the workers' ``appName`` so
  the conductor's own commands get through): a connection cut before a lock command or a
  guarded write runs (pymongo retries once, a second cut reaches the caller), retryable
  errors 91 and 10107 (the second also makes the client wait a heartbeat), a
  non-retryable error 2, a ``writeConcernError`` on a lock command (applied, yet reported
  failed: a lost reply), and a blocked connection longer than the operation's timeout
  (``DbTimeout``; the command may still be applied afterwards).
* **Reply cuts**: the workers connect through a proxy (``tests/proxy.py``) that, when
  armed, forwards the next lock command or guarded write, waits for the server's reply and
  closes the worker's connection instead: a reply lost *after* the command was applied.
  pymongo retries (the embedded server executes that retry again, ``docs/server.md``); a
  second cut reaches docmultilock, which retries itself. Every dropped reply is recorded
  with its command for the checker.
* **SIGKILL of a holder**: a worker process that holds a lock is killed and a fresh one
  takes its slot. A thread then watches the dead holder's lock through its own
  ``guard()`` filter (the library's "still counting" by the server's clock) until it no
  longer matches, recording the server time of the last poll that found it live.
* **kill -9 of the server**, restarted on the same on-disk storage and port (it runs with
  ``sync_on_commit``, so every acknowledged write survives). The proxy stays up and
  connects each new worker connection to the server anew.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from docmultilock.testing import EmbeddedServer
from tests.chaos.checker import DeadHolder, read_journal
from tests.chaos.resources import DB_NAME, Resource, lock_from, ms, resources
from tests.chaos.workers import APP_NAME, WorkerConfig, client_options, work
from tests.proxy import ReplyCutter

Doc = dict[str, Any]


@dataclass(frozen=True)
class FailPoint:
    """A ``failCommand`` fail point: it acts before the command runs, or on its reply."""

    name: str
    data: Doc
    times: tuple[int, int]  # how many commands it hits (a range)


@dataclass(frozen=True)
class ReplyCut:
    """The proxy drops the reply to an applied command (see ``tests/proxy.py``)."""

    name: str
    commands: frozenset[str]
    times: tuple[int, int]


FAULTS: list[FailPoint | ReplyCut] = [
    FailPoint(
        "cut lock command", {"failCommands": ["findAndModify"], "closeConnection": True}, (1, 3)
    ),
    FailPoint("cut guarded write", {"failCommands": ["update"], "closeConnection": True}, (1, 2)),
    FailPoint("error 91", {"failCommands": ["findAndModify", "update"], "errorCode": 91}, (1, 3)),
    FailPoint(
        "error 10107", {"failCommands": ["findAndModify", "update"], "errorCode": 10107}, (1, 2)
    ),
    FailPoint("error 2", {"failCommands": ["findAndModify"], "errorCode": 2}, (1, 2)),
    FailPoint(
        "lost reply",
        {
            "failCommands": ["findAndModify"],
            "writeConcernError": {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "chaos"},
        },
        (1, 2),
    ),
    FailPoint(
        "blocked past timeout",
        {"failCommands": ["findAndModify"], "blockConnection": True, "blockTimeMS": 2500},
        (1, 1),
    ),
    ReplyCut("lock command", frozenset({"findAndModify"}), (1, 2)),
    ReplyCut("guarded write", frozenset({"update"}), (1, 2)),
]


@dataclass(frozen=True)
class Plan:
    """The shape of a run."""

    workers: int
    documents: int
    names: int
    seconds: float
    restarts: tuple[float, ...]  # fractions of the run at which the server is killed
    kill_every: float  # seconds between holder kills, on average
    fault_every: float  # seconds between fail points, on average


def server_ms(client: MongoClient[Doc]) -> int:
    local: datetime = client.admin.command("hello")["localTime"]
    return ms(local)


class Fleet:
    """The worker processes, one per slot; a killed one is replaced in its slot."""

    def __init__(self, plan: Plan, uri: str, journal_dir: Path, deadline: float, seed: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.holding: Any = self._context.Array("b", plan.workers, lock=False)
        self._plan, self._uri, self._dir, self._deadline = plan, uri, journal_dir, deadline
        self._seed = seed
        self.processes: dict[int, Any] = {}
        self.configs: dict[int, WorkerConfig] = {}
        self._generation: Counter[int] = Counter()

    def start(self, slot: int) -> None:
        self._generation[slot] += 1
        config = WorkerConfig(
            uri=self._uri,
            journal_dir=str(self._dir),
            slot=slot,
            generation=self._generation[slot],
            seed=self._seed * 1000 + slot * 100 + self._generation[slot],
            deadline=self._deadline,
            documents=self._plan.documents,
            names=self._plan.names,
        )
        self.holding[slot] = 0
        process = self._context.Process(target=work, args=(config, self.holding), daemon=True)
        process.start()
        self.processes[slot], self.configs[slot] = process, config

    def holders(self) -> list[int]:
        return [slot for slot, p in self.processes.items() if self.holding[slot] and p.is_alive()]

    def kill(self, slot: int) -> WorkerConfig:
        process = self.processes[slot]
        process.kill()
        process.join()
        return self.configs[slot]

    def join(self, timeout: float) -> int:
        """Wait for every worker to finish; kill the ones still running. Returns how many."""
        until = time.monotonic() + timeout
        stragglers = 0
        for process in self.processes.values():
            process.join(max(0.0, until - time.monotonic()))
            if process.is_alive():
                stragglers += 1
                process.kill()
                process.join()
        return stragglers


def open_grants(journal: Path) -> list[Doc]:
    """The grants a (dead) worker's journal shows it had not started to release."""
    events, _ = read_journal(journal)
    releasing = {e["id"] for e in events if e["e"] == "releasing"}
    return [e for e in events if e["e"] == "grant" and e["id"] not in releasing]


def watch_dead_lock(
    client: MongoClient[Doc], resource: Resource, grant: Doc, killed_at: int, out: list[DeadHolder]
) -> None:
    """Poll the dead holder's guard until it stops matching (see the module docstring)."""
    lock = lock_from(grant)
    lifetime = grant["exp"] - grant["acq"]
    collection, guard = resource.lock_collection(), resource.guard(lock)
    last_live: int | None = None
    freed: int | None = None
    give_up = time.monotonic() + lifetime / 1000 + 20
    while time.monotonic() < give_up:
        try:
            # Read the time first: the lock was live at least until then if the guard matches.
            now = server_ms(client)
            live = collection.count_documents(guard) > 0
        except PyMongoError:
            time.sleep(0.1)
            continue
        if not live:
            freed = now
            break
        last_live = now
        time.sleep(0.05)
    out.append(DeadHolder(resource.key, lock.id, lifetime, killed_at, last_live, freed))


class Conductor:
    """Drives one run: workers, fail points, holder kills and server restarts."""

    def __init__(self, plan: Plan, server: EmbeddedServer, journal_dir: Path, seed: int) -> None:
        self.plan, self.server, self.journal_dir = plan, server, journal_dir
        self.rng = random.Random(seed)
        self.seed = seed
        self.client: MongoClient[Doc] = MongoClient(
            server.uri, appName="chaos-conductor", **client_options()
        )
        self.resources = resources(self.client[DB_NAME], plan.documents, plan.names)
        # The workers' way to the server; the conductor's own client goes direct.
        self.cutter = ReplyCutter(("127.0.0.1", server.port))
        self.cutter.start()
        self.faults: Counter[str] = Counter()
        self.restarted_at: list[int] = []
        self.killed_at: list[int] = []  # this host's clock, epoch ms, as the workers journal
        self.dead_holders: list[DeadHolder] = []
        self._watchers: list[threading.Thread] = []

    def close(self) -> None:
        self.client.close()
        self.cutter.stop()

    @property
    def workers_uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.cutter.port}/?directConnection=true"

    def run(self) -> int:
        """Run the workers for ``plan.seconds`` under faults; return the stragglers killed."""
        plan, rng = self.plan, self.rng
        start = time.time()
        deadline = start + plan.seconds
        fleet = Fleet(plan, self.workers_uri, self.journal_dir, deadline, self.seed)
        for slot in range(plan.workers):
            fleet.start(slot)
        restarts = [start + fraction * plan.seconds for fraction in plan.restarts]
        next_kill = start + rng.uniform(0.5, 1.5) * plan.kill_every
        next_fault = start + rng.uniform(0.5, 1.5) * plan.fault_every
        # Leave the last seconds fault-free so the final state can settle and be checked.
        while time.time() < deadline - 2:
            now = time.time()
            if restarts and now >= restarts[0]:
                restarts.pop(0)
                self.restart_server()
            elif now >= next_kill and self.kill_a_holder(fleet):
                next_kill = now + rng.uniform(0.5, 1.5) * plan.kill_every
            elif now >= next_fault:
                self.arm_fault()
                next_fault = now + rng.uniform(0.5, 1.5) * plan.fault_every
            time.sleep(0.05)
        self._quietly(self.disarm)
        stragglers = fleet.join(timeout=max(0.0, deadline - time.time()) + 15)
        for watcher in self._watchers:
            watcher.join()
        return stragglers

    def _quietly(self, action: Callable[[], object]) -> None:
        for _ in range(50):
            try:
                action()
            except PyMongoError:
                time.sleep(0.1)
            else:
                return

    def disarm(self) -> None:
        self.cutter.disarm()
        self.client.admin.command("configureFailPoint", "failCommand", mode="off")

    def arm_fault(self) -> None:
        fault = self.rng.choice(FAULTS)
        times = self.rng.randint(*fault.times)
        if isinstance(fault, ReplyCut):
            self.cutter.cut_replies(fault.commands, times)
            self.faults[f"reply cut armed: {fault.name}"] += 1
            return
        try:
            self.client.admin.command(
                "configureFailPoint",
                "failCommand",
                mode={"times": times},
                data={**fault.data, "appName": APP_NAME},
            )
        except PyMongoError:
            return  # the server is down; the next fault will do
        self.faults[f"fail point: {fault.name}"] += 1

    def kill_a_holder(self, fleet: Fleet) -> bool:
        holders = fleet.holders()
        if not holders:
            return False
        slot = self.rng.choice(holders)
        try:
            killed_at = server_ms(self.client)
        except PyMongoError:
            return False
        config = fleet.kill(slot)
        fleet.start(slot)
        self.faults["SIGKILL of a holder"] += 1
        for grant in open_grants(Path(config.journal_path)):
            watcher = threading.Thread(
                target=watch_dead_lock,
                args=(self.client, self.resources[grant["r"]], grant, killed_at, self.dead_holders),
            )
            watcher.start()
            self._watchers.append(watcher)
        return True

    def restart_server(self) -> None:
        self.killed_at.append(int(time.time() * 1000))
        self.server.stop(kill=True)
        self.faults["kill -9 of the server"] += 1
        self.server.start()
        self._quietly(lambda: self.restarted_at.append(server_ms(self.client)))
