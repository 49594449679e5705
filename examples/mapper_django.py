"""Locks on the records of a Django model stored in MongoDB by Django MongoDB Backend.

An ``Order`` model, no migrations: ``write_lock(Order)`` locks its records (an instance or
its pk is the key), ``edit()`` reads a record again under its lock, and ``held.save()``
writes the changed fields only while the lock is held. Django's own ``save()`` keeps the
lock field but is not guarded: it lands even while another holds the record.

Run it as a script, against DOCMULTILOCK_MONGODB_URI, or an embedded server when that is
unset. From a clone of the repository::

    pip install -e '.[django-mongodb,embedded]'
    python examples/mapper_django.py
"""

from __future__ import annotations

import time
import uuid
from typing import Any

# Django and Django MongoDB Backend ship no type hints: their names are Any here.
import django  # type: ignore[import-untyped]
from django.conf import settings  # type: ignore[import-untyped]

from docmultilock import LockError
from docmultilock.testing import mongodb_uri


def configure(uri: str, name: str) -> None:
    """Django with one database: Django MongoDB Backend on ``uri``; no app, no migration."""
    settings.configure(
        DATABASES={"default": {"ENGINE": "django_mongodb_backend", "HOST": uri, "NAME": name}},
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()


def main() -> None:
    with mongodb_uri() as uri:
        name = f"docmultilock_examples_{uuid.uuid4().hex[:8]}"
        configure(uri, name)
        # Models are made once Django is set up.
        from django.db import connection, models  # type: ignore[import-untyped]
        from django_mongodb_backend.fields import ObjectIdAutoField  # type: ignore[import-untyped]

        from docmultilock.mappers.django import write_lock

        class Order(models.Model):  # type: ignore[misc]
            id = ObjectIdAutoField(primary_key=True)
            status = models.CharField(max_length=20)
            total = models.IntegerField(default=0)

            class Meta:
                app_label = "shop"
                db_table = "orders"

        try:
            order: Any = Order.objects.create(status="new", total=10)
            orders = write_lock(Order, lock_timeout=10.0)

            with orders.edit(order) as held:
                order.status = "paid"
                held.save()
            print(f"saved under the lock: {Order.objects.get(pk=order.pk).status}")

            # A lock that runs out before the save: the save raises and writes nothing.
            try:
                with orders.edit(order.pk, lock_timeout=0.2) as held:
                    time.sleep(0.5)
                    held.record.status = "shipped"
                    held.save()
            except LockError as err:
                print(f"save after the lock expired: {err.code} (HTTP {err.status_code})")
            print(f"status still: {Order.objects.get(pk=order.pk).status}")

            # Django's own save() keeps the lock field (the model does not declare it),
            # but is not guarded: it lands while another holds the record.
            with orders.hold(order):
                order.status = "shipped"
                order.save()
                stored = connection.database["orders"].find_one({"_id": order.pk})
                print(
                    f"plain save while held: status={stored['status']}, lock kept: "
                    f"{len(stored['lock']['holders'])} holder"
                )
        finally:
            connection.connection.drop_database(name)


if __name__ == "__main__":
    main()
