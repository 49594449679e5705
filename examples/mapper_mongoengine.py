"""Edit MongoEngine records under their lock: guarded saves, and a stale holder refused.

An ``Order`` is a MongoEngine document that subclasses ``LockedDocument``; ``write_lock``
makes the lock manager from the model class. A record is edited under ``hold()`` and saved
with ``orders.save(record, lock)``: one update that lands only while the lock is held,
leaving the lock field alone. A holder whose lock ran out cannot save over the next
holder's edit, and MongoEngine's own ways to replace a record are refused.

Run it as a script, against DOCMULTILOCK_MONGODB_URI or an embedded server when that is
unset; from a clone of the repository::

    pip install -e '.[mongoengine,embedded]'
    python examples/mapper_mongoengine.py
"""

from __future__ import annotations

import time
import uuid

from mongoengine import IntField, NotUniqueError, StringField, connect, disconnect
from mongoengine.connection import get_connection

from docmultilock import LockWasReacquired
from docmultilock.mappers.mongoengine import LockedDocument, write_lock
from docmultilock.testing import mongodb_uri


class Order(LockedDocument):
    number = IntField(required=True)
    status = StringField(default="new")
    total = IntField(default=0)
    # Not strict (LockedDocument): a locked record carries the lock field, which the model
    # does not declare, and still loads.
    meta = {"collection": "orders"}  # noqa: RUF012 - MongoEngine's own declaration


def main() -> None:
    with mongodb_uri() as uri:
        database = f"docmultilock_examples_{uuid.uuid4().hex[:8]}"
        connect(database, host=uri, uuidRepresentation="standard")
        try:
            run()
        finally:
            get_connection().drop_database(database)
            disconnect()


def run() -> None:
    orders = write_lock(Order, lock_timeout=30.0)
    order = Order(number=7, total=10).save()

    # An edit under the record's lock: the save lands while the lock is held.
    with orders.hold(order, wait=5.0) as held:
        order.status = "paid"
        orders.save(order, held.lock)
        print(f"saved under fence {held.lock.fence}: {Order.objects.get(pk=order.pk).status}")
    print(f"lock released: locked={orders.locked(order)}")

    # A holder whose lock ran out: the next holder edits, the stale save is refused.
    stale = orders.acquire(order, lock_timeout=0.2)
    time.sleep(0.4)
    mine = Order.objects.get(pk=order.pk)
    with orders.hold(mine) as held:
        mine.total = 20
        orders.save(mine, held.lock)
        order.total = 99
        try:
            orders.save(order, stale)
        except LockWasReacquired as err:
            print(f"stale save refused: {type(err).__name__} (HTTP {err.status_code})")
        # MongoEngine's save() of a new instance with this id would replace the record,
        # lock field and all: LockedDocument inserts it instead, and MongoEngine refuses.
        try:
            Order(pk=order.pk, number=7).save()
        except NotUniqueError:
            print(f"replacing the record refused; still locked: {orders.locked(order)}")
    print(f"order now: total={Order.objects.get(pk=order.pk).total}")


if __name__ == "__main__":
    main()
