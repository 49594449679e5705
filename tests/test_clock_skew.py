"""Expiry follows the server's clock only: a client an hour off neither steals nor keeps.

A worker process runs under ``faketime`` (libfaketime, Debian's ``faketime`` package) one
hour ahead or one hour behind, and takes locks on the shared test server beside a normal
client in this process. Were the client's clock used anywhere, the client an hour ahead
would see every live lock as long expired, and the client an hour behind would see its
expired lock as good for another hour.

``faketime`` must be on PATH (``.ci/run`` installs it). Without it these tests skip with
"faketime not installed", except in CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import Lock, LockConflict, LockSchema, MultiLock, WriteLock
from tests.helpers import server_now, skewed_clock, stored_lock, wait_until
from tests.subjects import IN_DOCUMENTS

Doc = dict[str, Any]

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
#: faketime offsets, and the same offsets in seconds.
SKEWS = {"+1h": 3600.0, "-1h": -3600.0}
#: A lifetime long enough to stay live through a test, short beside the skew.
LIVE = 30.0
#: A lifetime that runs out during a test.
SHORT = 0.5

#: What each class raises when a live lock is in the way, and when a lock is gone.
REFUSED = {"WriteLock": "LockAlreadyTaken", "MultiLock": "CooperativeLock"}
LOST = {"WriteLock": "LockWasReacquired", "MultiLock": "LockNotFound"}


class SkewedClient:
    """The worker process under faketime: ask it to act, one JSON line each way."""

    def __init__(self, process: subprocess.Popen[str], skew: float, log: Path) -> None:
        self.process = process
        self.skew = skew
        self.log = log

    def ask(self, op: str, **request: Any) -> Doc:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the skewed worker died: {self.log.read_text()}"
        answer: Doc = json.loads(line)
        return answer

    def clock(self) -> datetime:
        return datetime.fromisoformat(self.ask("clock")["now"])


@pytest.fixture(scope="module", params=list(SKEWS))
def skewed(
    request: pytest.FixtureRequest,
    docmultilock_uri: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SkewedClient]:
    offset: str = request.param
    clock = skewed_clock(offset)
    log = tmp_path_factory.mktemp("skew") / "worker.log"
    worker = [sys.executable, "-m", "tests._clock_worker", docmultilock_uri, "docmultilock_test"]
    with log.open("w") as errors:
        process = subprocess.Popen(
            [*clock, *worker],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=ROOT,
        )
    client = SkewedClient(process, SKEWS[offset], log)
    try:
        yield client
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(params=sorted(IN_DOCUMENTS))
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def normal_acquire(kind: str, collection: Collection[Doc], lock_timeout: float) -> Lock:
    if kind == "MultiLock":
        return MultiLock(collection).acquire({"_id": 1}, tag="write", lock_timeout=lock_timeout)
    return WriteLock(collection).acquire({"_id": 1}, lock_timeout=lock_timeout)


def skewed_acquire(
    skewed: SkewedClient, kind: str, collection: Collection[Doc], lock_timeout: float
) -> Lock:
    answer = skewed.ask("acquire", kind=kind, collection=collection.name, lock_timeout=lock_timeout)
    assert "lock" in answer, answer
    lock: Lock = LockSchema().load(answer["lock"])
    return lock


def dump(lock: Lock) -> Doc:
    data: Doc = LockSchema().dump(lock)
    return data


def test_the_worker_really_runs_an_hour_off(skewed: SkewedClient, client: MongoClient[Doc]) -> None:
    before = time.time()
    seen = skewed.ask("clock")["time"]
    after = time.time()
    assert before + skewed.skew - 5 < seen < after + skewed.skew + 5
    assert abs(skewed.clock() - server_now(client) - timedelta(seconds=skewed.skew)) < timedelta(
        seconds=5
    )


def test_a_skewed_client_cannot_take_a_live_lock(
    skewed: SkewedClient, kind: str, collection: Collection[Doc], doc: Doc
) -> None:
    held = normal_acquire(kind, collection, LIVE)
    before = stored_lock(collection)
    # An hour ahead, the worker's own clock says this lock expired long ago.
    assert (skewed.clock() > held.expires_at) == (skewed.skew > 0)

    answer = skewed.ask("acquire", kind=kind, collection=collection.name, lock_timeout=LIVE)

    assert answer == {"error": REFUSED[kind]}
    assert stored_lock(collection) == before


def test_a_normal_client_cannot_take_a_live_lock_of_a_skewed_client(
    skewed: SkewedClient, kind: str, collection: Collection[Doc], client: MongoClient[Doc], doc: Doc
) -> None:
    held = skewed_acquire(skewed, kind, collection, LIVE)
    # The expiry the worker was given is the server's now plus the lifetime, not its own.
    expected = server_now(client) + timedelta(seconds=LIVE)
    assert abs(held.expires_at - expected) < timedelta(seconds=5)

    with pytest.raises(LockConflict) as exc:
        normal_acquire(kind, collection, LIVE)

    assert type(exc.value).__name__ == REFUSED[kind]
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [held.id]


def test_a_skewed_client_cannot_keep_its_lock_past_the_servers_expiry(
    skewed: SkewedClient, kind: str, collection: Collection[Doc], client: MongoClient[Doc], doc: Doc
) -> None:
    held = skewed_acquire(skewed, kind, collection, SHORT)
    wait_until(lambda: server_now(client) > held.expires_at)
    # An hour behind, the worker's own clock says its lock has most of an hour left.
    assert (skewed.clock() < held.expires_at) == (skewed.skew < 0)

    extended = skewed.ask("extend", kind=kind, collection=collection.name, lock=dump(held))

    assert extended == {"error": LOST[kind]}
    taken = normal_acquire(kind, collection, LIVE)
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [taken.id]


def test_a_skewed_client_cannot_write_through_its_expired_lock(
    skewed: SkewedClient, kind: str, collection: Collection[Doc], client: MongoClient[Doc], doc: Doc
) -> None:
    held = skewed_acquire(skewed, kind, collection, SHORT)
    live = skewed.ask(
        "guarded_write", kind=kind, collection=collection.name, lock=dump(held), value="live"
    )
    assert live == {"matched": 1}
    wait_until(lambda: server_now(client) > held.expires_at)

    late = skewed.ask(
        "guarded_write", kind=kind, collection=collection.name, lock=dump(held), value="late"
    )

    assert late == {"matched": 0}
    assert (collection.find_one({"_id": 1}) or {})["written"] == "live"
