"""The examples run as scripts against the test server and say what the docs say they do."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pymongo.collection import Collection
from werkzeug.test import Client

from docmultilock import MultiLock
from docmultilock.http import PROBLEM_JSON
from docmultilock.testing import URI_VARIABLE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, uri: str, *, python: str | Path = sys.executable) -> str:
    """Run ``examples/<name>`` with ``python`` and the test server's URI; return its output."""
    done = subprocess.run(
        [str(python), str(EXAMPLES / name)],
        env={**os.environ, URI_VARIABLE: uri},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_shows_the_write_lock_then_the_readers_and_writer(uri: str) -> None:
    lines = run_example("quickstart.py", uri).splitlines()

    assert "guarded write while held: matched 1" in lines
    assert any(
        line.startswith("second acquire refused: LockAlreadyTaken (HTTP 409)") for line in lines
    )
    assert "guarded write after release: matched 0" in lines
    assert "writer registered as pending, waits for ('read',)" in lines
    assert "new reader refused by the pending writer: blocking_tags=('write',)" in lines
    assert any(line.startswith("writer granted") and "pending=False" in line for line in lines)
    assert lines[-1] == "order now: {'_id': 1, 'status': 'paid', 'total': 10}"


def test_edit_example_writes_guarded_and_reports_the_loss(uri: str) -> None:
    lines = run_example("edit_document.py", uri).splitlines()

    assert lines[:5] == [
        "editing INV-1: 1 line(s), total 10",
        "guarded write: matched 1",
        "second editor gave up: LockTimeout (HTTP 409)",
        "reader refused during the edit: CooperativeLock",
        "edit done, lock released",
    ]
    assert lines[-5:] == [
        "an operator broke 1 lock(s): ['write']",
        "guarded write after the loss: matched 0",
        "hold() raised after the block: LockNotFound",
        "on_lost was called with: ['LockNotFound']",
        "invoice now: status=draft total=90",
    ]


def test_web_example_answers_conflicts_with_problem_json(uri: str) -> None:
    lines = run_example("web_werkzeug.py", uri).splitlines()

    assert lines[0] == "POST /orders/1/lock -> 201 application/json"
    assert lines[2] == "POST /orders/1/lock -> 409 application/problem+json"
    assert lines[3].startswith("  editor B: Lock already taken (LockAlreadyTaken): ")
    assert "  saved: {'_id': 1, 'status': 'paid', 'total': 10}" in lines
    assert "  stale lock: LockWasReacquired" in lines
    assert "POST /orders/2/lock -> 404 application/problem+json" in lines
    assert 'PUT /orders/1 {"lock": "' in lines[4]
    assert lines[4].endswith('...", "status": "paid"} -> 200 application/json')
    assert "POST /orders/%7B%22$ne%22:null%7D/lock -> 404 application/problem+json" in lines
    assert f"POST /orders/{2**64}/lock -> 404 application/problem+json" in lines
    assert 'POST /locks {"order_id": {"$ne": null}} -> 400 application/problem+json' in lines
    assert 'POST /locks {"order_id": "1"} -> 400 application/problem+json' in lines
    assert "  holders of order 1 after them: []" in lines
    assert lines[-1] == 'POST /locks {"order_id": 1} -> 201 application/json'


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>`` as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{Path(name).stem}", EXAMPLES / name)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered as a module is (dataclasses resolve their annotations through sys.modules).
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("status", [{"$ne": None}, ["paid"], 3, None, "lost"])
def test_web_example_refuses_a_status_that_is_not_one_of_its_strings_with_400(
    collection: Collection[dict[str, Any]], status: Any
) -> None:
    collection.insert_one({"_id": 1, "status": "new"})
    browser = Client(load_example("web_werkzeug.py").OrdersApp(collection))
    lock = browser.post("/locks", json={"order_id": 1}).get_json()["lock"]

    response = browser.put("/orders/1", json={"lock": lock, "status": status})

    assert response.status_code == 400
    assert response.mimetype == PROBLEM_JSON
    assert response.get_json()["status"] == 400
    assert collection.find_one({"_id": 1}, {"lock": 0}) == {"_id": 1, "status": "new"}


@pytest.mark.parametrize(
    "order_id",
    [{"$ne": None}, {"$gt": 0}, {"$where": "true"}, "1", [1], 1.5, True, None, 2**64, -1],
)
def test_web_example_refuses_an_order_id_that_is_not_an_int64_with_400(
    collection: Collection[dict[str, Any]], order_id: Any
) -> None:
    collection.insert_many([{"_id": 1, "status": "new"}, {"_id": 2, "status": "new"}])
    browser = Client(load_example("web_werkzeug.py").OrdersApp(collection))

    response = browser.post("/locks", json={"order_id": order_id})

    assert response.status_code == 400
    assert response.mimetype == PROBLEM_JSON
    assert list(collection.find({}, sort=[("_id", 1)])) == [
        {"_id": 1, "status": "new"},
        {"_id": 2, "status": "new"},
    ]


def test_web_example_locks_the_order_named_in_the_body(
    collection: Collection[dict[str, Any]],
) -> None:
    collection.insert_one({"_id": 1, "status": "new"})
    browser = Client(load_example("web_werkzeug.py").OrdersApp(collection))

    response = browser.post("/locks", json={"order_id": 1})

    assert response.status_code == 201
    assert browser.post("/locks", json={"order_id": 1}).status_code == 409


def test_fastapi_example_answers_conflicts_with_problem_json(uri: str) -> None:
    lines = run_example("web_fastapi.py", uri).splitlines()

    assert lines[:8] == [
        "GET /orders/1 -> 200 application/json",
        "  order: {'_id': 1, 'status': 'new', 'total': 10}",
        "  paid twice at once: [200, 200]",
        "  charged once: True",
        "GET /orders/1 -> 409 application/problem+json",
        "  while it is held: Lock wait timed out (LockTimeout)",
        "GET /orders/1 -> 200 application/json",
        lines[7],
    ]
    assert lines[7].startswith("  order: {'_id': 1, 'status': 'paid', 'total': 10, 'payment': ")
    assert lines[8:] == [
        "POST /orders/2/pay -> 404 application/problem+json",
        "  unknown order: Document not found (ResourceNotFound)",
        "GET /orders/%7B%22$ne%22:null%7D -> 422 application/json",
        f"GET /orders/{2**64} -> 422 application/json",
    ]


def test_fastapi_example_app_imports_without_the_test_clients_http_client() -> None:
    # What `uvicorn web_fastapi:app` does, with httpx and httpx2 not importable.
    script = (
        "import sys\n"
        "sys.modules['httpx'] = sys.modules['httpx2'] = None\n"
        "import web_fastapi\n"
        "print(type(web_fastapi.app).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert (done.returncode, done.stdout) == (0, "FastAPI\n"), done.stderr


@pytest.fixture
def fastapi_example() -> ModuleType:
    return load_example("web_fastapi.py")


@pytest.fixture
def shop(fastapi_example: ModuleType, uri: str, collection: Collection[dict[str, Any]]) -> FastAPI:
    """The FastAPI example on the test's collection, with order 1 in it."""
    collection.insert_one({"_id": 1, "status": "new", "total": 10})
    app: FastAPI = fastapi_example.create_app(
        uri, database=collection.database.name, collection=collection.name, wait=0.2
    )
    return app


def test_fastapi_example_reads_an_order_without_its_lock(shop: FastAPI) -> None:
    with TestClient(shop) as browser:
        response = browser.get("/orders/1")

    assert response.status_code == 200
    assert response.json() == {"_id": 1, "status": "new", "total": 10}


def test_fastapi_example_pays_with_a_guarded_write_and_releases_the_lock(
    shop: FastAPI, collection: Collection[dict[str, Any]]
) -> None:
    with TestClient(shop) as browser:
        response = browser.post("/orders/1/pay")

    assert response.status_code == 200
    stored = collection.find_one({"_id": 1}) or {}
    assert response.json() == {key: stored[key] for key in ("_id", "status", "total", "payment")}
    assert stored["status"] == "paid"
    assert stored["lock"]["holders"] == []


def test_fastapi_example_charges_once_when_paid_twice_at_once(
    fastapi_example: ModuleType, uri: str, collection: Collection[dict[str, Any]]
) -> None:
    collection.insert_one({"_id": 1, "status": "new", "total": 10})
    # Long enough for the second request to outwait the first on a loaded machine.
    shop: FastAPI = fastapi_example.create_app(
        uri, database=collection.database.name, collection=collection.name, wait=10.0
    )
    with TestClient(shop) as browser, ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: browser.post("/orders/1/pay"), range(2)))

    assert [response.status_code for response in both] == [200, 200]
    payments = {response.json()["payment"] for response in both}
    assert payments == {(collection.find_one({"_id": 1}) or {})["payment"]}


@pytest.mark.parametrize(("method", "path"), [("GET", "/orders/1"), ("POST", "/orders/1/pay")])
def test_fastapi_example_answers_409_problem_json_while_another_holds_the_write_lock(
    shop: FastAPI, collection: Collection[dict[str, Any]], method: str, path: str
) -> None:
    with TestClient(shop) as browser, MultiLock(collection).hold({"_id": 1}, tag="write"):
        response = browser.request(method, path)

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["code"] == "LockTimeout"
    assert (collection.find_one({"_id": 1}) or {})["status"] == "new"


@pytest.mark.parametrize(("method", "path"), [("GET", "/orders/2"), ("POST", "/orders/2/pay")])
def test_fastapi_example_answers_404_problem_json_for_a_missing_order(
    shop: FastAPI, method: str, path: str
) -> None:
    with TestClient(shop) as browser:
        response = browser.request(method, path)

    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["code"] == "ResourceNotFound"


def test_fastapi_example_writes_nothing_when_the_lock_is_lost_during_the_charge(
    fastapi_example: ModuleType,
    shop: FastAPI,
    collection: Collection[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def charge_while_an_admin_clears_the_lock(order: dict[str, Any]) -> str:
        collection.update_one({"_id": 1}, {"$unset": {"lock": ""}})
        return "payment-1"

    monkeypatch.setattr(fastapi_example, "charge", charge_while_an_admin_clears_the_lock)
    with TestClient(shop) as browser:
        response = browser.post("/orders/1/pay")

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["code"] == "LockNotFound"
    assert collection.find_one({"_id": 1}, {"lock": 0}) == {"_id": 1, "status": "new", "total": 10}


@pytest.mark.parametrize("order_id", ["abc", "%7B%22$ne%22:null%7D", "-1", str(2**64), "1.5"])
def test_fastapi_example_refuses_an_id_that_is_not_an_int64_with_422(
    shop: FastAPI, collection: Collection[dict[str, Any]], order_id: str
) -> None:
    with TestClient(shop) as browser:
        response = browser.post(f"/orders/{order_id}/pay")

    assert response.status_code == 422
    assert (collection.find_one({"_id": 1}) or {})["status"] == "new"


def test_beanie_example_saves_under_the_records_lock_and_answers_problem_json(
    uri: str,
) -> None:
    lines = run_example("mapper_beanie.py", uri).splitlines()

    assert lines == [
        "GET /orders/{id} -> 200 application/json",
        "  order: {'number': 7, 'status': 'new', 'total': 10}",
        "POST /orders/{id}/pay -> 200 application/json",
        "  paid: {'number': 7, 'status': 'paid', 'total': 10}",
        "POST /orders/{id}/pay -> 409 application/problem+json",
        "  while it is held: Lock wait timed out (LockTimeout)",
        "POST /orders/{unknown}/pay -> 404 application/problem+json",
        "  unknown order: Document not found (ResourceNotFound)",
        "POST /orders/not-an-id/pay -> 422 application/json",
    ]


def test_mongoengine_example_saves_under_the_lock_and_refuses_the_stale_holder(
    uri: str,
) -> None:
    lines = run_example("mapper_mongoengine.py", uri).splitlines()

    assert lines == [
        "saved under fence 1: paid",
        "lock released: locked=False",
        "stale save refused: LockWasReacquired (HTTP 409)",
        "replacing the record refused; still locked: True",
        "order now: total=20",
    ]


def test_nightly_report_runs_on_exactly_one_instance(uri: str) -> None:
    lines = run_example("nightly_report.py", uri).splitlines()

    running = [line for line in lines if line.endswith(": running nightly-report")]
    skipped = [line for line in lines if ": skipped, another instance" in line]
    assert (len(running), len(skipped)) == (2, 4)  # one of three instances, two nights
    assert "anyone holding nightly-report after the run: False" in lines
    assert lines[-1] == "the next night's fence is larger: True"


def metric_points(reader: Any) -> dict[str, list[Any]]:
    """Every data point the in-memory reader holds, by metric name."""
    points: dict[str, list[Any]] = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


def test_otel_example_counts_grants_refusals_losses_and_times_them(
    collection: Collection[dict[str, Any]], make_lock: Any
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from docmultilock import CooperativeLock, LockNotFound, MultiLock

    example = load_example("otel_metrics.py")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    listener = example.MetricsListener(provider.get_meter("test"))
    locks = make_lock(MultiLock, collection, listener=listener)
    collection.insert_one({"_id": 1})

    first = locks.acquire({"_id": 1}, tag="write")
    with pytest.raises(CooperativeLock):
        locks.acquire({"_id": 1}, tag="write")
    locks.release({"_id": 1}, first)
    second = locks.acquire({"_id": 1}, tag="write")
    locks.break_lock({"_id": 1}, everyone=True)
    with pytest.raises(LockNotFound):
        locks.release({"_id": 1}, second)

    points = metric_points(reader)
    assert [p.value for p in points["docmultilock.grants"]] == [2]
    assert [(dict(p.attributes), p.value) for p in points["docmultilock.refusals"]] == [
        ({"tag": "write", "code": "CooperativeLock"}, 1)
    ]
    assert [p.value for p in points["docmultilock.losses"]] == [1]
    acquire = {p.attributes["outcome"]: p.count for p in points["docmultilock.acquire.duration"]}
    assert acquire == {"granted": 2, "refused": 1}
    (held,) = points["docmultilock.hold.duration"]
    assert held.count == 2
    assert held.sum >= 0


def test_otel_example_forgets_locks_nobody_released_once_they_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from opentelemetry.sdk.metrics import MeterProvider

    from docmultilock import Lock, LockEvent

    example = load_example("otel_metrics.py")
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(example, "time", SimpleNamespace(monotonic=lambda: clock.now))
    listener = example.MetricsListener(MeterProvider().get_meter("test"))
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def event(kind: str, lock_id: str) -> LockEvent:
        lock = Lock(lock_id, "write", 1, start, start + timedelta(seconds=10), 1, False)
        return LockEvent(kind, {"_id": 1}, "write", lock, kind, 0.0)  # type: ignore[arg-type]

    for number in range(1000):  # processes that died holding their locks
        listener.on_granted(event("granted", f"{number:032x}"))
    listener.on_granted(event("granted", "e" * 32))
    clock.now = 9.0
    listener.on_extended(event("extended", "e" * 32))
    clock.now = 11.0
    listener.on_granted(event("granted", "f" * 32))

    assert sorted(listener._granted) == ["e" * 32, "f" * 32]
