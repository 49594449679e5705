"""Recipe: a Django view that edits a record in MongoDB under a lock, in one file.

    PUT /orders/<id>   {"status": "paid"}: set the order's status under its write lock

The records live in MongoDB, reached through pymongo: no Django model, no Django database.
The view holds the order's lock with ``WriteLock.hold()`` for the span of the request,
writes through the lock's guard, and releases it on the way out. A middleware,
:class:`docmultilock.http.DjangoProblemMiddleware`, answers every
:class:`~docmultilock.LockError` a view lets through as RFC 9457
``application/problem+json`` with the error's status: 409 while another request (on any
server) holds the order, 404 for an unknown one. Django sees no ``error_factory``: the
lock manager raises its own errors, and the views need no ``try`` for them.

In a project, ``"docmultilock.http.DjangoProblemMiddleware"`` goes in ``MIDDLEWARE``, and
:func:`use_orders` is called once at start-up (an ``AppConfig.ready()``) with the
collection your settings name. Here :func:`configure` makes the whole setup with
``settings.configure()``.

Run it as a script: ``main()`` drives the view with ``django.test.Client``, against
DOCMULTILOCK_MONGODB_URI, or an embedded server when that is unset. It needs Django, which
the ``django`` extra installs; from a clone of the repository::

    pip install -e '.[django,embedded]'
    python examples/recipe_django.py
"""

from __future__ import annotations

import json
import uuid
from typing import Any

# Django ships no type hints (they are in the separate django-stubs, with a mypy plugin):
# its names are Any here.
import django  # type: ignore[import-untyped]
from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpRequest, JsonResponse  # type: ignore[import-untyped]
from django.test import Client  # type: ignore[import-untyped]
from django.urls import path, register_converter  # type: ignore[import-untyped]
from django.views.decorators.http import require_http_methods  # type: ignore[import-untyped]
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import WriteLock
from docmultilock.testing import mongodb_uri

STATUSES = frozenset({"new", "paid", "shipped"})

#: How long a request waits for a busy order before it is answered 409.
WAIT_SECONDS = 2.0


class Orders:
    """The order records and their lock manager, made once per process."""

    def __init__(self, collection: Collection[dict[str, Any]], *, wait: float) -> None:
        self.collection = collection
        # A lock lives 10 s unless released: a worker that dies mid-request frees the
        # order when that runs out.
        self.locks = WriteLock(collection, lock_timeout=10.0)
        self.wait = wait


_orders: Orders | None = None


def use_orders(collection: Collection[dict[str, Any]], *, wait: float = WAIT_SECONDS) -> None:
    """Serve the orders of ``collection`` (at start-up: an ``AppConfig.ready()``)."""
    global _orders  # the process's one store, as an AppConfig would keep it
    _orders = Orders(collection, wait=wait)


def orders() -> Orders:
    if _orders is None:
        raise RuntimeError("call use_orders(collection) at start-up")
    return _orders


def set_status(request: HttpRequest, order_id: int) -> Any:
    try:
        body = json.loads(request.body)
    except ValueError:
        body = None
    status = body.get("status") if isinstance(body, dict) else None
    # Only a checked value reaches the update, never the client's own document.
    if not isinstance(status, str) or status not in STATUSES:
        return JsonResponse({"error": f"send {{'status': one of {sorted(STATUSES)}}}"}, status=400)
    store = orders()
    # The filter is built from the route's int, never from raw request data (a JSON
    # {"$ne": null} would be an operator: docs/howto/web.md, operator injection).
    with store.locks.hold({"_id": order_id}, wait=store.wait) as held:
        # require(): a guarded write that matched nothing (the lock was lost) raises the
        # loss (409 through the middleware); nothing was written.
        held.require(store.collection.update_one(held.guard(), {"$set": {"status": status}}))
        order = store.collection.find_one({"_id": order_id}, {"lock": 0})
    return JsonResponse(order)


class Int64Converter:
    """An order id in a URL: a number BSON's int64 can carry, else no match (404)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > 2**63 - 1:
            raise ValueError(value)  # Django: this route does not match
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(Int64Converter, "int64")
# require_http_methods() applied here rather than as a decorator keeps the view's own types
# for mypy (Django's decorators are untyped). Other methods get 405.
urlpatterns = [path("orders/<int64:order_id>", require_http_methods(["PUT"])(set_status))]


def configure() -> None:
    """Configure Django for this one module: its URLs, its middleware, no database."""
    if settings.configured:
        return
    settings.configure(
        DEBUG=False,
        SECRET_KEY="recipe-only-not-secret",  # nothing here signs or keeps sessions
        ALLOWED_HOSTS=["testserver", "localhost"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["docmultilock.http.DjangoProblemMiddleware"],
        INSTALLED_APPS=[],
        DATABASES={},  # the records live in MongoDB, through pymongo
        USE_TZ=True,
    )
    django.setup()


def main() -> None:
    configure()
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        collection = client["docmultilock_examples"][f"orders_{uuid.uuid4().hex[:8]}"]
        try:
            collection.insert_one({"_id": 1, "status": "new", "total": 10})
            use_orders(collection, wait=0.5)
            browser = Client()

            def put(url: str, body: object) -> dict[str, Any]:
                """Send one PUT; print its status and type; return its JSON."""
                response = browser.put(url, json.dumps(body), content_type="application/json")
                print(f"PUT {url} -> {response.status_code} {response['Content-Type']}")
                is_json = "json" in response["Content-Type"]
                data: dict[str, Any] = json.loads(response.content) if is_json else {}
                return data

            print(f"  order: {put('/orders/1', {'status': 'paid'})}")
            # Another worker (another process, in production) holds order 1 for a while:
            # the request waits half a second for it, then is told it is busy.
            with WriteLock(collection).hold({"_id": 1}):
                problem = put("/orders/1", {"status": "shipped"})
            print(f"  while another holds it: {problem['title']} ({problem['code']})")
            print(f"  status still: {(collection.find_one({'_id': 1}) or {})['status']}")
            problem = put("/orders/2", {"status": "paid"})
            print(f"  unknown order: {problem['title']} ({problem['code']})")
            put("/orders/1", {"status": ["paid"]})
            put(f"/orders/{2**64}", {"status": "paid"})
            print(f"  order: {put('/orders/1', {'status': 'shipped'})}")
        finally:
            collection.drop()
            client.close()


if __name__ == "__main__":
    main()
