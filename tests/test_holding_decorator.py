"""``holding()``: a function that runs holding a lock, one call at a time.

Over every manager and both flavours: an async manager decorates ``async def`` functions,
a sync one plain functions, and a function of the other flavour is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from docmultilock import InvalidArgument, LockConflict
from tests.flavours import Portal
from tests.subjects import Subject


def raw(subject: Subject) -> Any:
    """The subject's manager itself (the async one behind its test view)."""
    return getattr(subject.locks, "wrapped", subject.locks)


def decorated(
    subject: Subject,
    flavour: str,
    portal: Portal,
    key: Any,
    body: Callable[..., Any],
    **options: Any,
) -> Callable[..., Any]:
    """``body`` decorated by the subject's manager in its flavour, callable from the test."""
    manager = raw(subject)
    if flavour == "sync":
        return manager.holding(key, tag=subject.tag, **options)(body)  # type: ignore[no-any-return]

    async def run(*args: Any) -> Any:
        return body(*args)

    function = manager.holding(key, tag=subject.tag, **options)(run)
    return lambda *args: portal.call(function(*args))


def test_a_decorated_function_runs_holding_the_lock_and_it_is_released_after(
    subject: Subject, flavour: str, portal: Portal
) -> None:
    def body() -> list[str]:
        return [h["tag"] for h in subject.holders()]

    assert decorated(subject, flavour, portal, subject.key, body)() == ["write"]
    assert subject.holders() == []


def test_a_key_function_locks_the_key_of_each_calls_arguments(
    subject: Subject, flavour: str, portal: Portal
) -> None:
    keys = {1: subject.key, 2: subject.new_key(2)}
    seen: list[tuple[bool, bool]] = []

    def held(key: Any) -> bool:
        stored = subject.stored(key)
        return stored is not None and bool(stored["holders"])

    def body(number: int) -> None:
        seen.append((held(keys[1]), held(keys[2])))

    run = decorated(subject, flavour, portal, keys.__getitem__, body)
    run(1)
    run(2)
    assert seen == [(True, False), (False, True)]


def test_a_refused_call_raises_and_the_function_does_not_run(
    subject: Subject, flavour: str, portal: Portal
) -> None:
    ran: list[int] = []
    run = decorated(subject, flavour, portal, subject.key, lambda: ran.append(1))
    with subject.hold(), pytest.raises(LockConflict):
        run()
    assert ran == []


def test_pass_held_gives_the_function_the_held_lock_first(
    subject: Subject, flavour: str, portal: Portal
) -> None:
    def body(held: Any, number: int) -> tuple[str, int]:
        return held.lock.id, number

    lock_id, number = decorated(subject, flavour, portal, subject.key, body, pass_held=True)(7)
    assert number == 7
    assert len(lock_id) == 32


def test_the_decorated_function_keeps_its_name_and_docstring(subject: Subject) -> None:
    manager = raw(subject)

    async def report() -> None:
        """Make the report."""

    def plain_report() -> None:
        """Make the report."""

    function = report if manager is not subject.locks else plain_report
    wrapped = manager.holding(subject.key, tag=subject.tag)(function)
    assert (wrapped.__name__, wrapped.__doc__) == (function.__name__, "Make the report.")


def test_a_bad_option_is_refused_by_name_at_decoration(subject: Subject) -> None:
    manager: Any = raw(subject)
    with pytest.raises(InvalidArgument, match=r"\bwait\b"):
        manager.holding(subject.key, tag=subject.tag, wait="soon")
    assert subject.stored() is None


def test_a_keyword_hold_does_not_take_is_a_type_error_naming_holding(subject: Subject) -> None:
    manager: Any = raw(subject)
    with pytest.raises(TypeError, match=r"holding\(\) got an unexpected keyword argument 'wiat'"):
        manager.holding(subject.key, tag=subject.tag, wiat=5.0)


def test_a_bad_key_is_refused_at_decoration(subject: Subject) -> None:
    manager: Any = raw(subject)
    with pytest.raises(InvalidArgument):
        manager.holding(3.5j, tag=subject.tag)
    assert subject.stored() is None


def test_a_function_of_the_other_flavour_is_refused_naming_the_manager_to_use(
    subject: Subject,
) -> None:
    manager = raw(subject)
    name = type(manager).__name__
    if name.startswith("Async"):

        def other() -> None:
            pass

        wanted = rf"{name}\.holding\(\) decorates async functions .*'.*other'.*use {name[5:]}"
    else:

        async def other() -> None:  # type: ignore[misc]
            pass

        wanted = rf"{name}\.holding\(\) decorates plain functions.*use Async{name}"
    with pytest.raises(TypeError, match=wanted):
        manager.holding(subject.key, tag=subject.tag)(other)
