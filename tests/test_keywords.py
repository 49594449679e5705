"""The keyword options, declared once as typed dicts (``_keywords``), as each method takes them.

Every method that takes ``**options`` refuses a keyword it does not declare as Python
refuses one (``TypeError``, naming it) before anything is written, and reads every keyword
it declares: a bad value of each is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import InvalidArgument, InvalidConfiguration, WriteLock
from docmultilock.options import (
    BreakOptions,
    HoldOptions,
    MultiLockOptions,
    NamedLocksOptions,
    NewLockOptions,
    PreviewOptions,
    WriteLockOptions,
)
from tests.flavours import MakeLock
from tests.subjects import Subject

Doc = dict[str, Any]

#: What each method taking ``**options`` is called with, besides the misspelt keyword.
CALLS: dict[str, Callable[[Subject, dict[str, Any]], object]] = {
    "acquire": lambda s, kw: s.locks.acquire(s.key, **{"tag": s.tag, **kw}),
    "hold": lambda s, kw: s.locks.hold(s.key, **{"tag": s.tag, **kw}),
    "hold_all": lambda s, kw: s.locks.hold_all([s.key], **{"tag": s.tag, **kw}),
    "acquire_all": lambda s, kw: s.locks.acquire_all([s.key], **{"tag": s.tag, **kw}),
    "preview_break": lambda s, kw: s.locks.preview_break(s.key, **{"everyone": True, **kw}),
    "break_lock": lambda s, kw: s.locks.break_lock(s.key, **{"everyone": True, **kw}),
}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_a_misspelt_keyword_is_a_type_error_naming_it_and_writes_nothing(
    subject: Subject, method: str
) -> None:
    with pytest.raises(TypeError, match=rf"{method}\(\) got an unexpected keyword argument 'tg'"):
        CALLS[method](subject, {"tg": "write"})
    assert subject.stored() is None


def test_a_misspelt_constructor_keyword_is_a_type_error_naming_it(subject: Subject) -> None:
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'lock_timout'"):
        subject.manager(lock_timout=5.0)


def test_write_lock_takes_no_tag_table(make_lock: MakeLock, collection: Collection[Doc]) -> None:
    with pytest.raises(TypeError, match="'lock_relationships'"):
        make_lock(WriteLock, collection, lock_relationships={"write": {}})


def test_write_lock_acquire_takes_its_one_tag_and_no_other(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 1})
    locks = make_lock(WriteLock, collection)
    assert locks.acquire({"_id": 1}, tag="write").tag == "write"
    with pytest.raises(InvalidArgument, match="'read'"):
        locks.acquire({"_id": 1}, tag="read")


#: A value of each hold option that must be refused, by the option's name.
BAD_HOLD: dict[str, Any] = {
    "tag": 5,
    "lock_timeout": "soon",
    "timeout": "soon",
    "w": [],
    "wait": "soon",
    "backoff": "fast",
    "keepalive": "yes",
    "extend_every": "often",
    "on_lost": 5,
    "wake": "shout",
    "fair": "yes",
}


def test_every_hold_option_declared_has_a_refused_value_here() -> None:
    assert set(BAD_HOLD) == HoldOptions.__optional_keys__
    assert NewLockOptions.__optional_keys__ < HoldOptions.__optional_keys__


@pytest.mark.parametrize("option", sorted(BAD_HOLD))
@pytest.mark.parametrize("method", ["hold", "hold_all"])
def test_every_hold_option_is_read_and_a_bad_value_refused_by_name(
    subject: Subject, method: str, option: str
) -> None:
    with pytest.raises(InvalidArgument, match=rf"\b{option}\b"):
        CALLS[method](subject, {option: BAD_HOLD[option]})
    assert subject.stored() is None


#: A value of each break option that must be refused, by the option's name.
BAD_BREAK: dict[str, Any] = {
    "lock_id": 5,
    "all_expired": "yes",
    "everyone": "yes",
    "timeout": "soon",
    "w": [],
}


def test_every_break_option_declared_has_a_refused_value_here() -> None:
    assert set(BAD_BREAK) == BreakOptions.__optional_keys__
    assert set(BAD_BREAK) - {"w"} == PreviewOptions.__optional_keys__


@pytest.mark.parametrize("option", sorted(BAD_BREAK))
def test_every_break_option_is_read_and_a_bad_value_refused_by_name(
    subject: Subject, option: str
) -> None:
    # With everyone=True besides: a bad mode flag is refused before the modes are counted.
    with pytest.raises(InvalidArgument, match=rf"\b{option}\b"):
        CALLS["break_lock"](subject, {option: BAD_BREAK[option]})


#: A value of each constructor option that must be refused, by the option's name.
BAD_SETTING: dict[str, Any] = {
    "lock_timeouts": 5,
    "lock_relationships": 5,
    "lock_limits": 5,
    "max_holders": "many",
    "lock_timeout": "soon",
    "timeout": "soon",
    "w": [],
    "error_factory": 5,
    "listener": 5,
    "field": 5,
}


def test_every_constructor_option_declared_has_a_refused_value_here() -> None:
    declared = (
        MultiLockOptions.__optional_keys__
        | NamedLocksOptions.__optional_keys__
        | WriteLockOptions.__optional_keys__
    )
    assert set(BAD_SETTING) == declared


@pytest.mark.parametrize("option", sorted(BAD_SETTING))
def test_each_constructor_option_is_read_or_not_taken(subject: Subject, option: str) -> None:
    """A bad value of an option the manager takes is refused by name; another, as a keyword."""
    manager = getattr(subject.locks, "wrapped", subject.locks)  # the async one behind a view
    kind = type(manager).__name__.removeprefix("Async")
    accepted = {
        "MultiLock": MultiLockOptions.__optional_keys__,
        "NamedLocks": NamedLocksOptions.__optional_keys__,
        "WriteLock": WriteLockOptions.__optional_keys__,
    }[kind]
    refused = (
        pytest.raises(InvalidConfiguration, match=rf"\b{option}\b")
        if option in accepted
        else pytest.raises(TypeError, match=f"unexpected keyword argument '{option}'")
    )
    with refused:
        subject.manager(**{option: BAD_SETTING[option]})
