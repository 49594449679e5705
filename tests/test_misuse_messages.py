"""Misuse messages name the right thing: the method, the user's class, the key, the fix.

A ``hold_all()`` used without entering it names ``hold_all``, a forgotten ``await`` is
asked about, a bare ``_id`` is answered with the filter to write, a set's bad key is named
by its place, Python's argument errors name the user's class rather than a private base,
and ``help()`` of an options class shows every option it takes.
"""

from __future__ import annotations

import asyncio
import pydoc
from typing import Any

import pytest

from docmultilock import InvalidArgument, Lock
from docmultilock import options as options_module
from tests.flavours import Portal
from tests.subjects import Subject


def raw(subject: Subject) -> Any:
    """The subject's manager itself (the async one behind its test view)."""
    return getattr(subject.locks, "wrapped", subject.locks)


@pytest.mark.parametrize("name", ["locks", "members", "errors", "guard", "require", "lost"])
def test_a_hold_all_not_entered_names_hold_all(subject: Subject, name: str) -> None:
    hold_all = raw(subject).hold_all([subject.key], tag=subject.tag)
    with pytest.raises(AttributeError, match=r"hold_all\(\) returns a context manager") as exc:
        getattr(hold_all, name)
    assert f"locks.hold_all(...) as held:' and use held.{name}" in str(exc.value)


def test_a_hold_not_entered_names_held_convert(subject: Subject) -> None:
    with pytest.raises(AttributeError, match=r"use held\.convert inside the block"):
        raw(subject).hold(subject.key, tag=subject.tag).convert  # noqa: B018


def test_a_hold_all_entered_the_wrong_way_names_hold_all(subject: Subject, portal: Portal) -> None:
    manager = raw(subject)
    hold_all = manager.hold_all([subject.key], tag=subject.tag)
    if type(manager).__name__.startswith("Async"):
        with pytest.raises(TypeError, match=r"'async with locks\.hold_all\(\.\.\.\) as held:'"):
            hold_all.__enter__()

        async def awaited() -> None:
            await hold_all

        with pytest.raises(TypeError, match=r"'await locks\.acquire_all\(\.\.\.\)'"):
            portal.call(awaited())
    else:
        with pytest.raises(TypeError, match=r"'with locks\.hold_all\(\.\.\.\) as held:'"):
            asyncio.run(hold_all.__aenter__())
    assert subject.stored() is None


def test_an_argument_error_names_the_users_class_not_a_private_base(subject: Subject) -> None:
    manager = raw(subject)
    name = type(manager).__name__
    with pytest.raises(TypeError) as exc:
        manager.acquire(subject.key, subject.tag, None)
    assert str(exc.value).startswith(f"{name}.acquire() takes 2 positional arguments")
    with pytest.raises(TypeError, match=rf"^{name}\.release\(\) missing 1 required"):
        manager.release(subject.key)


@pytest.mark.parametrize("build", ["MultiLock", "WriteLock"], indirect=True)  # a name is a key
def test_a_bare_id_is_answered_with_the_filter_to_write(subject: Subject) -> None:
    with pytest.raises(InvalidArgument, match=r"pass \{'_id': 3\}"):
        subject.locks.acquire(3, tag=subject.tag)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["acquire_all", "hold_all"])
def test_a_sets_bad_key_is_named_by_its_place(subject: Subject, method: str) -> None:
    keys = [subject.key, 3.5j]
    with pytest.raises(InvalidArgument, match=r"^keys\[1\] of the set: "):
        # The view runs acquire_all's coroutine; hold_all refuses before it is entered.
        getattr(subject.locks if method == "acquire_all" else raw(subject), method)(
            keys, tag=subject.tag
        )
    assert subject.stored() is None


def test_a_lock_that_is_a_coroutine_asks_whether_await_was_forgotten(subject: Subject) -> None:
    async def acquire() -> Lock:
        raise AssertionError("never awaited")

    coroutine = acquire()
    try:
        with pytest.raises(InvalidArgument, match=r"not coroutine .*was 'await' forgotten\?"):
            subject.locks.release(subject.key, coroutine)  # type: ignore[arg-type]
    finally:
        coroutine.close()


@pytest.mark.parametrize(
    "name",
    [
        "AcquireOptions",
        "BreakOptions",
        "HoldOptions",
        "MultiLockOptions",
        "NamedLocksOptions",
        "NewLockOptions",
        "WaitOptions",
        "WriteLockOptions",
    ],
)
def test_help_of_an_options_class_shows_every_option_it_takes(name: str) -> None:
    cls = getattr(options_module, name)
    shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    missing = [key for key in sorted(cls.__optional_keys__) if f"``{key}``" not in shown]
    assert missing == []
