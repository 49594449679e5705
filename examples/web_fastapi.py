"""Read and pay orders under read/write locks: a FastAPI app with async handlers.

    GET  /orders/{id}       the order, read under a read lock
    POST /orders/{id}/pay   charge it once and mark it paid, under the write lock

The handlers are ``async def`` and use ``AsyncMultiLock`` over pymongo's
``AsyncMongoClient``: a handler waiting for a lock awaits, and the event loop serves other
requests meanwhile. (The sync ``MultiLock`` in an ``async def`` handler would block the
loop for as long as it waits.) The client is made in the app's lifespan, on the loop that
uses it.

Lock errors are answered by ``docmultilock.http``'s problem handler, as
``application/problem+json``: 409 when the lock could not be had within the wait
(``LockTimeout``) or was lost before the write (``LockNotFound``), 404 for an unknown order
(``ResourceNotFound``). An id that is not an int64 never reaches MongoDB: FastAPI answers
422.

Install it from a clone of the repository and serve it with a server of your own::

    pip install -e '.[fastapi]' uvicorn
    cd examples && DOCMULTILOCK_MONGODB_URI=mongodb://localhost:27017 uvicorn web_fastapi:app

or run it as a script: ``main()`` drives the app with FastAPI's test client (the
``fastapi`` extra brings what it needs), against DOCMULTILOCK_MONGODB_URI or an embedded
server when that is unset::

    pip install -e '.[fastapi,embedded]'
    python examples/web_fastapi.py

From a built wheel, ``pip install "$(echo dist/docmultilock-*.whl)[fastapi,embedded]"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Request
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection

from docmultilock import AsyncMultiLock, ResourceNotFound
from docmultilock.http import install_problem_handler
from docmultilock.testing import URI_VARIABLE

Doc = dict[str, Any]
MAX_ID = 2**63 - 1

#: The order's _id, from the URL: FastAPI answers 422 for anything but an int64, so no
#: operator ({"$ne": null}) can reach a filter.
OrderId = Annotated[int, Path(ge=0, le=MAX_ID)]


@dataclass(frozen=True)
class Shop:
    """What the handlers share: the orders, their locks, and how long a request waits."""

    orders: AsyncCollection[Doc]
    locks: AsyncMultiLock
    wait: float


def get_shop(request: Request) -> Shop:
    shop: Shop = request.app.state.shop
    return shop


ShopDep = Annotated[Shop, Depends(get_shop)]
router = APIRouter()


async def charge(order: Doc) -> str:
    """Stands for the payment provider: a call that takes a while; returns a payment id."""
    await asyncio.sleep(0.05)
    return uuid.uuid4().hex


@router.get("/orders/{order_id}")
async def read_order(order_id: OrderId, shop: ShopDep) -> Doc:
    key = {"_id": order_id}
    # Readers share the read lock. While a payment holds the write lock, a reader waits,
    # so nobody is shown an order that is being paid as still unpaid; and a payment
    # waiting for readers keeps new ones out (the writer is assertive), so it is not
    # starved. ResourceNotFound (404) when no order has this id.
    async with shop.locks.hold(key, tag="read", wait=shop.wait):
        order = await shop.orders.find_one(key, {"lock": 0})
    if order is None:  # deleted by someone who took no lock
        raise ResourceNotFound("no document matches", filter=key)
    return order


@router.post("/orders/{order_id}/pay")
async def pay(order_id: OrderId, shop: ShopDep) -> Doc:
    key = {"_id": order_id}
    # The write lock makes a double click safe: the second request waits for the first,
    # then finds the order paid and charges nothing. No wait left: 409 LockTimeout.
    async with shop.locks.hold(key, tag="write", wait=shop.wait) as held:
        order = await shop.orders.find_one(key, {"lock": 0})
        if order is None:  # deleted by someone who took no lock
            raise ResourceNotFound("no document matches", filter=key)
        if order["status"] == "new":
            payment = await charge(order)
            # The write lands only while the lock still holds (the guard); if it was lost
            # during the charge (expired, taken over), nothing is written and require()
            # raises the loss, answered 409. A real provider would be given an idempotency
            # key, such as the order id, so a retry does not charge twice.
            paid = {"status": "paid", "payment": payment}
            held.require(await shop.orders.update_one(held.guard(), {"$set": paid}))
            order.update(paid)
    return order


def create_app(
    uri: str, *, database: str = "shop", collection: str = "orders", wait: float = 2.0
) -> FastAPI:
    """The app, on the orders in ``database.collection`` of the server at ``uri``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # An AsyncMongoClient belongs to the event loop it was made on: make it here, on
        # the app's loop, and close it when the app stops.
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
        orders = client[database][collection]
        locks = AsyncMultiLock(orders, lock_timeouts={"read": 5.0, "write": 30.0})
        app.state.shop = Shop(orders, locks, wait)
        try:
            yield
        finally:
            await client.close()

    app = FastAPI(title="orders", lifespan=lifespan)
    # Every LockError a handler lets through becomes application/problem+json with its
    # status. The locks have no error_factory, so their errors reach the handler as they are.
    install_problem_handler(app)
    app.include_router(router)
    return app


#: For ``uvicorn web_fastapi:app``; nothing connects before the app starts.
app = create_app(os.environ.get(URI_VARIABLE, "mongodb://localhost:27017"))


def main() -> None:
    # Only the script needs these (the test client, with its HTTP client; a sync client and
    # lock standing for another process; a server): `uvicorn web_fastapi:app` needs none.
    from concurrent.futures import ThreadPoolExecutor

    from fastapi.testclient import TestClient
    from pymongo import MongoClient

    from docmultilock import MultiLock
    from docmultilock.testing import mongodb_uri

    with mongodb_uri() as uri:
        client: MongoClient[Doc] = MongoClient(uri)
        name = f"orders_{uuid.uuid4().hex[:8]}"
        orders = client["docmultilock_examples"][name]
        try:
            orders.insert_one({"_id": 1, "status": "new", "total": 10})
            shop = create_app(uri, database="docmultilock_examples", collection=name, wait=0.5)
            # Entering the test client runs the lifespan: the app's loop, its client.
            with TestClient(shop) as browser:

                def show(method: str, path: str) -> Any:
                    """Send one request; print its status and type; return its JSON."""
                    response = browser.request(method, path)
                    kind = response.headers["content-type"]
                    print(f"{method} {path} -> {response.status_code} {kind}")
                    return response.json()

                print(f"  order: {show('GET', '/orders/1')}")
                # A double click: two payments at once. The second waits for the first's
                # write lock, then finds the order paid.
                with ThreadPoolExecutor(2) as pool:
                    both = list(pool.map(lambda _: browser.post("/orders/1/pay"), range(2)))
                print(f"  paid twice at once: {[r.status_code for r in both]}")
                print(f"  charged once: {both[0].json()['payment'] == both[1].json()['payment']}")
                # Another process holds the write lock (here the sync twin, on the same
                # documents): a reader waits 0.5 s, then gets 409.
                with MultiLock(orders).hold({"_id": 1}, tag="write"):
                    problem = show("GET", "/orders/1")
                    print(f"  while it is held: {problem['title']} ({problem['code']})")
                print(f"  order: {show('GET', '/orders/1')}")
                problem = show("POST", "/orders/2/pay")
                print(f"  unknown order: {problem['title']} ({problem['code']})")
                show("GET", "/orders/%7B%22$ne%22:null%7D")
                show("GET", f"/orders/{2**64}")
        finally:
            orders.drop()
            client.close()


if __name__ == "__main__":
    main()
