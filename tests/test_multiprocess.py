"""Several processes contending for one document: never two conflicting holders at once."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import AssertiveLock, MultiLock
from docmultilock._bench._sets import PROCESSES as PROCESSES_OF_SETS
from docmultilock._bench._sets import run_sets
from tests._workers import contend, hold_read_lock

Doc = dict[str, Any]

PROCESSES = 4
SECONDS = 4.0
SET_SECONDS = 20.0


@pytest.mark.slow
def test_readers_and_writers_in_several_processes_exclude_each_other(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 1, "n": 0, "w_in": 0, "r_in": 0})
    args = [
        (uri, collection.database.name, collection.name, SECONDS, seed) for seed in range(PROCESSES)
    ]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        results = pool.starmap(contend, args)
    total = {key: sum(r[key] for r in results) for key in results[0]}
    print(f"contention over {SECONDS} s in {PROCESSES} processes: {total}")
    assert total["violations"] == 0
    assert total["write"] > 0
    assert total["read"] > 0
    final = collection.find_one({"_id": 1})
    assert final is not None
    # Lost updates would show as fewer increments than writes granted.
    assert final["n"] == total["write"]
    assert (final["w_in"], final["r_in"]) == (0, 0)
    assert final["lock"]["holders"] == []


@pytest.mark.slow
def test_a_writer_gets_through_after_a_reader_process_is_killed(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 1})
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    reader = spawn.Process(
        target=hold_read_lock, args=(uri, collection.database.name, collection.name, 1.0, ready)
    )
    reader.start()
    try:
        assert ready.wait(60), "the reader never took its lock"
        locks = MultiLock(collection, lock_timeouts={"read": 1.0, "write": 10.0})
        with pytest.raises(AssertiveLock) as exc:
            locks.acquire({"_id": 1}, tag="write")
        pending = exc.value.lock
        reader.kill()  # SIGKILL: the reader never releases
        reader.join()
        deadline = time.monotonic() + 5.0
        while pending.pending:
            assert time.monotonic() < deadline, "the writer waited on a dead reader"
            time.sleep(0.05)
            try:
                pending = locks.acquire({"_id": 1}, lock=pending)
            except AssertiveLock as again:
                pending = again.lock
    finally:
        reader.kill()
        reader.join()
        reader.close()


@pytest.mark.slow
def test_lock_sets_in_several_processes_neither_deadlock_nor_overlap(
    uri: str, collection: Collection[Doc]
) -> None:
    # 8 processes hold random sets of 2 to 4 of 10 documents, each given in a random order,
    # for 20 s (the worker of bench scenario 14): a deadlock shows as a set timing out.
    where = (collection.database.name, collection.name)
    results = run_sets(uri, where, SET_SECONDS, (2, 4))
    print("grants per process:", [r["grants"] for r in results])
    assert [r["violations"] for r in results] == [0] * PROCESSES_OF_SETS
    assert [r["timeouts"] for r in results] == [0] * PROCESSES_OF_SETS
    assert all(r["grants"] > 0 for r in results)
    assert collection.count_documents({"inside": {"$ne": 0}}) == 0
