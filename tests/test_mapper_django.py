"""``docmultilock.mappers.django``: locks on Django models stored by Django MongoDB Backend.

Against the test server, through Django MongoDB Backend's own client: a guarded save lands
only while the lock is held and never touches the lock field; Django's own writes keep the
lock field but are not guarded.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest
from bson import ObjectId

from docmultilock import InvalidArgument, InvalidConfiguration, LockError, LockNotFound
from docmultilock.http import PROBLEM_JSON, DjangoProblemMiddleware
from tests.helpers import lock_bytes, raw_reader
from tests.test_examples import run_example

# Django ships no type hints: its names are Any here.
from django.db import IntegrityError, connections  # type: ignore[import-untyped]  # isort: skip
from django.test import RequestFactory  # type: ignore[import-untyped]  # isort: skip
from docmultilock.mappers.django import (  # isort: skip
    HeldRecord,
    ModelLocks,
    multi_lock,
    write_lock,
)

#: The Django database of these tests: Django MongoDB Backend on the test server.
ALIAS = "docmultilock_models"


@pytest.fixture(scope="module")
def models(django_recipe: ModuleType, docmultilock_uri: str) -> Iterator[ModuleType]:
    """The test models, with ``ALIAS`` added to the process's Django databases.

    Django's settings are per process: the recipe's configuration is this process's, and
    the MongoDB database joins it as one more alias (a database of its own per module).
    """
    entry = {"ENGINE": "django_mongodb_backend", "HOST": docmultilock_uri}
    entry["NAME"] = f"dml_django_{uuid.uuid4().hex[:8]}"
    connections.settings[ALIAS] = connections.configure_settings({"default": {}, ALIAS: entry})[
        ALIAS
    ]
    from tests import django_models

    try:
        yield django_models
    finally:
        connection = connections[ALIAS]
        connection.connection.drop_database(entry["NAME"])
        connection.close_pool()
        del connections[ALIAS]
        del connections.settings[ALIAS]


@pytest.fixture
def Order(models: ModuleType) -> Any:
    """The ``Order`` model, its collection emptied."""
    models.Order.objects.using(ALIAS).all().delete()
    return models.Order


@pytest.fixture
def orders(Order: Any) -> ModelLocks[Any]:
    return write_lock(Order, using=ALIAS, lock_timeout=10.0)


@pytest.fixture
def order(Order: Any) -> Any:
    return Order.objects.using(ALIAS).create(status="new", total=10)


def stored(orders: ModelLocks[Any], order: Any) -> dict[str, Any]:
    found: dict[str, Any] | None = orders.locks.collection.find_one({"_id": order.pk})
    assert found is not None
    return found


def stored_lock_bytes(orders: ModelLocks[Any], order: Any) -> bytes:
    """The stored lock field of ``order``, as its BSON bytes."""
    return lock_bytes(raw_reader(orders.locks.collection)(order.pk))


# -- The manager, its keys -------------------------------------------------------------------


def test_model_locks_are_on_the_models_collection(orders: ModelLocks[Any]) -> None:
    collection = orders.locks.collection
    assert (collection.database.name, collection.name) == (
        connections[ALIAS].settings_dict["NAME"],
        "orders",
    )


def test_an_instance_its_pk_and_its_hex_are_one_key(orders: ModelLocks[Any], order: Any) -> None:
    assert orders.key(order) == orders.key(order.pk) == orders.key(str(order.pk))
    assert orders.key(order) == {"_id": order.pk}
    assert isinstance(orders.key(str(order.pk))["_id"], ObjectId)


def test_a_pk_stored_in_another_column_keys_by_that_column(models: ModuleType) -> None:
    invoices = write_lock(models.Invoice, using=ALIAS)
    assert invoices.key(models.Invoice(number=7)) == {"_id": 7}
    assert invoices.key("7") == {"_id": 7}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda m: m.Order(status="new"), id="unsaved"),
        pytest.param(lambda m: m.Clash(id=ObjectId()), id="another-model"),
        pytest.param(lambda m: "not-an-object-id", id="bad-pk"),
        pytest.param(lambda m: [ObjectId()], id="a-list"),
        pytest.param(lambda m: None, id="none"),
    ],
)
def test_a_bad_key_is_refused_before_anything_is_written(
    orders: ModelLocks[Any], order: Any, models: ModuleType, bad: Any
) -> None:
    before = stored(orders, order)
    with pytest.raises(InvalidArgument):
        orders.acquire(bad(models))
    assert stored(orders, order) == before


def test_a_model_declaring_the_lock_field_is_refused(models: ModuleType) -> None:
    with pytest.raises(InvalidConfiguration, match=r"Clash\.lock is stored in 'lock'"):
        write_lock(models.Clash, using=ALIAS)


def test_a_model_declaring_the_lock_field_may_lock_in_another_field(models: ModuleType) -> None:
    assert write_lock(models.Clash, using=ALIAS, field="held").locks.options.field == "held"


def test_a_database_that_is_not_mongodb_is_refused(models: ModuleType) -> None:
    with pytest.raises(InvalidConfiguration, match="not Django MongoDB Backend's"):
        write_lock(models.Order, using="default")


def test_an_unknown_database_is_refused(models: ModuleType) -> None:
    with pytest.raises(InvalidConfiguration, match="no database 'nowhere'"):
        write_lock(models.Order, using="nowhere")


def test_a_class_that_is_not_a_model_is_refused(models: ModuleType) -> None:
    with pytest.raises(InvalidConfiguration, match="not a concrete Django model"):
        write_lock(dict, using=ALIAS)


# -- hold() and the guarded save --------------------------------------------------------------


def test_edit_reads_the_instance_again_under_the_lock(orders: ModelLocks[Any], order: Any) -> None:
    orders.locks.collection.update_one({"_id": order.pk}, {"$set": {"status": "paid"}})
    with orders.edit(order) as held:
        assert held.record is order
        assert order.status == "paid"


def test_edit_by_pk_loads_the_record(orders: ModelLocks[Any], order: Any) -> None:
    with orders.edit(order.pk) as held:
        assert (held.record.pk, held.record.status) == (order.pk, "new")


def test_guarded_save_lands_and_keeps_the_lock_field_byte_for_byte(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.edit(order) as held:
        before = stored_lock_bytes(orders, order)
        order.status = "paid"
        held.save()
        assert stored_lock_bytes(orders, order) == before
        assert stored(orders, order)["status"] == "paid"


def test_guarded_save_writes_only_the_changed_fields(orders: ModelLocks[Any], order: Any) -> None:
    with orders.edit(order) as held:
        # A write the lock does not cover (an unguarded one) lands on another field meanwhile.
        orders.locks.collection.update_one({"_id": order.pk}, {"$set": {"total": 99}})
        order.status = "paid"
        held.save()
    assert (stored(orders, order)["status"], stored(orders, order)["total"]) == ("paid", 99)


def test_guarded_save_with_nothing_changed_writes_nothing(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.edit(order) as held:
        orders.locks.collection.update_one({"_id": order.pk}, {"$set": {"total": 99}})
        held.save()
    assert stored(orders, order)["total"] == 99


def test_a_second_save_writes_only_what_changed_since_the_first(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.edit(order) as held:
        order.status = "paid"
        held.save()
        orders.locks.collection.update_one({"_id": order.pk}, {"$set": {"status": "shipped"}})
        order.total = 20
        held.save()
    assert (stored(orders, order)["status"], stored(orders, order)["total"]) == ("shipped", 20)


def test_guarded_save_sets_auto_now_fields(orders: ModelLocks[Any], order: Any) -> None:
    before = stored(orders, order)["updated"]
    with orders.edit(order) as held:
        time.sleep(0.01)
        order.status = "paid"
        held.save()
    assert stored(orders, order)["updated"] > before


def test_guarded_save_validates_no_more_than_djangos_save(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.edit(order) as held:
        order.status = "x" * 30  # over max_length: full_clean() would refuse it, save() not
        held.save()
    assert stored(orders, order)["status"] == "x" * 30


def test_guarded_save_sends_no_django_signal(orders: ModelLocks[Any], order: Any) -> None:
    from django.db.models.signals import post_save, pre_save  # type: ignore[import-untyped]

    sent: list[str] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        sent.append(sender.__name__)

    pre_save.connect(receiver, weak=False)
    post_save.connect(receiver, weak=False)
    try:
        with orders.edit(order) as held:
            order.status = "paid"
            held.save()
    finally:
        pre_save.disconnect(receiver)
        post_save.disconnect(receiver)
    assert sent == []


def test_guarded_save_with_nothing_changed_under_a_lost_lock_raises(
    orders: ModelLocks[Any], order: Any
) -> None:
    # The hold's exit raises the loss too: suppressed, the save's is the one looked at.
    with contextlib.suppress(LockNotFound), orders.edit(order) as held:
        orders.locks.break_lock(orders.key(order), everyone=True)
        with pytest.raises(LockNotFound):
            held.save()


def test_guarded_save_stores_a_value_as_a_literal_never_an_operator(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.edit(order) as held:
        order.notes = {"$unset": "lock", "a.b": "$status"}
        held.save()
    assert stored(orders, order)["notes"] == {"$unset": "lock", "a.b": "$status"}
    assert "lock" in stored(orders, order)


def test_guarded_save_refuses_an_expression(orders: ModelLocks[Any], order: Any) -> None:
    from django.db.models import F  # type: ignore[import-untyped]

    with orders.edit(order) as held:
        order.total = F("total") + 1
        with pytest.raises(InvalidArgument, match=r"QuerySet\.update"):
            held.save()
    assert stored(orders, order)["total"] == 10


def save_after_a_loss(
    orders: ModelLocks[Any], order: Any, lose: Callable[[], object], **options: Any
) -> tuple[HeldRecord[Any], list[LockError]]:
    """Hold ``order``, ``lose()`` the lock, edit and save; return the hold and what raised.

    The save's error first, then the one the hold raises on its exit.
    """
    errors: list[LockError] = []
    try:
        with orders.edit(order, **options) as held:
            lose()
            order.status = "paid"
            try:
                held.save()
            except LockError as err:
                errors.append(err)
    except LockError as err:
        errors.append(err)
    return held, errors


def test_guarded_save_after_the_lock_was_broken_raises_and_writes_nothing(
    orders: ModelLocks[Any], order: Any
) -> None:
    _, errors = save_after_a_loss(
        orders, order, lambda: orders.locks.break_lock(orders.key(order), everyone=True)
    )
    assert [isinstance(error, LockNotFound) for error in errors] == [True, True]
    assert stored(orders, order)["status"] == "new"


def test_guarded_save_after_the_lock_expired_raises_and_writes_nothing(
    orders: ModelLocks[Any], order: Any
) -> None:
    # The server's clock judges: the lock is expired, and no one took it meanwhile.
    _, errors = save_after_a_loss(orders, order, lambda: time.sleep(0.5), lock_timeout=0.2)
    assert [isinstance(error, LockNotFound) for error in errors] == [True, True]
    assert stored(orders, order)["status"] == "new"


def test_a_concurrent_writer_cannot_land_a_stale_save(
    orders: ModelLocks[Any], order: Any, Order: Any
) -> None:
    fences: list[int] = []

    def take_over() -> None:
        """Another process takes the record over once the first lock expired, and saves."""
        time.sleep(0.5)
        other = Order.objects.using(ALIAS).get(pk=order.pk)
        with orders.edit(other) as fresh:
            other.status = "shipped"
            fresh.save()
            fences.append(fresh.lock.fence)

    stale, errors = save_after_a_loss(orders, order, take_over, lock_timeout=0.2)
    assert [isinstance(error, LockNotFound) for error in errors] == [True, True]
    assert fences[0] > stale.lock.fence
    assert stored(orders, order)["status"] == "shipped"


def test_concurrent_edits_each_land_once_none_lost(
    orders: ModelLocks[Any], order: Any, Order: Any
) -> None:
    def add_one() -> None:
        mine = Order.objects.using(ALIAS).get(pk=order.pk)  # read before the lock: stale
        with orders.edit(mine, wait=10.0) as held:
            mine.total += 1
            held.save()

    with ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(add_one) for _ in range(8)]:
            done.result()
    assert stored(orders, order)["total"] == 18


# -- Django's own writes on a locked record ----------------------------------------------------


def _save(order: Any, Order: Any) -> None:
    order.save(using=ALIAS)


def _save_update_fields(order: Any, Order: Any) -> None:
    order.save(using=ALIAS, update_fields=["status"])


def _bulk_update(order: Any, Order: Any) -> None:
    Order.objects.using(ALIAS).bulk_update([order], ["status"])


def _queryset_update(order: Any, Order: Any) -> None:
    Order.objects.using(ALIAS).filter(pk=order.pk).update(status=order.status)


DJANGO_WRITES = [
    pytest.param(_save, id="save"),
    pytest.param(_save_update_fields, id="save-update_fields"),
    pytest.param(_bulk_update, id="bulk_update"),
    pytest.param(_queryset_update, id="QuerySet.update"),
]


@pytest.mark.parametrize("write", DJANGO_WRITES)
def test_djangos_own_write_keeps_the_lock_field_byte_for_byte(
    orders: ModelLocks[Any], order: Any, Order: Any, write: Any
) -> None:
    with orders.hold(order):
        before = stored_lock_bytes(orders, order)
        order.status = "paid"
        write(order, Order)
        assert stored_lock_bytes(orders, order) == before
        assert stored(orders, order)["status"] == "paid"


@pytest.mark.parametrize("write", DJANGO_WRITES)
def test_djangos_own_write_is_not_guarded(
    orders: ModelLocks[Any], order: Any, Order: Any, write: Any
) -> None:
    with orders.hold(order):
        # Another process, holding no lock, writes through Django: it lands.
        other = Order.objects.using(ALIAS).get(pk=order.pk)
        other.status = "shipped"
        write(other, Order)
        assert stored(orders, order)["status"] == "shipped"


def test_djangos_save_of_a_deleted_record_inserts_it_again_without_a_lock(
    orders: ModelLocks[Any], order: Any
) -> None:
    orders.acquire(order)
    orders.locks.collection.delete_one({"_id": order.pk})
    order.save(using=ALIAS)
    assert "lock" not in stored(orders, order)


# -- Django MongoDB Backend on the test server (docs/server.md) --------------------------------


@pytest.fixture
def Item(models: ModuleType) -> Iterator[Any]:
    """The ``Item`` model, its collection made by Django's schema editor (its indexes too)."""
    with connections[ALIAS].schema_editor() as editor:
        editor.create_model(models.Item)
    try:
        yield models.Item
    finally:
        with connections[ALIAS].schema_editor() as editor:
            editor.delete_model(models.Item)


def test_the_schema_editor_makes_a_unique_index_the_server_enforces(Item: Any) -> None:
    Item.objects.using(ALIAS).create(name="a")
    with pytest.raises(IntegrityError):
        Item.objects.using(ALIAS).create(name="a")


def test_bulk_create_get_or_create_and_raw_aggregate_run(Item: Any) -> None:
    items = Item.objects.using(ALIAS)
    items.bulk_create([Item(name="a"), Item(name="b")])
    assert items.get_or_create(name="a")[1] is False
    assert items.get_or_create(name="c")[1] is True
    # raw_aggregate() takes its database as an argument: it ignores the queryset's.
    found = items.raw_aggregate([{"$match": {"name": {"$in": ["a", "c"]}}}], using=ALIAS)
    assert sorted(item.name for item in found) == ["a", "c"]


def test_a_transaction_of_django_mongodb_backend_commits(Item: Any) -> None:
    from django_mongodb_backend import transaction  # type: ignore[import-untyped]

    with transaction.atomic(using=ALIAS):
        Item.objects.using(ALIAS).create(name="t")
    assert Item.objects.using(ALIAS).filter(name="t").count() == 1


# -- HTTP ---------------------------------------------------------------------------------------


def test_a_view_editing_a_held_record_answers_409_problem_json_through_the_middleware(
    orders: ModelLocks[Any], order: Any
) -> None:
    def view(request: Any) -> Any:
        with orders.edit(order):
            raise AssertionError("edited while another holds it")

    middleware = DjangoProblemMiddleware(view)
    request = RequestFactory().put(f"/orders/{order.pk}")
    with orders.hold(order):
        try:
            view(request)
        except LockError as err:
            response = middleware.process_exception(request, err)
    assert (response.status_code, response["Content-Type"]) == (409, PROBLEM_JSON)
    assert json.loads(response.content)["code"] == "LockAlreadyTaken"


# -- The example --------------------------------------------------------------------------------


def test_the_example_saves_under_the_lock_and_refuses_a_save_after_it_expired(uri: str) -> None:
    assert run_example("mapper_django.py", uri).splitlines() == [
        "saved under the lock: paid",
        "save after the lock expired: LockWasReacquired (HTTP 409)",
        "status still: paid",
        "plain save while held: status=shipped, lock kept: 1 holder",
    ]


def test_edit_refuses_a_filter_before_anything_is_written(
    orders: ModelLocks[Any], order: Any
) -> None:
    with pytest.raises(InvalidArgument, match="not a filter"), orders.edit({"_id": order.pk}):
        pass
    assert "lock" not in stored(orders, order)


def test_a_filter_is_a_key_as_the_lock_managers_take_it(
    orders: ModelLocks[Any], order: Any
) -> None:
    lock = orders.acquire({"_id": order.pk})
    assert orders.locked(order)
    orders.release(order, lock)


def test_multi_lock_edits_under_a_tag(Order: Any, order: Any) -> None:
    orders = multi_lock(Order, using=ALIAS, lock_timeouts={"write": 10.0, "read": 10.0})
    with orders.edit(order, tag="write") as held:
        order.status = "paid"
        held.save()
        assert held.lock.tag == "write"
    assert Order.objects.using(ALIAS).get(pk=order.pk).status == "paid"


def test_a_save_of_a_record_not_read_by_edit_writes_every_field(
    orders: ModelLocks[Any], order: Any
) -> None:
    with orders.hold(order) as held:
        orders.locks.collection.update_one({"_id": order.pk}, {"$set": {"total": 99}})
        order.status = "paid"
        orders.save(order, held.lock)
    assert (stored(orders, order)["status"], stored(orders, order)["total"]) == ("paid", 10)
