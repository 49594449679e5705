"""The recipes (examples/recipe_*.py) run as scripts and do what their docstrings say.

Each runs once as a script against the test server, then is imported and driven
in-process: Flask's and Django's test clients, Celery's eager mode.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest

# Django ships no type hints (django-stubs would need a mypy plugin): its names are Any here.
from django.test import Client  # type: ignore[import-untyped]
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database

from docmultilock import LockWasReacquired, NamedLocks, WriteLock
from docmultilock.http import PROBLEM_JSON
from tests.helpers import Doc
from tests.test_examples import load_example, run_example

ORDER = {"_id": 1, "status": "new", "total": 10}
BAD_BODIES = [
    {"status": {"$unset": ""}},
    {"status": ["paid"]},
    {"status": "lost"},
    {"status": None},
    {},
    ["paid"],
]


def stored(collection: Collection[Doc]) -> Doc:
    return collection.find_one({"_id": 1}) or {}


# -- Flask ---------------------------------------------------------------------------------


def test_flask_recipe_script_answers_a_busy_order_with_problem_json(uri: str) -> None:
    lines = run_example("recipe_flask.py", uri).splitlines()

    assert lines == [
        'PUT /orders/1 {"status": "paid"} -> 200 application/json',
        "  order: {'_id': 1, 'status': 'paid', 'total': 10}",
        'PUT /orders/1 {"status": "shipped"} -> 409 application/problem+json',
        "  while another holds it: Lock wait timed out (LockTimeout)",
        "  status still: paid",
        'PUT /orders/2 {"status": "paid"} -> 404 application/problem+json',
        "  unknown order: Document not found (ResourceNotFound)",
        'PUT /orders/1 {"status": {"$unset": ""}} -> 400 application/problem+json',
        'PUT /orders/1 {"status": "shipped"} -> 200 application/json',
        "  order: {'_id': 1, 'status': 'shipped', 'total': 10}",
    ]


@pytest.fixture(scope="module")
def flask_recipe() -> ModuleType:
    return load_example("recipe_flask.py")


@pytest.fixture
def flask_browser(flask_recipe: ModuleType, collection: Collection[Doc]) -> Any:
    collection.insert_one(dict(ORDER))
    return flask_recipe.create_app(collection, wait=0.2).test_client()


def test_flask_recipe_writes_under_the_lock_and_releases_it(
    flask_browser: Any, collection: Collection[Doc]
) -> None:
    response = flask_browser.put("/orders/1", json={"status": "paid"})

    assert response.status_code == 200
    assert response.get_json() == {**ORDER, "status": "paid"}
    assert stored(collection)["lock"]["holders"] == []


def test_flask_recipe_answers_409_problem_json_and_writes_nothing_while_another_holds_it(
    flask_browser: Any, collection: Collection[Doc]
) -> None:
    with WriteLock(collection).hold({"_id": 1}):
        response = flask_browser.put("/orders/1", json={"status": "paid"})

    assert response.status_code == 409
    assert response.mimetype == PROBLEM_JSON
    assert response.get_json()["code"] == "LockTimeout"
    assert stored(collection)["status"] == "new"


def test_flask_recipe_answers_404_problem_json_for_an_unknown_order(flask_browser: Any) -> None:
    response = flask_browser.put("/orders/2", json={"status": "paid"})

    assert response.status_code == 404
    assert response.mimetype == PROBLEM_JSON
    assert response.get_json()["code"] == "ResourceNotFound"


@pytest.mark.parametrize("body", BAD_BODIES)
def test_flask_recipe_refuses_a_status_it_does_not_know_with_400(
    flask_browser: Any, collection: Collection[Doc], body: Any
) -> None:
    response = flask_browser.put("/orders/1", json=body)

    assert response.status_code == 400
    assert response.mimetype == PROBLEM_JSON
    assert response.get_json()["title"] == "Bad Request"
    assert collection.find_one({"_id": 1}) == ORDER


def test_flask_recipe_serves_two_requests_for_one_order_one_after_the_other(
    flask_recipe: ModuleType, collection: Collection[Doc]
) -> None:
    collection.insert_one(dict(ORDER))
    browser = flask_recipe.create_app(collection, wait=10.0).test_client()

    with ThreadPoolExecutor(2) as pool:
        statuses = ["paid", "shipped"]
        codes = list(pool.map(lambda s: browser.put("/orders/1", json={"status": s}), statuses))

    assert [response.status_code for response in codes] == [200, 200]
    assert stored(collection)["status"] in statuses
    assert stored(collection)["lock"]["holders"] == []


# -- Django --------------------------------------------------------------------------------


def test_django_recipe_script_answers_a_busy_order_with_problem_json(uri: str) -> None:
    lines = run_example("recipe_django.py", uri).splitlines()

    assert lines == [
        "PUT /orders/1 -> 200 application/json",
        "  order: {'_id': 1, 'status': 'paid', 'total': 10}",
        "PUT /orders/1 -> 409 application/problem+json",
        "  while another holds it: Lock wait timed out (LockTimeout)",
        "  status still: paid",
        "PUT /orders/2 -> 404 application/problem+json",
        "  unknown order: Document not found (ResourceNotFound)",
        "PUT /orders/1 -> 400 application/json",
        f"PUT /orders/{2**64} -> 404 text/html; charset=utf-8",
        "PUT /orders/1 -> 200 application/json",
        "  order: {'_id': 1, 'status': 'shipped', 'total': 10}",
    ]


@pytest.fixture
def django_browser(django_recipe: ModuleType, collection: Collection[Doc]) -> Any:
    collection.insert_one(dict(ORDER))
    django_recipe.use_orders(collection, wait=0.2)
    return Client()


def put_json(browser: Any, path: str, body: object) -> Any:
    return browser.put(path, json.dumps(body), content_type="application/json")


def test_django_recipe_writes_under_the_lock_and_releases_it(
    django_browser: Any, collection: Collection[Doc]
) -> None:
    response = put_json(django_browser, "/orders/1", {"status": "paid"})

    assert response.status_code == 200
    assert json.loads(response.content) == {**ORDER, "status": "paid"}
    assert stored(collection)["lock"]["holders"] == []


def test_django_recipe_answers_409_problem_json_and_writes_nothing_while_another_holds_it(
    django_browser: Any, collection: Collection[Doc]
) -> None:
    with WriteLock(collection).hold({"_id": 1}):
        response = put_json(django_browser, "/orders/1", {"status": "paid"})

    assert response.status_code == 409
    assert response["Content-Type"] == PROBLEM_JSON
    assert json.loads(response.content)["code"] == "LockTimeout"
    assert stored(collection)["status"] == "new"


def test_django_recipe_answers_404_problem_json_for_an_unknown_order(django_browser: Any) -> None:
    response = put_json(django_browser, "/orders/2", {"status": "paid"})

    assert response.status_code == 404
    assert response["Content-Type"] == PROBLEM_JSON
    assert json.loads(response.content)["code"] == "ResourceNotFound"


@pytest.mark.parametrize("path", [f"/orders/{2**63}", "/orders/-1", "/orders/abc"])
def test_django_recipe_matches_only_int64_order_ids(
    django_browser: Any, collection: Collection[Doc], path: str
) -> None:
    response = put_json(django_browser, path, {"status": "paid"})

    assert response.status_code == 404
    assert response["Content-Type"] != PROBLEM_JSON  # the route's own 404: nothing was locked
    assert collection.find_one({"_id": 1}) == ORDER


@pytest.mark.parametrize("body", BAD_BODIES)
def test_django_recipe_refuses_a_status_it_does_not_know_with_400(
    django_browser: Any, collection: Collection[Doc], body: Any
) -> None:
    response = put_json(django_browser, "/orders/1", body)

    assert response.status_code == 400
    assert collection.find_one({"_id": 1}) == ORDER


def test_django_recipe_allows_only_put(django_browser: Any) -> None:
    assert django_browser.get("/orders/1").status_code == 405


# -- Celery --------------------------------------------------------------------------------


def test_celery_recipe_script_skips_a_second_run_while_the_first_holds_the_job(uri: str) -> None:
    lines = run_example("recipe_celery.py", uri).splitlines()

    assert lines == [
        "second run, while the first holds nightly-report: {'skipped': True}",
        lines[1],
        "report after it: step 3",
        "breaking the lock of a run in progress: expect its loss logged, then Celery's "
        "traceback of the failed task, on stderr",
        "run whose lock was broken: failed=True, LockWasReacquired",
    ]
    assert lines[1].startswith("first run: 3 steps, ")
    assert lines[1].endswith(" s under a 1.5 s lock")
    assert float(lines[1].split(", ")[1].split(" s ")[0]) > 1.5  # outlived one lifetime


@pytest.fixture(scope="module")
def celery_recipe() -> ModuleType:
    return load_example("recipe_celery.py")


@pytest.fixture
def job_db(client: MongoClient[Doc]) -> Iterator[Database[Doc]]:
    """A database of its own, so that the job's name is locked by nobody else."""
    db = client[f"recipe_{uuid.uuid4().hex[:12]}"]
    db.reports.insert_one({"_id": "nightly-report", "fence": 0, "step": 0})
    try:
        yield db
    finally:
        client.drop_database(db.name)


def report(db: Database[Doc]) -> Doc:
    return db.reports.find_one({"_id": "nightly-report"}) or {}


def test_celery_recipe_runs_the_job_fenced_and_frees_the_name(
    celery_recipe: ModuleType, job_db: Database[Doc]
) -> None:
    celery_recipe.use_database(job_db, lock_timeout=5.0, step_seconds=0.0)

    result = celery_recipe.nightly_report_task.delay(2)

    assert result.successful()
    assert result.result["steps"] == 2
    assert report(job_db)["step"] == 2
    assert report(job_db)["fence"] > 0
    assert not NamedLocks(job_db).locked("nightly-report")


def test_celery_recipe_skips_the_job_while_another_run_holds_its_name(
    celery_recipe: ModuleType, job_db: Database[Doc]
) -> None:
    celery_recipe.use_database(job_db, lock_timeout=5.0, step_seconds=0.0)

    with NamedLocks(job_db).hold("nightly-report"):
        result = celery_recipe.nightly_report_task.delay(2)

    assert result.successful()
    assert result.result == {"skipped": True}
    assert report(job_db)["step"] == 0


def test_celery_recipe_keeps_the_name_for_a_job_longer_than_the_lock_lifetime(
    celery_recipe: ModuleType, job_db: Database[Doc]
) -> None:
    celery_recipe.use_database(job_db, lock_timeout=1.0, step_seconds=0.5)

    result = celery_recipe.nightly_report_task.delay(3)

    assert result.successful()
    assert result.result["steps"] == 3
    assert result.result["seconds"] > 1.0


def test_celery_recipe_stops_and_fails_the_task_when_its_lock_is_broken(
    celery_recipe: ModuleType, job_db: Database[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    # The loss is seen at the first extension (a third of 0.9 s), well before the first
    # step ends (1 s): the step writes nothing.
    celery_recipe.use_database(job_db, lock_timeout=0.9, step_seconds=1.0)
    locks = NamedLocks(job_db)
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.append(celery_recipe.nightly_report_task.delay(3))
    )

    with caplog.at_level(logging.ERROR, logger=celery_recipe.__name__):
        worker.start()
        deadline = time.monotonic() + 30.0
        while not locks.locked("nightly-report") and time.monotonic() < deadline:
            time.sleep(0.01)
        locks.break_lock("nightly-report", everyone=True)
        worker.join(30.0)

    (result,) = results
    assert result.failed()
    assert isinstance(result.result, LockWasReacquired)
    assert report(job_db)["step"] == 0
    assert "lost its lock" in caplog.text
