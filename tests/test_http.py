"""docmultilock.http: problem details, the Starlette handler and the error factories."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

import pytest
import starlette.exceptions
import werkzeug.exceptions
from bson import ObjectId
from fastapi import FastAPI
from pymongo import AsyncMongoClient
from pymongo.collection import Collection
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from docmultilock import (
    AssertiveLock,
    AsyncWriteLock,
    DbError,
    DbTimeout,
    IncompatibleLockField,
    Lock,
    LockAlreadyTaken,
    LockConflict,
    LockError,
    LockSchema,
    LockWasReacquired,
    ResourceNotFound,
    WriteLock,
)
from docmultilock.http import (
    PROBLEM_JSON,
    DjangoProblemMiddleware,
    install_problem_handler,
    problem_response,
    starlette_error,
    to_problem,
    werkzeug_error,
)
from docmultilock.options import ErrorFactory
from docmultilock.pytest_plugin import CLIENT_OPTIONS

Doc = dict[str, Any]

OID = ObjectId("65f0c0ffee0000000000abcd")
PENDING = Lock(
    id="0123456789abcdef0123456789abcdef",
    tag="write",
    document_id=OID,
    acquired_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    expires_at=datetime(2025, 1, 2, 3, 4, 15, tzinfo=timezone.utc),
    fence=0,
    pending=True,
)

#: One of each error a lock operation raises, as it would be raised.
ERRORS: list[LockError] = [
    LockAlreadyTaken("the document is locked", filter={"_id": OID}, blocking_tags=("write",)),
    AssertiveLock("waiting for read", filter={"_id": OID}, lock=PENDING, blocking_tags=("read",)),
    LockWasReacquired("the lock is gone", filter={"_id": 1}, lock=PENDING),
    ResourceNotFound("no document matches", filter={"_id": 1}),
    IncompatibleLockField("lock holds a string", filter={"_id": 1}),
    DbError("acquire failed: AutoReconnect: db1.internal:27017", filter={"_id": 1}),
    DbTimeout("acquire failed: timed out", filter={"_id": 1}),
]


class TeapotLock(LockConflict):
    """A user's own error with a status werkzeug has no class for."""

    status_code = 499


def status_of(exc: BaseException) -> int:
    """The HTTP status of a werkzeug or Starlette HTTP exception."""
    if isinstance(exc, werkzeug.exceptions.HTTPException):
        assert exc.code is not None
        return exc.code
    assert isinstance(exc, starlette.exceptions.HTTPException)
    return exc.status_code


FACTORIES = [
    pytest.param(werkzeug_error, id="werkzeug"),
    pytest.param(starlette_error, id="starlette"),
]


# to_problem


def test_problem_has_the_standard_members_then_the_error_data() -> None:
    err = LockAlreadyTaken("the document is locked", filter={"_id": OID}, blocking_tags=("write",))

    assert to_problem(err) == {
        "type": "urn:docmultilock:error:LockAlreadyTaken",
        "title": "Lock already taken",
        "status": 409,
        "detail": "the document is locked",
        "code": "LockAlreadyTaken",
        "filter": {"_id": {"$oid": str(OID)}},
        "blocking_tags": ["write"],
    }


def test_problem_of_an_assertive_lock_carries_the_pending_lock_to_continue_with() -> None:
    err = AssertiveLock("waiting for read", lock=PENDING, blocking_tags=("read",))

    problem = json.loads(json.dumps(to_problem(err)))

    assert problem["status"] == 409
    assert problem["title"] == "Lock pending"
    assert problem["blocking_tags"] == ["read"]
    assert LockSchema().load(problem["lock"]) == PENDING


def test_problem_of_a_lost_lock_names_its_id() -> None:
    problem = to_problem(LockWasReacquired("the lock is gone", lock=PENDING))

    assert problem["title"] == "Lock was reacquired"
    assert problem["lock_id"] == PENDING.id


def test_problem_of_a_missing_document_is_404() -> None:
    problem = to_problem(ResourceNotFound("no document matches", filter={"_id": 1}))

    assert (problem["status"], problem["title"], problem["detail"]) == (
        404,
        "Document not found",
        "no document matches",
    )
    assert problem["filter"] == {"_id": 1}


@pytest.mark.parametrize("err", [e for e in ERRORS if e.status_code >= 500], ids=repr)
def test_problem_of_a_server_error_keeps_its_message_and_filter_from_the_client(
    err: LockError,
) -> None:
    problem = to_problem(err)

    assert problem.keys() == {"type", "title", "status", "detail", "code"}
    assert (problem["type"], problem["status"], problem["code"]) == (
        f"urn:docmultilock:error:{err.code}",
        err.status_code,
        err.code,
    )
    assert problem["detail"] == "The server could not complete the lock operation."


def test_problem_of_a_timeout_is_504() -> None:
    problem = to_problem(DbTimeout("acquire failed: timed out"))

    assert (problem["status"], problem["title"]) == (504, "Database timeout")


def test_problem_of_a_subclass_takes_its_nearest_ancestors_title() -> None:
    problem = to_problem(TeapotLock("busy"))

    assert problem["type"] == "urn:docmultilock:error:TeapotLock"
    assert (problem["title"], problem["status"]) == ("Lock conflict", 499)


def test_problem_never_repeats_status_and_message_as_extension_members() -> None:
    for err in ERRORS:
        assert not {"status_code", "message"} & to_problem(err).keys()


@pytest.mark.parametrize("err", ERRORS, ids=repr)
def test_problem_is_json_serialisable(err: LockError) -> None:
    problem = to_problem(err)

    assert json.loads(json.dumps(problem)) == problem


# werkzeug_error


def test_werkzeug_error_is_werkzeugs_class_for_the_status() -> None:
    assert isinstance(werkzeug_error(LockAlreadyTaken("locked")), werkzeug.exceptions.Conflict)
    assert isinstance(werkzeug_error(ResourceNotFound("gone")), werkzeug.exceptions.NotFound)
    assert isinstance(werkzeug_error(DbTimeout("slow")), werkzeug.exceptions.GatewayTimeout)


def test_werkzeug_error_answers_problem_json() -> None:
    err = LockAlreadyTaken("the document is locked", filter={"_id": 1}, blocking_tags=("write",))

    response = werkzeug_error(err).get_response()

    assert response.status_code == 409
    assert response.headers["Content-Type"] == PROBLEM_JSON
    assert json.loads(response.get_data()) == to_problem(err)


def test_werkzeug_error_describes_itself_with_the_problem_detail() -> None:
    assert werkzeug_error(LockAlreadyTaken("locked")).description == "locked"
    assert werkzeug_error(DbError("db1.internal down")).description == (
        "The server could not complete the lock operation."
    )


def test_werkzeug_error_for_a_status_without_a_werkzeug_class_keeps_the_status() -> None:
    exc = werkzeug_error(TeapotLock("busy"))

    assert exc.code == 499
    assert exc.get_response().status_code == 499


def test_werkzeug_error_names_the_package_when_werkzeug_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "werkzeug.exceptions", None)

    with pytest.raises(ImportError, match="pip install werkzeug"):
        werkzeug_error(LockAlreadyTaken("locked"))


# starlette_error


def test_starlette_error_has_the_status_and_the_problem_as_detail() -> None:
    err = LockAlreadyTaken("the document is locked", blocking_tags=("write",))

    exc = starlette_error(err)

    assert isinstance(exc, starlette.exceptions.HTTPException)
    assert exc.status_code == 409
    detail: Any = exc.detail  # typed str by Starlette; a dict here, for FastAPI's handler
    assert detail == to_problem(err)


def test_starlette_error_for_a_missing_document_is_404() -> None:
    assert starlette_error(ResourceNotFound("gone")).status_code == 404


def test_starlette_error_names_the_package_when_starlette_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "starlette.exceptions", None)

    with pytest.raises(ImportError, match="pip install starlette"):
        starlette_error(LockAlreadyTaken("locked"))


# With a real lock


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_taken_lock_raises_the_frameworks_409_caused_by_lock_already_taken(
    collection: Collection[Doc], doc: Doc, factory: ErrorFactory
) -> None:
    locks = WriteLock(collection, error_factory=factory)
    locks.acquire(doc)

    with pytest.raises(Exception) as raised:  # noqa: PT011 - the type depends on the factory
        locks.acquire(doc)

    assert type(raised.value) is type(factory(LockAlreadyTaken("")))
    assert status_of(raised.value) == 409
    assert isinstance(raised.value.__cause__, LockAlreadyTaken)


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_missing_document_raises_the_frameworks_404(
    collection: Collection[Doc], factory: ErrorFactory
) -> None:
    locks = WriteLock(collection, error_factory=factory)

    with pytest.raises(Exception) as raised:  # noqa: PT011 - the type depends on the factory
        locks.acquire({"_id": "no such order"})

    assert status_of(raised.value) == 404
    assert isinstance(raised.value.__cause__, ResourceNotFound)


def test_releasing_a_lost_lock_answers_409_problem_json(
    collection: Collection[Doc], doc: Doc
) -> None:
    locks = WriteLock(collection, error_factory=werkzeug_error)
    lock = locks.acquire(doc)
    locks.release(doc, lock)

    with pytest.raises(werkzeug.exceptions.Conflict) as raised:
        locks.release(doc, lock)

    assert isinstance(raised.value.__cause__, LockWasReacquired)
    problem = json.loads(raised.value.get_response().get_data())
    assert (problem["code"], problem["lock_id"]) == ("LockWasReacquired", lock.id)


def raising(err: Exception) -> Starlette:
    """A Starlette app with the problem handler whose ``POST /`` raises ``err``."""

    async def endpoint(request: Request) -> Response:
        raise err

    app = Starlette(routes=[Route("/", endpoint, methods=["POST"])])
    install_problem_handler(app)
    return app


def a_request() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "headers": []})


# problem_response and install_problem_handler


@pytest.mark.parametrize("err", [e for e in ERRORS if e.status_code < 500], ids=repr)
def test_the_handler_answers_the_problem_at_the_top_level_as_problem_json(
    err: LockError,
) -> None:
    response = TestClient(raising(err)).post("/")

    assert response.status_code == err.status_code
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json() == json.loads(json.dumps(to_problem(err)))


def test_the_handler_hides_a_server_error_from_the_client_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    err = DbError("acquire failed: AutoReconnect: db1.internal:27017", filter={"_id": 1})

    with caplog.at_level(logging.ERROR, logger="docmultilock"):
        response = TestClient(raising(err)).post("/")

    assert response.status_code == 500
    assert "db1.internal" not in response.text
    assert response.json()["detail"] == "The server could not complete the lock operation."
    [record] = caplog.records
    assert record.getMessage() == "POST / answered 500: DbError"
    assert record.exc_info is not None
    assert record.exc_info[1] is err


def test_the_handler_keeps_a_users_own_status() -> None:
    response = TestClient(raising(TeapotLock("busy"))).post("/")

    assert response.status_code == 499
    assert response.json()["type"] == "urn:docmultilock:error:TeapotLock"


def test_the_handler_leaves_other_exceptions_alone() -> None:
    err = ValueError("not a lock error")

    with pytest.raises(ValueError, match="not a lock error"):
        asyncio.run(problem_response(a_request(), err))


def test_the_handler_names_the_package_when_starlette_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = a_request()
    monkeypatch.setitem(sys.modules, "starlette.responses", None)

    with pytest.raises(ImportError, match="pip install starlette"):
        asyncio.run(problem_response(request, LockAlreadyTaken("locked")))


def test_the_module_imports_without_starlette_werkzeug_or_django() -> None:
    code = (
        "import sys\n"
        "for name in ('starlette', 'werkzeug', 'fastapi', 'django'): sys.modules[name] = None\n"
        "import docmultilock.http\n"
        "print(sorted(n for n in sys.modules if n.startswith(('starlette', 'werkzeug', 'django'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    # The blocked entries only.
    assert done.stdout.strip() == "['django', 'starlette', 'werkzeug']"


def test_a_fastapi_app_answers_a_missing_document_with_404_problem_json() -> None:
    app = FastAPI()
    install_problem_handler(app)

    @app.get("/orders/{order_id}")
    async def order(order_id: int) -> dict[str, int]:
        raise ResourceNotFound("no document matches", filter={"_id": order_id})

    response = TestClient(app).get("/orders/7")

    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json() == {
        "type": "urn:docmultilock:error:ResourceNotFound",
        "title": "Document not found",
        "status": 404,
        "detail": "no document matches",
        "code": "ResourceNotFound",
        "filter": {"_id": 7},
    }


def test_a_starlette_app_answers_a_taken_lock_with_409_problem_json(
    collection: Collection[Doc], doc: Doc
) -> None:
    locks = WriteLock(collection)
    locks.acquire(doc)

    def edit(request: Request) -> Response:
        locks.acquire(doc)
        return Response("edited")  # pragma: no cover - the document is locked

    app = Starlette(
        routes=[Route("/edit", edit, methods=["POST"])],
        exception_handlers={LockError: problem_response},
    )
    response = TestClient(app).post("/edit")

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    problem = response.json()
    assert (problem["code"], problem["blocking_tags"]) == ("LockAlreadyTaken", ["write"])


def test_an_async_hold_that_waits_in_vain_answers_409_problem_json(
    uri: str, collection: Collection[Doc], doc: Doc
) -> None:
    WriteLock(collection).acquire(doc)  # another process holds the order

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # An AsyncMongoClient belongs to the loop that made it: the app's, here.
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, **CLIENT_OPTIONS)
        app.state.locks = AsyncWriteLock(client[collection.database.name][collection.name])
        try:
            yield
        finally:
            await client.close()

    async def edit(request: Request) -> Response:
        async with request.app.state.locks.hold(doc, wait=0.2):
            return Response("edited")  # pragma: no cover - the document is locked

    app = Starlette(routes=[Route("/edit", edit, methods=["POST"])], lifespan=lifespan)
    install_problem_handler(app)
    with TestClient(app) as browser:
        response = browser.post("/edit")

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    problem = response.json()
    assert (problem["code"], problem["title"]) == ("LockTimeout", "Lock wait timed out")


def test_starlette_error_on_fastapi_nests_the_problem_under_detail(
    collection: Collection[Doc], doc: Doc
) -> None:
    locks = WriteLock(collection, error_factory=starlette_error)
    locks.acquire(doc)
    app = FastAPI()

    @app.post("/edit")
    def edit() -> str:
        locks.acquire(doc)
        return "edited"  # pragma: no cover - the document is locked

    response = TestClient(app).post("/edit")

    assert response.status_code == 409
    assert response.headers["content-type"] == "application/json"
    assert response.json()["detail"]["code"] == "LockAlreadyTaken"


# -- Django ---------------------------------------------------------------------------------


@pytest.fixture
def django_request(django_recipe: ModuleType) -> Any:
    """A Django request (Django's settings come from the recipe's configuration)."""
    from django.test import RequestFactory  # type: ignore[import-untyped]

    return RequestFactory().put("/orders/1")


def test_the_django_middleware_answers_a_lock_error_as_problem_json_with_its_status(
    django_request: Any,
) -> None:
    middleware = DjangoProblemMiddleware(lambda request: None)
    error = LockAlreadyTaken("locked", filter={"_id": 1})

    response = middleware.process_exception(django_request, error)

    assert (response.status_code, response["Content-Type"]) == (409, PROBLEM_JSON)
    assert json.loads(response.content) == to_problem(error)


def test_the_django_middleware_hides_a_database_error_and_logs_it(
    django_request: Any, caplog: pytest.LogCaptureFixture
) -> None:
    middleware = DjangoProblemMiddleware(lambda request: None)
    error = DbError("connection to db-7.internal:27017 refused", filter={"_id": 1})

    with caplog.at_level(logging.ERROR, logger="docmultilock"):
        response = middleware.process_exception(django_request, error)

    assert response.status_code == 500
    assert response["Content-Type"] == PROBLEM_JSON
    problem = json.loads(response.content)
    assert problem["code"] == "DbError"
    assert "db-7.internal" not in problem["detail"]
    assert "db-7.internal" in caplog.text


def test_the_django_middleware_leaves_other_errors_to_django(django_request: Any) -> None:
    middleware = DjangoProblemMiddleware(lambda request: None)

    assert middleware.process_exception(django_request, ValueError("x")) is None


def test_the_django_middleware_needs_django_only_to_answer(
    django_request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    middleware = DjangoProblemMiddleware(lambda request: None)
    monkeypatch.setitem(sys.modules, "django.http", None)

    with pytest.raises(ImportError, match="pip install django"):
        middleware.process_exception(django_request, LockAlreadyTaken("locked"))
