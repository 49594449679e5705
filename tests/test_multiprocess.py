"""Several processes contending for one document: never two conflicting holders at once."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from pymongo.collection import Collection

from tests._workers import contend

Doc = dict[str, Any]

PROCESSES = 4
SECONDS = 4.0


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
