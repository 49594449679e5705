"""Edit an order over HTTP under a lock: a WSGI app on werkzeug alone (Flask works the same).

Two endpoints make one edit session that can span minutes and several requests:

    POST /orders/<id>/lock   take the order's write lock; 201 with the lock as JSON
    PUT  /orders/<id>        {"lock": <that JSON>, "status": "paid"}: write, then release

A third takes the order's id from the JSON body instead of the URL, to show how a value
from the request is checked before it goes into a filter:

    POST /locks              {"order_id": 1}: the same as POST /orders/1/lock

Lock errors become werkzeug HTTP exceptions with an RFC 9457 body, through
``error_factory=werkzeug_error``: a second editor gets 409 ``application/problem+json``, an
unknown order 404. Run it as a script: ``main()`` drives the app with werkzeug's test client,
against DOCMULTILOCK_MONGODB_URI or an embedded server when that is unset.

Werkzeug comes with the ``web`` extra; from a clone of the repository::

    pip install -e '.[web,embedded]'
    python examples/web_werkzeug.py
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import marshmallow
from pymongo import MongoClient
from pymongo.collection import Collection
from werkzeug.exceptions import BadRequest, Conflict, HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.test import Client
from werkzeug.wrappers import Request, Response

from docmultilock import InvalidArgument, Lock, LockSchema, LockWasReacquired, WriteLock
from docmultilock.http import werkzeug_error
from docmultilock.testing import mongodb_uri

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

STATUSES = frozenset({"new", "paid", "shipped"})
MAX_ID = 2**63 - 1


class OrderRef(marshmallow.Schema):
    """An order named in a request body: its id must be an int64, never an operator."""

    order_id = marshmallow.fields.Integer(
        required=True, strict=True, validate=marshmallow.validate.Range(min=0, max=MAX_ID)
    )


def json_response(data: object, status: int = 200) -> Response:
    return Response(json.dumps(data), status=status, mimetype="application/json")


def problem_response(exc: HTTPException) -> Response:
    """werkzeug's own errors (a 400 from a handler, a 404 from routing) as problem JSON.

    The lock errors come with theirs (``werkzeug_error``); these get the same shape, so a
    client reads every error of the app the same way.
    """
    problem = {"type": "about:blank", "title": exc.name, "status": exc.code}
    problem["detail"] = exc.description
    return Response(json.dumps(problem), status=exc.code, mimetype="application/problem+json")


class OrdersApp:
    """The WSGI application: routes, the two endpoints, and the error answer."""

    def __init__(self, orders: Collection[dict[str, Any]]) -> None:
        self.orders = orders
        # Every LockError this manager raises comes out as werkzeug's HTTPException for its
        # status (Conflict, NotFound, ...), carrying the problem JSON response, with the
        # LockError as __cause__ for the logs. The handlers need no try/except for them.
        # lock_timeout: an edit session may last minutes; a client that vanishes frees the
        # order when it runs out.
        self.locks = WriteLock(orders, lock_timeout=300.0, error_factory=werkzeug_error)
        # The int converter turns the id in the URL into the type the _id really has, and
        # answers 404 for anything else, including numbers too big for BSON's int64. (For
        # ObjectId ids, parse with bson.ObjectId(text) and answer 404 on InvalidId.)
        self.urls = Map(
            [
                Rule(
                    f"/orders/<int(max={MAX_ID}):order_id>/lock",
                    methods=["POST"],
                    endpoint=self.take_lock,
                ),
                Rule(f"/orders/<int(max={MAX_ID}):order_id>", methods=["PUT"], endpoint=self.edit),
                Rule("/locks", methods=["POST"], endpoint=self.take_lock_named_in_body),
            ]
        )

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        try:
            endpoint, args = self.urls.bind_to_environ(environ).match()
            response: Response = endpoint(request, **args)
        except HTTPException as exc:
            # An HTTPException is a WSGI app too; werkzeug_error's answer with their problem,
            # werkzeug's own ones (no response of their own) with one of the same shape.
            if exc.response is None:
                return problem_response(exc)(environ, start_response)
            return exc(environ, start_response)
        return response(environ, start_response)

    def take_lock(self, request: Request, order_id: int) -> Response:
        # The filter is built here, from a value of a known type. Never pass a filter, or
        # a value inside one, taken from the request as it is: JSON like {"$ne": null} is a
        # MongoDB operator, and {"_id": {"$ne": null}} would lock (and let this client edit)
        # whichever order comes first. That is operator injection.
        lock = self.locks.acquire({"_id": order_id})
        return json_response({"lock": LockSchema().dump(lock)}, status=201)

    def take_lock_named_in_body(self, request: Request) -> Response:
        # The id comes from JSON, where {"order_id": {"$ne": null}} is as easy to send as
        # {"order_id": 1}. Check it against the type the _id really has before building the
        # filter; answer 400 for anything else. (For ObjectId ids: bson.ObjectId(text),
        # and 400 on InvalidId or TypeError.)
        try:
            order_id: int = OrderRef().load(request.get_json(silent=True) or {})["order_id"]
        except marshmallow.ValidationError as exc:
            raise BadRequest(f"invalid order: {exc.messages}") from exc
        return self.take_lock(request, order_id)

    def edit(self, request: Request, order_id: int) -> Response:
        body = request.get_json(silent=True)
        if not (
            isinstance(body, dict)
            and isinstance(body.get("lock"), dict)
            # A str first: a JSON object or array is unhashable, and ``in`` a set would raise.
            and isinstance(body.get("status"), str)
            and body["status"] in STATUSES
        ):
            raise BadRequest(f'send {{"lock": ..., "status": one of {sorted(STATUSES)}}}')
        try:
            # The lock comes back from the client: LockSchema checks every field of it.
            lock: Lock = LockSchema().load(body["lock"])
        except marshmallow.ValidationError as exc:
            raise BadRequest(f"invalid lock: {exc.messages}") from exc
        order = {"_id": order_id}
        try:
            # guard() refuses a lock taken on another order (InvalidArgument, not a
            # LockError: the client's mistake, so 400).
            guarded = self.locks.guard(order, lock)
        except InvalidArgument as exc:
            raise BadRequest(str(exc)) from exc

        # Only a checked value reaches the update; a client-supplied update document could
        # carry operators ($unset, $rename, ...) just as a filter could.
        result = self.orders.update_one(guarded, {"$set": {"status": body["status"]}})
        if result.matched_count == 0:
            # The guard matched nothing: the lock expired or another editor holds the order
            # now. Nothing was written; answer the same 409 problem the library would.
            lost = LockWasReacquired("the lock is no longer held", filter=order, lock=lock)
            raise werkzeug_error(lost) from lost

        # The write landed while the lock was held; if the lock expired in the moments
        # since, there is nothing left to release, and the edit still succeeded.
        with contextlib.suppress(Conflict):
            self.locks.release(order, lock)
        return json_response(self.orders.find_one(order, {"lock": 0}))


def main() -> None:
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        orders = client["docmultilock_examples"][f"orders_{uuid.uuid4().hex[:8]}"]
        try:
            orders.insert_one({"_id": 1, "status": "new", "total": 10})
            browser = Client(OrdersApp(orders))

            def show(method: str, path: str, body: object = None) -> dict[str, Any]:
                """Send one request; print it, its status and type; return its JSON ({} if none)."""
                response = browser.open(path, method=method, json=body)
                # A lock sent back is shown by the start of its id: the rest is its fields.
                if isinstance(body, dict) and isinstance(body.get("lock"), dict):
                    body = {**body, "lock": f"{body['lock']['id'][:8]}..."}
                sent = "" if body is None else f" {json.dumps(body)}"
                print(f"{method} {path}{sent} -> {response.status_code} {response.mimetype}")
                data: dict[str, Any] = response.get_json(silent=True) or {}
                return data

            # Editor A locks order 1; editor B, a moment later, is told it is taken.
            first = show("POST", "/orders/1/lock")
            print(f"  editor A holds lock {first['lock']['id'][:8]}...")
            problem = show("POST", "/orders/1/lock")
            print(f"  editor B: {problem['title']} ({problem['code']}): {problem['detail']}")
            # A saves with its lock (which releases it), then tries the spent lock again.
            print(f"  saved: {show('PUT', '/orders/1', {**first, 'status': 'paid'})}")
            problem = show("PUT", "/orders/1", {**first, "status": "shipped"})
            print(f"  stale lock: {problem['code']}")
            problem = show("POST", "/orders/2/lock")
            print(f"  unknown order: {problem['title']} ({problem['code']})")
            # A crafted id never reaches MongoDB: the route only matches an int64, and an
            # id sent in the body must be one too.
            show("POST", "/orders/%7B%22$ne%22:null%7D/lock")
            show("POST", f"/orders/{2**64}/lock")
            show("POST", "/locks", {"order_id": {"$ne": None}})
            show("POST", "/locks", {"order_id": "1"})
            order = orders.find_one({"_id": 1}) or {}
            print(f"  holders of order 1 after them: {order['lock']['holders']}")
            show("POST", "/locks", {"order_id": 1})
        finally:
            orders.drop()
            client.close()


if __name__ == "__main__":
    main()
