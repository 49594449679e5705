"""Pay orders kept as Beanie documents: a FastAPI app saving each record under its lock.

    GET  /orders/{id}       the order
    POST /orders/{id}/pay   mark it paid, under the record's write lock

An ``Order`` is a Beanie document that subclasses ``LockedDocument`` (its ``replace()``,
which would erase the lock field, is refused); after ``init_beanie``, ``write_lock`` makes
the lock manager from the model class. The handler holds the record's lock, loads it,
changes it, and saves it with ``orders.save(order, held.lock)``: one update that lands
only while the lock is held and leaves the lock field alone.

Lock errors are answered by ``docmultilock.http``'s problem handler, as
``application/problem+json``: 409 while another holds the order (``LockTimeout``) or when
the lock was lost before the save, 404 for an unknown order (``ResourceNotFound``). An id
that is not an ObjectId never reaches MongoDB: FastAPI answers 422.

Run it as a script: ``main()`` drives the app with FastAPI's test client, against
DOCMULTILOCK_MONGODB_URI or an embedded server when that is unset; from a clone of the
repository::

    pip install -e '.[beanie,fastapi,embedded]'
    python examples/mapper_beanie.py
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from beanie import PydanticObjectId, init_beanie
from fastapi import FastAPI
from pymongo import AsyncMongoClient

from docmultilock import AsyncRecordLocks, ResourceNotFound
from docmultilock.http import install_problem_handler
from docmultilock.mappers.beanie import LockedDocument, write_lock
from docmultilock.testing import URI_VARIABLE


class Order(LockedDocument):
    number: int
    status: str = "new"
    total: int = 0

    class Settings:
        name = "orders"
        # The guarded save then writes only the fields that changed since the load.
        use_state_management = True


def create_app(uri: str, *, database: str = "shop", wait: float = 2.0) -> FastAPI:
    """The app, on the orders of ``database`` at ``uri``; a busy order is waited for ``wait`` s."""
    locks: dict[str, AsyncRecordLocks[Order]] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The client belongs to the app's event loop: made here, closed when the app stops.
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri)
        await init_beanie(database=client[database], document_models=[Order])
        locks["orders"] = write_lock(Order, lock_timeout=30.0)
        try:
            yield
        finally:
            await client.close()

    app = FastAPI(title="orders", lifespan=lifespan)
    install_problem_handler(app)

    @app.get("/orders/{order_id}")
    async def read_order(order_id: PydanticObjectId) -> dict[str, Any]:
        order = await Order.get(order_id)
        if order is None:
            raise ResourceNotFound(f"no order {order_id}", filter={"_id": order_id})
        return {"number": order.number, "status": order.status, "total": order.total}

    @app.post("/orders/{order_id}/pay")
    async def pay(order_id: PydanticObjectId) -> dict[str, Any]:
        orders = locks["orders"]
        # 409 LockTimeout when another holds the order past the wait; 404 when unknown.
        async with orders.hold(order_id, wait=wait) as held:
            order = await Order.get(order_id)
            if order is None:  # deleted by someone who took no lock
                raise ResourceNotFound(f"no order {order_id}", filter={"_id": order_id})
            order.status = "paid"
            # Lands only while the lock holds; else the loss (409) and nothing written.
            await orders.save(order, held.lock)
        return {"number": order.number, "status": order.status, "total": order.total}

    return app


def main() -> None:
    # Only the script needs these: the test client, a server, and a sync client and lock
    # standing for another process.
    import uuid

    from fastapi.testclient import TestClient
    from pymongo import MongoClient

    from docmultilock import WriteLock
    from docmultilock.testing import mongodb_uri

    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        database = f"docmultilock_examples_{uuid.uuid4().hex[:8]}"
        stored = client[database]["orders"]
        try:
            unknown = PydanticObjectId()
            order_id = stored.insert_one({"number": 7, "status": "new", "total": 10}).inserted_id
            with TestClient(create_app(uri, database=database, wait=0.5)) as browser:

                def show(method: str, path: str) -> Any:
                    """Send one request; print its status and type; return its JSON."""
                    response = browser.request(method, path)
                    kind = response.headers["content-type"]
                    shown = path.replace(str(order_id), "{id}").replace(str(unknown), "{unknown}")
                    print(f"{method} {shown} -> {response.status_code} {kind}")
                    return response.json()

                print(f"  order: {show('GET', f'/orders/{order_id}')}")
                print(f"  paid: {show('POST', f'/orders/{order_id}/pay')}")
                # Another process holds the record's lock: the app waits 0.5 s, then 409.
                with WriteLock(stored).hold({"_id": order_id}):
                    problem = show("POST", f"/orders/{order_id}/pay")
                    print(f"  while it is held: {problem['title']} ({problem['code']})")
                problem = show("POST", f"/orders/{unknown}/pay")
                print(f"  unknown order: {problem['title']} ({problem['code']})")
                show("POST", "/orders/not-an-id/pay")
        finally:
            client.drop_database(database)
            client.close()


#: For ``uvicorn mapper_beanie:app``; nothing connects before the app starts.
app = create_app(os.environ.get(URI_VARIABLE, "mongodb://localhost:27017"))


if __name__ == "__main__":
    main()
