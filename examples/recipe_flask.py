"""Recipe: a Flask app that locks one order per request, answering conflicts as problem JSON.

    PUT /orders/<id>   {"status": "paid"}: set the order's status under its write lock

Each request takes the order's lock with ``WriteLock.hold()``, writes through the lock's
guard, and releases it on the way out, so two requests (on any number of servers) never
edit one order at once. A request that finds the order busy waits up to ``wait`` seconds
for it, then gets 409 ``application/problem+json``; an unknown order gets 404, the same
way. The lock manager raises werkzeug's HTTP errors (``error_factory=werkzeug_error``),
which Flask answers with their ready problem JSON response: the view has no ``try`` for
lock errors.

For locks that last across requests (an edit session), see ``examples/web_werkzeug.py``.

Run it as a script: ``main()`` drives the app with Flask's test client, against
DOCMULTILOCK_MONGODB_URI, or an embedded server when that is unset. It needs Flask, which
the ``flask`` extra installs; from a clone of the repository::

    pip install -e '.[flask,embedded]'
    python examples/recipe_flask.py
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask import Flask, Response, jsonify, request
from flask.typing import ResponseReturnValue
from pymongo import MongoClient
from pymongo.collection import Collection
from werkzeug.exceptions import BadRequest, HTTPException

from docmultilock import WriteLock
from docmultilock.http import werkzeug_error
from docmultilock.testing import mongodb_uri

STATUSES = frozenset({"new", "paid", "shipped"})
MAX_ID = 2**63 - 1  # the route matches only ids BSON's int64 can carry


def create_app(orders: Collection[dict[str, Any]], *, wait: float = 2.0) -> Flask:
    """The app, on ``orders``; a busy order is waited for ``wait`` seconds, then 409."""
    app = Flask(__name__)
    # One manager for the app's life: its options are checked once, here. A lock lives 10 s
    # unless released: a worker that dies mid-request frees the order when that runs out.
    locks = WriteLock(orders, lock_timeout=10.0, error_factory=werkzeug_error)

    @app.errorhandler(HTTPException)
    def problem(exc: HTTPException) -> ResponseReturnValue:
        # The lock errors come with their problem JSON response (werkzeug_error); Flask's
        # own (this view's 400, a 404 from routing) get one of the same shape.
        if exc.response is not None:
            return exc.response
        body = {"type": "about:blank", "title": exc.name, "status": exc.code}
        body["detail"] = exc.description
        return Response(json.dumps(body), status=exc.code, mimetype="application/problem+json")

    @app.put(f"/orders/<int(max={MAX_ID}):order_id>")
    def set_status(order_id: int) -> Response:
        body = request.get_json(silent=True)
        status = body.get("status") if isinstance(body, dict) else None
        # Only a checked value reaches the update, never the client's own document.
        if not isinstance(status, str) or status not in STATUSES:
            raise BadRequest(f'send {{"status": one of {sorted(STATUSES)}}}')
        # The filter is built from the route's int, never from raw request data (a JSON
        # {"$ne": null} would be an operator: docs/howto/web.md, operator injection).
        with locks.hold({"_id": order_id}, wait=wait) as held:
            # require(): a guarded write that matched nothing (the lock was lost) raises the
            # loss, which error_factory turns into 409 problem JSON; nothing was written.
            held.require(orders.update_one(held.guard(), {"$set": {"status": status}}))
            order = orders.find_one({"_id": order_id}, {"lock": 0})
        return jsonify(order)

    return app


def main() -> None:
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        orders = client["docmultilock_examples"][f"orders_{uuid.uuid4().hex[:8]}"]
        try:
            orders.insert_one({"_id": 1, "status": "new", "total": 10})
            browser = create_app(orders, wait=0.5).test_client()

            def put(path: str, body: object) -> dict[str, Any]:
                """Send one PUT; print it, its status and type; return its JSON."""
                response = browser.put(path, json=body)
                print(
                    f"PUT {path} {json.dumps(body)} -> {response.status_code} {response.mimetype}"
                )
                data: dict[str, Any] = response.get_json(silent=True) or {}
                return data

            print(f"  order: {put('/orders/1', {'status': 'paid'})}")
            # Another worker (another process, in production) holds order 1 for a while:
            # the request waits half a second for it, then is told it is busy.
            with WriteLock(orders).hold({"_id": 1}):
                problem = put("/orders/1", {"status": "shipped"})
            print(f"  while another holds it: {problem['title']} ({problem['code']})")
            print(f"  status still: {(orders.find_one({'_id': 1}) or {})['status']}")
            problem = put("/orders/2", {"status": "paid"})
            print(f"  unknown order: {problem['title']} ({problem['code']})")
            put("/orders/1", {"status": {"$unset": ""}})
            print(f"  order: {put('/orders/1', {'status': 'shipped'})}")
        finally:
            orders.drop()
            client.close()


if __name__ == "__main__":
    main()
