"""Hostile and wrong input, generated: only documented errors, nothing written when refused.

Every property runs against the real server. The collection holds two documents with the
user's fields (``USER_FIELDS``): document 1 locked by a live write lock someone else holds,
document 2 unlocked. After each example:

* only documented exceptions came out: :class:`~docmultilock.InvalidArgument` (and its
  :class:`~docmultilock.InvalidConfiguration`), the :class:`~docmultilock.LockError` tree,
  and marshmallow's ``ValidationError`` from :class:`~docmultilock.LockSchema`;
* a refused call (``InvalidArgument``, ``ResourceNotFound``) left the collection byte for
  byte as it was;
* the user's fields are unchanged, whatever happened, and the other holder's lock with them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

import marshmallow
import pytest
from bson import CodecOptions
from bson.dbref import DBRef
from bson.errors import InvalidDocument
from bson.raw_bson import RawBSONDocument
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    InvalidArgument,
    Lock,
    LockError,
    LockNotFound,
    LockSchema,
    MultiLock,
    ResourceNotFound,
    WriteLock,
)
from tests.helpers import USER_FIELDS, nested

Doc = dict[str, Any]
Manager = WriteLock | MultiLock

#: Server round trips per example: keep the counts modest (the whole file runs in ~30 s).
#: No example database: nothing is stored between runs, and failures print their example.
SERVER = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: The exceptions a caller may see from a lock manager.
DOCUMENTED = (InvalidArgument, LockError)
#: Refusals that promise nothing was written.
REFUSALS = (InvalidArgument, ResourceNotFound)

# -- strategies ---------------------------------------------------------------------------

OPERATORS = [
    "$eq", "$ne", "$gt", "$lt", "$in", "$nin", "$exists", "$type", "$regex", "$not",
    "$and", "$or", "$nor", "$where", "$expr", "$elemMatch", "$size", "$all", "$mod",
    "$comment", "$jsonSchema", "$text", "$function",
]  # fmt: skip

keys = st.one_of(
    st.text(max_size=8), st.sampled_from(OPERATORS), st.sampled_from(["_id", "name", "lock"])
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too
    st.floats(),  # NaN and infinities too
    st.text(max_size=10),
    st.binary(max_size=8),
    st.datetimes(),
    st.just(object()),  # BSON cannot encode it
    st.frozensets(st.integers(), max_size=2),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(keys, inner, max_size=3),
        st.dictionaries(st.integers(), inner, min_size=1, max_size=2),  # non-string keys
    ),
    max_leaves=6,
)
filters = st.one_of(
    st.dictionaries(keys, values, max_size=3),
    st.dictionaries(st.one_of(st.integers(), st.none(), st.binary()), values, min_size=1),
    st.builds(lambda v: {"_id": v}, values),
    st.builds(lambda v: {"_id": {"$ne": v}}, values),
    st.builds(lambda js: {"$where": js}, st.text(max_size=20)),
    st.builds(lambda e: {"$expr": e}, values),
    st.builds(lambda v: {"_id": 1, "$expr": {"$eq": ["$name", v]}}, values),
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.tuples(st.text(max_size=3), values), max_size=2),
)
durations = st.one_of(
    st.floats(),
    st.integers(),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.timedeltas(),
    st.sampled_from([0, -1, 1e-4, 1e-300, math.nan, math.inf, 2**64, 10**400, 1e300]),
)
write_concerns = st.one_of(
    st.integers(min_value=-3, max_value=60),
    st.integers(),
    st.booleans(),
    st.floats(),
    st.none(),
    st.sampled_from(["majority", "", "nosuchmode"]),
    st.text(max_size=5),
)
field_names = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "$lock", "a.b", "_id", "lock\x00", "name", "total", "items", "lock"]),
    st.builds(lambda t: "$" + t, st.text(max_size=4)),
    st.builds(lambda a, b: f"{a}.{b}", st.text(max_size=3), st.text(max_size=3)),
    st.integers(),
    st.none(),
)
tags = st.one_of(
    st.sampled_from(["read", "write", "admin", "", "$$now", "$write", "Write"]),
    st.text(max_size=8),
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=2), max_size=2),
    st.binary(max_size=4),
)
hex_ids = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
LOCK_KEYS = ["id", "tag", "document_id", "acquired_at", "expires_at", "fence", "pending"]

# -- the collection under test ------------------------------------------------------------


class Scene:
    """The two documents, the other holder's live lock on document 1, and snapshots."""

    def __init__(self, collection: Collection[Doc]) -> None:
        self.collection = collection
        self.raw = collection.with_options(
            codec_options=CodecOptions(document_class=RawBSONDocument)
        )
        self.holder = WriteLock(collection, lock_timeout=60.0)
        self.reset()

    def reset(self) -> None:
        self.collection.delete_many({})
        self.collection.insert_many([{"_id": 1, **USER_FIELDS}, {"_id": 2, **USER_FIELDS}])
        self.held = self.holder.acquire({"_id": 1})
        self.held_entry = self.holders(1)

    def snapshot(self) -> list[bytes]:
        """Every document of the collection, as the bytes the server holds."""
        return [bytes(doc.raw) for doc in self.raw.find({}, sort=[("_id", 1)])]

    def holders(self, _id: int, field: str = "lock") -> Any:
        found = self.collection.find_one({"_id": _id}) or {}
        return (found.get(field) or {}).get("holders") if field in found else None

    def check_untouched(self, field: str = "lock", *, renewed: bool = False) -> None:
        """The user's fields of both documents, and the other holder's lock, are intact.

        With ``renewed`` (the call used the holder's own lock), its expiry may have moved,
        and its lifetime changed if the call gave one.
        """
        for document in self.collection.find({}, sort=[("_id", 1)]):
            mine = {k: v for k, v in document.items() if k in USER_FIELDS}
            assert mine == USER_FIELDS, document
            assert set(document) <= {"_id", *USER_FIELDS, "lock", field}, document
        now = self.holders(1)
        if renewed:
            assert [{**h, "expires": None, "ttl": None} for h in now] == [
                {**h, "expires": None, "ttl": None} for h in self.held_entry
            ]
        else:
            assert now == self.held_entry

    def run(
        self, call: Callable[[], object], field: str = "lock", *, renewed: bool = False
    ) -> object:
        """Make ``call``; let documented errors through only, then check what was written."""
        before = self.snapshot()
        try:
            return call()
        except REFUSALS:
            assert self.snapshot() == before
            raise
        finally:
            self.check_untouched(field, renewed=renewed)


@pytest.fixture
def scene(collection: Collection[Doc]) -> Scene:
    return Scene(collection)


def managers(collection: Collection[Doc]) -> list[Manager]:
    return [WriteLock(collection), MultiLock(collection)]


def take(locks: Manager, filter: Any, **kwargs: Any) -> Lock:  # noqa: A002
    if isinstance(locks, MultiLock):
        return locks.acquire(filter, tag="write", **kwargs)
    return locks.acquire(filter, **kwargs)


@pytest.fixture
def fresh(scene: Scene) -> Callable[[], Scene]:
    """Hand out the scene reset to its start, once per hypothesis example."""

    def again() -> Scene:
        scene.reset()
        return scene

    return again


# -- filters --------------------------------------------------------------------------------


@SERVER
@given(filter_=filters, which=st.integers(0, 1), op=st.sampled_from(["acquire", "other"]))
def test_any_filter_gives_a_lock_or_a_documented_error(
    fresh: Callable[[], Scene], filter_: Any, which: int, op: str
) -> None:
    scene = fresh()
    locks = managers(scene.collection)[which]
    # With the other holder's lock, release/extend/guard act on document 1 at most.
    calls: dict[str, Callable[[], object]] = {
        "acquire": lambda: take(locks, filter_),
        "other": lambda: (locks.guard(filter_, scene.held), locks.extend(filter_, scene.held)),
    }
    with contextlib.suppress(*DOCUMENTED):
        scene.run(calls[op], renewed=True)


@SERVER
@given(filter_=filters)
def test_a_guarded_write_through_any_filter_lands_only_on_the_locks_document(
    fresh: Callable[[], Scene], filter_: Any
) -> None:
    scene = fresh()
    try:
        guarded = scene.holder.guard(filter_, scene.held)
    except InvalidArgument:
        return
    # The server may refuse the caller's filter, or BSON may not encode it: no write then.
    with contextlib.suppress(PyMongoError, InvalidDocument, OverflowError):
        scene.collection.update_many(guarded, {"$set": {"seen": True}})
    touched = [d["_id"] for d in scene.collection.find({"seen": True})]
    assert touched in ([], [1])


# -- tags, durations, write concerns ----------------------------------------------------


@SERVER
@given(tag=tags)
def test_any_tag_gives_a_lock_or_a_documented_error(fresh: Callable[[], Scene], tag: Any) -> None:
    scene = fresh()
    locks = MultiLock(scene.collection)
    try:
        scene.run(lambda: locks.acquire({"_id": 2}, tag=tag))
    except DOCUMENTED:
        pass
    else:
        assert tag in ("read", "write")


@SERVER
@given(
    lock_timeout=durations,
    timeout=durations,
    w=write_concerns,
    which=st.integers(0, 1),
)
def test_any_per_call_option_gives_a_lock_or_a_documented_error(
    fresh: Callable[[], Scene], lock_timeout: Any, timeout: Any, w: Any, which: int
) -> None:
    scene = fresh()
    locks = managers(scene.collection)[which]
    options = {"lock_timeout": lock_timeout, "timeout": timeout, "w": w}
    with contextlib.suppress(*DOCUMENTED):
        scene.run(lambda: take(locks, {"_id": 2}, **options))
    with contextlib.suppress(*DOCUMENTED):
        scene.run(lambda: locks.extend({"_id": 1}, scene.held, **options), renewed=True)


@pytest.mark.parametrize("w", [0, False, -1, 0.0, "", 51, 2**70])
def test_an_unsatisfiable_or_unacknowledged_write_concern_is_refused(scene: Scene, w: Any) -> None:
    with pytest.raises(InvalidArgument):
        WriteLock(scene.collection, w=w)
    with pytest.raises(InvalidArgument):
        scene.run(lambda: scene.holder.acquire({"_id": 2}, w=w))


@pytest.mark.parametrize("bad", [10**400, -(10**400), 1e300, timedelta.max, 366 * 86400])
def test_a_lock_lifetime_beyond_a_year_is_refused(scene: Scene, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="lock_timeout"):
        WriteLock(scene.collection, lock_timeout=bad)
    with pytest.raises(InvalidArgument, match="lock_timeout"):
        scene.run(lambda: scene.holder.acquire({"_id": 2}, lock_timeout=bad))


@pytest.mark.parametrize("bad", [10**400, 1e300, timedelta.max, 30 * 86400])
def test_an_operation_timeout_beyond_mongodbs_limit_is_refused(scene: Scene, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="timeout"):
        WriteLock(scene.collection, timeout=bad)
    with pytest.raises(InvalidArgument, match="timeout"):
        scene.run(lambda: scene.holder.acquire({"_id": 2}, timeout=bad))


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb"])
def test_a_lone_surrogate_is_refused_in_a_field_tag_or_write_concern(
    scene: Scene, text: str
) -> None:
    with pytest.raises(InvalidArgument, match="field"):
        WriteLock(scene.collection, field=text)
    with pytest.raises(InvalidArgument, match="lock_timeouts"):
        MultiLock(scene.collection, lock_timeouts={text: 1.0})
    with pytest.raises(InvalidArgument, match="w must"):
        scene.run(lambda: scene.holder.acquire({"_id": 2}, w=text))


def test_a_lone_surrogate_in_a_filter_is_an_invalid_argument(scene: Scene) -> None:
    with pytest.raises(InvalidArgument):
        scene.run(lambda: scene.holder.acquire({"_id": 2, "name": "\ud800"}))


# -- whole configurations -----------------------------------------------------------------

hashable_tags = tags.filter(lambda tag: not isinstance(tag, list))
relationships = st.one_of(
    st.dictionaries(
        hashable_tags,
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "cooperative": st.one_of(st.lists(tags, max_size=3), tags),
                    "assertive": st.one_of(st.lists(tags, max_size=3), tags),
                },
            ),
            json_values,
        ),
        max_size=3,
    ),
    json_values,
)
configurations = st.fixed_dictionaries(
    {},
    optional={
        "lock_timeouts": st.one_of(
            st.dictionaries(hashable_tags, durations, max_size=3), json_values
        ),
        "lock_relationships": relationships,
        "lock_timeout": durations,
        "timeout": durations,
        "w": write_concerns,
        "field": field_names,
        "error_factory": st.one_of(st.none(), st.just(lambda err: err), json_values),
    },
)


@SERVER
@given(config=configurations, multi=st.booleans())
def test_any_configuration_builds_a_working_manager_or_is_refused_writing_nothing(
    fresh: Callable[[], Scene], config: dict[str, Any], multi: bool
) -> None:
    scene = fresh()
    if not multi:
        config.pop("lock_timeouts", None)
        config.pop("lock_relationships", None)
    before = scene.snapshot()
    try:
        locks: Manager = (MultiLock if multi else WriteLock)(scene.collection, **config)
    except InvalidArgument:  # InvalidConfiguration is one
        assert scene.snapshot() == before
        return
    field = locks.options.field
    tag = sorted(locks.options.rules.tags)[0]
    try:
        if isinstance(locks, MultiLock):
            scene.run(lambda: locks.acquire({"_id": 2}, tag=tag), field)
        else:
            scene.run(lambda: locks.acquire({"_id": 2}), field)
    except DOCUMENTED:
        pass


# -- forged locks -------------------------------------------------------------------------


@SERVER
@given(data=st.dictionaries(st.sampled_from([*LOCK_KEYS, "admin"]), json_values, max_size=8))
def test_a_random_dict_never_loads_as_a_lock_that_acts(
    fresh: Callable[[], Scene], data: dict[str, Any]
) -> None:
    try:
        forged = LockSchema().load(data)
    except marshmallow.ValidationError:
        return
    scene = fresh()
    for locks in managers(scene.collection):
        for act in (locks.release, locks.extend, locks.guard):
            with contextlib.suppress(*DOCUMENTED):
                scene.run(lambda act=act: act({"_id": 1}, forged))  # type: ignore[misc]


@SERVER
@given(
    forged_id=hex_ids,
    document_id=st.one_of(st.just(None), json_values),
    changes=st.dictionaries(st.sampled_from(["fence", "pending", "expires_at"]), json_values),
)
def test_a_forged_lock_with_a_guessed_id_never_releases_or_extends_the_holders_lock(
    fresh: Callable[[], Scene], forged_id: str, document_id: Any, changes: dict[str, Any]
) -> None:
    scene = fresh()
    data = {**LockSchema().dump(scene.held), **changes, "id": forged_id}
    if document_id is not None:
        data["document_id"] = document_id
    try:
        forged = LockSchema().load(data)
    except marshmallow.ValidationError:
        return
    assert forged.id != scene.held.id
    for filter_ in ({"_id": 1}, {"name": "original"}):
        for act in (scene.holder.release, scene.holder.extend):
            try:
                scene.run(lambda act=act, f=filter_: act(f, forged))  # type: ignore[misc]
            except (LockNotFound, InvalidArgument, ResourceNotFound):
                pass
            else:
                pytest.fail(f"{act.__name__} with a guessed id succeeded")
        try:
            guarded = scene.holder.guard(filter_, forged)
        except InvalidArgument:
            continue
        assert scene.collection.update_many(guarded, {"$set": {"seen": 1}}).matched_count == 0
    assert scene.holders(1) == scene.held_entry


@pytest.mark.parametrize(
    "document_id",
    [{"$ne": None}, {"$gt": {"$numberInt": "0"}}, [1], {"$regex": ".*", "$options": ""}],
)
def test_a_loaded_lock_cannot_carry_an_operator_as_its_document(document_id: Any) -> None:
    data = {**LockSchema().dump(_lock(1)), "document_id": document_id}
    with pytest.raises(marshmallow.ValidationError, match="document_id"):
        LockSchema().load(data)


@pytest.mark.parametrize(
    "document_id", [{"$ne": None}, [1, 2], 2**64, DBRef("orders", nested(150))]
)
def test_a_hand_made_lock_naming_an_operator_as_its_document_is_refused(
    scene: Scene, document_id: Any
) -> None:
    forged = Lock(**{**_fields(scene.held), "document_id": document_id})
    for act in (scene.holder.release, scene.holder.extend, scene.holder.guard):
        with pytest.raises(InvalidArgument, match="document_id"):
            scene.run(lambda act=act: act({"name": "original"}, forged))  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("expires_at", "0001-01-01T00:00:00+01:00"),
        ("document_id", {"$date": {"$numberLong": "99999999999999999"}}),
    ],
)
def test_a_lock_with_dates_out_of_range_is_a_validation_error(key: str, bad: Any) -> None:
    data = {**LockSchema().dump(_lock(1)), key: bad}
    with pytest.raises(marshmallow.ValidationError, match=key):
        LockSchema().load(data)


@pytest.mark.parametrize(
    ("key", "bad"), [("id", 5), ("id", "A" * 32), ("id", "a" * 32 + "\n"), ("tag", ["write"])]
)
def test_a_hand_made_lock_with_a_malformed_id_or_tag_is_refused(
    scene: Scene, key: str, bad: Any
) -> None:
    forged = Lock(**{**_fields(scene.held), key: bad})
    with pytest.raises(InvalidArgument):
        scene.run(lambda: scene.holder.release({"_id": 1}, forged))


def _lock(document_id: Any) -> Lock:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return Lock(
        id="0" * 32, tag="write", document_id=document_id, acquired_at=now, expires_at=now, fence=1
    )


def _fields(lock: Lock) -> dict[str, Any]:
    return {name: getattr(lock, name) for name in Lock.__dataclass_fields__}


# -- any sequence of operations -----------------------------------------------------------


class Operations(RuleBasedStateMachine):
    """Random acquire/continue/release/extend/guarded writes on one document, any tags.

    Invariants: the user's fields never change; guarded writes land exactly while the
    lock is granted on the document; never two granted writers, or a writer and a reader.
    """

    #: The collection to act on, set by the test (held in a list: hypothesis inspects
    #: class attributes, and a pymongo Collection answers any attribute name).
    where: ClassVar[list[Collection[Doc]]] = []

    locks = Bundle("locks")

    @initialize()
    def setup(self) -> None:
        self.collection = self.where[0]
        self.collection.delete_many({})
        self.collection.insert_one({"_id": 1, **USER_FIELDS, "writes": 0})
        self.manager = MultiLock(self.collection, lock_timeouts={"read": 60.0, "write": 60.0})
        self.writes = 0

    def _held(self) -> list[Doc]:
        found = self.collection.find_one({"_id": 1}) or {}
        holders: list[Doc] = (found.get("lock") or {}).get("holders") or []
        return holders

    @rule(target=locks, tag=tags)
    def acquire(self, tag: Any) -> Lock | None:
        try:
            return self.manager.acquire({"_id": 1}, tag=tag)
        except AssertiveLock as err:
            return err.lock
        except (CooperativeLock, InvalidArgument):
            return None

    @rule(target=locks, lock=locks)
    def go_on(self, lock: Lock | None) -> Lock | None:
        if lock is None or not lock.pending:
            return lock
        try:
            return self.manager.acquire({"_id": 1}, lock=lock)
        except AssertiveLock as err:
            return err.lock
        except (CooperativeLock, LockNotFound):
            return None

    @rule(lock=consumes(locks))
    def release(self, lock: Lock | None) -> None:
        if lock is None:
            return
        present = any(h["id"] == lock.id for h in self._held())
        try:
            self.manager.release({"_id": 1}, lock)
        except LockNotFound:
            assert not present
        else:
            assert present

    @rule(lock=locks)
    def extend(self, lock: Lock | None) -> None:
        if lock is None:
            return
        with contextlib.suppress(LockNotFound, InvalidArgument):
            self.manager.extend({"_id": 1}, lock)

    @rule(lock=locks, forged=hex_ids)
    def forged_release(self, lock: Lock | None, forged: str) -> None:
        if lock is None:
            return
        before = self._held()
        with pytest.raises((LockNotFound, InvalidArgument)):
            self.manager.release({"_id": 1}, Lock(**{**_fields(lock), "id": forged}))
        assert [h["id"] for h in self._held()] == [h["id"] for h in before]

    @rule(lock=locks)
    def guarded_write(self, lock: Lock | None) -> None:
        if lock is None:
            return
        granted = any(h["id"] == lock.id and not h["pending"] for h in self._held())
        try:
            guarded = self.manager.guard({"_id": 1}, lock)
        except InvalidArgument:
            assert lock.pending
            return
        matched = self.collection.update_one(guarded, {"$inc": {"writes": 1}}).matched_count
        assert matched == int(granted)
        self.writes += matched

    @invariant()
    def user_fields_are_unchanged(self) -> None:
        found = self.collection.find_one({"_id": 1}) or {}
        assert {k: found.get(k) for k in USER_FIELDS} == USER_FIELDS
        assert found.get("writes") == self.writes
        assert set(found) <= {"_id", *USER_FIELDS, "writes", "lock"}

    @invariant()
    def a_writer_is_alone(self) -> None:
        granted = [h["tag"] for h in self._held() if not h["pending"]]
        if "write" in granted:
            assert granted == ["write"]


def test_any_sequence_of_operations_keeps_the_users_fields_and_excludes_writers(
    collection: Collection[Doc],
) -> None:
    Operations.where[:] = [collection]
    Operations.TestCase.settings = settings(
        max_examples=15, stateful_step_count=20, deadline=None, database=None
    )
    Operations.TestCase().runTest()
