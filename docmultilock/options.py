"""The options: their types, each keyword declared once, and how a value is parsed.

Constructors and the methods with many options take ``**options`` typed by the typed
dicts here (PEP 692), so an option is added in one place and every method that takes it,
in both flavours, follows; type checkers and editors still see every keyword and its
type. A value is parsed by the functions here, raising
:class:`~docmultilock.InvalidArgument` before anything is written; constructor options go
through ``_schema`` so that one :class:`~docmultilock.InvalidConfiguration` names every
problem at once.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypedDict

from docmultilock._command import DEFAULT_MAX_HOLDERS
from docmultilock._events import LockListener
from docmultilock._lock import Lock
from docmultilock._rules import TagRules
from docmultilock.errors import InvalidArgument, LockError

__all__ = [
    "MAX_HOLDERS_LIMIT",
    "MAX_TAG_LENGTH",
    "AcquireOptions",
    "BreakOptions",
    "CallOptions",
    "Duration",
    "ErrorFactory",
    "HoldOptions",
    "LockOptions",
    "ManagerOptions",
    "MultiLockOptions",
    "NamedLocksOptions",
    "NewLockOptions",
    "OnLost",
    "PreviewOptions",
    "WaitOptions",
    "WriteLockOptions",
    "is_encodable",
    "parse_duration",
    "parse_field_name",
    "parse_lifetime_ms",
    "parse_write_concern",
    "raised_for",
    "take_keywords",
]


#: The longest tag, in characters.
MAX_TAG_LENGTH = 256

#: The longest operation ``timeout``: MongoDB refuses a ``maxTimeMS`` beyond 2**31 - 1 ms,
#: so a longer limit would fail every command (about 24.8 days; ``None`` means no limit).
MAX_TIMEOUT_SECONDS = (2**31 - 1) / 1000

#: The longest lock lifetime, 365 days. Expiries must stay dates that BSON and Python both
#: represent, and a lock nobody renews for a year has been forgotten, not held.
MAX_LIFETIME_SECONDS = 365 * 86400.0

#: A numeric ``w`` above this can never be satisfied: a replica set has at most 50 members.
#: It would apply every write and then report a failure, leaving a lock nobody holds.
MAX_W = 50

#: The largest ``max_holders``: about 135,000 entries fill MongoDB's 16 MiB document.
MAX_HOLDERS_LIMIT = 100_000


def is_encodable(text: str) -> bool:
    """False for text BSON cannot carry as UTF-8 (lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_duration(value: object, name: str, maximum: float = MAX_TIMEOUT_SECONDS) -> float:
    """Return a positive, finite number of seconds up to ``maximum``, refusing bools."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float: as good as infinite
            seconds = math.inf if value > 0 else -math.inf
    else:
        raise InvalidArgument(
            f"{name} must be seconds (a number) or a timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{name} must be positive and finite, not {value!r}")
    if seconds > maximum:
        raise InvalidArgument(f"{name} must be at most {maximum:g} seconds, not {value!r}")
    return seconds


def parse_lifetime_ms(value: object, name: str) -> int:
    """Return a lock lifetime in whole milliseconds (the server's date resolution), >= 1."""
    ms = round(parse_duration(value, name, MAX_LIFETIME_SECONDS) * 1000)
    if ms < 1:
        raise InvalidArgument(f"{name} must be at least one millisecond, not {value!r}")
    return ms


def parse_write_concern(value: object, name: str = "w") -> int | str:
    """Accept an acknowledged write concern: ``"majority"``, a tag set name, or 1 to 50."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgument(f"{name} must be an int or a string, not {type(value).__name__}")
    if isinstance(value, int) and value < 1:
        # w=0 is unacknowledged: the answer that decides the lock would never come back.
        raise InvalidArgument(f"{name} must be at least 1 (acknowledged writes), not {value}")
    if isinstance(value, int) and value > MAX_W:
        raise InvalidArgument(f"{name} must be at most {MAX_W} (replica set members), not {value}")
    if isinstance(value, str) and not (value and is_encodable(value)):
        raise InvalidArgument(f"{name} must be a non-empty UTF-8 string, not {value!r}")
    return value


def parse_field_name(value: object) -> str:
    """Accept a top-level field name the lock may own: not ``_id``, no ``.``, no leading ``$``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"field must be a string, not {type(value).__name__}")
    if (
        not value
        or value.startswith("$")
        or "." in value
        or "\x00" in value
        or value == "_id"
        or not is_encodable(value)
    ):
        raise InvalidArgument(
            f"field must be a non-empty top-level name without '.', a leading '$', a NUL "
            f"character or a lone surrogate, and not '_id'; got {value!r}"
        )
    return value


#: Seconds as a number, or a timedelta.
Duration = float | int | timedelta
#: Turns a LockError into the exception to raise instead (e.g. a framework's HTTP error).
ErrorFactory = Callable[[LockError], BaseException]


def raised_for(err: LockError, error_factory: ErrorFactory | None) -> BaseException:
    """What a public method raises for ``err``: ``error_factory(err)``, or ``err`` itself.

    The factory's exception gets ``err`` as its ``__cause__`` (``err`` itself, passed
    through, keeps its own).
    """
    if error_factory is None:
        return err
    replacement = error_factory(err)
    if replacement is not err:  # passed through: it keeps its own cause
        replacement.__cause__ = err
    return replacement


#: Called once, from wherever the loss was found, with the lock and why it is lost.
OnLost = Callable[[Lock, LockError], object]


class CallOptions(TypedDict, total=False):
    """The per-call overrides of an operation that writes a lock.

    ``lock_timeout``
        This lock's lifetime in seconds, instead of its tag's.
    ``timeout``
        The command's time limit in seconds, instead of the manager's.
    ``w``
        The write concern, instead of the manager's.
    """

    lock_timeout: Duration | None
    timeout: Duration | None
    w: int | str | None


class NewLockOptions(CallOptions, total=False):
    """The options of a new lock: ``acquire_all()``'s, and the acquisition of a hold.

    ``tag``
        The lock's tag; may be left out when the manager declares only one.
    """

    tag: str | None


class WaitOptions(NewLockOptions, total=False):
    """A new lock's options, and how to wait for it: ``acquire_all()``'s.

    ``wait``
        Seconds to go on trying while refused; ``None`` (the default) tries once.
    ``backoff``
        ``(min, max)`` seconds of the backoff between attempts; ``(0.01, 0.8)``.
    ``wake``
        How a waiter learns that the lock may be free: ``"changes"`` (the default) or
        ``"poll"``.
    ``fair``
        Hold a place in line while waiting (``False``).
    """

    wait: Duration | None
    backoff: tuple[float, float]
    wake: Literal["changes", "poll"]
    fair: bool


class AcquireOptions(WaitOptions, total=False):
    """``acquire()``'s options: a new lock's and how to wait, or ``lock=`` to continue one.

    ``lock``
        A pending assertive lock to go on waiting with (``err.lock``), instead of ``tag``.
    """

    lock: Lock | None


class HoldOptions(WaitOptions, total=False):
    """The options of ``hold()``, ``hold_all()`` and ``locked()``: waiting, and holding.

    ``keepalive``
        Extend the lock from the process's keep-alive (``False``).
    ``extend_every``
        Seconds between extensions; a third of the lock's lifetime by default.
    ``on_lost``
        Called as ``on_lost(lock, error)`` once, when the lock is found lost.
    """

    keepalive: bool
    extend_every: Duration | None
    on_lost: OnLost | None


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
        Each tag's lifetime in seconds; a tag left out lives ``lock_timeout``.
    ``lock_relationships``
        The tag table: each tag's ``cooperative`` and ``assertive`` tags; by default
        readers-writer (``MultiLock``) or one exclusive ``write`` tag (``NamedLocks``).
    ``lock_limits``
        The most granted locks of a tag at once on one document or name (none); at most
        ``max_holders``, for a tag that is not cooperative with itself.
    ``max_holders``
        The most live entries (held and pending) on one document or name; ``1000``.
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


def _inherits(cls: type, base: type) -> None:
    """Add ``base``'s options, with their text and defaults, to ``cls``'s docstring.

    A typed dict's docstring tells only the options it declares itself; ``help()`` and the
    API reference then show every option the class takes, inherited ones included.
    """
    own = inspect.cleandoc(cls.__doc__ or "")
    _, _, entries = inspect.cleandoc(base.__doc__ or "").partition("\n\n")
    cls.__doc__ = f"{own}\n\nFrom :class:`{base.__name__}`:\n\n{entries}"


for _cls, _base in (
    (NewLockOptions, CallOptions),
    (WaitOptions, NewLockOptions),
    (AcquireOptions, WaitOptions),
    (HoldOptions, WaitOptions),
    (BreakOptions, PreviewOptions),
    (WriteLockOptions, ManagerOptions),
    (NamedLocksOptions, ManagerOptions),
    (MultiLockOptions, NamedLocksOptions),
):
    _inherits(_cls, _base)


def take_keywords(given: Mapping[str, Any], accepted: type, where: str) -> None:
    """Raise the :class:`TypeError` Python raises for a keyword that ``where`` does not take.

    ``**options`` would otherwise let a misspelt option pass unseen, or surface later as
    some other error; ``accepted`` is the typed dict that declares the keywords.
    """
    known: frozenset[str] = getattr(accepted, "__optional_keys__", frozenset())
    for name in given:
        if name not in known:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


@dataclass(frozen=True, slots=True)
class LockOptions:
    """Validated options of one lock manager."""

    rules: TagRules
    timeout: float | None
    w: int | str
    field: str
    error_factory: ErrorFactory | None
    max_holders: int = DEFAULT_MAX_HOLDERS

    @property
    def limits(self) -> Mapping[str, int]:
        """``lock_limits``: the most granted entries of a tag at once (kept in the table)."""
        return self.rules.limits
