"""Django models for the tests of ``docmultilock.mappers.django``.

Imported once Django is set up (``tests/test_mapper_django.py``'s fixtures): a model class
registers itself with Django's app registry when it is made.
"""

from __future__ import annotations

# Django and Django MongoDB Backend ship no type hints: their names are Any here.
from django.db import models  # type: ignore[import-untyped]
from django_mongodb_backend.fields import ObjectIdAutoField  # type: ignore[import-untyped]
from django_mongodb_backend.managers import MongoManager  # type: ignore[import-untyped]

APP = "docmultilock_tests"


class Order(models.Model):  # type: ignore[misc]  # Django's Model is Any to mypy
    """A business record: the lock lives beside these fields, in ``lock``."""

    id = ObjectIdAutoField(primary_key=True)
    status = models.CharField(max_length=20)
    total = models.IntegerField(default=0)
    notes = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = APP
        db_table = "orders"


class Invoice(models.Model):  # type: ignore[misc]
    """Another model, keyed by an integer stored as ``_id``."""

    number = models.IntegerField(primary_key=True, db_column="_id")
    total = models.IntegerField(default=0)

    class Meta:
        app_label = APP
        db_table = "invoices"


class Item(models.Model):  # type: ignore[misc]
    """A model with a unique field, Django MongoDB Backend's own manager, and no lock."""

    id = ObjectIdAutoField(primary_key=True)
    name = models.CharField(max_length=20, unique=True)
    objects = MongoManager()

    class Meta:
        app_label = APP
        db_table = "items"


class Clash(models.Model):  # type: ignore[misc]
    """A model declaring the field the lock lives in: refused."""

    id = ObjectIdAutoField(primary_key=True)
    lock = models.JSONField(null=True)

    class Meta:
        app_label = APP
        db_table = "clashes"
