"""The keyword options of the public API, each declared once as a typed dict.

A manager's constructor and ``hold()``/``hold_all()`` take ``**options`` typed by these
dicts (PEP 692), so an option is added in one place and every method that takes it, in
both flavours, follows; type checkers and editors still see every keyword and its type.
Defaults are the ones the docstrings state, applied where the options are parsed:
``_holding.plan_hold`` for a hold, ``options.manager_setup`` for a constructor. The
public names are :mod:`docmultilock.options`'.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from docmultilock._events import LockListener
from docmultilock._lock import Lock
from docmultilock.errors import LockError

if TYPE_CHECKING:
    from typing_extensions import Unpack
elif sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10, where only typing_extensions has it
    # Only introspection of the ``**options`` annotations (typing.get_type_hints, the API
    # reference) needs the name at run time; typing_extensions is no dependency of ours.
    try:
        from typing_extensions import Unpack
    except ImportError:
        Unpack = None

__all__ = [
    "AcquireOptions",
    "BreakOptions",
    "Duration",
    "ErrorFactory",
    "HoldOptions",
    "ManagerOptions",
    "MultiLockOptions",
    "NamedLocksOptions",
    "NewLockOptions",
    "OnLost",
    "PreviewOptions",
    "Unpack",
    "WriteLockOptions",
    "take_keywords",
]

#: Seconds as a number, or a timedelta.
Duration = float | int | timedelta
#: Turns a LockError into the exception to raise instead (e.g. a framework's HTTP error).
ErrorFactory = Callable[[LockError], BaseException]

#: Called once, from wherever the loss was found, with the lock and why it is lost.
OnLost = Callable[[Lock, LockError], object]


class NewLockOptions(TypedDict, total=False):
    """The options of a new lock: ``acquire_all()``'s, and the acquisition of a hold.

    ``tag``
        The lock's tag; may be left out when the manager declares only one.
    ``lock_timeout``
        This lock's lifetime in seconds, instead of its tag's.
    ``timeout``
        The command's time limit in seconds, instead of the manager's.
    ``w``
        The write concern, instead of the manager's.
    """

    tag: str | None
    lock_timeout: Duration | None
    timeout: Duration | None
    w: int | str | None


class AcquireOptions(NewLockOptions, total=False):
    """``acquire()``'s options: a new lock's, or ``lock=`` to continue a pending one.

    ``lock``
        A pending assertive lock to go on waiting with (``err.lock``), instead of ``tag``.
    """

    lock: Lock | None


class HoldOptions(NewLockOptions, total=False):
    """The options of ``hold()`` and ``hold_all()``: an acquisition's, and how to hold it.

    ``wait``
        Seconds to go on trying while refused; ``None`` (the default) tries once.
    ``backoff``
        ``(min, max)`` seconds of the backoff between attempts; ``(0.01, 0.8)``.
    ``keepalive``
        Extend the lock from the process's keep-alive (``False``).
    ``extend_every``
        Seconds between extensions; a third of the lock's lifetime by default.
    ``on_lost``
        Called as ``on_lost(lock, error)`` once, when the lock is found lost.
    ``wake``
        How a waiter learns that the lock may be free: ``"changes"`` or ``"poll"``.
    ``fair``
        Hold a place in line while waiting (``False``).
    """

    wait: Duration | None
    backoff: tuple[float, float]
    keepalive: bool
    extend_every: Duration | None
    on_lost: OnLost | None
    wake: Literal["changes", "poll"]
    fair: bool


class PreviewOptions(TypedDict, total=False):
    """``preview_break()``'s options: which entries a break would remove (exactly one).

    ``lock_id``
        The one entry of this id, live or not.
    ``all_expired``
        Every expired entry (``False``).
    ``everyone``
        Every entry, live or not (``False``).
    ``timeout``
        The command's time limit in seconds, instead of the manager's.
    """

    lock_id: str | None
    all_expired: bool
    everyone: bool
    timeout: Duration | None


class BreakOptions(PreviewOptions, total=False):
    """``break_lock()``'s options: a preview's, and the write concern.

    ``w``
        The write concern, instead of the manager's.
    """

    w: int | str | None


class ManagerOptions(TypedDict, total=False):
    """What every lock manager's constructor takes.

    ``lock_timeout``
        The lifetime in seconds of a lock whose tag has none of its own; ``10.0``
        (``NamedLocks``: ``30.0``).
    ``timeout``
        Each command's time limit in seconds (``maxTimeMS``); ``None``: no limit; ``10.0``.
    ``w``
        The write concern of every write; ``"majority"``.
    ``error_factory``
        Turns each error into the exception to raise instead.
    ``listener``
        A :class:`~docmultilock.LockListener`, told of every decision.
    """

    lock_timeout: Duration
    timeout: Duration | None
    w: int | str
    error_factory: ErrorFactory | None
    listener: LockListener | None


class WriteLockOptions(ManagerOptions, total=False):
    """What ``WriteLock`` takes.

    ``field``
        The name of the lock field in your documents; ``"lock"``.
    """

    field: str


class NamedLocksOptions(ManagerOptions, total=False):
    """What ``NamedLocks`` takes: a tag table, its lifetimes and limits.

    ``lock_timeouts``
        Each tag's lifetime in seconds.
    ``lock_relationships``
        The tag table: each tag's ``cooperative`` and ``assertive`` tags.
    ``lock_limits``
        The most granted locks of a tag at once on one document or name.
    ``max_holders``
        The most live entries (held and pending) on one document or name.
    """

    lock_timeouts: Mapping[str, Duration] | None
    lock_relationships: Mapping[str, Mapping[str, Sequence[str]]] | None
    lock_limits: Mapping[str, int] | None
    max_holders: int


class MultiLockOptions(NamedLocksOptions, total=False):
    """What ``MultiLock`` takes: ``NamedLocks``' options and the lock field's name.

    ``field``
        The name of the lock field in your documents; ``"lock"``.
    """

    field: str


def take_keywords(given: Mapping[str, Any], accepted: type, where: str) -> None:
    """Raise the :class:`TypeError` Python raises for a keyword that ``where`` does not take.

    ``**options`` would otherwise let a misspelt option pass unseen, or surface later as
    some other error; ``accepted`` is the typed dict that declares the keywords.
    """
    known: frozenset[str] = getattr(accepted, "__optional_keys__", frozenset())
    for name in given:
        if name not in known:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


# Users import these from docmultilock.options, where the API reference documents them.
for _public in (
    AcquireOptions,
    BreakOptions,
    HoldOptions,
    ManagerOptions,
    MultiLockOptions,
    NamedLocksOptions,
    NewLockOptions,
    PreviewOptions,
    WriteLockOptions,
):
    _public.__module__ = "docmultilock.options"
